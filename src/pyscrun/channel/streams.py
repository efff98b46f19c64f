"""A task's stdout or stderr on a connection of its own.

The agent dials the anchor's port as for its control connection (the same proof of the
container's secret), names the stream in one message, and once the anchor has said it
takes the stream, sends the raw bytes until the stream ends (the connection's end).
Both ends move them with splice(2): from the container's pipe into the socket on the
node, from the socket into the caller's pipe on the anchor's host, never through
either process's memory.
"""

from __future__ import annotations

import _socket
import os
import select
import time

from pyscrun import poller
from pyscrun.channel import peer
from pyscrun.errors import ChannelError
from pyscrun.threads import Flag, Thread

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# What one splice moves at most: a widened pipe's whole buffer.
CHUNK = 1 << 20
# How long a stream's thread waits at a time (for data, or for room where it writes)
# before it looks whether it is told to stop.
WAIT = 0.2
# How long a stream's thread lets more gather after it moved some before it looks
# again. Without it a flowing stream wakes both ends for every write of the container
# (a poll, a splice and a TCP segment each): at 4 KiB per write, that took two fifths
# of a CPU at 100 MiB/s, which the container and podman then lacked. With it each wake
# moves what gathered meanwhile. Output waits at most this long at each end.
GATHER = 0.0005
HELLO = "agent-stream"
TAKEN = "stream-ok"


def dial(host: str, port: int, secret: bytes, timeout: float, task: str, kind: int,
         tasks: int = 1) -> _socket.socket:
    """A connection for stream kind (frames.STDOUT or STDERR) of task (of a step of
    tasks), ready for its raw bytes (non-blocking)."""
    return claim({kind: peer.dial(host, port, secret, timeout)}, task, timeout, tasks)[kind]


def claim(links: dict[int, peer.Peer], task: str, timeout: float,
          tasks: int = 1) -> dict[int, _socket.socket]:
    """Each proven connection named as task's stream of its kind (and how many tasks
    the step has: the anchor keeps their lines whole from the first one on), all named
    before any answer is awaited; once the anchor took them, their sockets, ready for
    raw bytes (non-blocking). Each is closed if any fails."""
    deadline = time.monotonic() + timeout
    with peer.ClosedOnFailure(list(links.values()), f"a stream of task {task}"):
        for kind, link in links.items():
            if not link.send_message({"op": HELLO, "task": task, "stream": kind,
                                      "tasks": tasks}, timeout):
                raise ChannelError(f"stream {kind}: could not name it to the anchor")
        for kind, link in links.items():
            _await_taken(link, kind, deadline)
    return {kind: link.sock for kind, link in links.items()}


def _await_taken(link: peer.Peer, kind: int, deadline: float) -> None:
    """Raw bytes may follow only once the anchor no longer reads frames on it."""
    got = link.receive() if link.early else []
    with poller.Poller() as selector:
        selector.register(link.sock, poller.READ)
        while not got:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise ChannelError(f"stream {kind}: the anchor did not take it in time")
            try:
                got = link.receive()
            except peer.PeerGone as gone:
                raise ChannelError(f"stream {kind}: the anchor closed its connection "
                                   f"{gone}") from None
    said = peer.messages(got)
    if [m.get("op") for m in said] != [TAKEN]:
        raise ChannelError(f"stream {kind}: the anchor answered {said!r}")


def move(source: int, target: int, wait_for_target: bool = False) -> int | None:
    """splice what source holds into target: the bytes moved, 0 at source's end, None
    when source has nothing now or target takes nothing now. wait_for_target: a
    blocking target (the agent's socket) is waited for instead. OSError if target is
    gone."""
    flags = os.SPLICE_F_MOVE if wait_for_target else os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
    try:
        return os.splice(source, target, CHUNK, flags=flags)
    except BlockingIOError:
        return None


class Mover:
    """One stream moved by a thread of its own: whenever source is readable, step moves
    what it can (False at the stream's end), until the stream ends or the thread is
    told to stop (looked at every WAIT s). sock is the stream's connection."""

    def __init__(self, source: int, sock: _socket.socket,
                 step: Callable[[Flag], bool],
                 on_end: Callable[[], None] = lambda: None) -> None:
        self.source, self.sock, self.step, self.on_end = source, sock, step, on_end
        self.ended = False
        self.stop = Flag()
        self.thread = Thread(self._run)
        # When a step last returned: something moved (a step waits while the target
        # takes nothing), or the stream ended.
        self.moved_at = 0.0

    def _run(self) -> None:
        source = select.poll()
        source.register(self.source, select.POLLIN)
        try:
            while not self.stop.is_set():
                if source.poll(WAIT * 1000):
                    if not self.step(self.stop):
                        break
                    self.moved_at = time.monotonic()
                    time.sleep(GATHER)
        except OSError:
            pass  # the other end is gone: nobody reads, or sends, this stream any more
        finally:
            self.ended = True
            self.on_end()

    def finish(self, quiet: float) -> None:
        """Let the stream end. Given up on (the thread told to stop, its connection shut
        down: a send blocked on it returns) only once quiet seconds pass with nothing
        moved: a process that holds the stream without writing, or a reader that
        stopped for good. A slow reader is waited for: nothing it reads is cut."""
        self.moved_at = time.monotonic()
        while self.thread.is_alive():
            left = self.moved_at + quiet - time.monotonic()
            if left <= 0:
                break
            self.thread.join(min(left, WAIT))
        if self.thread.is_alive():
            self.stop.set()
            try:
                self.sock.shutdown(_socket.SHUT_RDWR)
            except OSError:
                pass  # already gone
            self.thread.join(WAIT * 2)
        self.sock.close()
