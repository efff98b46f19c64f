"""A real anchor past create (its control socket and agents' port, served as its loop
serves them) with task 0's node agent on loopback, and scrun's own verbs as podman runs
them: for tests of what the anchor does with a request, without a job."""

from __future__ import annotations

import os
import queue
import threading
import time
from pathlib import Path

from pyscrun import poller
from pyscrun.anchor import protocol
from pyscrun.anchor.agent_port import AgentPort
from pyscrun.anchor.control import ControlSocket
from pyscrun.anchor.daemon import Anchor
from pyscrun.anchor.request import CreateRequest
from pyscrun.anchor.stand_in import StandIn
from pyscrun.anchor.store import Store
from pyscrun.anchor.task_orders import RULES
from pyscrun.backends.base import Allocation
from pyscrun.channel import files, peer
from pyscrun.cli import main
from pyscrun.conf import ociconf
from pyscrun.conf.site import PyscrunConf, Site
from pyscrun.errors import ChannelError
from pyscrun.fs import remove_tree
from pyscrun.leave import exit_status_of
from pyscrun.node.criu import local_order, task_image_dir, task_work_dir
from pyscrun.node.images import LOCAL_DIR
from pyscrun.oci.bundle import Bundle
from pyscrun.oci.state import RUNNING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

ID = "c1"


class Agent(threading.Thread):
    """Task 0's node agent: says hello, reports its container running and does every
    pause, resume, ..., checkpoint it is ordered; the orders it got, in turn. Its images
    go where the anchor sees them, or, once sees_image_path is False, over the channel
    as a node's that does not see the image path (node/images.py). while_dumping, if
    set, runs once it has dumped, before it answers (a fault of the login host's);
    awake, cleared, holds its answers (a stopped agent)."""

    def __init__(self, port: int, secret: bytes, node_dir: str, running: bool) -> None:
        super().__init__(daemon=True)
        self.port, self.secret = port, secret
        self.running = running  # reports its container running once it said hello
        self.node_dir = node_dir  # its node's own disk
        self.orders: list[str] = []
        self.sees_image_path = True
        self.while_dumping: Callable[[], None] | None = None
        # Cleared, it answers no pause, resume, ... until set: a stopped node agent (a
        # suspended job's). Its orders still arrive, and are carried out in turn.
        self.awake = threading.Event()
        self.awake.set()
        self.to_say: queue.Queue[dict[str, Any]] = queue.Queue()

    def say(self, message: dict[str, Any]) -> None:
        """Send the anchor a message of the agent's own (its container's exit, say)."""
        self.to_say.put(message)

    def run(self) -> None:
        link = peer.dial("127.0.0.1", self.port, self.secret, timeout=5)
        link.sock.setblocking(True)
        link.sock.settimeout(10)
        link.send_message({"op": "agent-hello", "task": "0", "node": "n1", "step": "0", "tasks": 1}, 5)
        if self.running:
            link.send_message({"event": "running"}, 5)
        try:
            while True:
                while not self.to_say.empty():
                    link.send_message(self.to_say.get(), 5)
                if not link.early and not _readable(link, 0.05):
                    continue
                for order in peer.messages(link.receive()):
                    self.orders.append(order["op"])
                    if order["op"] in RULES:
                        self.awake.wait()
                        link.send_message({"event": "ordered", "order": order["op"],
                                           "error": None}, 5)
                    elif order["op"] == "checkpoint":
                        error = self._checkpoint(link, order)
                        if self.while_dumping is not None:
                            self.while_dumping()
                        link.send_message({"event": "checkpointed", "error": error}, 5)
        except peer.PeerGone:
            pass  # the anchor closed the channel: the test is over
        link.close()

    def _checkpoint(self, link: peer.Peer, order: dict[str, Any]) -> str | None:
        """As CRIU dumps: one of its files written (or rewritten), and its log."""
        if self.sees_image_path:
            Path(order["image_path"], "pages-1.img").write_text("dumped")
            return None
        local = os.path.join(self.node_dir, LOCAL_DIR)
        here = local_order(order, local)
        try:
            for directory, name in ((task_image_dir(here["image_path"], "0"), "pages-1.img"),
                                    (task_work_dir(here, "0"), "dump.log")):
                Path(directory).mkdir(parents=True)
                Path(directory, name).write_text("dumped")
            files.send_all(link, files.tree_frames(task_image_dir(here["image_path"], "0"),
                                                   "image"))
            files.send_all(link, files.tree_frames(task_work_dir(here, "0"), "work"))
        except ChannelError as err:
            return str(err)
        finally:
            remove_tree(local)
        return None


def _readable(link: peer.Peer, timeout: float) -> bool:
    with poller.Poller() as selector:
        selector.register(link.sock, poller.READ)
        return bool(selector.select(timeout))


class Harness:
    """An anchor past create whose container is in status, with its agent connected
    (and, if running, its container reported running; otherwise the agent says so
    when told to)."""

    def __init__(self, tmp_path: Path, status: str, running: bool = True) -> None:
        self.root = str(tmp_path / "root")
        store = Store(self.root)
        # No Slurm: what scrun reads beside the slurm.conf it is given (missing) says so.
        self.slurm_conf = str(tmp_path / "slurm.conf")
        (tmp_path / "pyscrun.conf").write_text("Backend=local\n")
        site = Site(self.slurm_conf, ociconf.load(str(tmp_path / "oci.conf")),
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
        self.agent = Agent(anchor.agent_port.port, anchor.secret, str(tmp_path / "node"),
                           running)
        self.agent.start()
        self.serve_until(anchor.agents.all_running if running
                         else lambda: bool(anchor.agents.connected))

    def serve_until(self, done: Callable[[], bool]) -> None:
        """The anchor's loop (daemon.py _serve) until done: an error it lets out fails
        the test, as it would have ended the anchor and its container."""
        deadline = time.monotonic() + 10
        while not done():
            assert time.monotonic() < deadline, "the anchor did not get there in 10 s"
            for key, events in self.anchor.selector.select(0.05):
                self.anchor._dispatch(key, events)
            if self.anchor.waiting_orders:
                self.anchor._give_waiting_orders(time.monotonic())
            self.anchor._expire_task_order(time.monotonic())
            self.anchor._rearm()

    def scrun(self, verb: str, *options: str) -> int:
        """`scrun --root ROOT VERB [OPTIONS] c1` as podman runs it, while the anchor
        serves; its exit status (what it says goes to stderr)."""
        status: list[int] = []
        argv = ["--root", self.root, "-f", self.slurm_conf, verb, *options, ID]
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

    def runs_on(self) -> None:
        """The agent's link is up, nothing was killed, and the container runs on until it
        ends by itself, with its own status."""
        agents = self.anchor.agents
        assert [link.task for link in agents.connected] == ["0"]
        assert agents.given == []
        assert self.ask({"op": "state"})["state"]["status"] == RUNNING
        self.agent.say({"event": "exit", "status": 3})
        self.serve_until(lambda: bool(agents.exit_statuses))
        assert agents.exit_statuses == [3]
        assert agents.unreported() == 0

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
        self.agent.awake.set()
        self.agent.join(10)
