"""pause, resume, update and ps: one order to every task's agent, one answer to the client
once every agent has answered. A pause that failed on one task is undone on the others."""

from __future__ import annotations

from pyscrun.oci.state import PAUSED, RUNNING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pyscrun.anchor.agents import AgentLink
    from pyscrun.anchor.control import Connection


class Rule:
    __slots__ = ("after", "before", "refusal", "undo")

    def __init__(self, before: tuple[str, ...], refusal: str, after: str | None,
                 undo: str | None) -> None:
        self.before = before  # the statuses the container must be in
        self.refusal = refusal  # runc's words when it is not
        self.after = after  # its status once every task has done it (None: the same)
        self.undo = undo  # the order that takes it back on the tasks that did it


RULES = {
    "pause": Rule((RUNNING,), "container not running", PAUSED, "resume"),
    "resume": Rule((PAUSED,), "container not paused", RUNNING, None),
    "update": Rule((RUNNING, PAUSED), "container not running", None, None),
    "ps": Rule((RUNNING, PAUSED), "container not running", None, None),
}


class TaskOrder:
    """One order in progress: the agents it went to, and what each answered."""

    def __init__(self, op: str, client: Connection, agents: list[AgentLink]) -> None:
        self.op = op
        self.rule = RULES[op]
        self.client = client
        self.agents = agents
        self.results: dict[AgentLink, str | None] = {}  # agent -> error (None: done)
        self.pids: list[int] = []  # what ps found, every task's

    def record(self, agent: AgentLink, error: str | None, pids: list[int] | None = None) -> None:
        if agent in self.agents and agent not in self.results:
            self.results[agent] = error
            self.pids += [p for p in pids or [] if isinstance(p, int) and not isinstance(p, bool)]

    def lost(self, agent: AgentLink) -> None:
        self.record(agent, "the node agent of the task went away")

    @property
    def complete(self) -> bool:
        return len(self.results) == len(self.agents)

    @property
    def errors(self) -> list[str]:
        return [f"task {agent.task}: {error}" for agent, error in self.results.items() if error]

    def succeeded(self) -> list[AgentLink]:
        return [agent for agent, error in self.results.items() if error is None]
