"""The node agents of one container as the anchor sees them: their connections, the
orders waiting for them, what they reported, and a checkpoint in progress."""

from __future__ import annotations

from pyscrun import log
from pyscrun.channel import frames
from pyscrun.channel.peer import Peer

# typing costs milliseconds at every start of the CLI: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Generator
    from typing import Any

    from pyscrun.anchor.checkpointing import CheckpointRound
    from pyscrun.anchor.control import Connection
    from pyscrun.channel.files import TreeReceiver


# What a link's files may queue beyond what its connection took: with the kernel's own
# buffer, enough to keep a node's connection busy between two turns of the anchor's
# loop, and little enough for many nodes at once.
PUMP_WATER = 1 << 20


class AgentLink:
    """One connection on the agents' port: a stranger until it has proven it holds the
    container's secret and said hello, a node agent from then on."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.task: str | None = None
        self.node = ""
        self.reported_exit = False  # an agent that said how its container ended
        self.receiver: TreeReceiver | None = None  # its checkpoint images, if sent
        self.stream = False  # handed over as a task's output stream (no frames)
        # Answers ("ordered") still to come to orders no longer waited for: an undo, or
        # an order it had not answered in time. Each order is answered once, in turn.
        self.stale_answers = 0
        self.stdin_unheard = 0  # stdin sent that it has not said it took (task 0's)
        # Frames of files it asked for (its bundle, a restore's images), made as its
        # connection takes them.
        self.outgoing: Generator[bytes, None, None] | None = None

    def send(self, message: dict[str, Any]) -> bool:
        return self.peer.send(frames.message(message))

    def send_files(self, made: Generator[bytes, None, None]) -> None:
        """Files to send as the connection takes them; ValueError if it is still being
        sent others (one tree at a time is all an agent asks for)."""
        if self.outgoing is not None:
            made.close()
            raise ValueError("files asked for while others are on their way")
        self.outgoing = made

    def pump(self) -> None:
        """Queue the next frames of the files on their way, up to PUMP_WATER waiting."""
        while self.outgoing is not None and self.peer.pending < PUMP_WATER:
            chunk = next(self.outgoing, None)
            if chunk is None or not self.peer.send(chunk):
                self.stop_files()

    def stop_files(self) -> None:
        """No more of the files on their way (the link is gone, or they all went)."""
        made, self.outgoing = self.outgoing, None
        if made is not None:
            made.close()

    def send_unawaited(self, message: dict[str, Any]) -> None:
        """An order (an undo) whose answer no one waits for."""
        if self.send(message):
            self.stale_answers += 1


class Agents:
    def __init__(self) -> None:
        self.connected: list[AgentLink] = []
        # What every agent is told, one still to come too, in the order it was given:
        # kills, and the start of a step launched at create (a kill after the start
        # must not reach a held agent before it).
        self.given: list[dict[str, Any]] = []
        self.exit_statuses: list[int] = []
        self.running = 0  # agents that reported their container running
        self.tasks = 0  # how many the step has, as its agents say (0 until one has)
        self.step_id = ""  # the step's id in its job, as its agents say
        self.running_asked = False
        self.lost = 0  # agents whose connection closed before they reported an exit
        self.last_error = ""
        self.round: CheckpointRound | None = None
        self.round_client: Connection | None = None
        self.receivers_before: dict[AgentLink, TreeReceiver | None] = {}
        self.frozen: list[AgentLink] = []  # of the round: tasks that wait paused

    def hello(self, agent: AgentLink, task: str, node: str, step_id: str, tasks: int) -> None:
        agent.task, agent.node = task, node
        self.tasks, self.step_id = tasks, step_id
        self.connected.append(agent)
        for order in self.given:
            agent.send(order)
        if self.running_asked:
            agent.send({"op": "report-running"})

    def stdin_taker(self) -> AgentLink | None:
        """Task 0's agent, which reads the container's stdin, as with srun."""
        return next((agent for agent in self.connected if agent.task == "0"), None)

    def gone(self, agent: AgentLink) -> None:
        if agent in self.connected:
            self.connected.remove(agent)
            if not agent.reported_exit:
                self.lost += 1
                log.current.error(f"the node agent of task {agent.task} on "
                                  f"{agent.node or 'its node'} is gone")
            if self.round is not None:
                self.round.lost(agent)

    def failed(self, task: str, error: str) -> None:
        """An agent's error, before its container ran: of which task, when there are
        several."""
        self.last_error = f"task {task}: {error}" if self.tasks > 1 else error

    def unreported(self) -> int:
        """Agents that have not said how their container ended: lost, or still
        connected once their step is over (about to be killed with it)."""
        return self.lost + sum(not agent.reported_exit for agent in self.connected)

    def all_reported(self) -> bool:
        """Every task of the step has said how its container ended."""
        return self.tasks > 0 and not self.lost and len(self.exit_statuses) >= self.tasks

    def kill(self, signum: int, every: bool = False) -> None:
        """Order every agent to signal its container's init (every: each of its
        processes, as `kill --all`); agents yet to come get it too."""
        self._give({"op": "kill", "signal": signum, "all": every})

    def start(self) -> None:
        """The container starts: every agent of a step launched at create, and every
        one still to come, runs it."""
        self._give({"op": "go"})

    def _give(self, order: dict[str, Any]) -> None:
        self.given.append(order)
        for agent in list(self.connected):
            agent.send(order)

    def killed(self) -> bool:
        """Whether a kill was ordered."""
        return any(order["op"] == "kill" for order in self.given)

    def ask_running(self) -> None:
        """Every agent, and every one still to come, reports once its container runs."""
        if not self.running_asked:
            self.running_asked = True
            for agent in list(self.connected):
                agent.send({"op": "report-running"})

    def all_running(self) -> bool:
        """Every task of the step runs its container (orders can reach each)."""
        return self.tasks > 0 and self.running >= self.tasks and len(self.connected) >= self.tasks

    def nodes(self) -> list[str]:
        return sorted({agent.node for agent in self.connected if agent.node})

    # -- checkpoint ----------------------------------------------------------------------
    def start_checkpoint(self, client: Connection | None, order: dict[str, Any]) -> None:
        """client: who asked, None for the anchor's own (a move to a new job)."""
        from pyscrun.anchor.checkpointing import CheckpointRound

        self.round = CheckpointRound(order, {a: a.task or "0" for a in self.connected})
        self.round_client = client
        self.frozen = []
        # Task 0's receiver for what a shipped container changed, back after the round.
        self.receivers_before = {a: a.receiver for a in self.connected}
        agents_order = self.round.order_for_agents()
        for agent in list(self.connected):
            agent.receiver = self.round.receiver(agent)
            if not agent.send(agents_order):
                self.round.lost(agent)

    def checkpointed(self, agent: AgentLink, error: str | None, frozen: bool) -> None:
        """An agent's answer to the round (frozen: its task waits paused, dumped or not)."""
        if self.round is not None and self.round.record(agent, error) and frozen:
            self.frozen.append(agent)

    def finish_checkpoint(self, container_id: str, job_id: str,
                          given_up: str | None = None) -> dict[str, Any] | None:
        """Once every task answered: the reply for the client (None while waiting).
        given_up: why the round is to fail however it went (its tasks resumed, its
        images removed)."""
        done = self.round
        if done is None or not done.complete:
            return None
        self.round = None
        # A probe left behind is the round's own failure: it leaves nothing of its own.
        probe_left = done.remove_probe()
        done.close_receivers()
        for agent in self.connected:
            agent.receiver = self.receivers_before.get(agent)
        self.receivers_before = {}
        errors = done.errors + [why for why in (probe_left, given_up) if why]
        if not errors:
            try:
                done.write_manifest(container_id, job_id, self.nodes())
            except OSError as err:
                # Images without their manifest are no checkpoint: none is left to restore.
                errors.append(f"cannot write the checkpoint's manifest in "
                              f"{done.order['image_path']}: {err.strerror}")
        if errors:
            reply = _failed(done, "; ".join(errors))
            for agent in self.frozen:
                agent.send_unawaited({"op": "resume"})  # as it was: running
            return reply
        if done.stops:
            self.kill(9)  # a paused task is resumed to take it
        return {"ok": True}


def _failed(done: CheckpointRound, error: str) -> dict[str, Any]:
    """A failed round's reply, once what it wrote is removed (or said to be left)."""
    left = done.discard_images()
    if left:
        error = f"{error}; {left}"
    log.current.error(f"checkpoint failed: {error}")
    return {"ok": False, "error": error}
