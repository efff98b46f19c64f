"""A job allocation held open by a running salloc, as an interactive user holds one.

salloc runs `cat` (on this host) with its stdin a pipe only the anchor holds. Closing
the pipe ends `cat`, and salloc then completes the job (state COMPLETED, not CANCELLED).
The anchor dying, even by SIGKILL, closes the pipe as well: the job ends with it in
every state, created included.
"""

from __future__ import annotations

import os
import time

from pyscrun import log
from pyscrun.backends.base import start_command
from pyscrun.errors import BackendError

# salloc's words that name the job; the job's number follows.
_GRANTED = b"Granted job allocation "
_PENDING = b"Pending job allocation "
# salloc's words when slurmctld did not take the job back (it still exits 0).
_UNRELEASED = b"Unable to clean up job allocation"
# How long release waits for salloc to give the job back before cancelling it.
RELEASE_TIMEOUT = 30.0
# How long salloc may take to withdraw a queued job once told to.
WITHDRAW_TIMEOUT = 10.0
_SIGINT, _SIGKILL = 2, 9


def _number_after(said: bytes, words: bytes) -> str:
    at = said.find(words)
    rest = said[at + len(words):].split(maxsplit=1) if at >= 0 else []
    return rest[0].decode() if rest and rest[0].isdigit() else ""


def _job_named(said: bytes) -> tuple[str, bool]:
    """The job salloc named in what it said ('' if none yet), and whether granted."""
    granted = _number_after(said, _GRANTED)
    if granted:
        return granted, True
    return _number_after(said, _PENDING), False


def _spawn(argv: list[str], env: dict[str, str]) -> tuple[int, int, int]:
    """Start argv with its stdin and stderr pipes of ours (stdout: nowhere): its pid and
    the ends we hold. posix_spawn rather than subprocess, whose import (with re and
    locale, 6 ms) would come before salloc's start when the anchor asks early."""
    stdin_read, stdin_write = os.pipe()
    stderr_read, stderr_write = os.pipe()
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        pid = start_command(argv, env, (stdin_read, null, stderr_write))
    except BackendError:
        os.close(stdin_write)
        os.close(stderr_read)
        raise
    finally:
        for fd in (stdin_read, null, stderr_write):
            os.close(fd)
    return pid, stdin_write, stderr_read


