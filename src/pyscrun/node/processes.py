"""The processes below a node agent: waiting for them, whether they exec'd, their trees."""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import os
import time

from pyscrun.oci.state import process_start_time, shell_status

# How long a container's init may take to exec the container's program.
EXEC_WAIT = 1.0
# A process forked that has not exec'd since (linux/sched.h).
_PF_FORKNOEXEC = 0x40


def wait_status(pid: int) -> tuple[int, bool]:
    """Exit status of a child the way a shell reports it (128+N for signal N), and
    whether it exited by itself: neither killed nor saying, as the `/bin/sh -c` around
    a runtime does, that a process it waited for was (the runtime may be that one)."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return 0, False
    return shell_status(status), os.WIFEXITED(status) and os.WEXITSTATUS(status) < 128


def pid_in(path: str) -> int:
    """The pid a runtime wrote to its pid file (0: none yet)."""
    try:
        with open(path, "rb") as source:
            return int(source.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def ran_exec(pid: int) -> bool:
    """Whether pid, a container's init its runtime forked, has exec'd since (whatever
    the program it runs then calls itself), or has ended (gone, or a zombie). Before
    the exec it runs the runtime's own code, which a signal would end with a status of
    its own (runc's exits 2 on SIGTERM), and the container with it. The kernel marks a
    process from its fork to its exec (PF_FORKNOEXEC, in /proc/PID/stat's flags); a
    runtime's init is forked (runc's is cloned), never exec'd, until the container's
    program."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as source:
            stat = source.read()
    except OSError:
        return True
    # "PID (COMM) STATE PPID PGRP SESSION TTY TPGID FLAGS ...": the name may hold any
    # byte, parentheses included.
    fields = stat.rpartition(b") ")[2].split()
    return fields[0] == b"Z" or not int(fields[6]) & _PF_FORKNOEXEC


def await_exec(pid: int, timeout: float = EXEC_WAIT) -> None:
    """Wait until pid ran_exec, at most timeout seconds (an init that never execs)."""
    deadline = time.monotonic() + timeout
    while not ran_exec(pid) and time.monotonic() < deadline:
        time.sleep(0.001)


def children(pid: int | str = "self") -> list[int]:
    """The children of pid (this process's own by default) that are not reaped yet,
    oldest first."""
    found = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as listing:
                found += [int(child) for child in listing.read().split()]
        except OSError:
            continue
    return sorted(found, key=process_start_time)


def descendants(pid: int) -> list[int]:
    """Every process below pid: the rest of the container, below its init."""
    found: list[int] = []
    parents = [pid]
    while parents:
        below = children(parents.pop())
        found += below
        parents += below
    return found


def end_adopted(timeout: float = 5.0) -> None:
    """Kill every process below this one and reap them: what a container left behind
    when its init ended, adopted by this subreaper. Again while new ones appear (one
    may have forked meanwhile), up to timeout."""
    deadline = time.monotonic() + timeout
    while (left := descendants(os.getpid())) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, _signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in children():
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def set_child_subreaper() -> None:
    """Orphans below this process become its children, not init's."""
    from pyscrun import linux

    linux.set_child_subreaper()


def wait_output_taken(pid: int, timeout: float) -> bool:
    """Until what a paused container's init wrote to its stdout and stderr pipes has
    been read from them (the agent's pumps, or a restoring runtime's own copies of
    them), up to timeout; whether it was. A dump takes what a pipe still holds along,
    and a restore writes it again: its reader would see those lines twice."""
    import fcntl
    import stat
    import sys
    import termios

    pipes = []
    for stream in (1, 2):
        path = f"/proc/{pid}/fd/{stream}"
        try:
            if stat.S_ISFIFO(os.stat(path).st_mode):
                pipes.append(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
        except OSError:
            continue  # no such stream, or one this process may not open: nothing to wait for
    try:
        deadline = time.monotonic() + timeout
        while any(int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, bytes(4)), sys.byteorder)
                  for fd in pipes):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True
    finally:
        for fd in pipes:
            os.close(fd)
