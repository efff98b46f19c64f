"""pause, resume, update, ps and stats: one order to every task's agent, one answer to the
client once every agent has answered. A pause that failed on one task is undone on the
others; the container's figures are the sums of its tasks'."""

from __future__ import annotations

from pyscrun.anchor.answers import Answers
from pyscrun.oci.state import PAUSED, RUNNING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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
    "stats": Rule((RUNNING, PAUSED), "container not running", None, None),
}


class TaskOrder(Answers):
    """One order in progress: the agents it went to, and what each answered."""

    def __init__(self, op: str, client: Connection, agents: list[AgentLink]) -> None:
        super().__init__({agent: agent.task or "0" for agent in agents})
        self.op = op
        self.rule = RULES[op]
        self.client = client
        self.pids: list[int] = []  # what ps found, every task's
        self.stats: dict[str, Any] | None = None  # what stats found, summed over the tasks

    def answered(self, agent: object, report: dict[str, Any]) -> None:
        """An agent's `ordered` report (checked against the message table). A report of
        another order is not this one's answer: the resume that undid a failed pause
        or checkpoint round on a task may still be on its way when the next order goes
        out."""
        if report.get("order") != self.op or not self.record(agent, report.get("error")):
            return
        pids = report.get("pids") or []
        self.pids += [p for p in pids if isinstance(p, int) and not isinstance(p, bool)]
        if report.get("stats") is not None:
            self.stats = report["stats"] if self.stats is None else summed(self.stats,
                                                                           report["stats"])


def summed(one: Any, other: Any) -> Any:
    """Two tasks' figures as one container's: numbers added, lists added item by item
    (per-cpu figures), objects key by key; anything else is the first's."""
    if isinstance(one, dict) and isinstance(other, dict):
        return {key: summed(one[key], other[key]) if key in one and key in other
                else one.get(key, other.get(key)) for key in {**one, **other}}
    if isinstance(one, list) and isinstance(other, list):
        longer, shorter = (one, other) if len(one) >= len(other) else (other, one)
        return [summed(a, b) for a, b in zip(shorter, longer, strict=False)] + longer[len(shorter):]
    numbers = (int, float)
    if (isinstance(one, numbers) and isinstance(other, numbers)
            and not isinstance(one, bool) and not isinstance(other, bool)):
        return one + other
    return one
