"""The container's stdio as streams to the anchor, for a container on another machine.

The agent gives the runtime three pipes of its own. What comes out of the container's
stdout and stderr pipes is spliced into a connection of each stream's own
(channel/streams.py); task 0's stdin comes the other way as frames on the control
connection. When the anchor cannot keep up, a stream's socket fills, the agent stops
taking from that pipe and the container waits, as it would for a slow reader of its
own stdout: nothing is dropped and memory stays bounded.
"""

from __future__ import annotations

import os
import selectors
import socket
import time

from pyscrun.channel import frames, streams
from pyscrun.watch import drain, watch, widen_pipe

# Bytes of stdin waiting for the container beyond which the agent stops taking more.
HIGH_WATER = 1 << 20


class ContainerStdio:
    STDIN_KEY = ("stdin", 0)

    def __init__(self, with_stdin: bool, outputs: dict[int, socket.socket]) -> None:
        """outputs: the connection of each output stream (frames.STDOUT, STDERR)."""
        stdin_r, self.stdin_w = os.pipe() if with_stdin else (os.open(os.devnull, os.O_RDONLY), -1)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        # What the runtime gets, closed here once it has them.
        self.child_ends: tuple[int, int, int] | None = (stdin_r, out_w, err_w)
        # Each output pipe and the socket it is spliced into.
        self.outputs = {out_r: outputs[frames.STDOUT], err_r: outputs[frames.STDERR]}
        # Pipes whose socket took nothing last time: watched for the socket to take more.
        self.socket_full: set[int] = set()
        for fd in self.outputs:
            os.set_blocking(fd, False)
            widen_pipe(fd)
        if self.stdin_w >= 0:
            os.set_blocking(self.stdin_w, False)
        self.stdin_data = bytearray()
        self.stdin_ended = False
        self.selector: selectors.BaseSelector | None = None

    def spawned(self) -> None:
        """The runtime has the child ends: this process must not hold them (the
        container's end would never show as end of file)."""
        if self.child_ends is not None:
            for fd in self.child_ends:
                os.close(fd)
            self.child_ends = None

    def attach(self, selector: selectors.BaseSelector) -> None:
        self.selector = selector
        for fd in self.outputs:
            self._watch(fd)

    def _watch(self, fd: int, events_on: bool = True) -> None:
        """Watch the pipe for data, or its socket for room when it took nothing."""
        if self.selector is None:
            return
        full = events_on and fd in self.socket_full
        watch(self.selector, fd, selectors.EVENT_READ if events_on and not full else 0,
              ("output", fd))
        watch(self.selector, self.outputs[fd], selectors.EVENT_WRITE if full else 0,
              ("output", fd))

    def on_output(self, fd: int) -> None:
        """The pipe has data, or its socket room: move what can be moved."""
        try:
            moved = streams.move(fd, self.outputs[fd].fileno())
        except OSError:
            moved = 0  # the anchor is gone: nobody reads this stream any more
        if moved is None:
            # Readable pipe, full socket; or room in the socket, empty pipe.
            self.socket_full ^= {fd}
        elif moved:
            self.socket_full.discard(fd)
        else:
            self._close_output(fd)
            return
        self._watch(fd)

    def _close_output(self, fd: int) -> None:
        """The end of the stream: the connection closes once the socket has sent all."""
        self._watch(fd, events_on=False)
        self.outputs.pop(fd).close()
        self.socket_full.discard(fd)
        os.close(fd)

    # -- stdin -------------------------------------------------------------------------
    def on_stdin(self, data: bytes) -> None:
        """Data (or, empty, the end) of stdin from the anchor."""
        if self.stdin_w < 0 or self.stdin_ended:
            return
        if data:
            self.stdin_data += data
        else:
            self.stdin_ended = True
        self.write_stdin()

    def write_stdin(self) -> None:
        if self.stdin_w < 0:
            return
        stdin_w = self.stdin_w
        drain(self.stdin_data, lambda data: os.write(stdin_w, data))
        if self.selector is not None:
            watch(self.selector, self.stdin_w, selectors.EVENT_WRITE if self.stdin_data else 0,
                  self.STDIN_KEY)
        if self.stdin_ended and not self.stdin_data:
            os.close(self.stdin_w)
            self.stdin_w = -1

    def stdin_full(self) -> bool:
        """Whether stdin from the anchor should wait (the container is not reading)."""
        return len(self.stdin_data) >= HIGH_WATER

    # -- the end -----------------------------------------------------------------------
    def finish(self, timeout: float) -> None:
        """The container has ended: send what is left of its output, up to the end of
        each stream (or until timeout, should something of it still hold a pipe)."""
        self.spawned()
        if self.stdin_w >= 0:
            os.close(self.stdin_w)
            self.stdin_w = -1
        for fd in self.outputs:
            self._watch(fd, events_on=False)
        with selectors.DefaultSelector() as selector:
            self.selector = selector
            for fd in self.outputs:
                self._watch(fd)
            deadline = time.monotonic() + timeout
            while self.outputs and time.monotonic() < deadline:
                for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
                    if key.data[1] in self.outputs:
                        self.on_output(key.data[1])
            for fd in list(self.outputs):
                self._close_output(fd)
        self.selector = None
