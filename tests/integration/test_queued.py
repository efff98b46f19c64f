"""A container whose job waits in the queue: create returns once the job is queued (so
that podman, which holds the container's lock until create returns, can stop or remove
it), the caller is told with the job id, the container starts when the job comes, and
giving up (SIGTERM to the anchor, delete, Ctrl-C on run, podman rm -f) withdraws the job
at once and leaves nothing.

As root: scrun's own command line, with bundles of root's, as runc's is used; what an
ordinary user's podman does is in the tests that run as one."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.accounts import podman_env
from tests.integration.harness import IMAGE, Runtime, make_bundle, slurm, wait_for
from tests.integration.reliability import job_state

WITHDRAWN_WITHIN = 10.0


@pytest.fixture
def held_job(slurm_runtime: Runtime) -> Iterator[str]:
    """A held job of the test cluster: a container depending on it stays queued."""
    conf = slurm_runtime.slurm_conf.resolve()
    done = slurm(conf, "sbatch", "--hold", "--parsable", "-J", "pyscrun-held",
                 "--output=/dev/null", "--wrap", "true")
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


def _withdrawn(conf: Path, job: str, since: float) -> None:
    wait_for(lambda: job_state(conf, job) in ("", "CANCELLED"), WITHDRAWN_WITHIN,
             "the queued job to be withdrawn")
    assert time.monotonic() - since < WITHDRAWN_WITHIN


@pytest.mark.parametrize("how", ["SIGTERM to the anchor", "SIGKILL to the anchor",
                                 "delete --force"])
def test_create_of_a_queued_job_returns_and_giving_up_withdraws_it(
        slurm_runtime: Runtime, held_job: str, tmp_path: Path, how: str) -> None:
    """SIGKILL runs none of the anchor's clean-up: the job is withdrawn all the same,
    before podman's clean-up (delete) comes, if it ever does."""
    conf = slurm_runtime.slurm_conf.resolve()
    bundle = make_bundle(tmp_path, ["true"])
    said = tmp_path / "create.err"
    with open(said, "wb") as err:
        created = subprocess.run(
            [str(slurm_runtime.wrapper), "create", "-b", str(bundle), "q1"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, timeout=60,
            env={**os.environ, "SCRUN_DEPENDENCY": f"afterok:{held_job}"}, check=False)
    assert created.returncode == 0, said.read_text()
    job = _queued_job(said)
    assert job_state(conf, job) == "PENDING"
    started = time.monotonic()
    if how == "delete --force":
        deleted = slurm_runtime.scrun("delete", "--force", "q1")
        assert deleted.returncode == 0, deleted.stderr
        _withdrawn(conf, job, started)
    else:
        os.kill(slurm_runtime.anchor_pid("q1"), getattr(signal, how.split()[0]))
        _withdrawn(conf, job, started)
        wait_for(lambda: '"stopped"' in slurm_runtime.scrun("state", "q1").stdout, 10, "stopped")
        assert slurm_runtime.scrun("delete", "q1").returncode == 0
    assert not (slurm_runtime.root / "q1").exists()


def test_ctrl_c_on_run_while_the_job_is_queued(slurm_runtime: Runtime, held_job: str,
                                               tmp_path: Path) -> None:
    conf = slurm_runtime.slurm_conf.resolve()
    bundle = make_bundle(tmp_path, ["true"])
    said = tmp_path / "run.err"
    with open(said, "wb") as err:
        run = subprocess.Popen(
            [str(slurm_runtime.wrapper), "run", "-b", str(bundle), "q2"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            env={**os.environ, "SCRUN_DEPENDENCY": f"afterok:{held_job}"})
    try:
        job = _queued_job(said)
        started = time.monotonic()
        run.send_signal(signal.SIGINT)
        assert run.wait(WITHDRAWN_WITHIN + 5) == 128 + signal.SIGINT
        _withdrawn(conf, job, started)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def _podman_run(runtime: Runtime, said: Path, held: str, *command: str) -> subprocess.Popen[bytes]:
    with open(said, "wb") as err:
        return subprocess.Popen(
            ["podman", "--runtime", str(runtime.wrapper), "run", "--rm", "--name", "queued",
             "-e", f"SCRUN_DEPENDENCY=afterok:{held}", IMAGE, *command],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=podman_env())


def test_podman_rm_of_a_container_whose_job_is_queued(slurm_runtime: Runtime, held_job: str,
                                                      tmp_path: Path) -> None:
    conf = slurm_runtime.slurm_conf.resolve()
    said = tmp_path / "podman.err"
    run = _podman_run(slurm_runtime, said, held_job, "true")
    try:
        # podman shows the container's stderr once it has started it.
        job = _queued_job(said)
        started = time.monotonic()
        removed = subprocess.run(["podman", "--runtime", str(slurm_runtime.wrapper), "rm", "-f",
                                  "-t", "0", "queued"], capture_output=True, env=podman_env(),
                                 timeout=60, check=False)
        assert removed.returncode == 0, removed.stderr
        assert run.wait(WITHDRAWN_WITHIN + 5) != 0
        _withdrawn(conf, job, started)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_a_queued_container_runs_once_its_job_comes(slurm_runtime: Runtime, held_job: str,
                                                    tmp_path: Path) -> None:
    conf = slurm_runtime.slurm_conf.resolve()
    said = tmp_path / "podman.err"
    run = _podman_run(slurm_runtime, said, held_job, "sh", "-c", "echo ran; exit 4")
    try:
        _queued_job(said)
        assert slurm(conf, "scontrol", "release", held_job).returncode == 0
        out, _ = run.communicate(timeout=120)
        assert (run.returncode, out) == (4, b"ran\n"), said.read_text()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_a_create_that_fails_after_asking_for_its_job_withdraws_it(
        slurm_runtime: Runtime, held_job: str, tmp_path: Path) -> None:
    """The anchor asks Slurm for the job before anything else: a create that fails
    after that (here a console socket nobody listens on) has withdrawn the queued job
    by the time it returns, rather than leave a salloc waiting for it."""
    conf = slurm_runtime.slurm_conf.resolve()
    bundle = make_bundle(tmp_path, ["sh"], terminal=True)
    nobody = tmp_path / "nobody.sock"
    created = subprocess.run(
        [str(slurm_runtime.wrapper), "create", "-b", str(bundle), "--console-socket",
         str(nobody), "q5"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
        env={**os.environ, "SCRUN_DEPENDENCY": f"afterok:{held_job}",
             "SCRUN_JOB_NAME": "pyscrun-q5"}, check=False)
    assert created.returncode != 0
    assert created.stderr.strip().splitlines() == [
        f"scrun: error: cannot hand the console to {nobody}: "
        "No such file or directory"], created.stderr
    queued = slurm(conf, "squeue", "-h", "-n", "pyscrun-q5", "-o", "%i %T")
    assert queued.returncode == 0, queued.stderr
    assert queued.stdout.split()[1:] in ([], ["CANCELLED"]), queued.stdout
    assert slurm_runtime.scrun("state", "q5").returncode != 0


def test_an_interrupt_heard_with_the_grant_gives_the_job_back_at_once(
        slurm_runtime: Runtime) -> None:
    """The grant and a Ctrl-C reach the anchor in one poll: the job, granted after all,
    is given back at once, salloc ends by itself, and its `cat` with it."""
    from pyscrun.backends.salloc import HeldAllocation
    from pyscrun.errors import BackendError

    conf = slurm_runtime.slurm_conf.resolve()
    held = HeldAllocation.start(["salloc", "--job-name=pyscrun-race", "--nodes=1"],
                                {**os.environ, "SLURM_CONF": str(conf)})
    try:
        wait_for(lambda: _children(held.pid) != [], 30, "salloc to be granted the job")
        job = slurm(conf, "squeue", "-h", "-n", "pyscrun-race", "-o", "%i").stdout.strip()
        assert job_state(conf, job) == "RUNNING"
        cat = _children(held.pid)
        interrupt_r, interrupt_w = os.pipe()
        os.write(interrupt_w, b"\0")  # readable, as salloc's "Granted": both in one poll
        since = time.monotonic()
        with pytest.raises(BackendError, match="interrupted"):
            held.await_job(30, interrupt_r)
        os.close(interrupt_r)
        os.close(interrupt_w)
        assert held.returncode is not None and not held.killed
        assert time.monotonic() - since < 5
        wait_for(lambda: job_state(conf, job) in ("", "COMPLETED", "CANCELLED"), 10,
                 f"job {job} to end")
        wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in cat), 5,
                 f"salloc's command {cat} to end")
    finally:
        if held.returncode is None:
            held.abandon()


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            return [int(word) for word in children.read().split()]
    except OSError:
        return []


def _group(pgid: int) -> list[str]:
    """The command lines of the processes of process group pgid."""
    listed = subprocess.run(["pgrep", "-a", "-g", str(pgid)], capture_output=True,
                            text=True, check=False)
    return listed.stdout.splitlines()


def test_a_queued_jobs_guard_goes_once_the_job_is_granted(
        slurm_runtime: Runtime, held_job: str) -> None:
    """While the job waits, a guard in salloc's process group stands ready to withdraw
    it should the anchor die; once the job is granted it goes, quietly (no SIGINT: a
    granted job is given back by `cat`'s end alone), and the job runs on."""
    from pyscrun.backends.salloc import HeldAllocation

    conf = slurm_runtime.slurm_conf.resolve()
    held = HeldAllocation.start(["salloc", "--job-name=pyscrun-guarded", "--nodes=1",
                                 f"--dependency=afterok:{held_job}"],
                                {**os.environ, "SLURM_CONF": str(conf)})
    try:
        held.await_job(30, queued_is_enough=True)
        assert not held.granted
        assert any("kill -s INT 0" in line for line in _group(held.pid)), _group(held.pid)
        assert slurm(conf, "scontrol", "release", held_job).returncode == 0
        held.await_job(30)
        assert held.granted
        assert job_state(conf, held.job_id) == "RUNNING"
        assert [line for line in _group(held.pid) if "kill -s INT 0" in line] == []
        time.sleep(0.5)  # a SIGINT to salloc would have ended the job by now
        assert job_state(conf, held.job_id) == "RUNNING"
        assert held.release()
    finally:
        if held.returncode is None:
            held.abandon()
