"""A state file the anchor cannot write (a full disk, a file system gone read-only)
fails the request that changed the state, not the anchor: the CLI says why in one line
and exits non-zero, the anchor goes on serving, and what it holds is what the tasks did.

A real anchor (its control socket and agents' port, served as its loop serves them),
a node agent on loopback that does every order, and scrun's own verbs as podman runs
them. The fault is real and stops root too: a directory where the state's temporary
file is to be written (fs.write_atomic) fails the save with EISDIR, while the state
file and the control socket the CLI uses stay as they were.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from pyscrun import log
from pyscrun.anchor import protocol
from pyscrun.anchor.agent_port import AgentPort
from pyscrun.anchor.control import ControlSocket
from pyscrun.anchor.daemon import Anchor
from pyscrun.anchor.request import CreateRequest
from pyscrun.anchor.stand_in import StandIn
from pyscrun.anchor.store import STATE_FILE, Store
from pyscrun.anchor.task_orders import RULES
from pyscrun.backends.base import Allocation
from pyscrun.channel import peer
from pyscrun.cli import main
from pyscrun.conf import ociconf
from pyscrun.conf.site import PyscrunConf, Site
from pyscrun.leave import exit_status_of
from pyscrun.oci.bundle import Bundle
from pyscrun.oci.state import CREATED, PAUSED, RUNNING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

ID = "c1"


class Agent(threading.Thread):
    """Task 0's node agent: says hello, reports its container running and does every
    pause, resume, ... it is ordered; the orders it got, in turn."""

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


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Harness]]:
    # The CLI configures the process's logger: the next test gets its own back.
    monkeypatch.setattr(log, "current", log.current)
    made: list[Harness] = []

    def make(status: str) -> Harness:
        made.append(Harness(tmp_path, status))
        return made[-1]

    yield make
    for one in made:
        one.close()


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
