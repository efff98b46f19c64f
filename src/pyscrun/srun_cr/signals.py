"""Signals: which ones srun_cr relays to srun, how they are received, exit mimicry.

srun_cr and srun share a process group, as a shell would run srun itself, so a signal
the terminal sends (Ctrl-C, Ctrl-Z, hangup, window size: the kernel sends those to the
whole foreground group, si_code SI_KERNEL) reaches srun directly and is not relayed
again: srun's "one more Ctrl-C within 1 s" logic sees each keystroke once. Every other
catchable signal except SIGCHLD (and the checkpoint signal) is relayed. Signals are
blocked and taken with sigwaitinfo() in one thread, which is what gives their origin.
"""

from __future__ import annotations

import os
import resource
import signal
import struct
import sys
from typing import NoReturn

from pyscrun.digits import only_digits
from pyscrun.errors import UsageError
from pyscrun.threads import Thread

SI_KERNEL = 0x80
_RECORD = struct.Struct("iii")
_JOB_CONTROL = {signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}
SIGNAL_ENV = "SRUN_CR_SIGNAL"
DEFAULT_CHECKPOINT_SIGNAL = signal.SIGUSR2


def catchable() -> set[int]:
    return {int(s) for s in signal.valid_signals()} - {signal.SIGKILL, signal.SIGSTOP,
                                                         signal.SIGCHLD}


def checkpoint_signal(environ: dict[str, str]) -> int | None:
    """The signal that asks srun_cr for a checkpoint: $SRUN_CR_SIGNAL (a name such as
    USR2 or SIGUSR2, a number, or `none`), default SIGUSR2."""
    text = environ.get(SIGNAL_ENV, "").strip()
    if not text:
        return int(DEFAULT_CHECKPOINT_SIGNAL)
    if text.lower() == "none":
        return None
    if only_digits(text):
        number = int(text)
    else:
        name = text.upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        try:
            number = int(signal.Signals[name])
        except KeyError:
            number = -1
    if number not in catchable():
        raise UsageError(f"{SIGNAL_ENV}={text!r} is not a catchable signal (e.g. USR2, or none)")
    return number


class Relay:
    """Blocks the given signals and reports each (signo, si_code, si_pid) on a pipe."""

    def __init__(self, signals: set[int]) -> None:
        self.signals = signals
        self.read_fd, self._write_fd = os.pipe2(os.O_CLOEXEC)
        self._pending = b""

    def block(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, self.signals)

    def start(self) -> None:
        Thread(self._wait).start()

    def _wait(self) -> None:
        while True:
            info = signal.sigwaitinfo(self.signals)
            os.write(self._write_fd, _RECORD.pack(info.si_signo, info.si_code, info.si_pid))

    def read(self) -> list[tuple[int, int, int]]:
        self._pending += os.read(self.read_fd, 4096)
        count = len(self._pending) // _RECORD.size
        records = [_RECORD.unpack_from(self._pending, i * _RECORD.size) for i in range(count)]
        self._pending = self._pending[count * _RECORD.size:]
        return records


def decide(signo: int, code: int, sender: int, checkpoint: int | None,
           session_leader: bool = False) -> str:
    """What srun_cr does with a signal: 'checkpoint', 'forward', 'stop' (a terminal's
    job-control stop: stop as srun does) or 'ignore'. session_leader: srun_cr leads its
    session (`ssh -t host srun_cr ...`), so a hangup of its terminal reaches it alone."""
    if sender == os.getpid() and code != SI_KERNEL:
        return "ignore"  # our own, e.g. SIGPIPE from a write to a closed stderr
    if checkpoint is not None and signo == checkpoint:
        return "checkpoint"
    if code == SI_KERNEL:
        if signo == signal.SIGHUP and session_leader:
            return "forward"
        return "stop" if signo in _JOB_CONTROL else "ignore"
    return "forward"


def unblock_all() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def exit_like(status: int) -> NoReturn:
    """Exit as a process with this wait status did: the same code, or death by the same
    signal (without a core dump)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
            if signum != signal.SIGKILL:  # whose action cannot be set, nor blocked
                signal.signal(signum, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
            signal.raise_signal(signum)
        except (OSError, ValueError):
            pass
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
