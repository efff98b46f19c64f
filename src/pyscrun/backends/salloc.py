"""A job allocation held open by a running salloc, as an interactive user holds one.

salloc runs `cat` (on this host) with its stdin a pipe only the anchor holds. Closing
the pipe ends `cat`, and salloc then completes the job (state COMPLETED, not CANCELLED).
The anchor dying, even by SIGKILL, closes the pipe as well: the job ends with it in
every state, created included. A job still queued then is withdrawn at once by its
guard (_GUARD), not left to be granted first.

Where scrun.lua wants the job's variables, `cat` comes after `env`: salloc gives its
command the variables Slurm makes for a job (env_array_for_job, the node list and
count, the partition...), the ones Slurm's scrun hands scrun.lua as job_env.
"""

from __future__ import annotations

import os
import time

from pyscrun import log
from pyscrun.backends.base import start_command
from pyscrun.child import Child, ends_within, spawn
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
# salloc's command when the job's variables are wanted: its environment, each entry
# ended by a NUL and the whole by an empty entry, then `cat` holding the job.
_VARIABLES_THEN_HOLD = ["/bin/sh", "-c", "env -0; printf '\\000'; exec cat"]
# How long the job's variables may take to come once the job is granted.
VARIABLES_TIMEOUT = 10.0
# The variables of the job's environment: Slurm's and SPANK options' (Slurm's
# env_array_merge_slurm_spank).
_JOB_PREFIXES = ("SLURM", "_SLURM_SPANK_OPTION_")
_SIGINT, _SIGKILL = 2, 9
# A queued job's guard, in salloc's process group, its stdin a pipe whose write end
# the anchor alone holds. The pipe's end without a line (the anchor died, SIGKILL
# included) has it send SIGINT to the group: salloc withdraws the job, as on withdraw.
# A line (the job granted, or salloc ended) ends it quietly: a granted job is given
# back by `cat`'s end, which a SIGINT racing it can leave salloc hung on (22.05).
# While it lives the group's id (salloc's pid) cannot be reused: no stranger is hit.
_GUARD = ["/bin/sh", "-c", "read -r _ || kill -s INT 0"]


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


def job_variables_in(environ: dict[str, str]) -> dict[str, str]:
    """The job's variables among environ."""
    return {name: value for name, value in environ.items() if name.startswith(_JOB_PREFIXES)}


def _spawn(argv: list[str], env: dict[str, str], with_stdout: bool,
           ) -> tuple[int, int, int, int]:
    """Start argv with its stdin and stderr pipes of ours, and its stdout too if
    with_stdout (else nowhere): its pid and the ends we hold (-1: none). posix_spawn
    rather than subprocess, whose import (with re and locale, 6 ms) would come before
    salloc's start when the anchor asks early."""
    stdin_read, stdin_write = os.pipe()
    stderr_read, stderr_write = os.pipe()
    stdout_read, stdout_write = os.pipe() if with_stdout else (-1, os.open(os.devnull,
                                                                           os.O_WRONLY))
    try:
        pid = start_command(argv, env, (stdin_read, stdout_write, stderr_write), group=0)
    except BackendError:
        for fd in (stdin_write, stderr_read, stdout_read):
            if fd >= 0:
                os.close(fd)
        raise
    finally:
        for fd in (stdin_read, stdout_write, stderr_write):
            os.close(fd)
    return pid, stdin_write, stderr_read, stdout_read


