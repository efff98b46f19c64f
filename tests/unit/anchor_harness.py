"""A real anchor past create (its control socket and agents' port, served as its loop
serves them) with task 0's node agent on loopback, and scrun's own verbs as podman runs
them: for tests of what the anchor does with a request, without a job."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from pyscrun.anchor import protocol
from pyscrun.anchor.agent_port import AgentPort
from pyscrun.anchor.control import ControlSocket
from pyscrun.anchor.daemon import Anchor
from pyscrun.anchor.request import CreateRequest
from pyscrun.anchor.stand_in import StandIn
from pyscrun.anchor.store import Store
from pyscrun.anchor.task_orders import RULES
from pyscrun.backends.base import Allocation
from pyscrun.channel import peer
from pyscrun.cli import main
from pyscrun.conf import ociconf
from pyscrun.conf.site import PyscrunConf, Site
from pyscrun.leave import exit_status_of
from pyscrun.oci.bundle import Bundle

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

ID = "c1"


class Agent(threading.Thread):
    """Task 0's node agent: says hello, reports its container running and does every
    pause, resume, ..., checkpoint (its images where the anchor sees them) it is
    ordered; the orders it got, in turn."""

    def __init__(self, port: int, secret: bytes) -> None:
        super().__init__(daemon=True)
        self.port, self.secret = port, secret
        self.orders: list[str] = []

    def run(self) -> None:
        link = peer.dial("127.0.0.1", self.port, self.secret, timeout=5)
        link.sock.setblocking(True)
        link.sock.settimeout(10)
        link.send_message({"op": "agent-hello", "task": "0", "node": "n1", "tasks": 1}, 5)
        link.send_message({"event": "running"}, 5)
        try:
            while True:
                for order in peer.messages(link.receive()):
                    self.orders.append(order["op"])
                    if order["op"] in RULES:
                        link.send_message({"event": "ordered", "order": order["op"],
                                           "error": None}, 5)
                    elif order["op"] == "checkpoint":
                        # As CRIU dumps: one of its files written (or rewritten).
                        Path(order["image_path"], "pages-1.img").write_text("dumped")
                        link.send_message({"event": "checkpointed", "error": None}, 5)
        except peer.PeerGone:
            pass  # the anchor closed the channel: the test is over
        link.close()


class Harness:
    """An anchor past create whose container is in status, with its agent connected."""

    def __init__(self, tmp_path: Path, status: str) -> None:
        self.root = str(tmp_path / "root")
        store = Store(self.root)
        site = Site(str(tmp_path / "slurm.conf"), ociconf.load(str(tmp_path / "oci.conf")),
                    "local", PyscrunConf())
        bundle = Bundle(str(tmp_path / "bundle"), {"process": {"args": ["true"]}})
        request = CreateRequest(ID, bundle, store, site, None, None, {}, {})
        # The stand-in is only named (its pid is the OCI state's); nothing here asks it.
        request.stand_in = StandIn(os.getpid(), -1, -1)
        self.anchor = anchor = Anchor(request)
        os.makedirs(store.spool_dir(ID), 0o700)
        anchor.allocation = Allocation("local1", ["n1"], owned=True)
        anchor.state.status = status
        store.save(anchor.state)
        # What the anchor's _setup makes, without a job or a stand-in to talk to.
        anchor.control = ControlSocket(anchor.selector, store.socket_path(ID), anchor._handle)
        anchor.agent_port = AgentPort(
            anchor.selector, anchor.agents, anchor.secret, None, loopback_only=True,
            on_event=anchor._agent_event, on_stream=anchor._agent_stream,
            on_gone=anchor._agent_gone)
        self.agent = Agent(anchor.agent_port.port, anchor.secret)
        self.agent.start()
        self.serve_until(anchor.agents.all_running)

    def serve_until(self, done: Callable[[], bool]) -> None:
        """The anchor's loop (daemon.py _serve) until done: an error it lets out fails
        the test, as it would have ended the anchor and its container."""
        deadline = time.monotonic() + 10
        while not done():
            assert time.monotonic() < deadline, "the anchor did not get there in 10 s"
            for key, events in self.anchor.selector.select(0.05):
                self.anchor._dispatch(key, events)
            self.anchor._rearm()

    def scrun(self, verb: str) -> int:
        """`scrun --root ROOT VERB c1` as podman runs it, while the anchor serves; its
        exit status (what it says goes to stderr)."""
        status: list[int] = []
        argv = ["--root", self.root, verb, ID]
        thread = threading.Thread(target=lambda: status.append(
            exit_status_of(lambda: main.run(argv))))
        thread.start()
        self.serve_until(lambda: not thread.is_alive())
        return status[0]

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        """The anchor's reply to one request on its control socket."""
        reply: list[dict[str, Any]] = []
        path = self.anchor.store.socket_path(ID)
        thread = threading.Thread(target=lambda: reply.append(protocol.request(path, message)))
        thread.start()
        self.serve_until(lambda: not thread.is_alive())
        return reply[0]

    def saved_status(self) -> str:
        return self.anchor.store.load(ID).status

    def close(self) -> None:
        anchor = self.anchor
        for link in list(anchor.agents.connected):
            link.peer.close()
        assert anchor.agent_port is not None and anchor.control is not None
        anchor.agent_port.close()
        anchor.control.close()
        anchor.selector.close()
        self.agent.join(10)
