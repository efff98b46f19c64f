"""Accepting connections with the C socket type alone, without spinning when out of
descriptors, and holding them until they prove themselves.

The anchor listens and accepts without the `socket` module: its enums, selectors and
collections cost 5 ms of CPU, which the anchor would spend while salloc and slurmctld
need the same CPUs for the container's job.
"""

from __future__ import annotations

import _socket
import errno
import time

from pyscrun import log
from pyscrun.poller import READ

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Generic, TypeVar

    from pyscrun.poller import Poller

    Link = TypeVar("Link")
else:
    # typing costs the anchor milliseconds at start: at run time, a plain base class.
    class Generic:
        def __class_getitem__(cls, item: object) -> type:
            return object

    Link = None


def accept(listener: _socket.socket) -> _socket.socket:
    """The next connection on listener, as the socket module's accept makes it (blocking,
    close-on-exec); accept(2)'s errors as OSError."""
    # _accept is the C type's accept4(2), on which the socket module's accept is built.
    fd, _ = listener._accept()  # type: ignore[attr-defined]
    return _socket.socket(listener.family, listener.type, listener.proto, fileno=fd)


# How long a listener rests when the process is out of descriptors.
ACCEPT_PAUSE = 1.0


class Listener:
    """A listening socket in a poll loop, accepting until the process runs out of
    descriptors; then the connection stays queued and the socket readable, so accepting
    again at once would spin the loop: it rests ACCEPT_PAUSE, then tries again."""

    def __init__(self, selector: Poller, sock: _socket.socket, data: object, name: str) -> None:
        self.selector = selector
        self.sock = sock
        self.data = data
        self.name = name
        self.resume_at: float | None = None
        self.short = False  # out of descriptors since the last accept (said once)
        selector.register(sock, READ, data)

    def accept(self, make_room: Callable[[], bool] | None = None) -> _socket.socket | None:
        """The next connection, or None: none is waiting, or no descriptor is free (then
        make_room, if given, may close one of the caller's; if it did, no rest)."""
        try:
            conn = accept(self.sock)
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE) and \
                    not (make_room is not None and make_room()):
                self._rest(err.strerror or "out of descriptors")
            return None
        self.short = False
        return conn

    def _rest(self, why: str) -> None:
        if not self.short:
            log.current.error(f"{self.name}: {why}: accepting again every {ACCEPT_PAUSE:.0f} s "
                              f"until a descriptor is free")
            self.short = True
        if self.resume_at is None:
            self.selector.unregister(self.sock)
        self.resume_at = time.monotonic() + ACCEPT_PAUSE

    def deadlines(self) -> list[float]:
        return [] if self.resume_at is None else [self.resume_at]

    def resume(self, now: float) -> None:
        if self.resume_at is not None and self.resume_at <= now:
            self.selector.register(self.sock, READ, self.data)
            self.resume_at = None

    def close(self) -> None:
        if self.selector.get_key(self.sock) is not None:
            self.selector.unregister(self.sock)
        self.resume_at = None
        self.sock.close()


# How many connections may be proving themselves at once: a flood of them cannot take
# every descriptor.
MAX_STRANGERS = 64


class Strangers(Generic[Link]):
    """Connections accepted but not proven yet: each for at most timeout seconds, at most
    MAX_STRANGERS at once (a new one pushes out the oldest). One pushed out or late is no
    longer held, and goes to refuse with the reason."""

    def __init__(self, timeout: float, refuse: Callable[[Link, str], None]) -> None:
        self.timeout = timeout
        self.refuse = refuse
        # In the order they came, so that of their deadlines too.
        self.waiting: dict[Link, float] = {}

    def add(self, make: Callable[[], Link]) -> Link:
        """The link make() makes of a connection just accepted (it challenges the peer at
        once), held: made only once the oldest is refused where it must make room, so
        that no more than MAX_STRANGERS are ever open."""
        if len(self.waiting) >= MAX_STRANGERS:
            oldest = next(iter(self.waiting))
            del self.waiting[oldest]
            self.refuse(oldest, "too many connections are waiting to say hello")
        link = make()
        self.waiting[link] = time.monotonic() + self.timeout
        return link

    def discard(self, link: Link) -> None:
        """link proved itself, or is gone."""
        self.waiting.pop(link, None)

    def expire(self, now: float) -> None:
        while self.waiting:
            link, deadline = next(iter(self.waiting.items()))
            if deadline > now:
                return
            del self.waiting[link]
            self.refuse(link, "it did not say hello in time")

    def deadlines(self) -> list[float]:
        return [next(iter(self.waiting.values()))] if self.waiting else []

    def __iter__(self) -> Iterator[Link]:
        return iter(list(self.waiting))
