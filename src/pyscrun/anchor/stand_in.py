"""The container's stand-in: the pid podman and docker are given for the container.

podman enters the namespaces of the pid in `--pid-file` (`podman cp` writes and reads
through its mount namespace and root, buildah's RUN sets up networking in its network
namespace), and conmon waits for that pid to learn the container's exit status. The
container itself runs elsewhere (another machine, or under the runtime on this one),
so the pid is a process of its own: forked by create (so that, once create exits, it
is conmon's child), pid 1 of a pid namespace of its own, in mount, network, uts and
ipc namespaces of its own. Its root is the container's rootfs as this host sees it,
or an empty read-only file system where the container runs from another copy. On the
local backend it joins the container's own namespaces once the container runs.
It does nothing but wait for the anchor's orders, one line each on a pipe:

    root PATH   pivot into PATH (empty: an empty read-only root); answers ok/error
    join PID    enter the namespaces of PID (the container's init); answers ok/error
    exit N      exit with status N (the container's)

If the anchor goes without saying `exit` (killed), it exits 128+SIGKILL, as a
container killed with it would.
"""

from __future__ import annotations

import os

from pyscrun.errors import ScrunError

# A killed anchor takes its container with it (its agents end it).
_ORPHANED_STATUS = 128 + 9
ANSWER_TIMEOUT = 10.0
# The namespaces joined on the local backend, the user namespace first: the others
# belong to it. Not pid: a process cannot change its own pid namespace.
_JOINED = (("user", 0x10000000), ("cgroup", 0x02000000), ("ipc", 0x08000000),
           ("uts", 0x04000000), ("net", 0x40000000), ("mnt", 0x00020000))


class StandInPipes:
    """The pipes between the anchor and the stand-in, made before either is forked.

    create forks the anchor first, which asks for the job at once, and the stand-in
    after it (a few milliseconds: new namespaces), telling the anchor the stand-in's
    pid on a third pipe once it is known."""

    def __init__(self) -> None:
        self.orders_read, self.orders_write = os.pipe()
        self.answers_read, self.answers_write = os.pipe()
        self.pid_read, self.pid_write = os.pipe()
        self.forked = 0  # the stand-in's pid, in create, once forked

    def anchor_ends(self) -> tuple[int, int, int]:
        return self.orders_write, self.answers_read, self.pid_read

    def close(self) -> None:
        """In create, when no anchor could be forked."""
        for fd in (*self.anchor_ends(), self.orders_read, self.answers_write, self.pid_write):
            os.close(fd)

    def fork(self) -> int:
        """In create, once the anchor is forked: fork the stand-in and tell the anchor
        its pid. Whatever fails, create holds none of the pipes afterwards (the anchor,
        told nothing, gives up)."""
        for fd in self.anchor_ends():
            os.close(fd)
        try:
            try:
                self.forked = _fork_stand_in(self.orders_read, self.answers_write)
            except OSError as err:
                raise ScrunError(f"cannot start the container's stand-in: {err.strerror}") from None
            try:
                os.write(self.pid_write, f"{self.forked}\n".encode())
            except BrokenPipeError:
                pass  # the anchor is gone: its report on create, or its silence, says why
            return self.forked
        finally:
            for fd in (self.orders_read, self.answers_write, self.pid_write):
                os.close(fd)

    def receive(self) -> StandIn:
        """In the anchor: the stand-in, once create has said its pid."""
        said = b""
        try:
            while not said.endswith(b"\n"):
                chunk = os.read(self.pid_read, 32)
                if not chunk:
                    raise ScrunError("create did not start the container's stand-in")
                said += chunk
        finally:
            os.close(self.pid_read)
        return StandIn(int(said), self.orders_write, self.answers_read)


def _fork_stand_in(orders_read: int, answers_write: int) -> int:
    """Fork the stand-in, in a pid namespace of its own where it may have one."""
    from pyscrun import linux

    try:
        pid = linux.fork_in_new_pid_namespace()
    except PermissionError:
        try:
            # Inside rootless podman's user namespace, which may make a pid
            # namespace but not come back from it.
            pid = linux.fork_adopted_in_new_pid_namespace()
        except PermissionError:
            # Unprivileged, outside any user namespace of its own: the host's pid
            # namespace, but every other namespace of its own (below).
            pid = os.fork()
    if pid == 0:
        try:
            _serve(orders_read, answers_write)
        finally:
            os._exit(_ORPHANED_STATUS)
    return pid


