"""A bundle shipped to nodes that do not see it goes to each as its connection takes it,
inside the anchor's loop: a node slow to take its copy (a far or busy one, a large
rootfs) holds back neither the other nodes' copies nor the anchor's clients. It used to
go to one node at a time, the loop waiting on each: the next node, and `podman ps`,
waited meanwhile (up to 120 s per node).

A real anchor with its agent on loopback (anchor_harness.py); the slow node is a second
agent's connection that asks for its bundle and reads nothing.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from pyscrun.channel import peer
from pyscrun.oci.state import RUNNING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.unit.anchor_harness import Harness

# More than the loopback connection's buffers and the anchor's own queue hold together.
ROOTFS_SIZE = 48 << 20


def _children() -> list[str]:
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as listing:
        return listing.read().split()


def test_a_node_that_does_not_take_its_bundle_holds_back_no_other_node_nor_a_client(
        harness: Callable[[str], Harness], tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "rootfs" / "big").write_bytes(os.urandom(ROOTFS_SIZE))
    (bundle / "config.json").write_text(json.dumps(
        {"root": {"path": "rootfs"}, "process": {"args": ["true"]}}))
    before = _children()
    one = harness(RUNNING)
    one.anchor.ships_bundle = True
    agents = one.anchor.agents
    dialed: list[peer.Peer] = []

    def dial() -> None:
        dialed.append(peer.dial("127.0.0.1", one.agent.port, one.agent.secret, timeout=5))
        dialed[0].send_message({"op": "agent-hello", "task": "1", "node": "n2", "step": "0",
                                "tasks": 2}, 5)
        dialed[0].send_message({"op": "send-bundle"}, 5)

    thread = threading.Thread(target=dial)
    thread.start()
    one.serve_until(lambda: any(link.outgoing is not None for link in agents.connected))

    asked = time.monotonic()
    one.agent.say({"op": "send-bundle"})
    one.serve_until(lambda: "bundle-sent" in one.agent.orders)
    assert time.monotonic() - asked < 10, "task 0's bundle waited for the slow node's"
    assert one.ask({"op": "state"})["state"]["status"] == RUNNING
    [slow_link] = [link for link in agents.connected if link.task == "1"]
    assert slow_link.outgoing is not None  # its copy still on its way, not given up

    thread.join()
    dialed[0].close()
    one.serve_until(lambda: slow_link not in agents.connected)
    assert slow_link.outgoing is None
    assert _children() == before  # its tar ended with it
