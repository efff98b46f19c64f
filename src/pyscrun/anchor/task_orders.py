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


class Answers:
    """What each agent an order went to answered (a checkpoint's, a pause's, ...): its
    first answer counts; one whose connection closed answered with an error."""

    def __init__(self, tasks: dict[object, str]) -> None:
        self.tasks = tasks  # each agent's connection (any hashable) -> its task id
        self.results: dict[object, str | None] = {}  # agent -> error (None: done)

    def record(self, agent: object, error: str | None) -> bool:
        """False if agent is not one of the order's, or had answered already."""
        if agent not in self.tasks or agent in self.results:
            return False
        self.results[agent] = error
        return True

    def lost(self, agent: object) -> None:
        self.record(agent, "the node agent of the task went away")

    @property
    def complete(self) -> bool:
        return len(self.results) == len(self.tasks)

    @property
    def errors(self) -> list[str]:
        return [f"task {self.tasks[a]}: {e}" for a, e in self.results.items() if e]

    def succeeded(self) -> list[object]:
        return [agent for agent, error in self.results.items() if error is None]


class TaskOrder(Answers):
    """One order in progress: the agents it went to, and what each answered."""

    def __init__(self, op: str, client: Connection, agents: list[AgentLink]) -> None:
        super().__init__({agent: agent.task or "0" for agent in agents})
        self.op = op
        self.rule = RULES[op]
        self.client = client
        self.pids: list[int] = []  # what ps found, every task's

    def answered(self, agent: object, error: str | None, pids: object = None) -> None:
        if self.record(agent, error) and isinstance(pids, list):
            self.pids += [p for p in pids if isinstance(p, int) and not isinstance(p, bool)]
