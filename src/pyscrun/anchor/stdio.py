"""The caller's stdio (podman's pipes) for a container whose agents stream it.

What the agents send of the container's stdout and stderr waits in a buffer per stream
until the caller's descriptor takes it; while a buffer is over its mark the anchor
stops reading the agents, and so the container, its output unread, waits. stdin is read
only while task 0's agent takes it.
"""

from __future__ import annotations

import os
import selectors
import socket
import stat
import time

from pyscrun.channel import frames
from pyscrun.watch import drain, widen_pipe

HIGH_WATER = 1 << 20


class Sink:
    """One output descriptor of the caller, written without ever blocking the anchor."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.sock: socket.socket | None = None
        self.out = bytearray()
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode):
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

    def flush(self) -> None:
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


class CallerStdio:
    def __init__(self) -> None:
        self.sinks = {frames.STDOUT: Sink(os.dup(1)), frames.STDERR: Sink(os.dup(2))}
        self.stdin_fd = os.dup(0)

    def output(self, kind: int, data: bytes) -> None:
        if data and kind in self.sinks:
            self.sinks[kind].write(data)

    def full(self) -> bool:
        return any(sink.pending >= HIGH_WATER for sink in self.sinks.values())

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
        for sink in self.sinks.values():
            sink.close()
        self.close_stdin()
