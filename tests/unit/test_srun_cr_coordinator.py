"""srun_cr's checkpoint logic without processes: all or nothing, and the directory."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from pyscrun.errors import CheckpointError
from pyscrun.srun_cr import images
from pyscrun.srun_cr.coordinator import WAIT_FOR_TASKS, Coordinator, Request


class Peer:
    """A launcher or requester: what srun_cr sent it."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []

    def __call__(self, message: dict[str, Any]) -> None:
        self.got.append(message)

    def ops(self) -> list[str]:
        return [str(m.get("op")) for m in self.got]


def _step(tmp_path: Path, ntasks: int = 3) -> tuple[Coordinator, list[Peer]]:
    coordinator = Coordinator(["prog", "a"], str(tmp_path), {})
    peers = []
    for rank in range(ntasks):
        peer = Peer()
        coordinator.hello({"op": "hello", "job": "7", "step": "0", "rank": rank,
                           "ntasks": ntasks, "node": f"n{rank + 1}", "pid": 100 + rank}, peer)
        peers.append(peer)
    return coordinator, peers


def _dump_all(coordinator: Coordinator, peers: list[Peer], failing: dict[int, str] | None = None,
              ) -> None:
    for rank, peer in enumerate(peers):
        order = peer.got[-1]
        assert order["op"] == "dump"
        error = (failing or {}).get(rank)
        if error is None:
            os.mkdir(images.task_dir(order["dir"], rank))
        coordinator.message(rank, {"op": "dumped", "ok": error is None, "error": error})


def test_checkpoint_writes_manifest_only_when_every_task_is_dumped(tmp_path: Path) -> None:
    coordinator, peers = _step(tmp_path)
    client = Peer()
    coordinator.request(Request(str(tmp_path / "ck"), False, client))
    assert all(p.ops() == ["dump"] for p in peers)
    assert not (tmp_path / "ck").exists()
    _dump_all(coordinator, peers)
    assert client.got == [{"ok": True, "step": "7.0", "dir": str(tmp_path / "ck")}]
    manifest = json.loads((tmp_path / "ck" / "manifest.json").read_text())
    assert manifest["tasks"] == 3 and manifest["nodes"] == ["n1", "n2", "n3"]
    assert manifest["command"] == ["prog", "a"] and manifest["job"] == "7"
    # Left running: no second phase.
    assert all(p.ops() == ["dump"] for p in peers)
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]


def test_one_failed_task_fails_the_whole_checkpoint_and_resumes_stopped_tasks(tmp_path: Path,
                                                                              ) -> None:
    coordinator, peers = _step(tmp_path)
    client = Peer()
    coordinator.request(Request(str(tmp_path / "ck"), True, client))
    _dump_all(coordinator, peers, failing={1: "criu dump failed: no"})
    assert client.got[0]["ok"] is False
    assert "task 1 (n2): criu dump failed: no" in client.got[0]["error"]
    assert list(tmp_path.iterdir()) == []  # no partial images left
    assert all(p.got[-1] == {"op": "finish", "action": "resume"} for p in peers)


def test_stop_kills_after_a_complete_checkpoint(tmp_path: Path) -> None:
    coordinator, peers = _step(tmp_path, 2)
    coordinator.request(Request(str(tmp_path / "ck"), True, Peer()))
    _dump_all(coordinator, peers)
    assert all(p.got[-1] == {"op": "finish", "action": "kill"} for p in peers)
    assert json.loads((tmp_path / "ck" / "manifest.json").read_text())["stopped"] is True


