"""The anchor's operations: what its owner asks (start, kill, delete, state, checkpoint,
pause, resume, update, ps) and what its agents report, each answered in turn.

A mixin of the anchor (anchor/daemon.py), which holds the state it works on."""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import time

from pyscrun import log
from pyscrun.anchor.agent_port import image_frames
from pyscrun.anchor.task_orders import ORDER_WAIT, RULES, TaskOrder
from pyscrun.errors import InvalidState, ScrunError
from pyscrun.oci.state import CREATED, PAUSED, RUNNING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pyscrun.anchor.agents import AgentLink, Agents
    from pyscrun.anchor.control import Connection
    from pyscrun.anchor.request import CreateRequest
    from pyscrun.anchor.shipping import Shipment
    from pyscrun.anchor.staging import Staging
    from pyscrun.anchor.stand_in import StandIn
    from pyscrun.anchor.store import Store
    from pyscrun.backends.base import Backend, Step
    from pyscrun.oci.state import ContainerState

# Signals whose default action neither ends nor dumps a process.
HARMLESS_SIGNALS = frozenset((_signal.SIGCHLD, _signal.SIGCONT, _signal.SIGURG, _signal.SIGWINCH,
                              _signal.SIGSTOP, _signal.SIGTSTP, _signal.SIGTTIN, _signal.SIGTTOU))
# After SIGKILL was ordered, how long the step may take before its launcher is killed.
KILL_GRACE = 10.0
# After SIGKILL was ordered, how long the node agents may take to end the container
# before Slurm is asked to kill the step's processes itself (its job suspended: Slurm
# stopped them, the agents too). Well within the 5 s podman waits after its SIGKILL.
SLURM_KILL_AFTER = 2.0
# How long a start waits for every task to run its container before it returns anyway
# (a bundle shipped to the nodes may take that long).
START_WAIT = 10.0


