"""A container whose job waits in the queue: the caller is told, with the job id, and
giving up (SIGTERM to the anchor, Ctrl-C, delete, podman rm -f) withdraws the job at
once and leaves nothing."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import IMAGE, Runtime, make_bundle, podman_env, slurm, wait_for
from tests.integration.reliability import job_state

WITHDRAWN_WITHIN = 10.0


@pytest.fixture
def held_job(slurm_runtime: Runtime) -> Iterator[str]:
    """A held job of the test cluster: a container depending on it stays queued."""
    conf = slurm_runtime.slurm_conf.resolve()
    done = slurm(conf, "sbatch", "--hold", "--parsable", "-J", "pyscrun-held", "--wrap", "true")
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    yield job
    slurm(conf, "scancel", job)


def _queued_job(said: Path) -> str:
    def queued() -> bool:
        return "queued and waiting for resources" in said.read_text(errors="replace")

    wait_for(queued, 60, "scrun to say that the job is queued")
    found = re.search(r"scrun: job (\d+) queued and waiting for resources", said.read_text())
    assert found, said.read_text()
    return found.group(1)


@pytest.mark.parametrize("how", ["SIGTERM to the anchor", "Ctrl-C", "delete --force"])
def test_a_queued_create_says_so_and_gives_the_job_up_at_once(
        slurm_runtime: Runtime, held_job: str, tmp_path: Path, how: str) -> None:
    conf = slurm_runtime.slurm_conf.resolve()
    bundle = make_bundle(tmp_path, ["true"])
    said = tmp_path / "create.err"
    with open(said, "wb") as err:
        create = subprocess.Popen(
            [str(slurm_runtime.wrapper), "create", "-b", str(bundle), "q1"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            env={**os.environ, "SCRUN_DEPENDENCY": f"afterok:{held_job}"})
    try:
        job = _queued_job(said)
        assert job_state(conf, job) == "PENDING"
        started = time.monotonic()
        if how == "SIGTERM to the anchor":
            os.kill(slurm_runtime.anchor_pid("q1"), signal.SIGTERM)
        elif how == "Ctrl-C":
            create.send_signal(signal.SIGINT)
        else:
            deleted = slurm_runtime.scrun("delete", "--force", "q1")
            assert deleted.returncode == 0, deleted.stderr
        assert create.wait(WITHDRAWN_WITHIN + 5) != 0
        wait_for(lambda: job_state(conf, job) in ("", "CANCELLED"), WITHDRAWN_WITHIN,
                 "the queued job to be withdrawn")
        assert time.monotonic() - started < WITHDRAWN_WITHIN
        assert not (slurm_runtime.root / "q1").exists()
    finally:
        if create.poll() is None:
            create.kill()
            create.wait()


def test_podman_rm_of_a_container_whose_job_is_queued(slurm_runtime: Runtime, held_job: str,
                                                      tmp_path: Path) -> None:
    conf = slurm_runtime.slurm_conf.resolve()
    said = tmp_path / "podman.err"
    with open(said, "wb") as err:
        run = subprocess.Popen(
            ["podman", "--runtime", str(slurm_runtime.wrapper), "run", "--rm", "--name", "queued",
             "-e", f"SCRUN_DEPENDENCY=afterok:{held_job}", IMAGE, "true"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=podman_env())
    try:
        job = _queued_job(said)
        started = time.monotonic()
        removed = subprocess.run(["podman", "--runtime", str(slurm_runtime.wrapper), "rm", "-f",
                                  "-t", "0", "queued"], capture_output=True, env=podman_env(),
                                 timeout=60, check=False)
        assert removed.returncode == 0, removed.stderr
        assert run.wait(WITHDRAWN_WITHIN + 5) != 0
        wait_for(lambda: job_state(conf, job) in ("", "CANCELLED"), WITHDRAWN_WITHIN,
                 "the queued job to be withdrawn")
        assert time.monotonic() - started < WITHDRAWN_WITHIN
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
