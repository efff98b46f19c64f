"""Accepting connections with the C socket type alone.

The anchor listens and accepts without the `socket` module: its enums, selectors and
collections cost 5 ms of CPU, which the anchor would spend while salloc and slurmctld
need the same CPUs for the container's job.
"""

from __future__ import annotations

import _socket


def accept(listener: _socket.socket) -> _socket.socket:
    """The next connection on listener, as the socket module's accept makes it (blocking,
    close-on-exec); accept(2)'s errors as OSError."""
    # _accept is the C type's accept4(2), on which the socket module's accept is built.
    fd, _ = listener._accept()  # type: ignore[attr-defined]
    return _socket.socket(listener.family, listener.type, listener.proto, fileno=fd)
