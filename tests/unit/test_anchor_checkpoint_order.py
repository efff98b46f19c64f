"""A checkpoint the anchor cannot write in its image path fails that request in one
line; the anchor goes on serving and its container goes on running (it used to end
both). The CLI checks the path first: a client that skips the check, or a path that
becomes unwritable between the check and the order, reaches the anchor as here.

A real anchor with its agent on loopback (anchor_harness.py); the faults are real: a
regular file where the image directory is to be, a directory where the manifest is.
"""

from __future__ import annotations

from pathlib import Path

from pyscrun.node.criu import MANIFEST
from pyscrun.oci.state import RUNNING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.unit.anchor_harness import Harness


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
