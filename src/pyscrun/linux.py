"""The few Linux calls Python 3.11's os module lacks: unshare, setns, mount, pivot_root,
prctl, renameat2.

They go through _ctypes, the C module under ctypes, with the three C types they take:
create (for the stand-in) and the node agent (a child subreaper) both load this module
on the way to the container's start, and ctypes' own module, with its many types and
their checks, costs each of them 1.3 ms more."""

from __future__ import annotations

import _ctypes
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    _IntData = _ctypes._SimpleCData[int]  # generic in the stub only
else:
    _IntData = _ctypes._SimpleCData

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
# glibc has no pivot_root(): the system call's number, per architecture.
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}


class _Int(_IntData):
    _type_ = "i"


class _Long(_IntData):
    _type_ = "l"


class _ULong(_IntData):
    _type_ = "L"


class _LibcFunction(_ctypes.CFuncPtr):
    """A function of the C library returning int, errno kept for get_errno()."""

    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


# The program's own symbols, the C library's among them, as ctypes.CDLL(None) has them
# (the stub knows dlopen of a path only, not of NULL).
_PROGRAM = _ctypes.dlopen(None, os.RTLD_NOW)  # type: ignore[arg-type]


def _function(name: str) -> _LibcFunction:
    return _LibcFunction(_ctypes.dlsym(_PROGRAM, name))


def _check(name: str, result: int) -> None:
    if result != 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _call(name: str, *args: int) -> None:
    _check(name, _function(name)(*(_ULong(a) if name == "prctl" else _Int(a) for a in args)))


def unshare(flags: int) -> None:
    _call("unshare", flags)


def setns(fd: int, nstype: int) -> None:
    _call("setns", fd, nstype)


def join_namespaces(pid: int, kinds: tuple[tuple[str, int], ...], proc_fd: int) -> None:
    """Enter pid's namespaces of kinds (their names under /proc/PID/ns and CLONE_NEW*
    flags), in that order, each that is not this process's own already. All are opened
    first: a joined mount namespace would change what the paths find. proc_fd: /proc,
    opened where this process still sees it."""
    targets = []
    try:
        for name, flag in kinds:
            path = f"{pid}/ns/{name}"
            if os.stat(path, dir_fd=proc_fd).st_ino == os.stat(f"self/ns/{name}",
                                                                dir_fd=proc_fd).st_ino:
                continue
            targets.append((os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd), flag))
        for fd, flag in targets:
            setns(fd, flag)
    finally:
        for fd, _ in targets:
            os.close(fd)


def set_parent_death_signal(signum: int) -> None:
    _call("prctl", PR_SET_PDEATHSIG, signum, 0, 0, 0)


def set_child_subreaper() -> None:
    _call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check("mount", _function("mount")(source.encode(), target.encode(),
                                       fstype.encode() if fstype else None, _ULong(flags),
                                       data.encode() if data else None))


def umount(target: str, flags: int = 0) -> None:
    _check("umount2", _function("umount2")(target.encode(), _Int(flags)))


def exchange(first: str, second: str) -> None:
    """Swap two paths in one step (renameat2's RENAME_EXCHANGE): neither is ever
    missing. OSError EINVAL where the file system cannot."""
    _check("renameat2", _function("renameat2")(_Int(_AT_FDCWD), first.encode(), _Int(_AT_FDCWD),
                                               second.encode(), _Int(_RENAME_EXCHANGE)))


def pivot_root(new_root: str, put_old: str) -> None:
    machine = os.uname().machine
    number = _SYS_PIVOT_ROOT.get(machine)
    if number is None:
        raise OSError(0, f"pivot_root: unknown on {machine}")
    _check("pivot_root", _function("syscall")(_Long(number), new_root.encode(), put_old.encode()))


def keep_only(keep: set[int]) -> None:
    """stdio on /dev/null and every other descriptor but keep closed: a process that
    outlives its caller must hold nothing of the caller's (a copy of one of conmon's
    pipes would keep it waiting)."""
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in keep | {0, 1, 2}:
            try:
                os.close(int(name))
            except OSError:
                pass


def fork_in_new_pid_namespace() -> int:
    """fork() whose child is pid 1 of a new pid namespace, while the caller's later
    children stay in the caller's own namespace. Returns as os.fork() does."""
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    try:
        # Coming back is allowed only with CAP_SYS_ADMIN over the namespace's owner,
        # which a caller inside rootless podman's user namespace lacks: found out
        # before anything is forked (PermissionError), never after.
        setns(own, CLONE_NEWPID)
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


def fork_adopted_in_new_pid_namespace() -> int:
    """fork() whose child is pid 1 of a new pid namespace, for a caller that may not
    come back to its own (inside rootless podman's user namespace): a process between
    unshares and forks it, then exits, and the caller, made a child subreaper, adopts
    it. PermissionError if no new pid namespace may be made. Returns as os.fork() does."""
    set_child_subreaper()
    read_fd, write_fd = os.pipe()
    between = os.fork()
    if between == 0:
        os.close(read_fd)
        try:
            unshare(CLONE_NEWPID)
            pid = os.fork()
        except BaseException:
            os._exit(1)
        if pid == 0:
            os.close(write_fd)
            return 0
        os.write(write_fd, str(pid).encode())
        os._exit(0)
    os.close(write_fd)
    try:
        said = os.read(read_fd, 32)
    finally:
        os.close(read_fd)
        os.waitpid(between, 0)
    if not said:
        raise PermissionError("no new pid namespace may be made here")
    return int(said)
