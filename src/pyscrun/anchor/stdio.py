"""The caller's stdio (podman's pipes) for a container whose agents stream it.

Each task's stdout and stderr arrive on connections of their own (channel/streams.py).
A thread per stream moves them into the caller's descriptor: spliced into a pipe, read
and written otherwise, never blocking on the caller for longer than it takes to look
whether it is told to stop. While the caller's descriptor is full the thread waits, its
socket fills, and so the container, its output unread, waits too. The anchor's loop
hears of a stream's end through a wake-up pipe. stdin is read by the loop, only while
task 0's agent takes it.
"""

from __future__ import annotations

import _socket
import _thread
import os
import select
import stat

from pyscrun.channel import frames, streams
from pyscrun.watch import widen_pipe

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from pyscrun.threads import Flag

# Bytes of the caller's stdin waiting to reach task 0's agent beyond which the anchor
# stops reading it.
HIGH_WATER = 1 << 20
# A task's line longer than this reaches a shared descriptor in parts: what waits for
# its newline stays bounded.
LONGEST_LINE = streams.CHUNK


class Sink:
    """One output descriptor of the caller, written without ever blocking for long."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.sock: _socket.socket | None = None
        self.pipe = False  # takes the streams spliced in
        self.gone = False  # its reader is gone: what comes is dropped
        # The tasks that write here: those whose streams it took, or as many as their
        # step has (some may still come).
        self.tasks = 0
        # Held by a stream's thread while it writes whole lines: once several tasks
        # write here, no task's line is cut by another's, as srun keeps them.
        self.lines = _thread.allocate_lock()
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
                self.pipe = True
            widen_pipe(self.fd)
        elif stat.S_ISSOCK(mode):
            self.sock = _socket.socket(fileno=fd)

    def _room(self, stop: Flag) -> bool:
        """Wait until the descriptor takes more; False if told to stop meanwhile."""
        while not self._has_room(streams.WAIT):
            if stop.is_set():
                return False
        return True

    def _has_room(self, wait: float) -> bool:
        poller = select.poll()
        poller.register(self.fd, select.POLLOUT)
        return bool(poller.poll(wait * 1000))

    def take_from(self, sock: _socket.socket, stop: Flag, pending: bytearray) -> bool:
        """Move what arrived on sock (it was readable) into this descriptor; False at
        the stream's end. Shared by several tasks, whole lines only (pending: the
        stream's line so far)."""
        if self.tasks > 1:
            return self._take_lines(sock, stop, pending)
        while self.pipe and not self.gone:
            try:
                moved = streams.move(sock.fileno(), self.fd)
            except BrokenPipeError:
                self.gone = True
                break
            if moved is not None:
                return moved != 0
            if self._has_room(0):
                return True  # the socket had nothing after all
            if not self._room(stop):
                return False
        try:
            data = sock.recv(streams.CHUNK)
        except BlockingIOError:
            return True
        self.write(data, stop)
        return bool(data)

    def _take_lines(self, sock: _socket.socket, stop: Flag, pending: bytearray) -> bool:
        """The whole lines of what arrived on sock; a line's start waits for its end
        (or the stream's, or LONGEST_LINE), as srun's line-buffered output."""
        try:
            data = sock.recv(streams.CHUNK)
        except BlockingIOError:
            return True
        pending += data
        whole = not data or len(pending) >= LONGEST_LINE
        cut = len(pending) if whole else pending.rfind(b"\n") + 1
        if cut:
            with self.lines:
                self.write(bytes(pending[:cut]), stop)
            del pending[:cut]
        return bool(data)

    def write(self, data: bytes, stop: Flag) -> None:
        view = memoryview(data)
        while view and not self.gone:
            try:
                if self.sock is not None:
                    written = self.sock.send(view, _socket.MSG_DONTWAIT)
                else:
                    written = os.write(self.fd, view)
            except BlockingIOError:
                if not self._room(stop):
                    return
                continue
            except OSError:
                self.gone = True
                return
            view = view[written:]

    def let_go(self) -> None:
        """Its reader sees its end now: the descriptor stays open (a thread may still
        write to it) but leads nowhere, and what comes is dropped."""
        self.gone = True
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self.sock.fileno() if self.sock is not None else self.fd)
        os.close(null)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        else:
            os.close(self.fd)


def stream_into(sink: Sink, sock: _socket.socket, on_end: Callable[[], None],
                task: bool = True, tasks: int = 1) -> streams.Mover:
    """What arrives on a stream connection (a task's of a step of tasks, or the
    launcher's own output), moved into sink by a thread (not started yet); on_end is
    called in it once the stream has ended."""
    sock.setblocking(False)
    if task:
        sink.tasks = max(sink.tasks + 1, tasks)
    pending = bytearray()
    return streams.Mover(sock.fileno(), sock, lambda stop: sink.take_from(sock, stop, pending),
                         on_end)


class CallerStdio:
    def __init__(self) -> None:
        self.sinks = {frames.STDOUT: Sink(os.dup(1)), frames.STDERR: Sink(os.dup(2))}
        self.stdin_fd = os.dup(0)
        self.streams: list[streams.Mover] = []
        # Those of them that carry what the step's launcher (srun) itself says: they
        # end only with it.
        self.launcher_streams: list[streams.Mover] = []
        # Written by a stream's thread at its end, read by the anchor's loop.
        self.wake_fd, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def take(self, sock: _socket.socket, kind: int, launcher: bool = False,
             tasks: int = 1) -> None:
        """A task's output stream (kind: frames.STDOUT or STDERR; its step has tasks),
        or the launcher's own output of that kind, from now on."""
        stream = stream_into(self.sinks[kind], sock, self._wake, task=not launcher,
                             tasks=tasks)
        self.streams.append(stream)
        if launcher:
            self.launcher_streams.append(stream)
        stream.thread.start()

    def _wake(self) -> None:
        """A stream's thread has ended: the anchor's loop hears it."""
        try:
            os.write(self._wake_w, b"e")
        except OSError:
            pass  # the anchor is finishing and no longer listens

    def reap(self) -> None:
        """Let go of the streams that have ended (the wake-up pipe was readable)."""
        try:
            os.read(self.wake_fd, 4096)
        except BlockingIOError:
            pass
        for stream in [s for s in self.streams if s.ended]:
            stream.thread.join()
            stream.sock.close()
            self._forget(stream)

    def _forget(self, stream: streams.Mover) -> None:
        self.streams.remove(stream)
        if stream in self.launcher_streams:
            self.launcher_streams.remove(stream)

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

    def finish_tasks(self, quiet: float) -> None:
        """Let the tasks' streams end (each given up once quiet seconds pass with
        nothing moved), the launcher's left running."""
        for stream in [s for s in self.streams if s not in self.launcher_streams]:
            stream.finish(quiet)
            self._forget(stream)

    def let_go_of_caller(self) -> None:
        """The caller's output descriptors reach their end while the launcher's streams
        may still run: what it says from now on is dropped."""
        for sink in self.sinks.values():
            sink.let_go()

    def finish(self, quiet: float) -> None:
        """Let the streams end (each given up once quiet seconds pass with nothing
        moved: a caller that stopped reading, or an agent that never ended its stream),
        then let go of the caller's descriptors."""
        for stream in list(self.streams):
            stream.finish(quiet)
            self._forget(stream)
        for sink in self.sinks.values():
            sink.close()
        self.close_stdin()
        for fd in (self.wake_fd, self._wake_w):
            os.close(fd)
