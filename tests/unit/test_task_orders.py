"""One order to every task: only each agent's answer to that order counts."""

from __future__ import annotations

from pyscrun.anchor.task_orders import TaskOrder


class _Agent:
    def __init__(self, task: str) -> None:
        self.task = task


def test_the_answer_to_an_earlier_resume_is_not_taken_for_the_pause_s() -> None:
    """A failed checkpoint round (or pause) resumes its tasks; the user's next pause can
    go out before a task's answer to that resume came back. Taken for the pause's
    answer, a pause that then failed on that task was reported done."""
    task0, task1 = _Agent("0"), _Agent("1")
    order = TaskOrder("pause", None, [task0, task1])  # type: ignore[arg-type, list-item]
    order.answered(task0, {"event": "ordered", "order": "resume", "error": None})
    order.answered(task1, {"event": "ordered", "order": "pause", "error": None})
    assert not order.complete
    order.answered(task0, {"event": "ordered", "order": "pause", "error": "runc pause: exit 1"})
    assert order.complete
    assert order.errors == ["task 0: runc pause: exit 1"]
