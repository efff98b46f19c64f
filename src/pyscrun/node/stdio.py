"""The container's stdio as streams to the anchor, for a container on another machine.

The agent gives the runtime three pipes of its own and moves what comes out of them to
the anchor as frames (and task 0's stdin the other way). When the anchor cannot keep
up, the agent stops reading the pipes and the container waits, as it would for a slow
reader of its own stdout: nothing is dropped and memory stays bounded.
"""

from __future__ import annotations

import os
import selectors
import time

from pyscrun.channel import frames
from pyscrun.channel.peer import Peer
from pyscrun.watch import drain, watch, widen_pipe

# Bytes waiting to reach the anchor (or the container's stdin) beyond which the agent
# stops taking more.
HIGH_WATER = 1 << 20


class ContainerStdio:
    STDIN_KEY = ("stdin", 0)

    def __init__(self, peer: Peer, with_stdin: bool) -> None:
        self.peer = peer
        stdin_r, self.stdin_w = os.pipe() if with_stdin else (os.open(os.devnull, os.O_RDONLY), -1)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        # What the runtime gets, closed here once it has them.
        self.child_ends: tuple[int, int, int] | None = (stdin_r, out_w, err_w)
        self.outputs = {out_r: frames.STDOUT, err_r: frames.STDERR}
        for fd in self.outputs:
            os.set_blocking(fd, False)
            widen_pipe(fd)
        if self.stdin_w >= 0:
            os.set_blocking(self.stdin_w, False)
        self.stdin_data = bytearray()
        self.stdin_ended = False
        self.selector: selectors.BaseSelector | None = None
        self.reading = False

    def spawned(self) -> None:
        """The runtime has the child ends: this process must not hold them (the
        container's end would never show as end of file)."""
        if self.child_ends is not None:
            for fd in self.child_ends:
                os.close(fd)
            self.child_ends = None

    def attach(self, selector: selectors.BaseSelector) -> None:
        self.selector = selector
        self.balance()

    def balance(self) -> None:
        """Read the container's output while the anchor keeps up; stop while it does not."""
        if self.selector is None:
            return
        want = self.peer.pending < HIGH_WATER
        if want == self.reading:
            return
        for fd in self.outputs:
            if want:
                self.selector.register(fd, selectors.EVENT_READ, ("output", fd))
            else:
                self.selector.unregister(fd)
        self.reading = want

    def on_output(self, fd: int) -> None:
        try:
            data = os.read(fd, frames.MAX_DATA)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        self.peer.send(frames.frame(self.outputs[fd], data))
        if not data:
            self._close_output(fd)
        self.balance()

    def _close_output(self, fd: int) -> None:
        if self.reading and self.selector is not None:
            self.selector.unregister(fd)
        del self.outputs[fd]
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
        if self.selector is not None and self.reading:
            for fd in self.outputs:
                self.selector.unregister(fd)
        self.reading = False
        self.selector = None
        with selectors.DefaultSelector() as selector:
            for fd in self.outputs:
                selector.register(fd, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout
            while self.outputs and time.monotonic() < deadline:
                for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
                    fd = int(key.fd)
                    self.on_output(fd)
                    if fd not in self.outputs:
                        selector.unregister(fd)
                if self.peer.pending >= HIGH_WATER:
                    self.peer.flush_blocking(max(0.0, deadline - time.monotonic()))
        for fd, kind in list(self.outputs.items()):
            self.peer.send(frames.frame(kind))
            os.close(fd)
        self.outputs.clear()
