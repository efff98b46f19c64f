"""Orders to the tasks (pause, resume, update, ps, checkpoint) while something else is
under way: an agent that does not answer (stopped with a suspended job the moment the
order went out, its node stalled), a client that gave up waiting, the job's warning
that it ends soon. An order is done wholly or not at all, never after its client was
told it failed, and the warning is acted on once the order is over.

A real anchor with its node agent on loopback (anchor_harness.py); the agent holds its
answers as a stopped process would, and gets its orders, in turn, once it goes on."""

from __future__ import annotations

import threading

import pytest

from pyscrun.anchor import protocol, task_orders
from pyscrun.cli import main
from pyscrun.errors import AnchorError
from pyscrun.leave import exit_status_of
from pyscrun.oci.state import PAUSED, RUNNING
from tests.unit.anchor_harness import ID

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.unit.anchor_harness import Harness


@pytest.mark.parametrize(("verb", "before", "undo"), [("pause", RUNNING, "resume"),
                                                       ("resume", PAUSED, "pause")])
def test_an_order_the_agent_does_not_answer_fails_and_is_taken_back(
        harness: Callable[..., Harness], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, verb: str, before: str, undo: str) -> None:
    monkeypatch.setattr(task_orders, "ANSWER_WAIT", 0.3)
    one = harness(before)
    one.agent.awake.clear()
    assert one.scrun(verb) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"scrun: error: {verb} failed: task 0: its node agent did not answer within 0.3 s"]
    assert one.saved_status() == before
    # The agent goes on: it does what it was ordered, then takes it back, as ordered after.
    one.agent.awake.set()
    link = one.anchor.agents.connected[0]
    one.serve_until(lambda: one.agent.orders == [verb, undo] and not link.stale_answers)
    assert one.ask({"op": "state"})["state"]["status"] == before
    # The next order waits for the agent's answer to it, not to one before.
    assert one.scrun(verb) == 0
    assert one.saved_status() != before
    assert one.agent.orders == [verb, undo, verb]


def test_an_order_whose_client_gave_up_while_the_tasks_started_is_not_carried_out(
        harness: Callable[..., Harness]) -> None:
    """A pause right after the start waits for every task to run; a client that gave up
    before (its own wait ran out, or it was interrupted) was told it failed."""
    one = harness(RUNNING, running=False)
    path = one.anchor.store.socket_path(ID)
    gave_up: list[Exception] = []

    def pause() -> None:
        try:
            protocol.request(path, {"op": "pause"}, timeout=0.3)
        except AnchorError as err:
            gave_up.append(err)

    client = threading.Thread(target=pause)
    client.start()
    one.serve_until(lambda: not client.is_alive())
    assert gave_up, "the pause was answered before every task ran"
    one.agent.say({"event": "running"})
    one.serve_until(one.anchor.agents.all_running)
    # The agent answers in turn: a pause given would come before this ps.
    assert one.scrun("ps") == 0
    assert one.agent.orders == ["report-running", "ps"]
    assert one.ask({"op": "state"})["state"]["status"] == RUNNING


def test_the_jobs_warning_during_an_order_moves_the_container_once_the_order_is_done(
        harness: Callable[..., Harness]) -> None:
    """Slurm warns once: a warning that came while a ps was answered is acted on after."""
    one = harness(RUNNING)
    one.agent.awake.clear()
    path = one.anchor.store.socket_path(ID)
    client = threading.Thread(target=lambda: protocol.request(path, {"op": "ps"}))
    client.start()
    one.serve_until(lambda: one.anchor.task_order is not None)
    one.anchor._job_ending()  # the warning's report, as the agent's link gives it
    assert one.anchor.move_wanted
    one.agent.awake.set()
    one.serve_until(lambda: not client.is_alive() and "checkpoint" in one.agent.orders)
    assert one.agent.orders[:2] == ["ps", "checkpoint"]  # then, dumped, the tasks end


def test_an_order_during_a_move_waits_for_the_tasks_of_the_new_job(
        harness: Callable[..., Harness]) -> None:
    """A pause while the container moves (its tasks dumped, about to be ended) is not
    given to those tasks, which would answer it failed or not at all: it waits, and is
    given once the move is over."""
    one = harness(RUNNING)
    one.anchor.move_phase = "dumped"
    done: list[int] = []
    argv = ["--root", one.root, "-f", one.slurm_conf, "pause", ID]
    pausing = threading.Thread(target=lambda: done.append(exit_status_of(lambda: main.run(argv))))
    pausing.start()
    one.serve_until(lambda: bool(one.anchor.waiting_orders))
    assert "pause" not in one.agent.orders
    one.anchor.move_phase = ""
    one.serve_until(lambda: bool(done))
    pausing.join()
    assert done == [0] and "pause" in one.agent.orders
    assert one.saved_status() == PAUSED
