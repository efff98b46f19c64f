"""A container that outlives its job: moved to a new one before the old one ends.

With pyscrun.conf's MoveBeforeEnd, salloc asks Slurm for a warning that many seconds
before the job's end: its time limit, or a preemption where the site has Slurm send
the job's signal then (`SlurmctldParameters=preempt_send_user_signal` in 22.05,
`PreemptParameters=send_user_signal` in 24.11, with a GraceTime to move in). The node
agents take that signal as the word to move and tell the anchor, which then:

1. checkpoints every task into the container's spool dir, as a checkpoint that stops
   the container does (all of them or none; the images come over the channel where a
   node does not see that dir);
2. once the step has ended, gives the old job back and asks for a new one;
3. restores every task from those images in the new job's step.

podman sees the container running throughout, its output goes on in the same pipes,
and its end is the restored container's. A move that cannot be made (the dump fails)
leaves the container to end with its job, as without MoveBeforeEnd. A kill (but of a
harmless signal) or delete during a move gives it up: the tasks go on where they were
and take the signal, as without a move. A task that cannot be restored in the new job
ends the container, every task of it.

A base of the anchor (anchor/daemon.py), which holds the state it works on."""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import os

from pyscrun import identity, log, poller
from pyscrun.anchor.agents import Agents
from pyscrun.anchor.ending import Ending
from pyscrun.anchor.orders import HARMLESS_SIGNALS
from pyscrun.errors import CheckpointError, ScrunError
from pyscrun.fs import remove_tree
from pyscrun.node.criu import PROBE, UNPROBED
from pyscrun.oci.state import RUNNING
from pyscrun.watch import watch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# The directory of the container's spool dir that holds a move's images.
MOVE_DIR = "move"
# A move's phases: its checkpoint round; the tasks dumped, their step ending; the tasks
# restored in the new job's step, until every one runs.
DUMPING, DUMPED, RESTORING = "dumping", "dumped", "restoring"


