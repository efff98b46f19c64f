"""How a container ends: its status once its step ended and its agents said all (or
once every task reported, before the step ended), the output drained, stage_out, the
state recorded, the stand-in told, and the job given back.

A base of the anchor (anchor/daemon.py), which holds the state it works on."""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import os
import time

from pyscrun import log
from pyscrun.anchor.launch import Launch
from pyscrun.child import ends_within
from pyscrun.errors import ScrunError
from pyscrun.oci.state import CREATED, STOPPED, shell_status, wait_reaped
from pyscrun.watch import watch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pyscrun.anchor.control import Connection, ControlSocket

# Once the step ended, how long its agents' last frames (output, status) may take to
# arrive; and how long the container's output may move nothing (a caller that stopped
# reading for good) before what is left of it is given up.
DRAIN_TIMEOUT = 10.0
# Once every task reported its container's end, how long the step may take to end by
# itself (its agents remove what is left of their containers first).
STEP_END_GRACE = 10.0
# How long conmon may take to reap the stand-in once it exited.
STAND_IN_REAPED = 5.0


class Ending(Launch):
    # What the anchor holds (anchor/daemon.py), beside what Launch uses.
    drain_deadline: float | None
    ready_fd: int | None
    restore_probe: str
    control: ControlSocket | None

    def _end_if_drained(self) -> None:
        """Once the step ended and its agents have said all (or no longer may), or every
        task has reported its container's end: the container's status."""
        if self.exit_status is not None:
            return
        if self.step_status is None:
            if self._ended_before_step():
                self.exit_status = max(self.agents.exit_statuses)
            return
        if self.state.status == CREATED and not self.agents.killed():
            # Launched at create, the step ended by itself before the start (an agent's
            # error, its node lost): the container ends when it is started, as then.
            self.drain_deadline = None
            return
        streaming = self.stdio is not None and self.stdio.streams
        if ((self.agents.connected or streaming) and self.drain_deadline is not None
                and time.monotonic() < self.drain_deadline):
            return
        # Agents report their container's status and exit 0. A task that did not
        # report was killed: srun says so in its own status, unless it gave up
        # waiting for the step to end (its status is then 0).
        lost = [128 + _signal.SIGKILL] if self.agents.unreported() else []
        self.exit_status = max([self.step_status, *self.agents.exit_statuses, *lost])
        self._report_ready(f"restore failed: {self.agents.last_error or 'the step ended'}")

    def _ended_before_step(self) -> bool:
        """Every task of the started container reported its end, each after all of its
        output, while the step still runs: podman may learn of the end before the step
        has ended and the job is given back (_finish), unless a scrun.lua stage_out
        must first run after the step."""
        return (self.step is not None and self.state.status != CREATED
                and self.ready_fd is None and not self.staging.stages_out()
                and self.agents.all_reported())

    def _remove_restore_probe(self) -> None:
        if self.restore_probe:
            _remove_probe(self.restore_probe)
            self.restore_probe = ""

    def _release(self) -> None:
        self.request.abandon_started_allocation()
        self._remove_restore_probe()
        if self.bundle_probe:
            _remove_probe(self.bundle_probe)
            self.bundle_probe = ""
        if self.shipment is not None:
            self.shipment.remove()
        if self.allocation is not None:
            try:
                self.backend.release(self.site, self.allocation)
            except ScrunError as err:
                log.current.error(f"releasing job {self.allocation.job_id}: {err}")
            self.allocation = None
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.agent_port is not None:
            self.agent_port.close()
            self.agent_port = None

    def _finish(self, status: int) -> int:
        before_step = self.step is not None and self.step_status is None
        if self.stdio is not None:
            watch(self.selector, self.stdio.wake_fd, 0, "streams")
            # All the container's output reaches the caller before its status does.
            self.stdio.finish_tasks(DRAIN_TIMEOUT)
            if before_step:
                # conmon reads its pipes to their end before it reports the status:
                # they end now, and what srun may still say at its end goes nowhere.
                self.stdio.let_go_of_caller()
            else:
                self._finish_stdio()
        if (self.allocation is not None and not self.allocation.queued
                and self.staging.stages_out()):
            self.state.staging_out = True
            self._save_state()
            self.staging.stage_out(self.allocation)
            self.state.staging_out = False
        self.state.status = STOPPED
        self.state.exit_status = status
        self.state.ended = time.time()
        self._save_state()
        self._give_waiting_orders()
        if before_step:
            # Ended before its step: podman has the status now, and delete waits for
            # the job to be given back.
            self.stand_in.exit(status)
            self._await_step()
            self._finish_stdio()
        checkpointed = self.stopped_waiters
        if checkpointed and self.control is not None:
            checkpointed = [(self.control.detach(c), r) for c, r in checkpointed]
        self._release()
        if checkpointed:
            self._answer_stopped(checkpointed, status)
        return status

    def _save_state(self) -> None:
        """The state as it is now; a failure to write it is logged: the container's
        end goes on (its job must be given back)."""
        try:
            self.store.save(self.state)
        except ScrunError as err:
            log.current.error(str(err))

    def _answer_stopped(self, waiters: list[tuple[Connection, dict[str, Any]]],
                        status: int) -> None:
        """As runc's, a checkpoint that stops the container returns once it has ended
        for podman: conmon has seen the stand-in's status (podman next removes the
        files conmon writes then)."""
        self.stand_in.exit(status)
        wait_reaped(self.stand_in.pid, self.state.stand_in_start, STAND_IN_REAPED)
        for client, reply in waiters:
            client.send(reply)
            client.conn.close()

    def _finish_stdio(self) -> None:
        if self.stdio is not None:
            self.stdio.finish(DRAIN_TIMEOUT)
            self.stdio = None

    def _await_step(self) -> None:
        """The step ends by itself within STEP_END_GRACE or its launcher is killed: no
        step of the container's outlives its job."""
        assert self.step is not None
        if not ends_within(self.step.pid, STEP_END_GRACE):
            self._force_stop()
        self.step_status = wait_status(self.step.pid)


def wait_status(pid: int) -> int:
    """Exit status of a child the way a shell reports it (128+N for signal N)."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return 255
    return shell_status(status)


def _remove_probe(probe: str) -> None:
    """A probe left behind is said, and no more: the container goes on, or ends, as it
    would have."""
    from pyscrun.anchor.checkpointing import remove_probe

    left = remove_probe(probe)
    if left:
        log.current.error(left)
