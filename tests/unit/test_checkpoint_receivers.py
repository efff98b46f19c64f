"""A checkpoint round takes each agent's incoming files for its images, then gives the
link back what it had: task 0 of a shipped container sends what the container changed
when it ends, and that must still reach the shipment (it used to find no receiver: the
link was refused, the exit report never read, the status 137 and the changes lost)."""

from __future__ import annotations

import _socket
from pathlib import Path

from pyscrun.anchor.agents import AgentLink, Agents
from pyscrun.channel.files import TreeReceiver
from pyscrun.channel.peer import Peer


def test_the_shipments_receiver_is_back_after_a_checkpoint(tmp_path: Path) -> None:
    ours, theirs = _socket.socketpair()
    try:
        agent = AgentLink(Peer.accepted(ours, b"s" * 32))
        agents = Agents()
        agents.hello(agent, "0", "n1", "0", 1)
        shipment = TreeReceiver({"rootfs": str(tmp_path / "back")})
        agent.receiver = shipment
        images = tmp_path / "images"
        images.mkdir()
        for error in (None, "criu dump failed"):
            agents.start_checkpoint(None, {"image_path": str(images), "work_path": "",  # type: ignore[arg-type]
                                           "leave_running": True})
            assert agent.receiver is not shipment  # the images' while the round lasts
            agents.checkpointed(agent, error, False)
            reply = agents.finish_checkpoint("c1", "7")
            assert reply is not None and reply["ok"] is (error is None)
            assert agent.receiver is shipment
    finally:
        ours.close()
        theirs.close()
