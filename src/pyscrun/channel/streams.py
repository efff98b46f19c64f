"""A task's stdout or stderr on a connection of its own.

The agent dials the anchor's port as for its control connection (the same proof of the
container's secret), names the stream in one message, and once the anchor has said it
takes the stream, sends the raw bytes until the stream ends (the connection's end).
Both ends move them with splice(2): from the container's pipe into the socket on the
node, from the socket into the caller's pipe on the anchor's host, never through
either process's memory.
"""

from __future__ import annotations

import os
import selectors
import socket
import time

from pyscrun.channel import frames, peer
from pyscrun.errors import ChannelError

# What one splice moves at most: a widened pipe's whole buffer.
CHUNK = 1 << 20
HELLO = "agent-stream"
TAKEN = "stream-ok"


def dial(host: str, port: int, secret: bytes, timeout: float, task: str, kind: int,
         ) -> socket.socket:
    """A connection for stream kind (frames.STDOUT or STDERR) of task, ready for its
    raw bytes (non-blocking)."""
    link = peer.dial(host, port, secret, timeout)
    try:
        if not link.send_message({"op": HELLO, "task": task, "stream": kind}, timeout):
            raise ChannelError(f"could not name stream {kind} to the anchor")
        _await_taken(link, time.monotonic() + timeout)
    except (ChannelError, OSError, frames.FrameError) as err:
        link.close()
        raise ChannelError(f"stream {kind}: {err}") from None
    return link.sock


def _await_taken(link: peer.Peer, deadline: float) -> None:
    """Raw bytes may follow only once the anchor no longer reads frames on it."""
    got = link.receive() if link.early else []
    with selectors.DefaultSelector() as selector:
        selector.register(link.sock, selectors.EVENT_READ)
        while not got:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise ChannelError("the anchor did not take the stream in time")
            try:
                got = link.receive()
            except peer.PeerGone as gone:
                raise ChannelError(f"the anchor closed the stream's connection {gone}") from None
    said = peer.messages(got)
    if [m.get("op") for m in said] != [TAKEN]:
        raise ChannelError(f"the anchor answered {said!r} to a stream")


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
