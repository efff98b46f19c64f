"""A state file the anchor cannot write (a full disk, a file system gone read-only)
fails the request that changed the state, not the anchor: the CLI says why in one line
and exits non-zero, the anchor goes on serving, and what it holds is what the tasks did.

A real anchor with a node agent on loopback that does every order, and scrun's own
verbs as podman runs them (anchor_harness.py). The fault is real and stops root too: a
directory where the state's temporary file is to be written (fs.write_atomic) fails
the save with EISDIR, while the state file and the control socket the CLI uses stay
as they were.
"""

from __future__ import annotations

import os

import pytest

from pyscrun.anchor.store import STATE_FILE
from pyscrun.oci.state import CREATED, PAUSED, RUNNING
from tests.unit.anchor_harness import ID

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.unit.anchor_harness import Harness


def _break_saves(spool: str) -> str:
    """Make every save of the state fail, as a full disk would: a directory where
    fs.write_atomic creates its temporary file (root writes through any mode, not into
    a directory). Returns it, to be removed once saves may succeed again."""
    blocker = os.path.join(spool, f".{STATE_FILE}.{os.getpid()}.tmp")
    os.mkdir(blocker)
    return blocker


@pytest.mark.parametrize(("verb", "before", "after"), [("pause", RUNNING, PAUSED),
                                                        ("resume", PAUSED, RUNNING)])
def test_a_state_that_cannot_be_saved_fails_the_verb_and_the_anchor_goes_on(
        harness: Callable[[str], Harness], capsys: pytest.CaptureFixture[str],
        verb: str, before: str, after: str) -> None:
    """The tasks did it, so the anchor holds it (its `state` answers so); only the file
    still says what was, and the error says the verb once more records it."""
    one = harness(before)
    _break_saves(one.anchor.store.spool_dir(ID))
    assert one.scrun(verb) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"scrun: error: container {after}, but cannot save state of {ID!r}: Is a directory; "
        f"{verb} again to record it"]
    assert one.agent.orders == [verb]
    assert one.ask({"op": "state"})["state"]["status"] == after
    assert one.saved_status() == before


@pytest.mark.parametrize(("verb", "before", "after"), [("pause", RUNNING, PAUSED),
                                                        ("resume", PAUSED, RUNNING)])
def test_the_verb_repeated_once_saves_succeed_records_what_the_tasks_did(
        harness: Callable[[str], Harness], verb: str, before: str, after: str) -> None:
    """The tasks are not ordered a second time: they did it already."""
    one = harness(before)
    blocker = _break_saves(one.anchor.store.spool_dir(ID))
    assert one.scrun(verb) == 1
    os.rmdir(blocker)  # room again on the disk
    assert one.scrun(verb) == 0
    assert one.saved_status() == after
    assert one.agent.orders == [verb]
    # Recorded: the verb is refused again as runc refuses it, and its opposite works.
    assert one.scrun(verb) == 1
    opposite = "resume" if verb == "pause" else "pause"
    assert one.scrun(opposite) == 0
    assert one.saved_status() == before
    assert one.agent.orders == [verb, opposite]


def test_a_start_whose_state_cannot_be_saved_leaves_the_container_created(
        harness: Callable[[str], Harness], capsys: pytest.CaptureFixture[str]) -> None:
    """The state is written before the start is acted on: a start that could not write
    it started nothing, and may be asked again."""
    one = harness(CREATED)
    _break_saves(one.anchor.store.spool_dir(ID))
    assert one.scrun("start") == 1
    assert capsys.readouterr().err.splitlines() == [
        f"scrun: error: cannot save state of {ID!r}: Is a directory"]
    assert one.ask({"op": "state"})["state"]["status"] == CREATED
    assert one.anchor.agents.given == []  # no `go`: nothing started
