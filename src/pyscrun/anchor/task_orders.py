"""pause, resume, update, ps and stats: one order to every task's agent, one answer to the
client once every agent has answered, or once one has not in time. A pause or resume
that failed on one task is undone on the others; the container's figures are the sums
of its tasks'."""

from __future__ import annotations

import time

from pyscrun.anchor.answers import Answers
from pyscrun.oci.state import PAUSED, RUNNING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pyscrun.anchor.agents import AgentLink
    from pyscrun.anchor.control import Connection


class Rule:
    __slots__ = ("action", "after", "before", "refusal", "undo")

    def __init__(self, action: str, before: tuple[str, ...], refusal: str, after: str | None,
                 undo: str | None) -> None:
        self.action = action  # what it does to a container, in words: "cannot ACTION it"
        self.before = before  # the statuses the container must be in
        self.refusal = refusal  # runc's words when it is not
        self.after = after  # its status once every task has done it (None: the same)
        self.undo = undo  # the order that takes it back on the tasks that did it


# How long an order for the tasks (these, and checkpoint) waits for every task to run
# its container (right after the start, or while the job is queued).
ORDER_WAIT = 60.0
# How long an order waits for every agent's answer once it went out.
ANSWER_WAIT = 20.0
# How long the CLI waits for the anchor's answer to one of these orders: past both, so
# that it hears the anchor's reason, and an order is never carried out after its
# client gave up on it.
CLIENT_WAIT = ORDER_WAIT + ANSWER_WAIT + 10.0

RULES = {
    "pause": Rule("pause", (RUNNING,), "container not running", PAUSED, "resume"),
    "resume": Rule("resume", (PAUSED,), "container not paused", RUNNING, "pause"),
    "update": Rule("update", (RUNNING, PAUSED), "container not running", None, None),
    "ps": Rule("list the processes of", (RUNNING, PAUSED), "container not running", None,
               None),
    "stats": Rule("read the figures of", (RUNNING, PAUSED), "container not running", None,
                  None),
}


class TaskOrder(Answers):
    """One order in progress: the agents it went to, and what each answered."""

    def __init__(self, op: str, client: Connection, agents: list[AgentLink]) -> None:
        super().__init__({agent: agent.task or "0" for agent in agents})
        self.agents = agents
        self.op = op
        self.rule = RULES[op]
        self.client = client
        self.pids: list[int] = []  # what ps found, every task's
        self.stats: dict[str, Any] | None = None  # what stats found, summed over the tasks
        self.deadline = time.monotonic() + ANSWER_WAIT
        self.late: list[AgentLink] = []  # the agents that had not answered by the deadline

    def expire(self) -> None:
        """The deadline passed: each agent that has not answered fails the order. It may
        still carry it out once it comes to it (its job suspended, its node stalled),
        so the order's undo is for it too, and its answer, when it comes, is stale."""
        for agent in self.agents:
            if self.record(agent, f"its node agent did not answer within {ANSWER_WAIT:g} s"):
                self.late.append(agent)
                agent.stale_answers += 1

    def answered(self, agent: object, report: dict[str, Any]) -> None:
        """An agent's `ordered` report (checked against the message table), stale ones
        left out (AgentLink.stale_answers)."""
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