class HeldAllocation:
    def __init__(self, pid: int, stdin_fd: int, stderr_fd: int) -> None:
        self.pid = pid
        self.stdin_fd = stdin_fd  # closed: `cat` ends, and salloc gives the job back
        self.stderr_fd = stderr_fd
        self.returncode: int | None = None  # once salloc ended
        self.job_id = ""
        self.granted = False
        self.said = b""  # salloc's stderr so far
        self.killed = False  # salloc had to be killed: its job may still be held

    @classmethod
    def start(cls, argv: list[str], env: dict[str, str]) -> HeldAllocation:
        """salloc (argv, without a command) asking for the job; await_job follows it."""
        log.current.debug(f"slurm: {' '.join(argv)}")
        return cls(*_spawn([*argv, "--", "cat"], env))

    def await_job(self, timeout: float, interrupt_fd: int = -1,
                  queued_is_enough: bool = False) -> None:
        """Until the job is granted (or, if queued_is_enough, queued: `advance` then
        follows it). While the job is queued the caller's stderr says so, with its id,
        as salloc's does; if interrupt_fd becomes readable first, the queued job is
        withdrawn."""
        import select

        deadline = time.monotonic() + timeout
        poller = select.poll()
        poller.register(self.stderr_fd, select.POLLIN)
        if interrupt_fd >= 0:
            poller.register(interrupt_fd, select.POLLIN)
        while not self.granted and not (self.job_id and queued_is_enough):
            remaining = deadline - time.monotonic()
            ready = [fd for fd, _ in poller.poll(remaining * 1000)] if remaining > 0 else []
            if not ready or interrupt_fd in ready:
                self.withdraw()
                if ready:
                    raise BackendError("interrupted while the job waited in the queue")
                raise BackendError(f"salloc was not granted a job within {timeout:.0f} s")
            self.advance()

    def fileno(self) -> int:
        """Readable when salloc says something: whether a queued job came, or failed."""
        return self.stderr_fd

    def advance(self) -> None:
        """Read what salloc said (it was readable): granted, queued, or BackendError
        when salloc ended without a job."""
        chunk = os.read(self.fileno(), 65536)
        if not chunk:
            self._ended_within(None)
            raise BackendError(self.said.decode(errors="replace").strip()
                               or f"salloc exited {self.returncode}")
        self.said += chunk
        job_id, granted = _job_named(self.said)
        if granted:
            self.job_id, self.granted = job_id, True
            return
        if job_id and not self.job_id:
            self.job_id = job_id
            log.current.info(f"job {self.job_id} queued and waiting for resources")
            log.tell_caller(f"scrun: job {self.job_id} queued and waiting for resources")

    def withdraw(self) -> bool:
        """End a salloc whose job is still queued: on SIGINT it withdraws the job.
        False if it had to be killed instead (the job may still be queued), or could
        not give a granted job back.

        A job granted meanwhile (the grant and the interrupt heard in one poll) is
        given back as a release would: its `cat` ends with its stdin. A SIGINT then,
        racing `cat`'s end, leaves salloc hung now and then (seen with Slurm 22.05)."""
        if self._ended_within(0):
            return True
        self._close_stdin()
        self.said += self._rest_of_stderr()
        if _job_named(self.said)[1]:
            self.granted = True
            return self._given_back()
        os.kill(self.pid, _SIGINT)
        return self._ended_within(WITHDRAW_TIMEOUT)

    def abandon(self) -> str:
        """Give up a job never waited for, granted or not (its anchor failed before it
        looked): the job's id if salloc had to be killed with it still held, for the
        caller to cancel, else ''."""
        self._close_stdin()  # a granted job's `cat` ends: salloc gives it back
        if self.withdraw() and not self.killed:
            return ""
        self.said += self._rest_of_stderr()
        return _job_named(self.said)[0]

    def release(self) -> bool:
        """Give the job back; False if salloc did not end in time (then it is killed) or
        could not give the job back (it exits 0 even when slurmctld was unreachable)."""
        if not self.granted:
            return self.withdraw()
        self._close_stdin()
        return self._given_back()

    def _given_back(self) -> bool:
        """Whether salloc, its stdin closed, ended within RELEASE_TIMEOUT having given
        the job back (it exits 0 even when slurmctld was unreachable)."""
        ended = self._ended_within(RELEASE_TIMEOUT)
        self.said += self._rest_of_stderr()
        return ended and _UNRELEASED not in self.said

    def _close_stdin(self) -> None:
        if self.stdin_fd >= 0:
            os.close(self.stdin_fd)
            self.stdin_fd = -1

    def _ended_within(self, timeout: float | None) -> bool:
        """salloc ended by itself within timeout (None: however long it takes); else
        it is killed (False), unless timeout is 0: a look only."""
        if self.returncode is not None:
            return True
        if timeout:
            import select

            pidfd = os.pidfd_open(self.pid)
            try:
                select.select([pidfd], [], [], timeout)
            finally:
                os.close(pidfd)
        if not self._reaped(os.WNOHANG if timeout is not None else 0) and timeout:
            os.kill(self.pid, _SIGKILL)
            self.killed = True
            self._reaped(0)
            return False
        return self.returncode is not None

    def _reaped(self, flags: int) -> bool:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:
            self.returncode = 255  # reaped already: its status is lost, not its end
            return True
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)
        return bool(pid)

    def _rest_of_stderr(self) -> bytes:
        """What salloc has said and is not read yet (no waiting for more)."""
        os.set_blocking(self.stderr_fd, False)
        said = b""
        try:
            while chunk := os.read(self.stderr_fd, 65536):
                said += chunk
        except BlockingIOError:
            pass
        return said
