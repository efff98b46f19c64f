"""A container whose job Slurm suspends (`scontrol suspend`, what preemption does in a
partition with PreemptMode=SUSPEND): it stops with its job and goes on where it was
once the job is resumed, and podman can still end it while it is suspended. An
ordinary user's rootless podman, on the cluster of separate machines."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.accounts import USER, account
from tests.integration.conftest import runtime_on
from tests.integration.harness import (
    IMAGE,
    Cluster,
    Runtime,
    podman,
    podman_ok,
    slurm,
    slurm_jobs,
    wait_for,
)
from tests.integration.reliability import job_state

# Each line: the count and the second it was written at.
COUNTER = "i=0; while true; do i=$((i+1)); echo \"$i $(date +%s)\"; sleep 0.2; done"
# How long the tests keep the job suspended.
SUSPENDED_FOR = 8.0


@pytest.fixture(params=["built-in", "create-start"])
def user(request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path) -> Iterator[Runtime]:
    """The user's podman, its containers run by `runc run` (the built-in oci.conf), or
    by runc's create and start (Slurm's other mode)."""
    with runtime_on("slurm", request.param, cluster, tmp_path, account(USER)) as made:
        yield made


@pytest.fixture
def root(cluster: Cluster, tmp_path: Path) -> Iterator[Runtime]:
    """root's podman through Slurm: pause and checkpoint are root's (a rootless
    container has no cgroup of its own on this cgroup v1 host, and CRIU needs root)."""
    with runtime_on("slurm", "built-in", cluster, tmp_path) as made:
        yield made


def _lines(runtime: Runtime, cid: str) -> list[tuple[int, int]]:
    """(count, second) of each line the container wrote so far."""
    logs = podman_ok(runtime, "logs", cid)
    return [(int(n), int(s)) for n, s in re.findall(r"^(\d+) (\d+)$", logs, re.M)]


def _the_job(runtime: Runtime) -> str:
    jobs = [line.split()[0] for line in slurm_jobs(runtime.slurm_conf.resolve())]
    assert len(jobs) == 1, jobs
    return jobs[0]


def _suspended_counter(runtime: Runtime) -> tuple[str, str]:
    """A counting container, counting, whose job has just been suspended: its id and
    its job's."""
    cid = podman_ok(runtime, "run", "-d", IMAGE, "sh", "-c", COUNTER).strip()
    wait_for(lambda: len(_lines(runtime, cid)) >= 5, 60, "the container to count")
    job = _the_job(runtime)
    conf = runtime.slurm_conf.resolve()
    done = slurm(conf, "scontrol", "suspend", job)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: job_state(conf, job) == "SUSPENDED", 10, f"job {job} to be suspended")
    return cid, job


def test_a_suspended_jobs_container_stops_and_goes_on_once_resumed(user: Runtime) -> None:
    cid, job = _suspended_counter(user)
    time.sleep(SUSPENDED_FOR)
    conf = user.slurm_conf.resolve()
    done = slurm(conf, "scontrol", "resume", job)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: job_state(conf, job) == "RUNNING", 10, f"job {job} to run again")
    assert podman_ok(user, "inspect", cid, "--format", "{{.State.Status}}").strip() == "running"
    at_resume = _lines(user, cid)[-1][0]
    wait_for(lambda: _lines(user, cid)[-1][0] >= at_resume + 10, 30, "the count to go on")
    lines = _lines(user, cid)
    counts = [count for count, _ in lines]
    assert counts == list(range(1, len(counts) + 1)), counts
    # The container itself stood still, not only its output: Slurm stops the step's
    # processes a moment after the job's suspension (SIGTSTP first, then SIGSTOP).
    longest_pause = max(b - a for (_, a), (_, b) in itertools.pairwise(lines))
    assert longest_pause >= SUSPENDED_FOR - 4, lines
    podman_ok(user, "rm", "-f", "-t", "0", cid)
    wait_for(lambda: not job_state(conf, job).startswith(("RUNNING", "SUSPENDED")), 30,
             f"job {job} to end with the container")


def test_podman_stop_ends_a_container_whose_job_is_suspended(user: Runtime) -> None:
    """Its node agent is stopped with the job: the stop's SIGKILL reaches the container
    through Slurm, as scancel's would, in time for podman."""
    cid, job = _suspended_counter(user)
    time.sleep(SUSPENDED_FOR)  # Slurm's SIGSTOP has reached every process of the step
    done = podman(user, "stop", "-t", "1", cid)
    assert done.returncode == 0, done.stderr.decode()
    assert podman_ok(user, "inspect", cid, "--format", "{{.State.ExitCode}}").strip() == "137"
    assert any(f"Slurm kills step {job}." in line for line in user.log_errors()), \
        user.log_errors()
    conf = user.slurm_conf.resolve()
    wait_for(lambda: job_state(conf, job) in ("", "COMPLETED", "CANCELLED"), 30,
             f"job {job} to end with the container")
    podman_ok(user, "rm", cid)


def test_exec_in_a_container_whose_job_is_suspended_is_refused_in_one_line(
        user: Runtime) -> None:
    """As runc refuses to exec in a paused container: srun would wait for the job's
    resumption, silently. Once resumed, exec works again."""
    cid, job = _suspended_counter(user)
    done = podman(user, "exec", cid, "echo", "hi", timeout=60)
    assert done.returncode != 0
    said = done.stderr.decode()
    assert f"cannot exec in a container whose job {job} is suspended" in said, said
    conf = user.slurm_conf.resolve()
    steps = slurm(conf, "squeue", "-h", "-s", "-j", job, "-o", "%j").stdout.split()
    assert "scrun-exec" not in steps, steps
    done = slurm(conf, "scontrol", "resume", job)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: job_state(conf, job) == "RUNNING", 10, f"job {job} to run again")
    assert podman_ok(user, "exec", cid, "echo", "hi") == "hi"
    podman_ok(user, "rm", "-f", "-t", "0", cid)


def test_pause_and_checkpoint_of_a_suspended_jobs_container_are_refused_in_one_line(
        root: Runtime, tmp_path: Path) -> None:
    """Its node agents are stopped with the job: a pause would wait for the job's
    resumption and come whenever it did, a checkpoint would hang until then. Each is
    refused at once, the container left as it was; once resumed, both work."""
    cid, job = _suspended_counter(root)
    for verb in (("pause",), ("container", "checkpoint")):
        done = podman(root, *verb, cid, timeout=60)
        assert done.returncode != 0
        said = done.stderr.decode()
        assert f"a container whose job {job} is suspended" in said, said
    assert podman_ok(root, "inspect", cid, "--format", "{{.State.Status}}") == "running"
    conf = root.slurm_conf.resolve()
    done = slurm(conf, "scontrol", "resume", job)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: job_state(conf, job) == "RUNNING", 10, f"job {job} to run again")
    # Nothing refused was carried out on the resumption.
    assert podman_ok(root, "inspect", cid, "--format", "{{.State.Status}}") == "running"
    at_resume = _lines(root, cid)[-1][0]
    wait_for(lambda: _lines(root, cid)[-1][0] >= at_resume + 3, 30, "the count to go on")
    podman_ok(root, "pause", cid)
    podman_ok(root, "unpause", cid)
    archive = tmp_path / "counter.tar.gz"
    podman_ok(root, "container", "checkpoint", "--export", str(archive), cid)
    assert archive.stat().st_size > 0
    podman_ok(root, "rm", "-f", "-t", "0", cid)
