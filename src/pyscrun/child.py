"""Child processes started with posix_spawn, on the way to a container's start: the
node agent's runtime commands, the anchor's salloc and srun, and scrun.lua's commands
(which the anchor's signals interrupt, and which die with it). The subprocess module
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

from pyscrun import selfpipe
from pyscrun.errors import Interrupted

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

_DEFAULT_IN_CHILD = (_signal.SIGPIPE, _signal.SIGXFSZ)
# What a command run in the foreground passes on to what it runs, as `runc run` and
# `runc exec` do: SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM.
PASSED_ON = (_signal.SIGHUP, _signal.SIGINT, _signal.SIGQUIT, _signal.SIGUSR1, _signal.SIGUSR2,
             _signal.SIGTERM)
# How long an interrupted command may take to end on SIGTERM (an srun ends its step
# then, which SIGKILL would leave running) before its process group is killed.
INTERRUPT_GRACE = 2.0
# How long what a bound command left running has between SIGTERM and SIGKILL: Slurm's.
LEFT_RUNNING_GRACE = 0.01
# A bound command runs as `sh -c _BOUND sh argv...`, its stdin a pipe whose write end
# this process alone holds. The shell forks a guard into the command's process group,
# then becomes the command (its pid, its exit status). The pipe's end (this process
# died, SIGKILL included) has the guard kill the group. prctl's PR_SET_PDEATHSIG would
# need code between fork and exec, which posix_spawn lacks, and would end the command
# alone, not what it started.
_BOUND = ('exec 3<&0 </dev/null; { read -r _ <&3; kill -s KILL 0; } >/dev/null 2>&1 & '
          'exec 3<&- "$@"')


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

    def ended_within(self, timeout: float) -> bool:
        """Whether it ends within timeout seconds (it is not reaped)."""
        return self.returncode is not None or ends_within(self.pid, timeout)

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
          group: int | None = None) -> Child:
    """Start argv (its program by path, or by name looked up in this process's PATH)
    with env; stdio: the descriptors to give it as 0, 1 and 2 (each 3 or above; None:
    this process's own); pass_fds: descriptors it keeps as they are; new_session: in a
    session of its own; group: in that process group of this session (0: one of its
    own; None: this process's)."""
    kept = set(pass_fds)
    actions: list[tuple[int, ...]] = [
        (os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(stdio) if fd is not None]
    # A descriptor dup'ed onto itself loses its close-on-exec flag (glibc >= 2.29).
    actions += [(os.POSIX_SPAWN_DUP2, fd, fd) for fd in sorted(kept)]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable() if fd not in kept]
    start = os.posix_spawn if "/" in argv[0] else os.posix_spawnp
    if group is not None and not new_session:
        return Child(start(argv[0], argv, env, file_actions=actions,
                           setsigdef=_DEFAULT_IN_CHILD, setpgroup=group))
    return Child(start(argv[0], argv, env, file_actions=actions, setsigdef=_DEFAULT_IN_CHILD,
                       setsid=new_session))


def pass_signals_on(to: Callable[[int], None], ignored: Iterable[int] = ()) -> None:
    """Each of PASSED_ON this process gets from now on, given to `to` (a target that has
    ended is let be: its status is on its way); those in ignored, ignored."""
    import signal

    def pass_on(signum: int, frame: object) -> None:
        try:
            to(signum)
        except ProcessLookupError:
            pass

    for signum in PASSED_ON:
        signal.signal(signum, signal.SIG_IGN if signum in ignored else pass_on)


def ends_within(pid: int, timeout: float) -> bool:
    """Whether the child pid ends within timeout seconds (it is not reaped)."""
    pidfd = os.pidfd_open(pid)
    try:
        return bool(select.select([pidfd], [], [], timeout)[0])
    finally:
        os.close(pidfd)


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


def run(argv: list[str], env: Mapping[str, str], timeout: float | None,
        pass_fds: Iterable[int] = (), merge_output: bool = False, interrupt_fd: int = -1,
        bound: bool = False) -> tuple[int, bytes, bytes]:
    """Run argv to its end, its stdin empty: its exit code, stdout and stderr (with
    merge_output, both in stdout, as written). TimeoutError once timeout seconds (None:
    no limit) have passed: it is killed then, with every process it started (a shell's
    runc and CRIU would go on dumping).

    interrupt_fd: a self-pipe (selfpipe.catch) of this process's; a signal arriving
    there ends the command, and every process it started, with SIGTERM (SIGKILL after
    INTERRUPT_GRACE), and raises Interrupted. bound: the command and every process it
    started are killed, too, if this process dies first (SIGKILL included), and what
    it left running in its process group once it ended, as Slurm's run_command ends
    what scrun.lua's commands leave (SIGTERM, SIGKILL 10 ms later)."""
    stdin = os.open(os.devnull, os.O_RDONLY)
    out_read, out_write = os.pipe()
    err_read, err_write = (-1, out_write) if merge_output else os.pipe()
    guard = -1
    if bound:
        os.close(stdin)
        stdin, guard = os.pipe()
        argv = ["/bin/sh", "-c", _BOUND, "sh", *argv]
    try:
        child = spawn(argv, env, (stdin, out_write, err_write), pass_fds, group=0)
    except BaseException:
        for fd in (out_read, err_read, guard):
            _close(fd)
        raise
    finally:
        for fd in {stdin, out_write, err_write}:
            os.close(fd)
    try:
        try:
            said = _read_all([out_read, err_read], None if timeout is None else
                             time.monotonic() + timeout, interrupt_fd)
        except TimeoutError:
            _end_group(child, 0.0)
            raise
        except Interrupted:
            _end_group(child, INTERRUPT_GRACE)
            raise
        finally:
            for fd in (out_read, err_read):
                _close(fd)
        code = child.wait()
        if guard >= 0:
            # The guard, alive until its pipe closes, keeps the group's id from reuse.
            _kill_group(child.pid, _signal.SIGTERM)
            time.sleep(LEFT_RUNNING_GRACE)
            _kill_group(child.pid, _signal.SIGKILL)
    finally:
        _close(guard)
    return code, said.get(out_read, b""), said.get(err_read, b"")


def _close(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def _end_group(child: Child, grace: float) -> None:
    """child and every process of its group ended: SIGTERM first if grace, SIGKILL once
    child has ended or grace seconds have passed."""
    if grace:
        _kill_group(child.pid, _signal.SIGTERM)
        child.ended_within(grace)
    _kill_group(child.pid, _signal.SIGKILL)
    child.wait()


def _kill_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass  # ended, and reaped, already


def _read_all(fds: list[int], deadline: float | None, interrupt_fd: int) -> dict[int, bytes]:
    """Everything written to the pipes fds (-1: none) until all are closed."""
    said = {fd: bytearray() for fd in fds if fd >= 0}
    poller = select.poll()
    for fd in [*said, interrupt_fd]:
        if fd >= 0:
            poller.register(fd, select.POLLIN)
    open_fds = len(said)
    while open_fds:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError
        for fd, _ in poller.poll(None if left is None else left * 1000):
            if fd == interrupt_fd:
                selfpipe.check(fd)
                continue
            chunk = os.read(fd, 65536)
            if chunk:
                said[fd] += chunk
            else:
                poller.unregister(fd)
                open_fds -= 1
    return {fd: bytes(data) for fd, data in said.items()}
