"""How the node agent signals its container: the signals the agent gets (the step's,
a resize of its terminal) and the anchor's kill orders reach the container's init, or
wait until it runs the container's process; a runtime that does not end with its killed
container is killed itself.

A base of the agent (node/agent.py), which holds the state it works on.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import os
import time

from pyscrun import log, poller, selfpipe
from pyscrun.node import processes
from pyscrun.node.modes import ContainerModes

# How long a runtime may take to end once its container was sent SIGKILL.
RUNTIME_AFTER_KILL = 5.0
# What the agent passes on to the container: the step's signals (srun's, scancel's,
# Slurm's SIGCONT and SIGTERM at the job's end).
_FORWARDED_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGQUIT,
                      _signal.SIGUSR1, _signal.SIGUSR2, _signal.SIGCONT)


class ContainerSignals(ContainerModes):
    # What the agent holds (node/agent.py), beside what ContainerModes uses.
    container_pid: int
    pending_signals: list[tuple[int, bool]]
    killed_at: float | None  # when the container was sent SIGKILL
    restoring: bool
    move_signal: int
    selector: poller.Poller

    def _send(self, message: dict[str, object]) -> None:
        raise NotImplementedError

    def _catch_signals(self, terminal: bool) -> None:
        """Catch what is passed on, the job's warning of its end, and in create/start
        mode, where the container's stdio is this agent's terminal, its resizes."""
        resizes = (_signal.SIGWINCH,) if terminal and not self.conf.run_mode else ()
        warning = (self.move_signal,) if self.move_signal else ()
        selfpipe.install(self.selector, (*_FORWARDED_SIGNALS, *resizes, *warning), "signal")

    def deliver(self, signum: int, every: bool = False) -> None:
        """Send signum to the container's init (every: to each of its processes), or
        keep it until the init exists."""
        self.pending_signals.append((signum, every))
        self._flush_signals()
        if signum == _signal.SIGKILL and self.paused and self.commands is not None:
            # A frozen process takes SIGKILL only once thawed: sent first, it is the
            # first thing the process does then (a checkpointed one runs no further).
            self.commands.run("RunTimeResume")
            self.paused = False

    def _flush_signals(self) -> None:
        if not self.pending_signals:
            return
        pid = self._container_init()
        if not pid:
            return
        for signum, every in self.pending_signals:
            for target in [pid, *processes.descendants(pid)] if every else [pid]:
                try:
                    os.kill(target, signum)
                except ProcessLookupError:
                    pass
            if signum == _signal.SIGKILL and self.killed_at is None:
                self.killed_at = time.monotonic()
        self.pending_signals.clear()

    def _stuck_runtime_wait(self, pid: int) -> float | None:
        """How long the runtime pid may still take to end after its container was
        killed (None: no limit); killed itself once that is up (a foreground `runc
        restore` has been seen to hang there), so that its container gets deleted."""
        if self.killed_at is None or pid != self.runtime_pid:
            return None
        left = self.killed_at + RUNTIME_AFTER_KILL - time.monotonic()
        if left > 0:
            return left
        log.current.error("the runtime did not end with its container: killing it")
        self.killed_at = None
        try:
            os.kill(pid, _signal.SIGKILL)
        except ProcessLookupError:
            pass
        return None

    def _container_init(self) -> int:
        """The container's init pid once it runs the container's process (0 until then).

        Before that the init still runs the runtime's own code (runc's waits for
        `start`, and goes on for a moment after it), which a SIGTERM would end with a
        status of its own. Without RunTimeQuery the runtime's own process is the best
        there is; with it, signalling the `/bin/sh -c` wrapper would orphan the
        container instead.
        """
        if self.container_pid or self.commands is None:
            return self.container_pid
        if self.created_init:
            if processes.ran_exec(self.created_init):
                self.container_pid = self.created_init
            return self.container_pid
        if self.conf.RunTimeQuery:
            pid = self.commands.running_pid()
            if pid and not self.restoring:
                # "running" as soon as the init may go on, maybe before its exec. (CRIU
                # forks the restored processes, which exec'd before their dump.)
                processes.await_exec(pid)
            self.container_pid = pid
            return self.container_pid
        return self.runtime_pid

    def _on_signal(self, reader: int) -> None:
        for signum in selfpipe.received(reader):
            if signum == self.move_signal:
                self._send({"event": "job-ending"})
            elif signum == _signal.SIGWINCH:
                self._tell_of_resize()
            else:
                self.deliver(signum)

    def _tell_of_resize(self) -> None:
        """In create/start mode the container's stdio is this agent's terminal, the
        controlling terminal of no process of the container (the runtime's init starts a
        session of its own): the kernel tells this agent's group only of a resize. The
        init's group hears it from here: its shell, and what that runs in the foreground
        (without job control, in the shell's group). Before the container runs there is
        nobody to tell: it finds the size as it starts. (This mode has RunTimeQuery, so
        the init is never the runtime's own process.)"""
        pid = self._container_init()
        if pid:
            try:
                os.killpg(pid, _signal.SIGWINCH)
            except ProcessLookupError:
                pass

    def _ending_signals(self) -> list[int]:
        """The signals waiting that would end the container. SIGCONT (Slurm's, before
        its SIGTERM, or on resuming a suspended job) would not end a process that ran:
        nothing to end before the start either."""
        return [signum for signum, _ in self.pending_signals if signum != _signal.SIGCONT]
