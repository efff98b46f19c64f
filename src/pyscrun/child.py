"""Child processes started with posix_spawn, on the way to a container's start: the
node agent's runtime commands, and the anchor's salloc and srun. The subprocess module
would have the agent load locale, re, threading and more (5 ms) before its container
can start; a fork of the anchor, a large process, costs both it and the child a page
fault for every page either then writes (3 to 4 ms before salloc or srun runs).

As subprocess does by default, a child gets only the descriptors it is given: every
other inheritable one is closed in it, and SIGPIPE and SIGXFSZ, which Python ignores,
are back to their defaults there.
"""

from __future__ import annotations

# _signal's plain numbers: `signal` would have the anchor load enum (3 ms) before
# salloc starts.
import _signal  # type: ignore[import-not-found]
import os
import select
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

_DEFAULT_IN_CHILD = (_signal.SIGPIPE, _signal.SIGXFSZ)


class Child:
    """A child process: its pid, and its exit code once waited for (negative: killed
    by that signal)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """Its exit code if it has ended (it is reaped then), else None."""
        if self.returncode is None:
            self._reap(os.WNOHANG)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self._reap(0)
        assert self.returncode is not None
        return self.returncode

    def _reap(self, options: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, options)
        except ChildProcessError:
            # Reaped elsewhere (the agent waits for its runtime itself): its end is
            # known there, not here.
            self.returncode = 0
            return
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)


def spawn(argv: list[str], env: Mapping[str, str],
          stdio: tuple[int | None, int | None, int | None] = (None, None, None),
          pass_fds: Iterable[int] = (), new_session: bool = False,
          own_group: bool = False) -> Child:
    """Start argv (its program by path, or by name looked up in this process's PATH)
    with env; stdio: the descriptors to give it as 0, 1 and 2 (each 3 or above; None:
    this process's own); pass_fds: descriptors it keeps as they are; new_session: in a
    session of its own; own_group: in a process group of its own (in this session)."""
    kept = set(pass_fds)
    actions: list[tuple[int, ...]] = [
        (os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(stdio) if fd is not None]
    # A descriptor dup'ed onto itself loses its close-on-exec flag (glibc >= 2.29).
    actions += [(os.POSIX_SPAWN_DUP2, fd, fd) for fd in sorted(kept)]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable() if fd not in kept]
    start = os.posix_spawn if "/" in argv[0] else os.posix_spawnp
    if own_group and not new_session:
        return Child(start(argv[0], argv, env, file_actions=actions,
                           setsigdef=_DEFAULT_IN_CHILD, setpgroup=0))
    return Child(start(argv[0], argv, env, file_actions=actions, setsigdef=_DEFAULT_IN_CHILD,
                       setsid=new_session))


def _inheritable() -> list[int]:
    """This process's descriptors above 2 that a program it starts would inherit."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                found.append(fd)
        except OSError:
            continue  # the listing's own descriptor, closed since
    return found


def run(argv: list[str], env: Mapping[str, str], timeout: float,
        pass_fds: Iterable[int] = ()) -> tuple[int, bytes, bytes]:
    """Run argv to its end, its stdin empty: its exit code, stdout and stderr.
    TimeoutError once timeout seconds have passed (it is killed then, with every
    process it started: a shell's runc and CRIU would go on dumping)."""
    stdin = os.open(os.devnull, os.O_RDONLY)
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        child = spawn(argv, env, (stdin, out_write, err_write), pass_fds, own_group=True)
    finally:
        for fd in (stdin, out_write, err_write):
            os.close(fd)
    try:
        out, err = _read_both(out_read, err_read, time.monotonic() + timeout)
    except TimeoutError:
        os.killpg(child.pid, _signal.SIGKILL)
        child.wait()
        raise
    finally:
        os.close(out_read)
        os.close(err_read)
    return child.wait(), out, err


def _read_both(out_fd: int, err_fd: int, deadline: float) -> tuple[bytes, bytes]:
    """Everything written to both pipes until both are closed."""
    said = {out_fd: bytearray(), err_fd: bytearray()}
    poller = select.poll()
    for fd in said:
        poller.register(fd, select.POLLIN)
    open_fds = len(said)
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        for fd, _ in poller.poll(left * 1000):
            chunk = os.read(fd, 65536)
            if chunk:
                said[fd] += chunk
            else:
                poller.unregister(fd)
                open_fds -= 1
    return bytes(said[out_fd]), bytes(said[err_fd])
