"""CRIU command lines for one task's pid namespace: dump, restore, and their errors.

A task is dumped from its namespace's init (see nsinit.py). Its stdio and the init's
status pipe belong to the step that ran it; on restore they are reconnected to the new
step's with --inherit-fd, keyed by what they were at dump time (`pipe:[INODE]`, a file's
path without the leading "/"), so output goes on where the new srun reads it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping

from pyscrun.criu_log import log_reason
from pyscrun.errors import CheckpointError

# Cgroups are left alone: a restored task belongs to the new step's cgroup (the one
# the launcher is in), never to the old job's.
_COMMON = ["--manage-cgroups=ignore"]
CRIU_ENV = "SRUN_CR_CRIU"


def find(environ: Mapping[str, str]) -> str:
    """The criu binary: $SRUN_CR_CRIU, else `criu` on PATH; CheckpointError if absent."""
    name = environ.get(CRIU_ENV) or "criu"
    path = shutil.which(name, path=environ.get("PATH") or os.defpath)
    if path is None:
        where = f"{CRIU_ENV}={name}" if environ.get(CRIU_ENV) else "PATH"
        raise CheckpointError(
            f"criu not found ({where}): install CRIU 4.1 or later (Debian 13: apt-get install "
            f"criu; Debian 12: scripts/criu-setup.sh)")
    return path


def resource_key(link: str) -> str | None:
    """The --inherit-fd name of what a descriptor was (readlink of /proc/PID/fd/N), or
    None when CRIU reopens it by itself (/dev/null and other device nodes)."""
    if link.startswith(("pipe:[", "socket:[")):
        return link
    if link.startswith("/") and not link.startswith("/dev/"):
        return link[1:]
    return None


# CRIU's parasite, when the task's /proc is not its pid namespace's (ours never is: no
# mount namespace), mounts a proc at the fixed path "proc.crtools" in the task's working
# directory. Two dumps of tasks sharing one directory (tasks of one step on one node; or
# on several nodes over a shared file system) can collide there. Dumps on one host take
# turns; a collision across hosts is retried.
_COLLISION = ("Can't create a directory (-17)", "Can't get /proc fd", "Can't retrieve FD from socket")
DUMP_ATTEMPTS = 4
LOCK_TIMEOUT = 600.0


@contextlib.contextmanager
def _host_turn() -> Iterator[None]:
    path = os.path.join(tempfile.gettempdir(), f"pyscrun-srun-cr-{os.getuid()}.dump.lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break  # a hung dump elsewhere: go ahead, collisions are retried
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


def dump(criu: str, pid: int, image_dir: str, leave_stopped: bool, keep: tuple[str, ...] = (),
         extra: list[str] | None = None) -> float:
    """Dump the tree of `pid` into image_dir, leaving it running (or stopped). Files named
    in `keep` are the caller's. Returns the seconds taken; CheckpointError on failure."""
    mode = "--leave-stopped" if leave_stopped else "--leave-running"
    argv = [criu, "dump", "-t", str(pid), "-D", image_dir, "-o", "dump.log", mode, *_COMMON,
            *(extra or [])]
    log_path = os.path.join(image_dir, "dump.log")
    with _host_turn():
        for attempt in range(1, DUMP_ATTEMPTS + 1):
            try:
                return _run(argv, log_path, "dump", pass_fds=())
            except CheckpointError:
                if attempt == DUMP_ATTEMPTS or not _collided(log_path):
                    raise
            for name in os.listdir(image_dir):
                if name not in keep:
                    os.unlink(os.path.join(image_dir, name))
            time.sleep(random.uniform(0.05, 0.3))
    raise AssertionError("unreachable")


def _collided(log_path: str) -> bool:
    try:
        with open(log_path, encoding="utf-8", errors="replace") as log:
            text = log.read()
    except OSError:
        return False
    return any(sign in text for sign in _COLLISION)


def restore(criu: str, image_dir: str, inherit: Mapping[str, int],
            extra: list[str] | None = None) -> int:
    """Restore the tree in image_dir as a child of the caller, in a new pid namespace,
    with each resource named in `inherit` replaced by the caller's descriptor for it.
    Returns the pid of the restored init."""
    work = tempfile.mkdtemp(prefix="srun_cr-restore-")
    try:
        pidfile = os.path.join(work, "init.pid")
        argv = [criu, "restore", "-D", image_dir, "-W", work, "-o", "restore.log",
                "--restore-detached", "--restore-sibling", "--pidfile", pidfile, *_COMMON]
        for key, fd in inherit.items():
            argv += ["--inherit-fd", f"fd[{fd}]:{key}"]
        argv += extra or []
        _run(argv, os.path.join(work, "restore.log"), "restore", pass_fds=tuple(inherit.values()))
        try:
            with open(pidfile, encoding="ascii") as file:
                return int(file.read().strip())
        except (OSError, ValueError) as err:
            raise CheckpointError(f"criu restore wrote no pid file: {err}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(argv: list[str], log_path: str, what: str, pass_fds: tuple[int, ...]) -> float:
    started = time.monotonic()
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, pass_fds=pass_fds, check=False)
    except OSError as err:
        raise CheckpointError(f"cannot run {argv[0]}: {err.strerror or err}") from None
    if done.returncode != 0:
        reason = log_reason(log_path) or done.stderr.decode(errors="replace").strip()[-400:]
        raise CheckpointError(f"criu {what} failed (exit {done.returncode}): {reason}")
    return time.monotonic() - started