class StandIn:
    """The anchor's handle on the stand-in: its pid and the two ends of its pipes."""

    def __init__(self, pid: int, orders_fd: int, answers_fd: int) -> None:
        self.pid = pid
        self.orders_fd = orders_fd
        self.answers_fd = answers_fd

    def _ask(self, order: str) -> None:
        import select

        try:
            os.write(self.orders_fd, f"{order}\n".encode())
        except OSError as err:
            raise ScrunError(f"the container's stand-in is gone: {err.strerror}") from None
        answer = b""
        while not answer.endswith(b"\n"):
            ready, _, _ = select.select([self.answers_fd], [], [], ANSWER_TIMEOUT)
            chunk = os.read(self.answers_fd, 4096) if ready else b""
            if not chunk:
                raise ScrunError("the container's stand-in did not answer")
            answer += chunk
        text = answer.decode(errors="replace").strip()
        if text != "ok":
            raise ScrunError(f"the container's stand-in: {text.removeprefix('error ')}")

    def set_root(self, rootfs: str) -> None:
        """Its namespaces, with rootfs (or nothing) as its root."""
        self._ask(f"root {rootfs}")

    def join(self, pid: int) -> None:
        """Enter the namespaces of pid, the container's own init on this host."""
        self._ask(f"join {pid}")

    def exit(self, status: int) -> None:
        """Exit with the container's status: what conmon reports to podman. Said once:
        the anchor may tell it before the step has ended, and again at its own end."""
        if self.orders_fd < 0:
            return
        try:
            os.write(self.orders_fd, f"exit {status & 0xFF}\n".encode())
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        for fd in (self.orders_fd, self.answers_fd):
            if fd >= 0:
                os.close(fd)
        self.orders_fd = self.answers_fd = -1


# -- the stand-in's side --------------------------------------------------------------

def _serve(orders_fd: int, answers_fd: int) -> None:
    import _signal  # type: ignore[import-not-found]

    from pyscrun import linux

    linux.keep_only({orders_fd, answers_fd})
    # A session and process group of its own, as a runc container's init has: conmon's
    # --timeout (podman run --timeout) kills the container's whole process group, which
    # would otherwise be conmon's own, conmon with it, before it writes the exit file.
    os.setsid()
    for signum in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT):
        _signal.signal(signum, _signal.SIG_IGN)
    # The host's /proc, for a later join: the new root has none.
    proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    with open(orders_fd, "rb", buffering=0) as orders:
        for line in iter(orders.readline, b""):
            verb, _, value = line.decode(errors="replace").rstrip("\n").partition(" ")
            if verb == "exit":
                os._exit(int(value) if value.isdigit() else _ORPHANED_STATUS)
            try:
                if verb == "root":
                    isolate(value)
                elif verb == "join":
                    linux.join_namespaces(int(value), _JOINED, proc_fd)
                else:
                    raise ValueError(f"unknown order {verb!r}")
                answer = "ok"
            except (OSError, ValueError) as err:
                answer = f"error {err}"
            os.write(answers_fd, f"{answer}\n".encode())


def isolate(rootfs: str) -> None:
    from pyscrun import linux

    flags = linux.CLONE_NEWNS | linux.CLONE_NEWNET | linux.CLONE_NEWUTS | linux.CLONE_NEWIPC
    if os.geteuid() != 0:
        flags |= linux.CLONE_NEWUSER
    linux.unshare(flags)
    # Nothing done in here may propagate back to the host's mounts.
    linux.mount("none", "/", None, linux.MS_REC | linux.MS_PRIVATE)
    if rootfs and os.path.isdir(rootfs):
        linux.mount(rootfs, rootfs, None, linux.MS_BIND | linux.MS_REC)
        new_root, read_only = rootfs, False
    else:
        new_root, read_only = "/tmp", True
        linux.mount("pyscrun-stand-in", new_root, "tmpfs", 0, "size=16k,mode=0555")
    os.chdir(new_root)
    # The host's tree is stacked under the new root and then detached: the namespace
    # holds the container's files and nothing else.
    linux.pivot_root(".", ".")
    linux.umount(".", linux.MNT_DETACH)
    os.chdir("/")
    if read_only:
        linux.mount("none", "/", None, linux.MS_REMOUNT | linux.MS_RDONLY)
