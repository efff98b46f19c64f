"""What the login host's own disk cannot do while the anchor handles an agent's message
fails what the message was for, in one line; the agent's link stays up and its container
runs on. Such an OSError used to be taken for the agent's fault: its link was dropped,
and the agent, without its anchor, killed the container.

A real anchor with its agent on loopback (anchor_harness.py); the disk faults are real
read-only bind mounts (mounts.py).
"""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

from pyscrun.anchor.checkpointing import place_probe
from pyscrun.oci.state import RUNNING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.unit.anchor_harness import Harness
    from tests.unit.mounts import Mounts

READ_ONLY = os.strerror(errno.EROFS)


def _errors(logged: io.StringIO) -> list[str]:
    return [line for line in logged.getvalue().splitlines() if line.startswith("t: error: ")]


def test_a_spool_dir_that_cannot_be_written_fails_the_bundles_shipping_not_the_link(
        harness: Callable[[str], Harness], mounts: Mounts, logged: io.StringIO) -> None:
    one = harness(RUNNING)
    one.anchor.ships_bundle = True
    spool = Path(one.anchor.store.spool_dir(one.anchor.state.id))
    mounts.read_only(spool)
    one.agent.say({"op": "send-bundle"})
    one.serve_until(lambda: "bundle-sent" in one.agent.orders)
    assert _errors(logged) == [
        f"t: error: shipping the bundle to n1: [Errno {errno.EROFS}] {READ_ONLY}: "
        f"'{spool / 'shipment'}'"]
    one.runs_on()


def test_a_restores_probe_that_cannot_be_removed_is_logged_not_the_links_end(
        harness: Callable[[str], Harness], tmp_path: Path, mounts: Mounts,
        logged: io.StringIO) -> None:
    one = harness(RUNNING)
    images = tmp_path / "images"
    probe = place_probe(str(images))
    mounts.read_only(images)
    # As create left a restore whose nodes look for the probe: it goes once all run.
    one.anchor.request.restore = {"image_path": str(images), "tasks": 1}
    one.anchor.restore_probe = probe
    one.agent.say({"event": "running"})
    one.serve_until(lambda: not one.anchor.restore_probe)
    assert _errors(logged) == [f"t: error: cannot remove {probe}: {READ_ONLY}"]
    one.runs_on()
