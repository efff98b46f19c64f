"""The caller's stdio (podman's pipes) for a container whose agents stream it.

Each task's stdout and stderr arrive on connections of their own (channel/streams.py)
and are spliced into the caller's pipe; a descriptor that is no pipe gets them read and
written, through a buffer. While the caller's descriptor is full (or the buffer over
its mark) the anchor stops reading those streams, and so the container, its output
unread, waits. stdin is read only while task 0's agent takes it.
"""

from __future__ import annotations

import os
import selectors
import socket
import stat
import time

from pyscrun.channel import frames, streams
from pyscrun.watch import drain, widen_pipe

HIGH_WATER = 1 << 20


class Sink:
    """One output descriptor of the caller, written without ever blocking the anchor."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.sock: socket.socket | None = None
        self.out = bytearray()
        # A pipe takes the streams spliced in; full: it took nothing last time.
        self.pipe = False
        self.full = False
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode):
            self.pipe = True
            # A description of its own: O_NONBLOCK on the caller's would reach
            # whoever shares it.
            try:
                own = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                pass
            else:
                os.close(fd)
                self.fd = own
            widen_pipe(self.fd)
        elif stat.S_ISSOCK(mode):
            self.sock = socket.socket(fileno=fd)

    @property
    def pending(self) -> int:
        return len(self.out)

    def write(self, data: bytes) -> None:
        self.out += data
        self.flush()

    def splice_from(self, sock: socket.socket) -> int | None:
        """Move what sock holds straight into this pipe: as streams.move, None also
        when this pipe is full (then marked so). A reader that is gone takes no more:
        the bytes are read and dropped from then on."""
        try:
            moved = streams.move(sock.fileno(), self.fd)
        except BrokenPipeError:
            self.pipe = False
            return self.read_into(sock)
        if moved is None:
            self.full = True
        return moved

    def read_into(self, sock: socket.socket) -> int | None:
        """Read what sock holds and write it (buffered): as streams.move."""
        try:
            data = sock.recv(streams.CHUNK)
        except BlockingIOError:
            return None
        self.write(data)
        return len(data)

    def flush(self) -> None:
        self.full = False
        sock = self.sock
        if sock is not None:
            drain(self.out, lambda data: sock.send(data, socket.MSG_DONTWAIT))
        else:
            drain(self.out, lambda data: os.write(self.fd, data))

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        else:
            os.close(self.fd)


class AgentStream:
    """One task's stdout or stderr, on a connection of its own."""

    def __init__(self, sock: socket.socket, kind: int, task: str) -> None:
        self.sock, self.kind, self.task = sock, kind, task


class CallerStdio:
    def __init__(self) -> None:
        self.sinks = {frames.STDOUT: Sink(os.dup(1)), frames.STDERR: Sink(os.dup(2))}
        self.stdin_fd = os.dup(0)
        self.streams: list[AgentStream] = []

    def stream_wanted(self, stream: AgentStream) -> bool:
        """Whether to read the stream now: its sink has room."""
        sink = self.sinks[stream.kind]
        return not sink.full and sink.pending < HIGH_WATER

    def move(self, stream: AgentStream) -> bool:
        """What arrived on stream, into its sink; False once the stream has ended."""
        sink = self.sinks[stream.kind]
        try:
            if sink.pipe and not sink.pending:
                moved = sink.splice_from(stream.sock)
            else:
                moved = sink.read_into(stream.sock)
        except OSError:
            moved = 0  # the agent's connection failed: its node or itself is gone
        return moved != 0

    def end(self, stream: AgentStream) -> None:
        """Let go of an ended stream (no longer watched)."""
        self.streams.remove(stream)
        stream.sock.close()

    def waiting(self) -> list[Sink]:
        return [sink for sink in self.sinks.values() if sink.pending]

    def read_stdin(self) -> bytes | None:
        """What the caller wrote to stdin (it was readable): b"" at its end, None if
        nothing after all."""
        try:
            return os.read(self.stdin_fd, frames.MAX_DATA)
        except BlockingIOError:
            return None
        except OSError:
            return b""

    def close_stdin(self) -> None:
        if self.stdin_fd >= 0:
            os.close(self.stdin_fd)
            self.stdin_fd = -1

    def finish(self, timeout: float) -> None:
        """Write out what is left (up to timeout: a caller that stopped reading), then
        let go of the caller's descriptors."""
        deadline = time.monotonic() + timeout
        with selectors.PollSelector() as selector:
            for sink in self.waiting():
                selector.register(sink.fd, selectors.EVENT_WRITE, sink)
            while selector.get_map() and time.monotonic() < deadline:
                for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
                    key.data.flush()
                    if not key.data.pending:
                        selector.unregister(key.fd)
        for stream in self.streams:
            stream.sock.close()
        self.streams.clear()
        for sink in self.sinks.values():
            sink.close()
        self.close_stdin()
