"""The few Linux calls Python 3.11's os module lacks: unshare, setns, prctl."""

from __future__ import annotations

import ctypes
import os
from typing import Any

CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1

_libc: Any = None


def _call(name: str, *args: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if getattr(_libc, name)(*(ctypes.c_ulong(a) if name == "prctl" else ctypes.c_int(a)
                              for a in args)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _call("unshare", flags)


def setns(fd: int, nstype: int) -> None:
    _call("setns", fd, nstype)


def set_parent_death_signal(signum: int) -> None:
    _call("prctl", PR_SET_PDEATHSIG, signum, 0, 0, 0)


def fork_in_new_pid_namespace() -> int:
    """fork() whose child is pid 1 of a new pid namespace, while the caller's later
    children stay in the caller's own namespace. Returns as os.fork() does."""
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    try:
        unshare(CLONE_NEWPID)
        try:
            pid = os.fork()
        except BaseException:
            setns(own, CLONE_NEWPID)
            raise
        if pid:
            setns(own, CLONE_NEWPID)
        return pid
    finally:
        os.close(own)