class Moving(Ending):
    # What the anchor holds (anchor/daemon.py), beside what Ending uses.
    signals: int
    move_phase: str  # one of the phases above, "" while no move is under way
    move_wanted: bool  # a warning not acted on yet (tasks not all running, an order on)
    ready_fd: int | None  # open while a restore waits for its tasks
    move_dir: str  # the images of the move under way, or of the last one

    def _job_ending(self) -> None:
        """The job's warning reached a task: the container moves to a new job, as soon
        as every task runs it. Warnings of the job being left (each of its tasks gets
        one) change nothing."""
        if self.exit_status is not None or self.move_phase in (DUMPING, DUMPED):
            return
        self.move_wanted = True
        self._move_when_running()

    def _move_when_running(self) -> None:
        """Once every task runs, and an order in progress (the user's checkpoint, pause,
        ps...) is done: Slurm warns once."""
        if (not self.move_wanted or self.move_phase or not self.agents.all_running()
                or self.agents.round is not None or self.task_order is not None):
            return
        self.move_wanted = False
        if self.state.status != RUNNING:
            log.current.error(f"the job's end is near, but a container that is "
                              f"{self.state.status} does not move: it ends with its job")
            return
        try:
            images = self._new_move_dir()
        except OSError as err:
            log.current.error(f"the container cannot move: its images have no place: "
                              f"{err}; it ends with its job")
            return
        order = {"op": "checkpoint", "image_path": images, "work_path": "",
                 "leave_running": False}
        log.current.info(f"job {self.state.job_id} ends in {self.request.move_before_end()} s "
                         "or less: moving the container to a new job")
        try:
            self.agents.start_checkpoint(None, order)
        except CheckpointError as err:
            log.current.error(f"the container cannot move: {err}; it ends with its job")
            remove_tree(images)
            return
        self.move_phase, self.move_abandoned = DUMPING, False
        self._answer_checkpoint()

    def _moving_out(self) -> bool:
        """The tasks are being dumped, or ended, for a move: orders wait for the new
        job's tasks."""
        return self.move_phase in (DUMPING, DUMPED)

    def _restore_under_way(self) -> bool:
        """Tasks are being restored (podman's restore, or a move's) and not all run yet."""
        return self.request.restore is not None and (self.ready_fd is not None
                                                     or self.move_phase == RESTORING)

    def _restore_failed(self) -> None:
        """A task could not come back: the container ends, every task of it."""
        if self.move_phase == RESTORING:
            log.current.error(f"a task could not be restored in job {self.state.job_id}: "
                              "the container ends")
        self._kill(_signal.SIGKILL)

    def _new_move_dir(self) -> str:
        """An empty directory for a move's images: below MoveImagePath, where the nodes
        write them, else the container's spool dir (they come over the channel)."""
        base = self.site.move_image_path(self.state.owner, identity.real_uid())
        if not base:
            self.move_dir = os.path.join(self.store.spool_dir(self.state.id), MOVE_DIR)
            remove_tree(self.move_dir)
            return self.move_dir
        import tempfile

        os.makedirs(base, mode=0o700, exist_ok=True)
        self.move_dir = tempfile.mkdtemp(prefix=f"{self.state.id}.", suffix=".move", dir=base)
        return self.move_dir

    def _dumped_for_move(self, reply: dict[str, Any]) -> None:
        """The move's checkpoint is over: its tasks now end, or they go on where it failed."""
        if reply.get("ok"):
            self.move_phase = DUMPED
            return
        log.current.error(f"the container cannot move: {reply.get('error')}; "
                          "it ends with its job")
        remove_tree(self.move_dir)
        self.move_phase = ""

    def _kill(self, signum: int, every: bool = False) -> None:
        """A signal that would end the container's process gives a move under way up;
        a harmless one (CONT, WINCH, ...) is sent on and the move goes on."""
        if self.move_phase and not self.move_abandoned and signum not in HARMLESS_SIGNALS:
            log.current.info("a kill in the middle of the move: the move is given up, the "
                             "container takes the signal where it runs")
            self.move_abandoned = True
        super()._kill(signum, every)

    def _end_if_drained(self) -> None:
        """A dumped container's step ended: it goes on in a new job."""
        if self.move_phase == DUMPED and not self.move_abandoned:
            if self.step_status is not None:
                self._carry_over()
            return
        super()._end_if_drained()

    def _carry_over(self) -> None:
        images = self.move_dir
        order: dict[str, Any] = {"image_path": images, "work_path": "",
                                 "tasks": self.agents.tasks}
        self.move_phase = RESTORING
        self._forget_step()
        from pyscrun.anchor.checkpointing import place_probe

        try:
            self.restore_probe = place_probe(images)
            order[PROBE] = os.path.basename(self.restore_probe)
        except CheckpointError:
            order[PROBE] = UNPROBED
        self.request.restore = order
        old, self.allocation = self.allocation, None
        if old is not None:
            try:
                self.backend.release(self.site, old)
            except ScrunError as err:
                log.current.error(f"releasing job {old.job_id}: {err}")
        try:
            self.allocation = self.backend.allocate(
                self.site, self.state, self.request.job_options, self.request.job_environ(),
                self.signals, queued_is_enough=True, warn_before=self.request.move_before_end())
            self.state.job_id = self.allocation.job_id
            self._save_state()
            if self.allocation.queued:
                self.selector.register(self.backend.queue_fd(self.allocation), poller.READ,
                                       "queued")
            else:
                self._launch()
        except ScrunError as err:
            log.current.error(f"the container could not move to a new job: {err}")
            self.exit_status = 255

    def _finish(self, status: int) -> int:
        """A move under way ends with the container: its images go (MoveImagePath is not
        the spool dir, which delete removes)."""
        if self.move_phase:
            remove_tree(self.move_dir)
            self.move_phase = ""
        return super()._finish(status)

    def _forget_step(self) -> None:
        """What the anchor held of the ended step and its agents: let go, for the next."""
        for link in self.agents.connected:
            watch(self.selector, link.peer.sock, 0, link)
            link.peer.close()
        self.agents = Agents()
        assert self.agent_port is not None
        self.agent_port.agents = self.agents
        self.step = None
        self.step_status = None
        self.drain_deadline = None
        self.kill_deadline = self.slurm_kill_at = None
        self.launcher_output = {}

    def _task_runs(self) -> None:
        """A task reported its container running: once every task does, a move's images
        are of no more use, and a warning that came meanwhile is acted on."""
        if not self.agents.all_running():
            return
        if self.move_phase == RESTORING:
            remove_tree(self.move_dir)
            self.move_phase = ""
            log.current.info(f"container moved to job {self.state.job_id}")
        self._move_when_running()