class HeldAllocation:
    def __init__(self, pid: int, stdin_fd: int, stderr_fd: int, variables_fd: int = -1,
                 env: dict[str, str] | None = None) -> None:
        self.pid = pid
        self.stdin_fd = stdin_fd  # closed: `cat` ends, and salloc gives the job back
        self.stderr_fd = stderr_fd
        self.variables_fd = variables_fd  # the command's stdout, if it says the variables
        self.env = env or {}  # what salloc was started with
        self.variables: dict[str, str] | None = None  # once read
        self.returncode: int | None = None  # once salloc ended
        self.job_id = ""
        self.granted = False
        self.said = b""  # salloc's stderr so far
        self.killed = False  # salloc had to be killed: its job may still be held
        self.guard: tuple[Child, int] | None = None  # while queued: _GUARD, its pipe

    @classmethod
    def start(cls, argv: list[str], env: dict[str, str], variables: bool = False,
              ) -> HeldAllocation:
        """salloc (argv, without a command) asking for the job; await_job follows it.
        variables: the job's variables are wanted (job_variables)."""
        log.current.debug(f"slurm: {' '.join(argv)}")
        command = _VARIABLES_THEN_HOLD if variables else ["cat"]
        return cls(*_spawn([*argv, "--", *command], env, variables), env=env)

    def job_variables(self) -> dict[str, str]:
        """The variables salloc set for the granted job (those its command sees that
        it was not started with), as Slurm's scrun gets them with the job; only the
        job's id if salloc was not asked for them (start)."""
        if self.variables is not None:
            return self.variables
        self.variables = {"SLURM_JOB_ID": self.job_id}
        if self.variables_fd < 0:
            return self.variables
        import select

        said = b""
        deadline = time.monotonic() + VARIABLES_TIMEOUT
        try:
            while b"\0\0" not in b"\0" + said:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([self.variables_fd], [], [], remaining)[0]:
                    raise BackendError(f"job {self.job_id}: its variables did not come "
                                       f"within {VARIABLES_TIMEOUT:.0f} s")
                chunk = os.read(self.variables_fd, 65536)
                if not chunk:
                    raise BackendError(f"job {self.job_id}: salloc's command ended before "
                                       "saying the job's variables")
                said += chunk
        finally:
            os.close(self.variables_fd)
            self.variables_fd = -1
        entries = (b"\0" + said).split(b"\0\0", 1)[0].split(b"\0")[1:]
        seen = dict(entry.decode(errors="surrogateescape").partition("=")[::2]
                    for entry in entries)
        self.variables.update({name: value for name, value in job_variables_in(seen).items()
                               if self.env.get(name) != value})
        return self.variables

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
            self._unguard()
            return
        if job_id and not self.job_id:
            self.job_id = job_id
            self._guard()
            log.current.info(f"job {self.job_id} queued and waiting for resources")
            log.tell_caller(f"scrun: job {self.job_id} queued and waiting for resources")

    def _guard(self) -> None:
        """The queued job withdrawn if the anchor dies (_GUARD); without a guard (it
        cannot start), it is given back once granted, as before it was queued."""
        read_end, write_end = os.pipe()
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            self.guard = spawn(_GUARD, {}, (read_end, null, null), group=self.pid), write_end
        except OSError as err:
            os.close(write_end)
            log.current.error(f"job {self.job_id}: no guard to withdraw it if this "
                              f"process dies: {err.strerror}")
        finally:
            os.close(read_end)
            os.close(null)

    def _unguard(self) -> None:
        """The job granted, or salloc ended: its guard told so, and ended."""
        if self.guard:
            guard, write_end = self.guard
            self.guard = None
            try:
                os.write(write_end, b"\n")
            except OSError:
                pass  # the guard is gone already
            os.close(write_end)
            guard.wait()

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
        """The job let go: `cat`'s stdin closed, and the variables' pipe, read or not
        (a command stuck writing a large environment to it would never reach `cat`)."""
        for fd in (self.stdin_fd, self.variables_fd):
            if fd >= 0:
                os.close(fd)
        self.stdin_fd = self.variables_fd = -1

    def _ended_within(self, timeout: float | None) -> bool:
        """salloc ended by itself within timeout (None: however long it takes); else
        it is killed (False), unless timeout is 0: a look only."""
        if self.returncode is not None:
            return True
        if timeout:
            ends_within(self.pid, timeout)
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
            self._unguard()
            return True
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)
            self._unguard()
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
