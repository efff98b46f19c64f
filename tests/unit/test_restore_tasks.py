"""A restore runs as many tasks as were checkpointed: an SCRUN_NTASKS of another count
(from podman's environment, where config.json does not set it) is refused at create in
one line, instead of a restore that waits forever for tasks that never come."""

from __future__ import annotations

import pytest

from pyscrun.cli.lifecycle import tasks_to_restore
from pyscrun.errors import UsageError


@pytest.mark.parametrize(("given", "tasks", "wanted"), [
    ({}, 1, {}), ({}, 3, {"SCRUN_NTASKS": "3"}), ({"SCRUN_NTASKS": "3"}, 3, {"SCRUN_NTASKS": "3"}),
    ({"SCRUN_NTASKS": "1"}, 1, {"SCRUN_NTASKS": "1"}),
])
def test_the_checkpoints_count_is_the_restores(given: dict[str, str], tasks: int,
                                               wanted: dict[str, str]) -> None:
    tasks_to_restore(given, tasks)
    assert given == wanted


@pytest.mark.parametrize(("given", "tasks"), [("1", 2), ("3", 2), ("2", 1)])
def test_another_count_is_refused_in_one_line(given: str, tasks: int) -> None:
    with pytest.raises(UsageError) as refused:
        tasks_to_restore({"SCRUN_NTASKS": given}, tasks)
    assert str(refused.value) == (f"the checkpoint holds {tasks} task(s): restore it without "
                                  f"SCRUN_NTASKS={given}, or with SCRUN_NTASKS={tasks}")
