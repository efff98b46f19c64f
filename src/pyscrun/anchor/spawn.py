"""Forking the anchor from create, and the pipe over which it reports `created`."""

from __future__ import annotations

import os

from pyscrun import log
from pyscrun.anchor.stand_in import StandIn, StandInPipes
from pyscrun.anchor.store import Store
from pyscrun.conf.site import Site
from pyscrun.errors import ScrunError
from pyscrun.oci.bundle import Bundle

# typing costs milliseconds at every start of the CLI: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# The signals that end a container's anchor: SIGTERM, SIGINT and SIGHUP (numbers, not
# the signal module, which costs create milliseconds before the anchor is forked).
TERMINATING_SIGNALS = (15, 2, 1)


class CreateRequest:
    """Everything the anchor is told by create (or restore)."""

    def __init__(self, container_id: str, bundle: Bundle, store: Store, site: Site,
                 console_socket: str | None, pid_file: str | None, environ: dict[str, str],
                 job_options: dict[str, str], log_file: str | None = None,
                 log_format: str = "text", restore: dict[str, Any] | None = None,
                 preserve_fds: int = 0) -> None:
        self.container_id = container_id
        self.bundle = bundle
        self.store = store
        self.site = site
        self.console_socket = console_socket
        self.pid_file = pid_file
        self.environ = environ
        self.job_options = job_options
        self.log_file = log_file
        self.log_format = log_format
        self.restore = restore  # the CRIU order when this is a restore
        self.preserve_fds = preserve_fds  # the caller's fds 3.. that go to the container
        self.stand_in: StandIn | None = None  # forked with the anchor
        # Made by the anchor before its own modules load (start_anchor).
        self.signals: int | None = None
        self.started_allocation: object = None  # the backend's, to wait on

    def job_environ(self) -> dict[str, str]:
        """The environment the job is asked for with: the caller's, and a
        `podman run -e SLURM_JOB_ID=N` runs the container in that existing job."""
        environ = dict(self.environ)
        for entry in self.bundle.env:
            if entry.startswith("SLURM_JOB_ID="):
                environ["SLURM_JOB_ID"] = entry.partition("=")[2]
        return environ

    def abandon_started_allocation(self) -> None:
        """Give up the job asked for early if nothing waited on it (the anchor failed
        before): no salloc, and no job, is left behind."""
        started, self.started_allocation = self.started_allocation, None
        if started is not None:
            from pyscrun import backends

            try:
                backends.get(self.site.backend).abandon_allocation(self.site, started)
            except ScrunError as err:  # as a release's: said, and the anchor goes on ending
                log.current.error(f"giving up the job asked for: {err}")


def write_all(fd: int, data: bytes) -> bool:
    """All of data to a blocking fd, or what it takes of it if its reader is gone
    (False)."""
    while data:
        try:
            data = data[os.write(fd, data):]
        except OSError:
            return False
    return True


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _report(read_fd: int) -> bytes:
    """The anchor's one-line report on create (empty if it died first)."""
    # _signal, not signal: its enums would cost create's CPU while the anchor and
    # salloc need it.
    import _signal  # type: ignore[import-not-found]

    previous = _signal.signal(_signal.SIGTERM, _interrupted)
    try:
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = os.read(read_fd, 4096)
            if not chunk:
                break
            reply += chunk
        return reply
    finally:
        _signal.signal(_signal.SIGTERM, previous)


def _start_early(request: CreateRequest) -> None:
    """In the anchor, before its own modules load: catch what would end it, and ask
    for the job, whose answer (salloc's, 10 ms and more) then comes while they do."""
    from pyscrun import backends, selfpipe

    request.signals = selfpipe.catch(TERMINATING_SIGNALS)
    request.started_allocation = backends.get(request.site.backend).start_allocation(
        request.site, request.container_id, request.job_options, request.job_environ())


def start_anchor(request: CreateRequest, keep_fds: tuple[int, ...]) -> tuple[int, int]:
    """Fork the anchor and the container's stand-in; returns their pids once the anchor
    reported created. Raises on failure, leaving neither."""
    # Loaded before the fork, for the stand-in's namespaces.
    from pyscrun import linux  # noqa: F401

    stand_in = StandInPipes()
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError as err:
        for fd in (read_fd, write_fd):
            os.close(fd)
        stand_in.close()
        raise ScrunError(f"cannot start the container's anchor: {err.strerror}") from None
    if pid == 0:
        try:
            os.close(read_fd)
            os.setsid()
            if request.bundle.terminal:
                # A terminal container's stdio is its pty: as with runc, nothing of it
                # holds the caller's (containerd's shim reads create's stdout and
                # stderr until EOF: `docker run -t` would hang).
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                if null > 2:
                    os.close(null)
            # Hold nothing of the caller's but stdio (and fds it asked to preserve):
            # a stray copy of one of conmon's pipes would keep it waiting forever.
            keep = {0, 1, 2, write_fd, *stand_in.anchor_ends(), *keep_fds,
                    *log.current.open_fds()}
            for fd in _open_fds():
                if fd not in keep:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            log.current.detach_stderr()
            log.current.prefix = f"scrun-anchor[{request.container_id}]"
            _start_early(request)
            try:
                from pyscrun.anchor.daemon import Anchor

                request.stand_in = stand_in.receive()
                Anchor(request).run(write_fd)
            finally:
                request.abandon_started_allocation()  # the anchor failed to start
        finally:
            os._exit(1)
    os.close(write_fd)
    try:
        try:
            # Forked here, not by the anchor: once create exits, conmon (a subreaper)
            # must be the stand-in's parent, to learn its exit status. After the
            # anchor, which meanwhile asks for the job.
            stand_in_pid = stand_in.fork()
        except BaseException:
            _reap_both(pid, stand_in.forked)  # the anchor, told no stand-in, gives up
            raise
        try:
            reply = _report(read_fd)
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM while the job waits in the queue: the anchor withdraws
            # it and gives up, and so does create.
            os.kill(pid, 15)
            _report(read_fd)
            _reap_both(pid, stand_in_pid)
            raise
    finally:
        os.close(read_fd)
    if reply == b"ok\n":
        return pid, stand_in_pid
    # The anchor's end closed the stand-in's orders: it exits.
    _reap_both(pid, stand_in_pid)
    message = reply.decode(errors="replace").strip().removeprefix("error ")
    raise ScrunError(message or "the anchor died while creating the container")


def _reap_both(anchor: int, stand_in: int) -> None:
    os.waitpid(anchor, 0)
    if stand_in:
        os.waitpid(stand_in, 0)