def test_new_checkpoint_replaces_the_previous_one(tmp_path: Path) -> None:
    coordinator, peers = _step(tmp_path, 1)
    for _ in range(2):
        client = Peer()
        coordinator.request(Request(str(tmp_path / "ck"), False, client))
        _dump_all(coordinator, peers)
        assert client.got[0]["ok"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_task_ending_during_checkpoint_fails_it(tmp_path: Path) -> None:
    coordinator, _ = _step(tmp_path, 2)
    client = Peer()
    coordinator.request(Request(str(tmp_path / "ck"), False, client))
    coordinator.gone(1)
    coordinator.message(0, {"op": "dumped", "ok": True})
    assert "task 1 (n2): the task ended" in client.got[0]["error"]
    later = Peer()
    coordinator.request(Request(str(tmp_path / "ck"), False, later))
    assert "have ended" in later.got[0]["error"]


def test_a_task_that_ends_once_it_has_dumped_is_still_in_the_checkpoint(tmp_path: Path) -> None:
    """Its images were taken with the others': a restart runs every task, not the ones
    still running when the last dump came in."""
    coordinator, peers = _step(tmp_path)
    client = Peer()
    coordinator.request(Request(str(tmp_path / "ck"), False, client))
    directory = peers[0].got[-1]["dir"]
    os.mkdir(images.task_dir(directory, 0))
    coordinator.message(0, {"op": "dumped", "ok": True})
    coordinator.gone(0)  # its program exits right after its dump
    for rank in (1, 2):
        os.mkdir(images.task_dir(directory, rank))
        coordinator.message(rank, {"op": "dumped", "ok": True})
    assert client.got == [{"ok": True, "step": "7.0", "dir": str(tmp_path / "ck")}]
    checkpoint = images.Checkpoint.load(str(tmp_path / "ck"))
    assert checkpoint.tasks == 3 and checkpoint.nodes == ["n1", "n2", "n3"]


def test_request_waits_for_tasks_to_report_then_times_out(tmp_path: Path) -> None:
    coordinator = Coordinator(["x"], str(tmp_path), {})
    client = Peer()
    coordinator.request(Request(None, False, client))
    assert client.got == []
    deadline = coordinator.next_deadline()
    assert deadline is not None
    coordinator.tick(deadline + 1)
    assert "only 0 of ? task(s)" in client.got[0]["error"]


def test_a_request_behind_a_long_checkpoint_waits_for_it(tmp_path: Path) -> None:
    coordinator, peers = _step(tmp_path, 2)
    first, second = Peer(), Peer()
    coordinator.request(Request(str(tmp_path / "ck1"), False, first))
    coordinator.request(Request(str(tmp_path / "ck2"), False, second))
    assert coordinator.next_deadline() is None  # nothing to wait for but the dump
    coordinator.tick(time.monotonic() + WAIT_FOR_TASKS + 60)
    assert second.got == []
    _dump_all(coordinator, peers)
    assert first.got[0]["ok"] and second.got == []
    _dump_all(coordinator, peers)
    assert second.got == [{"ok": True, "step": "7.0", "dir": str(tmp_path / "ck2")}]


def test_pending_request_starts_when_the_last_task_reports(tmp_path: Path) -> None:
    coordinator = Coordinator(["x"], str(tmp_path), {})
    client = Peer()
    coordinator.request(Request(None, False, client))
    peers = []
    for rank in range(2):
        peer = Peer()
        coordinator.hello({"job": "9", "step": "1", "rank": rank, "ntasks": 2, "pid": 5}, peer)
        peers.append(peer)
    assert all(p.ops() == ["dump"] for p in peers)
    _dump_all(coordinator, peers)
    assert client.got[0]["dir"] == str(tmp_path / "srun_cr-9.1")


def test_unwritable_directory_is_a_clear_error(tmp_path: Path) -> None:
    coordinator, peers = _step(tmp_path, 1)
    (tmp_path / "file").write_text("")
    client = Peer()
    coordinator.request(Request(str(tmp_path / "file" / "ck"), False, client))
    assert "is not writable: Not a directory" in client.got[0]["error"]
    assert peers[0].ops() == []


def test_directory_with_other_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "data").write_text("")
    with pytest.raises(CheckpointError, match="not empty"):
        images.Staging(str(tmp_path / "ck"))


def test_restart_directory_checks(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        images.Checkpoint.load(str(tmp_path / "none"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"no manifest\.json"):
        images.Checkpoint.load(str(tmp_path / "empty"))
    ck = tmp_path / "ck"
    ck.mkdir()
    images.write_json(str(ck / images.MANIFEST),
                      images.make_manifest("1", "0", ["n1", "n2"], ["p"], "/", False))
    with pytest.raises(CheckpointError, match="lacks the images of task 0"):
        images.Checkpoint.load(str(ck))
    (ck / "task-0").mkdir()
    (ck / "task-1").mkdir()
    loaded = images.Checkpoint.load(str(ck))
    assert loaded.tasks == 2 and loaded.command == ["p"]
    with pytest.raises(CheckpointError, match="holds 2 task"):
        loaded.check_tasks(3)
