"""The container's figures from its tasks' (anchor/task_orders.summed) and runc's
--interval durations (cli/events.parse_interval)."""

from __future__ import annotations

import pytest

from pyscrun.anchor.task_orders import summed
from pyscrun.cli.events import parse_interval
from pyscrun.errors import UsageError


def test_two_tasks_figures_add_up_key_by_key_and_cpu_by_cpu() -> None:
    one = {"cpu": {"usage": {"total": 10, "percpu": [4, 6]}}, "pids": {"current": 2},
           "memory": {"usage": {"usage": 100, "failcnt": 0}}, "blkio": {}}
    other = {"cpu": {"usage": {"total": 5, "percpu": [1, 2, 2]}}, "pids": {"current": 1},
             "memory": {"usage": {"usage": 50, "failcnt": 1}, "swap": {"usage": 7}}}
    assert summed(one, other) == {
        "cpu": {"usage": {"total": 15, "percpu": [5, 8, 2]}}, "pids": {"current": 3},
        "memory": {"usage": {"usage": 150, "failcnt": 1}, "swap": {"usage": 7}}, "blkio": {}}


def test_what_is_not_a_number_is_the_first_tasks() -> None:
    assert summed({"name": "a", "ok": True, "x": None}, {"name": "b", "ok": False, "x": 3}) == {
        "name": "a", "ok": True, "x": None}


@pytest.mark.parametrize(("text", "seconds"), [
    ("5s", 5.0), ("250ms", 0.25), ("1m30s", 90.0), ("1.5h", 5400.0), ("100us", 1e-4)])
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_interval(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "s", "5 s", "-1s", "5x", "5s3"])
def test_what_is_not_a_duration_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match="invalid --interval"):
        parse_interval(text)


def test_a_zero_interval_is_refused_as_runc_does() -> None:
    with pytest.raises(UsageError, match="greater than 0"):
        parse_interval("0s")
