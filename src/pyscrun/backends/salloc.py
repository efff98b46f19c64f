"""A job allocation held open by a running salloc, as an interactive user holds one.

salloc runs `cat` (on this host) with its stdin a pipe only the anchor holds. Closing
the pipe ends `cat`, and salloc then completes the job (state COMPLETED, not CANCELLED).
The anchor dying, even by SIGKILL, closes the pipe as well: the job ends with it in
every state, created included.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import time

from pyscrun import identity, log
from pyscrun.errors import BackendError

_GRANTED = re.compile(rb"Granted job allocation (\d+)")
_PENDING = re.compile(rb"Pending job allocation (\d+)")
# salloc's words when slurmctld did not take the job back (it still exits 0).
_UNRELEASED = b"Unable to clean up job allocation"
# How long release waits for salloc to give the job back before cancelling it.
RELEASE_TIMEOUT = 30.0
# How long salloc may take to withdraw a queued job once told to.
WITHDRAW_TIMEOUT = 10.0


def _job_named(said: bytes) -> tuple[str, bool]:
    """The job salloc named in what it said ('' if none yet), and whether granted."""
    granted = _GRANTED.search(said)
    if granted:
        return granted.group(1).decode(), True
    queued = _PENDING.search(said)
    return (queued.group(1).decode() if queued else ""), False


class HeldAllocation:
    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.job_id = ""
        self.granted = False
        self.said = b""  # salloc's stderr so far

    @classmethod
    def start(cls, argv: list[str], env: dict[str, str]) -> HeldAllocation:
        """salloc (argv, without a command) asking for the job; await_job follows it."""
        log.current.debug(f"slurm: {' '.join(argv)}")
        try:
            process = subprocess.Popen(
                [*argv, "--", "cat"], env=env, stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                preexec_fn=identity.preexec())
        except FileNotFoundError:
            raise BackendError(f"{argv[0]} not found: install slurm-client") from None
        return cls(process)

    def await_job(self, timeout: float, interrupt_fd: int = -1,
                  queued_is_enough: bool = False) -> None:
        """Until the job is granted (or, if queued_is_enough, queued: `advance` then
        follows it). While the job is queued the caller's stderr says so, with its id,
        as salloc's does; if interrupt_fd becomes readable first, the queued job is
        withdrawn."""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.fileno(), selectors.EVENT_READ, "salloc")
            if interrupt_fd >= 0:
                selector.register(interrupt_fd, selectors.EVENT_READ, "interrupt")
            while not self.granted and not (self.job_id and queued_is_enough):
                remaining = deadline - time.monotonic()
                ready = [key.data for key, _ in selector.select(remaining)] if remaining > 0 else []
                if not ready or "interrupt" in ready:
                    self.withdraw()
                    if ready:
                        raise BackendError("interrupted while the job waited in the queue")
                    raise BackendError(f"salloc was not granted a job within {timeout:.0f} s")
                self.advance()

    def fileno(self) -> int:
        """Readable when salloc says something: whether a queued job came, or failed."""
        assert self.process.stderr is not None
        return self.process.stderr.fileno()

    def advance(self) -> None:
        """Read what salloc said (it was readable): granted, queued, or BackendError
        when salloc ended without a job."""
        chunk = os.read(self.fileno(), 65536)
        if not chunk:
            self.process.wait()
            raise BackendError(self.said.decode(errors="replace").strip()
                               or f"salloc exited {self.process.returncode}")
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
        False if it had to be killed instead (the job may still be queued)."""
        if self.process.poll() is not None:
            return True
        self.process.send_signal(signal.SIGINT)
        return self._ended_within(WITHDRAW_TIMEOUT)

    def abandon(self) -> str:
        """Give up a job never waited for, granted or not (its anchor failed before it
        looked): the job's id if salloc had to be killed with it still held, for the
        caller to cancel, else ''."""
        assert self.process.stdin is not None
        self.process.stdin.close()  # a granted job's `cat` ends: salloc gives it back
        if self.withdraw():
            return ""
        self.said += self._rest_of_stderr()
        return _job_named(self.said)[0]

    def release(self) -> bool:
        """Give the job back; False if salloc did not end in time (then it is killed) or
        could not give the job back (it exits 0 even when slurmctld was unreachable)."""
        if not self.granted:
            return self.withdraw()
        assert self.process.stdin is not None
        self.process.stdin.close()
        return self._ended_within(RELEASE_TIMEOUT) and _UNRELEASED not in self._rest_of_stderr()

    def _ended_within(self, timeout: float) -> bool:
        """salloc ended by itself within timeout; else it is killed (False)."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return False
        return True

    def _rest_of_stderr(self) -> bytes:
        """What salloc said after the grant (it has exited: no waiting for more)."""
        if self.process.stderr is None:
            return b""
        fd = self.process.stderr.fileno()
        os.set_blocking(fd, False)
        said = b""
        try:
            while chunk := os.read(fd, 65536):
                said += chunk
        except BlockingIOError:
            pass
        return said
