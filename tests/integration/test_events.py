"""events (runc's `events --stats` and `--interval`): the container's figures, read on
the node of each task and summed, for whoever watches the container from the login side.

The figures come from the container's cgroup: root's containers here (a rootless one has
no cgroup of its own on this cgroup v1 host, and its figures are all zero)."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from tests.integration.harness import IMAGE, Runtime, podman, wait_for

# Three processes in each task: the shell and two sleeps.
THREE = "sleep 1000 & sleep 1001 & wait"


def _run(runtime: Runtime, *options: str) -> tuple[str, str]:
    name = f"e{uuid.uuid4().hex[:8]}"
    started = podman(runtime, "run", "-d", "--name", name, *options, IMAGE, "sh", "-c", THREE)
    assert started.returncode == 0, started.stderr
    container_id = podman(runtime, "inspect", "--format", "{{.Id}}", name).stdout.decode().strip()
    return name, container_id


def _figures(runtime: Runtime, container_id: str) -> dict[str, object]:
    done = runtime.scrun("events", "--stats", container_id)
    assert done.returncode == 0, done.stderr
    line = json.loads(done.stdout)
    assert line["type"] == "stats" and line["id"] == container_id
    data: dict[str, object] = line["data"]
    return data


def _pids(figures: dict[str, object]) -> int:
    return int(figures["pids"]["current"])  # type: ignore[index]


def test_stats_give_the_containers_own_figures(root_runtime: Runtime) -> None:
    name, container_id = _run(root_runtime)
    try:
        wait_for(lambda: _pids(_figures(root_runtime, container_id)) == 3, 30,
                 "the container's three processes in its figures")
        figures = _figures(root_runtime, container_id)
        assert figures["memory"]["usage"]["usage"] > 0  # type: ignore[index]
        assert figures["cpu"]["usage"]["total"] > 0  # type: ignore[index]
    finally:
        podman(root_runtime, "rm", "-f", "-t", "0", name)
    gone = root_runtime.scrun("events", "--stats", container_id)
    assert gone.returncode == 1 and "does not exist" in gone.stderr, gone.stderr


@pytest.mark.nodes(3)
def test_the_figures_of_three_tasks_on_three_nodes_add_up(slurm_runtime: Runtime) -> None:
    name, container_id = _run(slurm_runtime, "-e", "SCRUN_JOB_NUM_NODES=3", "-e", "SCRUN_NTASKS=3")
    try:
        wait_for(lambda: _pids(_figures(slurm_runtime, container_id)) == 9, 60,
                 "nine processes: three in each task")
    finally:
        podman(slurm_runtime, "rm", "-f", "-t", "0", name)


def test_events_print_figures_every_interval_until_the_container_ends(local_runtime: Runtime,
                                                                       ) -> None:
    name, container_id = _run(local_runtime)
    try:
        wait_for(lambda: _pids(_figures(local_runtime, container_id)) == 3, 30,
                 "the container to run")
        watching = subprocess.Popen([str(local_runtime.wrapper), "events", "--interval", "200ms",
                                     container_id], stdout=subprocess.PIPE, text=True)
        assert watching.stdout is not None
        lines = [json.loads(watching.stdout.readline()) for _ in range(3)]
        assert all(line["type"] == "stats" and line["id"] == container_id for line in lines)
        stopped = podman(local_runtime, "stop", "-t", "1", name)
        assert stopped.returncode == 0, stopped.stderr
        assert watching.wait(timeout=30) == 0
        # Stopped (or already deleted by podman's clean-up): runc's refusal either way.
        ended = local_runtime.scrun("events", "--stats", container_id)
        assert ended.returncode == 1, ended.stdout
        assert "container not running" in ended.stderr or "does not exist" in ended.stderr
    finally:
        podman(local_runtime, "rm", "-f", "-t", "0", name)
    bad = local_runtime.scrun("events", "--interval", "soon", container_id)
    assert bad.returncode == 2 and "invalid --interval" in bad.stderr
