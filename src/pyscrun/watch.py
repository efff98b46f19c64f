"""Non-blocking descriptors in selector loops: what each is watched for right now, and
writing out what waits for one."""

from __future__ import annotations

import fcntl

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from pyscrun.poller import HasFileno, Poller


def watch(selector: Poller, fileobj: HasFileno | int, events: int, data: object) -> None:
    """Watch fileobj for events (none: not at all), registering, changing or dropping
    its registration as needed."""
    key = selector.get_key(fileobj)
    if key is None:
        if events:
            selector.register(fileobj, events, data)
    elif not events:
        selector.unregister(fileobj)
    elif key.events != events or key.data is not data:
        selector.modify(fileobj, events, data)


def drain(waiting: bytearray, write: Callable[[bytearray], int]) -> bool:
    """Write out as much of waiting as the descriptor takes now, removing it from
    waiting. False if the reader is gone: what waited is dropped, it has nowhere to go."""
    while waiting:
        try:
            written = write(waiting)
        except BlockingIOError:
            return True
        except OSError:
            waiting.clear()
            return False
        del waiting[:written]
    return True


# A pipe's buffer as large as an unprivileged process may make it (pipe-max-size's
# default): fewer, bigger reads and writes for a stream.
PIPE_SIZE = 1 << 20


def widen_pipe(fd: int) -> None:
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        pass  # a site's pipe-max-size below it: the default size works too
