"""A checkpoint the anchor cannot write in its image path fails that request in one
line; the anchor goes on serving and its container goes on running (it used to end
both). The CLI checks the path first: a client that skips the check, or a path that
becomes unwritable between the check and the order, reaches the anchor as here.

Images a node sends over the channel that cannot be written here are the same: our
disk failed, not the agent, whose link stays up and whose container runs on (the link
used to be dropped as if the agent had sent garbage, and the agent, without its
anchor, killed the container). So is an image path that turns read-only during the
round: what it cannot remove of its own is said in the reply.

A real anchor with its agent on loopback (anchor_harness.py); the faults are real: a
regular file where the image directory is to be, a directory where the manifest is, a
full tmpfs, a read-only bind mount (mounts.py).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pyscrun.anchor.checkpointing import CheckpointRound
from pyscrun.node.criu import MANIFEST
from pyscrun.oci.state import RUNNING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.unit.anchor_harness import Harness
    from tests.unit.mounts import Mounts


def test_an_image_path_that_cannot_be_written_fails_the_checkpoint_not_the_anchor(
        harness: Callable[[str], Harness], tmp_path: Path) -> None:
    one = harness(RUNNING)
    taken = tmp_path / "taken"
    taken.write_text("not a directory")
    reply = one.ask({"op": "checkpoint", "image_path": str(taken / "images"),
                     "work_path": ""})
    assert reply == {"ok": False,
                     "error": f"cannot write in {taken}/images: Not a directory"}
    assert "checkpoint" not in one.agent.orders
    assert one.ask({"op": "state"})["state"]["status"] == RUNNING
    assert one.anchor.exit_status is None


def test_a_manifest_that_cannot_be_written_fails_the_checkpoint_in_one_line(
        harness: Callable[[str], Harness], tmp_path: Path) -> None:
    one = harness(RUNNING)
    images = tmp_path / "images"
    (images / MANIFEST).mkdir(parents=True)
    (images / MANIFEST / "kept").write_text("")
    (images / "disk.img").write_text("the user's")
    (images / "inventory.img").write_text("an earlier checkpoint's")
    reply = one.ask({"op": "checkpoint", "image_path": str(images), "work_path": "",
                     "leave_running": True})
    assert reply["ok"] is False
    assert reply["error"].startswith(f"cannot write the checkpoint's manifest in {images}: ")
    assert "\n" not in reply["error"]
    assert one.agent.orders == ["checkpoint"]
    # Images without a manifest are no checkpoint: what was dumped is gone; what the
    # directory held before is not this round's to remove.
    assert sorted(p.name for p in images.iterdir()) == ["disk.img", "inventory.img", MANIFEST]
    assert (images / "disk.img").read_text() == "the user's"
    assert one.ask({"op": "state"})["state"]["status"] == RUNNING


@pytest.mark.parametrize("unwritable", ["image path full", "work path read-only"])
def test_images_from_a_node_that_cannot_be_written_fail_the_checkpoint_not_the_container(
        harness: Callable[[str], Harness], tmp_path: Path, mounts: Mounts,
        capsys: pytest.CaptureFixture[str], unwritable: str) -> None:
    one = harness(RUNNING)
    one.agent.sees_image_path = False
    images, work = tmp_path / "images", tmp_path / "work"
    if unwritable == "image path full":
        mounts.full_tmpfs(images)
        work.mkdir()
        failing, why = images, os.strerror(errno.ENOSPC)
    else:
        images.mkdir()
        mounts.read_only(work)
        failing, why = work, os.strerror(errno.EROFS)
    before = sorted(p.name for p in images.iterdir())
    assert one.scrun("checkpoint", "--image-path", str(images), "--work-path", str(work),
                     "--leave-running") == 1
    # The CLI's line, and the anchor's log of it (one process here, one stderr).
    assert set(capsys.readouterr().err.splitlines()) == {
        f"scrun: error: checkpoint failed: task 0: cannot write in {failing}: {why}"}
    assert one.agent.orders == ["checkpoint"]
    # The round left nothing of its own: no probe, no image, no log.
    assert sorted(p.name for p in images.iterdir()) == before
    assert not any(work.iterdir())
    one.runs_on()


def test_an_image_path_made_read_only_during_the_round_fails_it_in_one_line(
        harness: Callable[[str], Harness], tmp_path: Path, mounts: Mounts) -> None:
    # Neither the round's probe nor what was dumped can be removed any more: the round
    # fails, saying so; the link stays up (both removals used to end it).
    one = harness(RUNNING)
    images = tmp_path / "images"
    images.mkdir()
    one.agent.while_dumping = lambda: mounts.read_only(images)
    reply = one.ask({"op": "checkpoint", "image_path": str(images), "work_path": "",
                     "leave_running": True})
    [probe] = [p for p in images.iterdir() if p.name.startswith(".pyscrun-probe-")]
    read_only = os.strerror(errno.EROFS)
    assert reply == {"ok": False,
                     "error": f"cannot remove {probe}: {read_only}; "
                              f"cannot remove pages-1.img from {images}: {read_only}"}
    assert one.agent.orders == ["checkpoint"]
    one.runs_on()


@pytest.mark.parametrize("new_file", [False, True], ids=["rewritten", "rewritten-and-new"])
def test_a_failed_round_removes_what_it_wrote_in_a_task_dir_and_nothing_else(
        tmp_path: Path, new_file: bool) -> None:
    # An earlier checkpoint of two tasks; the round's task 1 rewrites one of its files
    # in place (the same inode) and fails. The rewritten file used to stay, half
    # written, or, beside a new file, the whole task dir used to go.
    images = tmp_path / "images"
    (images / "task-1").mkdir(parents=True)
    earlier = ["pages-1.img", MANIFEST, "task-1/pages-1.img", "task-1/core-1.img"]
    for name in earlier:
        (images / name).write_text("an earlier checkpoint's")
    done = CheckpointRound({"image_path": str(images), "work_path": ""}, {"a": "0", "b": "1"})
    (images / "pages-1.img").write_text("task 0's")
    (images / "task-1/pages-1.img").write_text("task 1's, half")
    if new_file:
        (images / "task-1/pages-2.img").write_text("task 1's, half")
    done.record("a", None)
    done.record("b", "criu failed")
    assert done.remove_probe() is None
    assert done.discard_images() is None
    assert sorted(str(p.relative_to(images)) for p in images.rglob("*")) == [
        MANIFEST, "task-1", "task-1/core-1.img"]
    assert {p.read_text() for p in images.rglob("*") if p.is_file()} == {"an earlier checkpoint's"}
