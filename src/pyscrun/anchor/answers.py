"""Collecting every agent's answer to one order sent to all the tasks (a checkpoint,
a pause, ...)."""

from __future__ import annotations


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