class Orders:
    # What the anchor holds (anchor/daemon.py).
    request: CreateRequest
    store: Store
    state: ContainerState
    backend: Backend
    agents: Agents
    stand_in: StandIn
    step: Step | None
    terminal_fd: int | None
    kill_deadline: float | None
    slurm_kill_at: float | None
    exit_status: int | None
    task_order: TaskOrder | None
    unsaved: bool
    stopped_waiters: list[tuple[Connection, dict[str, Any]]]
    waiting_orders: list[tuple[Connection, dict[str, Any], float]]
    ships_bundle: bool
    shipment: Shipment | None
    staging: Staging
    move_abandoned: bool  # a kill came during the move: the move is given up

    def _start(self) -> bool:
        raise NotImplementedError

    def _report_ready(self, error: str | None) -> None:
        raise NotImplementedError

    def _job_ending(self) -> None:
        raise NotImplementedError

    def _dumped_for_move(self, reply: dict[str, Any]) -> None:
        raise NotImplementedError

    def _task_runs(self) -> None:
        raise NotImplementedError

    def _move_when_running(self) -> None:
        raise NotImplementedError

    def _handle(self, client: Connection, message: dict[str, Any]) -> dict[str, Any] | None:
        op = message.get("op")
        if op == "start":
            if self._start():
                # Answered once every task runs its container, as runc's start returns
                # once the container's process runs: a signal that follows the start
                # must find the process, not reach it before its first instruction.
                self.waiting_orders.append((client, message, time.monotonic() + START_WAIT))
                return None
        elif op == "kill":
            self._kill(message["signal"], bool(message.get("all")))
        elif op == "delete":
            self._kill(_signal.SIGKILL)
        elif op == "checkpoint" or op in RULES:
            self._when_running(client, message)
            return None
        elif op != "state":
            raise ScrunError(f"unknown operation {op!r}")
        return {"ok": True, "state": self.state.oci_document()}

    def _agent_event(self, agent: AgentLink, message: dict[str, Any]) -> None:
        if message.get("op") == "send-images":
            agent.send_files(image_frames(agent, self.request.restore))
            return
        if message.get("op") == "send-bundle":
            if self.ships_bundle:
                if self.shipment is None:
                    from pyscrun.anchor.shipping import Shipment

                    self.shipment = Shipment(self.staging.bundle,
                                             self.store.spool_dir(self.state.id))
                agent.send_files(self.shipment.frames_for(agent))
            else:
                agent.send({"op": "bundle-sent", "error": "this container ships no bundle"})
            return
        event = message.get("event")
        if event == "exit":
            if agent.task == "0" and agent.receiver is not None and self.shipment is not None:
                agent.receiver.close()
                failed, agent.receiver = agent.receiver.failed, None
                self.shipment.bring_back(self.staging.rootfs, failed)
            agent.reported_exit = True
            self.agents.exit_statuses.append(message["status"])
        elif event == "running":
            self.agents.running += 1
            pid = message.get("pid")
            if pid and agent.task == "0" and self.backend.name == "local":
                # The container runs on this host: the stand-in takes its namespaces.
                try:
                    self.stand_in.join(pid)
                except ScrunError as err:
                    log.current.info(f"the stand-in keeps namespaces of its own: {err}")
            restore = self.request.restore
            if restore is not None and self.agents.running >= int(restore.get("tasks", 1)):
                self._report_ready(None)
            self._task_runs()
            self._give_waiting_orders()
        elif event == "job-ending":
            self._job_ending()
        elif event == "stdin-taken":
            agent.stdin_unheard = max(0, agent.stdin_unheard - message["bytes"])
        elif event == "ordered":
            if agent.stale_answers:
                agent.stale_answers -= 1
                if message.get("error"):
                    # An undo that failed leaves that task unlike the others: say so.
                    log.current.error(f"task {agent.task}: {message.get('order')}, no longer "
                                      f"waited for, failed: {message['error']}")
            elif self.task_order is not None:
                self.task_order.answered(agent, message)
            self._answer_task_order()
        elif event == "checkpointed":
            error = message.get("error")
            self.agents.checkpointed(agent, str(error) if error else None,
                                     bool(message.get("frozen")))
            self._answer_checkpoint()

    # -- operations --------------------------------------------------------------------
    def _kill(self, signum: int, every: bool = False) -> None:
        status = self.state.status
        if status in (CREATED, RUNNING) and self.step is None:
            # Nothing runs yet: a signal that would end a process ends the container
            # before it started; one that would not (CONT, WINCH, STOP...) does nothing.
            if signum not in HARMLESS_SIGNALS:
                self.exit_status = 128 + signum
            return
        if status not in (CREATED, RUNNING, PAUSED):
            raise InvalidState(f"cannot kill a container that is {status}")
        if status == CREATED and signum in HARMLESS_SIGNALS:
            return  # its step waits for the start: nothing runs that it could reach
        if signum == _signal.SIGKILL and self.kill_deadline is None:
            now = time.monotonic()
            self.kill_deadline = now + KILL_GRACE
            if self.backend.name == "slurm":
                self.slurm_kill_at = now + SLURM_KILL_AFTER
        self.agents.kill(signum, every)

    def _tasks_ready(self) -> bool:
        """Every task runs its container, and not on its way out of its job (a move):
        an order given to those would reach tasks being ended."""
        return self.agents.all_running() and not self._moving_out()

    def _moving_out(self) -> bool:
        raise NotImplementedError

    def _when_running(self, client: Connection, message: dict[str, Any]) -> None:
        """An order for the tasks (checkpoint, pause, ...), given once every task runs
        its container: right after start, while the job is queued, or while the
        container moves to a new job, it waits."""
        if self._tasks_ready():
            self._give(client, message)
            return
        self.waiting_orders.append((client, message, time.monotonic() + ORDER_WAIT))
        # Agents report running only when asked (asking RunTimeQuery costs the node).
        self.agents.ask_running()

    def _give_waiting_orders(self, now: float | None = None) -> None:
        """Give the orders that waited, once every task runs; fail those that waited
        too long, or whose container ended. A start that waited is answered then too,
        once its container ended, or once it waited START_WAIT."""
        waiting, self.waiting_orders = self.waiting_orders, []
        for client, message, deadline in waiting:
            if client.closed:
                continue  # its client gave up (interrupted): nothing is done for it
            ended = self.exit_status is not None
            late = now is not None and now >= deadline
            if message["op"] == "start":
                if self.agents.all_running() or ended or late:
                    client.send({"ok": True, "state": self.state.oci_document()})
                else:
                    self.waiting_orders.append((client, message, deadline))
            elif self._tasks_ready() and not ended:
                self._give(client, message)
            elif ended or late:
                client.send({"ok": False, "error": "container not running" if ended else
                             f"the container's tasks did not all start within {ORDER_WAIT:.0f} s"})
            else:
                self.waiting_orders.append((client, message, deadline))

    def _give(self, client: Connection, message: dict[str, Any]) -> None:
        try:
            if message["op"] == "checkpoint":
                self._checkpoint(client, message)
            else:
                self._order_tasks(client, message)
        except ScrunError as err:
            client.send({"ok": False, "error": str(err)})

    def _order_tasks(self, client: Connection, message: dict[str, Any]) -> None:
        """pause, resume, update, ps or stats every task; the client's answer comes once all
        answered."""
        op = message["op"]
        rule = RULES[op]
        if self.unsaved and self.state.status == rule.after:
            # The tasks did it already; only writing it down failed. The CLI, which
            # reads the file, still asks for it: done once the file says so.
            error = self._save_status(op)
            client.send({"ok": False, "error": error} if error else
                        {"ok": True, "state": self.state.oci_document()})
            return
        if self.state.status not in rule.before:
            raise InvalidState(rule.refusal)
        if self.task_order is not None or self.agents.round is not None:
            raise InvalidState("another order to this container is in progress")
        self.task_order = TaskOrder(op, client, list(self.agents.connected))
        for agent in list(self.agents.connected):
            if not agent.send(message):
                self.task_order.lost(agent)
        self._answer_task_order()

    def _expire_task_order(self, now: float) -> None:
        if self.task_order is not None and now >= self.task_order.deadline:
            self.task_order.expire()
            self._answer_task_order()

    def _answer_task_order(self) -> None:
        order = self.task_order
        if order is None or not order.complete:
            return
        self.task_order = None
        self._answer(order)
        self._move_when_running()  # a warning that came meanwhile

    def _answer(self, order: TaskOrder) -> None:
        errors = order.errors
        if errors:
            # All or nothing: the tasks that did it, or may yet, take it back.
            if order.rule.undo is not None:
                done = order.succeeded() + order.late
                for agent in self.agents.connected:
                    if agent in done:
                        agent.send_unawaited({"op": order.rule.undo})
            order.client.send({"ok": False, "error": f"{order.op} failed: {'; '.join(errors)}"})
            return
        if order.rule.after is not None:
            self.state.status = order.rule.after
            error = self._save_status(order.op)
            if error:
                order.client.send({"ok": False, "error": error})
                return
        # The tasks' pids name processes of this host only on the local backend: the
        # nodes' mean nothing here, and what stands for them is the stand-in.
        pids = sorted(order.pids) if self.backend.name == "local" else [self.stand_in.pid]
        order.client.send({"ok": True, "state": self.state.oci_document(), "pids": pids,
                           "stats": order.stats})

    def _save_status(self, op: str) -> str | None:
        """Write the status a pause or resume of every task left; if that fails (a full
        disk), the error for its client. The anchor keeps the status either way: it is
        what the tasks did, and the next save that succeeds writes it."""
        try:
            self.store.save(self.state)
        except ScrunError as err:
            self.unsaved = True
            return f"container {self.state.status}, but {err}; {op} again to record it"
        self.unsaved = False
        return None

    def _checkpoint(self, client: Connection, order: dict[str, Any]) -> None:
        if self.state.status != RUNNING:
            raise InvalidState(f"cannot checkpoint a container that is {self.state.status}")
        if self.agents.round is not None:
            raise InvalidState("a checkpoint of this container is already in progress")
        self.agents.start_checkpoint(client, order)
        self._answer_checkpoint()

    def _answer_checkpoint(self) -> None:
        client = self.agents.round_client
        stops = self.agents.round is not None and not self.agents.round.order.get("leave_running")
        # A kill that came during a move's dump reaches the tasks as they go on (they
        # wait frozen, the signal pending): the app handles it as without a move.
        given_up = "a kill came in the middle of the move" \
            if client is None and self.move_abandoned else None
        reply = self.agents.finish_checkpoint(self.state.id, self.state.job_id, given_up)
        if reply is None:
            return
        if client is None:
            self._dumped_for_move(reply)  # the anchor's own: the container moves
            return
        if reply["ok"] and stops:
            # As with runc, checkpoint returns once the container has stopped: the
            # delete that follows must find it so.
            self.stopped_waiters.append((client, reply))
        else:
            client.send(reply)
            self._move_when_running()  # a warning that came meanwhile
