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

from pyscrun.errors import BackendError

_GRANTED = re.compile(rb"Granted job allocation (\d+)")
_PENDING = re.compile(rb"Pending job allocation (\d+)")
# salloc's words when slurmctld did not take the job back (it still exits 0).
_UNRELEASED = b"Unable to clean up job allocation"
# How long release waits for salloc to give the job back before cancelling it.
RELEASE_TIMEOUT = 30.0
# How long salloc may take to withdraw a queued job once told to.
WITHDRAW_TIMEOUT = 10.0


class HeldAllocation:
    def __init__(self, process: subprocess.Popen[bytes], job_id: str) -> None:
        self.process = process
        self.job_id = job_id

    @classmethod
    def request(cls, argv: list[str], env: dict[str, str], timeout: float,
                interrupt_fd: int = -1) -> HeldAllocation:
        """Run salloc (argv, without a command) until the job is granted. While the job
        is queued the caller's stderr says so, with its id, as salloc's does; if
        interrupt_fd becomes readable first, the queued job is withdrawn."""
        try:
            process = subprocess.Popen(
                [*argv, "--", "cat"], env=env, stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except FileNotFoundError:
            raise BackendError(f"{argv[0]} not found: install slurm-client") from None
        assert process.stderr is not None
        said = b""
        pending: bytes | None = None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(process.stderr, selectors.EVENT_READ, "salloc")
            if interrupt_fd >= 0:
                selector.register(interrupt_fd, selectors.EVENT_READ, "interrupt")
            while not (granted := _GRANTED.search(said)):
                remaining = deadline - time.monotonic()
                ready = [key.data for key, _ in selector.select(remaining)] if remaining > 0 else []
                if not ready or "interrupt" in ready:
                    _withdraw(process)
                    if ready:
                        raise BackendError("interrupted while the job waited in the queue")
                    raise BackendError(f"salloc was not granted a job within {timeout:.0f} s")
                chunk = os.read(process.stderr.fileno(), 65536)
                if not chunk:
                    process.wait()
                    raise BackendError(said.decode(errors="replace"))
                said += chunk
                queued = _PENDING.search(said)
                if queued and pending is None:
                    pending = queued.group(1)
                    _tell_caller(f"scrun: job {pending.decode()} queued and waiting for resources")
        return cls(process, granted.group(1).decode())

    def release(self) -> bool:
        """Give the job back; False if salloc did not end in time (then it is killed) or
        could not give the job back (it exits 0 even when slurmctld was unreachable)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(RELEASE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return False
        return _UNRELEASED not in self._rest_of_stderr()

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


def _withdraw(process: subprocess.Popen[bytes]) -> None:
    """End a salloc whose job is still queued: on SIGINT it withdraws the job."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(WITHDRAW_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _tell_caller(line: str) -> None:
    """A line on the caller's stderr (podman shows it), where salloc's own would go."""
    try:
        os.write(2, f"{line}\n".encode())
    except OSError:
        pass
