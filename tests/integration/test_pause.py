"""pause and resume (podman pause/unpause): every task frozen and thawed, runc's refusals.

pause, resume and update are root's here: on this cgroup v1 host a rootless container
has no cgroup of its own to freeze or limit (podman refuses them to an ordinary user)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import runtime_on
from tests.integration.harness import IMAGE, Cluster, Runtime, podman, wait_for
from tests.integration.reliability import agent_pids

COUNTER = "i=0; while true; do i=$((i+1)); echo $i; sleep 0.2; done"


def _counts(runtime: Runtime, name: str) -> list[int]:
    logs = podman(runtime, "logs", name).stdout.decode()
    return [int(n) for n in re.findall(r"^(\d+)$", logs, re.M)]


def _status(runtime: Runtime, name: str) -> str:
    return podman(runtime, "inspect", "--format", "{{.State.Status}}", name).stdout.decode().strip()


def test_pause_stops_the_count_and_unpause_goes_on_from_there(root_runtime: Runtime) -> None:
    name = f"p{uuid.uuid4().hex[:8]}"
    started = podman(root_runtime, "run", "-d", "--name", name, IMAGE, "sh", "-c", COUNTER)
    assert started.returncode == 0, started.stderr
    try:
        wait_for(lambda: len(_counts(root_runtime, name)) >= 3, 60, "the count to start")
        paused = podman(root_runtime, "pause", name)
        assert paused.returncode == 0, paused.stderr
        assert _status(root_runtime, name) == "paused"
        time.sleep(0.5)  # a line on its way when the freeze came
        frozen = len(_counts(root_runtime, name))
        time.sleep(1.5)
        assert len(_counts(root_runtime, name)) == frozen, "the count went on while paused"
        resumed = podman(root_runtime, "unpause", name)
        assert resumed.returncode == 0, resumed.stderr
        assert _status(root_runtime, name) == "running"
        wait_for(lambda: len(_counts(root_runtime, name)) >= frozen + 3, 30, "the count to go on")
        counts = _counts(root_runtime, name)
        assert counts == list(range(1, len(counts) + 1)), "the count did not go on from where it was"
    finally:
        removed = podman(root_runtime, "rm", "-f", "-t", "0", name)
    assert removed.returncode == 0, removed.stderr


def test_runc_refusals_leave_the_container_as_it_was(root_runtime: Runtime) -> None:
    name = f"p{uuid.uuid4().hex[:8]}"
    assert podman(root_runtime, "run", "-d", "--name", name, IMAGE, "sleep", "1000").returncode == 0
    container_id = podman(root_runtime, "inspect", "--format", "{{.Id}}", name).stdout.decode().strip()
    try:
        wait_for(lambda: _status(root_runtime, name) == "running", 30, "the container to run")
        resumed = root_runtime.scrun("resume", container_id)
        assert resumed.returncode == 1 and "container not paused" in resumed.stderr
        assert root_runtime.scrun("pause", container_id).returncode == 0
        again = root_runtime.scrun("pause", container_id)
        assert again.returncode == 1 and "container not running" in again.stderr
        state = json.loads(root_runtime.scrun("state", container_id).stdout)
        assert state["status"] == "paused"
    finally:
        # A paused container is removed as any other: thawed, then killed.
        removed = podman(root_runtime, "rm", "-f", "-t", "0", name)
    assert removed.returncode == 0, removed.stderr


def test_podman_update_memory_reaches_the_container(root_runtime: Runtime) -> None:
    name = f"u{uuid.uuid4().hex[:8]}"
    watch = "while true; do cat /sys/fs/cgroup/memory/memory.limit_in_bytes; sleep 0.2; done"
    assert podman(root_runtime, "run", "-d", "--name", name, IMAGE, "sh", "-c", watch).returncode == 0
    try:
        wait_for(lambda: podman(root_runtime, "logs", name).stdout.strip() != b"", 60,
                 "the container to report its memory limit")
        updated = podman(root_runtime, "update", "--memory", "64m", name)
        assert updated.returncode == 0, updated.stderr
        wait_for(lambda: b"67108864" in podman(root_runtime, "logs", name).stdout, 30,
                 "the new memory limit in the container's cgroup")
    finally:
        podman(root_runtime, "rm", "-f", "-t", "0", name)
    bad = root_runtime.scrun("update", "--memory", "lots", "x")
    assert bad.returncode == 2 and "needs a size" in bad.stderr


def test_ps_lists_every_process_of_the_container(runtime: Runtime) -> None:
    tag = str(920000 + uuid.uuid4().int % 79999)
    name = f"s{uuid.uuid4().hex[:8]}"
    assert podman(runtime, "run", "-d", "--name", name, IMAGE, "sh", "-c",
                  f"sleep {tag} & sleep {int(tag) + 1}").returncode == 0
    container_id = podman(runtime, "inspect", "--format", "{{.Id}}", name).stdout.decode().strip()
    try:
        wait_for(lambda: _status(runtime, name) == "running", 30, "the container to run")
        time.sleep(1)
        listed = runtime.scrun("ps", "--format", "json", container_id)
        assert listed.returncode == 0, listed.stderr
        pids = json.loads(listed.stdout)
        if runtime.slurm_conf.exists():
            # Through Slurm the tasks' pids are the nodes': what stands for them is
            # the stand-in, the pid podman has.
            stand_in = podman(runtime, "inspect", "--format", "{{.State.Pid}}", name)
            assert pids == [int(stand_in.stdout)]
        else:
            commands = {Path(f"/proc/{pid}/cmdline").read_bytes() for pid in pids}
            assert {f"sleep\0{tag}\0".encode(), f"sleep\0{int(tag) + 1}\0".encode()} <= commands
        table = runtime.scrun("ps", container_id)
        assert table.returncode == 0 and table.stdout.startswith("UID")
    finally:
        podman(runtime, "rm", "-f", "-t", "0", name)


@pytest.fixture
def root_through_slurm(cluster: Cluster, tmp_path: Path) -> Iterator[Runtime]:
    with runtime_on("slurm", "built-in", cluster, tmp_path) as made:
        yield made


def test_a_pause_the_stopped_node_agent_cannot_answer_fails_and_is_taken_back(
        root_through_slurm: Runtime) -> None:
    """The node agent stopped (as a job's suspension stops it, if it comes just as the
    pause goes out): podman pause fails, saying which task did not answer, and the
    container is not left paused once the agent goes on."""
    runtime = root_through_slurm
    name = f"p{uuid.uuid4().hex[:8]}"
    started = podman(runtime, "run", "-d", "--name", name, IMAGE, "sh", "-c", COUNTER)
    assert started.returncode == 0, started.stderr
    try:
        wait_for(lambda: len(_counts(runtime, name)) >= 3, 60, "the count to start")
        [agent] = agent_pids(runtime)
        os.kill(agent, signal.SIGSTOP)
        try:
            paused = podman(runtime, "pause", name, timeout=60)
        finally:
            os.kill(agent, signal.SIGCONT)
        assert paused.returncode != 0
        said = paused.stderr.decode()
        assert "task 0: its node agent did not answer within 20 s" in said, said
        assert _status(runtime, name) == "running"
        at_continue = len(_counts(runtime, name))
        wait_for(lambda: len(_counts(runtime, name)) >= at_continue + 5, 30,
                 "the count to go on once the agent went on")
        assert podman(runtime, "pause", name).returncode == 0
        assert _status(runtime, name) == "paused"
        assert podman(runtime, "unpause", name).returncode == 0
    finally:
        removed = podman(runtime, "rm", "-f", "-t", "0", name)
    assert removed.returncode == 0, removed.stderr
