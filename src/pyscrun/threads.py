"""The threads of stdio streams and of sealed copies, on _thread: the threading module
loads functools and collections, 3 ms of the node agent's start before its container
can run. What is used of threading's Thread and Event, no more."""

from __future__ import annotations

import _thread

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class Thread:
    """A thread running target(*args) once started; the process does not wait for it
    at its end (as threading's daemon threads)."""

    def __init__(self, target: Callable[..., object], args: tuple[object, ...] = ()) -> None:
        self._target = target
        self._args = args
        # Held from the start until target returns: join waits to take it.
        self._running = _thread.allocate_lock()

    def start(self) -> None:
        self._running.acquire()
        try:
            _thread.start_new_thread(self._run, ())
        except BaseException:
            self._running.release()
            raise

    def _run(self) -> None:
        try:
            self._target(*self._args)
        finally:
            self._running.release()

    def join(self, timeout: float | None = None) -> None:
        """Until target has returned, or timeout seconds have passed."""
        if self._running.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            self._running.release()

    def is_alive(self) -> bool:
        return self._running.locked()


class Flag:
    """A thread told to stop looks at this between its steps."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set
