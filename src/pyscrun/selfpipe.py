"""Signals as selector events: handlers only wake the loop, the loop does the work.

A pipe and _signal (signal without its enums) rather than a socket pair and signal:
the anchor catches signals before its own modules load, where those imports would
cost it 5 ms before it asks for its job.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import os

from pyscrun.errors import Interrupted

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from pyscrun.poller import Poller

# The write end must live as long as the process: set_wakeup_fd holds only its number.
_writers: list[int] = []


def install(selector: Poller, signums: Iterable[int], data: object) -> int:
    """Deliver signums as readable events (their numbers as bytes) tagged with data;
    the descriptor they arrive on."""
    from pyscrun.poller import READ

    reader = catch(signums)
    selector.register(reader, READ, data)
    return reader


def catch(signums: Iterable[int]) -> int:
    """signums, from now on, as their numbers on the descriptor returned (for a selector
    that does not exist yet: what arrives meanwhile waits there)."""
    reader, writer = os.pipe()
    os.set_blocking(reader, False)
    os.set_blocking(writer, False)
    _signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    _writers.append(writer)
    for signum in signums:
        _signal.signal(signum, _wake_only)
    return reader


def _wake_only(signum: int, frame: object) -> None:
    """The handler: the number reaches the pipe without it."""


def received(reader: int) -> bytes:
    """The signal numbers that arrived since the last call."""
    try:
        return os.read(reader, 256)
    except BlockingIOError:
        return b""


def check(reader: int) -> None:
    """Interrupted if a signal arrived on reader since the last call (it is taken)."""
    signals = received(reader)
    if signals:
        raise Interrupted(signals[0])
