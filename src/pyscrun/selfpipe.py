"""Signals as selector events: handlers only wake the loop, the loop does the work."""

from __future__ import annotations

import selectors
import signal
import socket
from collections.abc import Iterable

# The write end must live as long as the process: set_wakeup_fd holds only its number.
_writers: list[socket.socket] = []


def install(selector: selectors.BaseSelector, signums: Iterable[int], data: object,
            ) -> socket.socket:
    """Deliver signums as readable events (their numbers as bytes) tagged with data;
    the socket they arrive on."""
    reader = catch(signums)
    selector.register(reader, selectors.EVENT_READ, data)
    return reader


def catch(signums: Iterable[int]) -> socket.socket:
    """signums, from now on, as their numbers on the socket returned (for a selector
    that does not exist yet: what arrives meanwhile waits there)."""
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    _writers.append(writer)
    for signum in signums:
        signal.signal(signum, lambda *_: None)
    return reader


def received(reader: socket.socket) -> bytes:
    """The signal numbers that arrived since the last call."""
    try:
        return reader.recv(256)
    except BlockingIOError:
        return b""
