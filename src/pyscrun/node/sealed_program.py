"""The runtime run from a sealed copy of its program in memory.

runc, started from its file, guards the host's binary against a container that would
overwrite it (CVE-2019-5736) at every container start: with a read-only bind mount of
it where it may mount (root on the host; rootless podman runs it in a mount namespace
of its own, and so does the node agent of an ordinary user: node/userns.py), else with
a copy into a memfd that it seals and executes again: about 15 ms of each start here,
and a start that fails now and then (`could not ensure we are a cloned binary: Device
or resource busy`, the kernel refusing the seal while pages of the fresh copy are
still referenced). A runc whose own program already is a fully sealed memfd skips all
of it (its documented provision for sharing one sealed copy). Where runc would copy
itself (an ordinary user's runc outside namespaces of the agent's own: a config.json
with uid mappings of its own), the agent makes that copy once, retries a busy seal,
and runs the program from its file when it cannot.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time

from pyscrun import fs, log
from pyscrun.threads import Thread

# Runtimes that copy themselves at each start unless run from a sealed memfd.
SELF_COPYING = ("runc",)

_F_ADD_SEALS = 1033
# F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE: all of them, as runc checks.
_ALL_SEALS = 0x1 | 0x2 | 0x4 | 0x8
# Executable whatever vm.memfd_noexec says (kernels before 6.3 refuse the flag).
_MFD_EXEC = 0x10
_SEAL_ATTEMPTS = 5
_SEAL_RETRY_DELAY = 0.01
# ioctl(2) on a namespace's file: its owning user namespace (linux/nsfs.h).
_NS_GET_USERNS = 0xB701
_CAP_SYS_ADMIN = 21


def needed() -> bool:
    """Whether runc, started by this process, would copy itself: unless it holds
    CAP_SYS_ADMIN in the user namespace that owns its mount namespace, where it may
    bind-mount its program read-only instead."""
    try:
        with open("/proc/self/status", "rb") as status:
            effective = next(line for line in status if line.startswith(b"CapEff:"))
        if not int(effective.split()[1], 16) >> _CAP_SYS_ADMIN & 1:
            return True
        mounts = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        try:
            owner = fcntl.ioctl(mounts, _NS_GET_USERNS)
        finally:
            os.close(mounts)
        try:
            return os.fstat(owner).st_ino != os.stat("/proc/self/ns/user").st_ino
        finally:
            os.close(owner)
    except (OSError, StopIteration, ValueError, IndexError):
        return True


def copies_itself(program: str) -> bool:
    return os.path.basename(program) in SELF_COPYING


def program_file(pattern: str, search_path: str | None) -> str | None:
    """The file of a command pattern's program where that program copies itself."""
    words = pattern.split(None, 1)
    if not words or not copies_itself(words[0]):
        return None
    return fs.which(words[0], search_path)


class Sealing:
    """Sealed copies of programs, made in a thread of its own while the agent loads its
    modules: the copying is the kernel's work, done without the interpreter's lock.
    Joined (wait) before the agent forks anything, whose child would otherwise start
    with a copy half made; what is not taken is closed."""

    def __init__(self, paths: list[str]) -> None:
        self.copies: dict[str, int] = {}
        self.thread = Thread(self._make, (paths,))
        self.thread.start()

    def _make(self, paths: list[str]) -> None:
        for path in dict.fromkeys(paths):
            fd = sealed_copy(path)
            if fd is not None:
                self.copies[path] = fd

    def wait(self) -> None:
        self.thread.join()

    def take(self, path: str) -> int | None:
        self.wait()
        return self.copies.pop(path, None)

    def close(self) -> None:
        self.wait()
        for fd in self.copies.values():
            os.close(fd)
        self.copies.clear()


def sealed_copy(path: str) -> int | None:
    """A sealed memfd holding the program at path, or None when one cannot be made."""
    try:
        fd = _memfd(os.path.basename(path))
    except OSError as err:
        log.current.debug(f"no sealed copy of {path}: {err}")
        return None
    try:
        with open(path, "rb") as source:
            size = os.fstat(source.fileno()).st_size
            sent = 0
            while sent < size:
                done = os.sendfile(fd, source.fileno(), sent, size - sent)
                if done == 0:
                    raise OSError(errno.EIO, f"{path} ended early")
                sent += done
        _seal(fd)
    except OSError as err:
        os.close(fd)
        log.current.debug(f"no sealed copy of {path}: {err}")
        return None
    return fd


def _memfd(name: str) -> int:
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    try:
        return os.memfd_create(name, flags | _MFD_EXEC)
    except OSError as err:
        if err.errno != errno.EINVAL:
            raise
        return os.memfd_create(name, flags)


def _seal(fd: int) -> None:
    for attempt in range(_SEAL_ATTEMPTS):
        try:
            fcntl.fcntl(fd, _F_ADD_SEALS, _ALL_SEALS)
            return
        except OSError as err:
            if err.errno != errno.EBUSY or attempt == _SEAL_ATTEMPTS - 1:
                raise
        time.sleep(_SEAL_RETRY_DELAY * (attempt + 1))
