"""The node agents of one container as the anchor sees them: their connections, the
orders waiting for them, what they reported, and a checkpoint in progress."""

from __future__ import annotations

import socket

from pyscrun import log
from pyscrun.anchor import protocol

# typing costs milliseconds at every start of the CLI: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pyscrun.anchor.checkpointing import CheckpointRound


class Connection:
    """One accepted connection on the control socket: a CLI request or an agent."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.reader = protocol.LineReader()
        self.task: str | None = None  # set once an agent said hello
        self.node = ""
        self.reported_exit = False  # an agent that said how its container ended

    def send(self, message: dict[str, Any]) -> bool:
        try:
            self.conn.sendall(protocol.encode(message))
        except OSError:
            return False
        return True


class Agents:
    def __init__(self) -> None:
        self.connected: list[Connection] = []
        self.pending_kills: list[int] = []
        self.exit_statuses: list[int] = []
        self.running = 0  # agents that reported their container running
        self.lost = 0  # agents whose connection closed before they reported an exit
        self.last_error = ""
        self.round: CheckpointRound | None = None
        self.round_client: Connection | None = None

    def hello(self, agent: Connection, task: str, node: str, stdio: list[int] | None) -> None:
        """Register an agent; hand it the container's stdio if it asked and we hold it."""
        agent.task, agent.node = task, node
        self.connected.append(agent)
        if stdio is not None:
            # Only task 0 reads stdin, as with srun; the others get stdin's last entry.
            fds = stdio[:3] if task == "0" else [stdio[3], stdio[1], stdio[2]]
            try:
                agent.conn.setblocking(True)
                socket.send_fds(agent.conn, [protocol.encode({"op": "stdio"})], fds)
                agent.conn.setblocking(False)
            except OSError:
                return
        for signum in self.pending_kills:
            agent.send({"op": "kill", "signal": signum})

    def gone(self, agent: Connection) -> None:
        if agent in self.connected:
            self.connected.remove(agent)
            if not agent.reported_exit:
                self.lost += 1
                log.current.error(f"the node agent of task {agent.task} on "
                                  f"{agent.node or 'its node'} is gone")
            if self.round is not None:
                self.round.lost(agent)

    def unreported(self) -> int:
        """Agents that have not said how their container ended: lost, or still
        connected once their step is over (about to be killed with it)."""
        return self.lost + sum(not agent.reported_exit for agent in self.connected)

    def kill(self, signum: int) -> None:
        """Order every agent to signal its container; agents yet to come get it too."""
        self.pending_kills.append(signum)
        for agent in list(self.connected):
            agent.send({"op": "kill", "signal": signum})

    def nodes(self) -> list[str]:
        return sorted({agent.node for agent in self.connected if agent.node})

    # -- checkpoint ----------------------------------------------------------------------
    def start_checkpoint(self, client: Connection, order: dict[str, Any]) -> None:
        from pyscrun.anchor.checkpointing import CheckpointRound

        self.round = CheckpointRound(order, {a: a.task or "0" for a in self.connected})
        self.round_client = client
        agents_order = self.round.order_for_agents()
        for agent in list(self.connected):
            if not agent.send(agents_order):
                self.round.lost(agent)

    def checkpointed(self, agent: Connection, error: str | None) -> None:
        if self.round is not None:
            self.round.record(agent, error)

    def finish_checkpoint(self, container_id: str, job_id: str) -> dict[str, Any] | None:
        """Once every task answered: the reply for the client (None while waiting)."""
        done = self.round
        if done is None or not done.complete:
            return None
        self.round = None
        errors = done.errors
        if errors:
            log.current.error(f"checkpoint failed: {'; '.join(errors)}")
            done.discard_images()
            return {"ok": False, "error": "; ".join(errors)}
        done.write_manifest(container_id, job_id, self.nodes())
        if done.stop_after:
            self.kill(9)
        return {"ok": True}
