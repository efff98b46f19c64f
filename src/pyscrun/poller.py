"""Descriptor loops over poll(2): what the anchor's, the node agent's and srun_cr's
loops use of the selectors module, without its imports. selectors loads collections,
and (with the socket and signal modules, which the agent does without too) enum and
functools: together some 6 ms of the node agent's start before its container runs."""

from __future__ import annotations

import math
import select

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol

    class HasFileno(Protocol):
        def fileno(self) -> int: ...

# As selectors' EVENT_READ and EVENT_WRITE.
READ = 1
WRITE = 2
_POLL_READ = select.POLLIN
_POLL_WRITE = select.POLLOUT


def _fd(fileobj: HasFileno | int) -> int:
    return fileobj if isinstance(fileobj, int) else fileobj.fileno()


class Key:
    """One registration: the object registered, its descriptor, the events watched
    for, and the caller's data."""

    __slots__ = ("data", "events", "fd", "fileobj")

    def __init__(self, fileobj: HasFileno | int, fd: int, events: int, data: Any) -> None:
        self.fileobj = fileobj
        self.fd = fd
        self.events = events
        self.data = data


class Poller:
    def __init__(self) -> None:
        self._poll = select.poll()
        self._keys: dict[int, Key] = {}

    def __enter__(self) -> Poller:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._keys.clear()

    def get_key(self, fileobj: HasFileno | int) -> Key | None:
        return self._keys.get(_fd(fileobj))

    def register(self, fileobj: HasFileno | int, events: int, data: Any = None) -> Key:
        fd = _fd(fileobj)
        if fd in self._keys:
            raise KeyError(f"descriptor {fd} is already registered")
        key = self._keys[fd] = Key(fileobj, fd, events, data)
        self._poll.register(fd, _poll_mask(events))
        return key

    def modify(self, fileobj: HasFileno | int, events: int, data: Any = None) -> Key:
        key = self._keys[_fd(fileobj)]
        if key.events != events:
            self._poll.modify(key.fd, _poll_mask(events))
            key.events = events
        key.data = data
        return key

    def unregister(self, fileobj: HasFileno | int) -> Key:
        key = self._keys.pop(_fd(fileobj))
        try:
            self._poll.unregister(key.fd)
        except (KeyError, ValueError):
            pass  # closed meanwhile
        return key

    def select(self, timeout: float | None = None) -> list[tuple[Key, int]]:
        """The registrations ready within timeout seconds (None: until one is), each with
        the events it is ready for. A hang-up or an error counts as both."""
        if timeout is None:
            wait = -1
        elif timeout <= 0:
            wait = 0
        else:
            wait = math.ceil(timeout * 1000)  # rounded up: a wait never ends early
        ready = []
        for fd, happened in self._poll.poll(wait):
            key = self._keys.get(fd)
            if key is None:
                continue
            events = (WRITE if happened & ~_POLL_READ else 0) | \
                (READ if happened & ~_POLL_WRITE else 0)
            if events & key.events:
                ready.append((key, events & key.events))
        return ready


def _poll_mask(events: int) -> int:
    return (_POLL_READ if events & READ else 0) | (_POLL_WRITE if events & WRITE else 0)
