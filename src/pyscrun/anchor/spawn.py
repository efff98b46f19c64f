"""Forking the anchor from create, and the pipe over which it reports `created`."""

from __future__ import annotations

import gc
import os

from pyscrun import log
from pyscrun.anchor.request import TERMINATING_SIGNALS, CreateRequest
from pyscrun.anchor.stand_in import StandInPipes
from pyscrun.errors import ScrunError

# typing costs milliseconds at every start of the CLI: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


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
        request.site, request.container_id, request.job_options, request.job_environ(),
        variables=request.hooks is not None, warn_before=request.move_before_end())


def start_anchor(request: CreateRequest, keep_fds: tuple[int, ...]) -> tuple[int, int]:
    """Fork the anchor and the container's stand-in; returns their pids once the anchor
    reported created. Raises on failure, leaving neither."""
    # Loaded before the fork, for the stand-in's namespaces.
    from pyscrun import linux  # noqa: F401

    stand_in = StandInPipes()
    read_fd, write_fd = os.pipe()
    # No collections in the anchor until it serves (anchor/daemon.py), nor here until
    # it reported: one would touch every object the forks share, copying them page by
    # page while salloc and srun wait on the anchor. (The stand-in, forked meanwhile,
    # never collects: it allocates next to nothing.)
    gc.disable()
    try:
        return _fork_anchor(request, keep_fds, stand_in, read_fd, write_fd)
    finally:
        gc.enable()


def _fork_anchor(request: CreateRequest, keep_fds: tuple[int, ...], stand_in: StandInPipes,
                 read_fd: int, write_fd: int) -> tuple[int, int]:
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
            # Ctrl-C or SIGTERM while the job waits in the queue, or scrun.lua's
            # stage_in runs: the anchor withdraws the job or interrupts the script, and
            # gives up, and so does create, saying why.
            said = _give_up(pid, read_fd).decode(errors="replace").strip()
            if said.startswith("error "):
                log.current.error(said.removeprefix("error "))
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


def _give_up(anchor: int, read_fd: int) -> bytes:
    """The anchor told to give up (SIGTERM), and again at each further Ctrl-C or
    SIGTERM until it reported (a stage_out of scrun.lua's may wait on a command in
    turn): its report."""
    while True:
        os.kill(anchor, 15)
        try:
            return _report(read_fd)
        except KeyboardInterrupt:
            continue


def _reap_both(anchor: int, stand_in: int) -> None:
    os.waitpid(anchor, 0)
    if stand_in:
        os.waitpid(stand_in, 0)
