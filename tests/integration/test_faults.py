"""Faults: a killed node agent, slurmctld restarted or away, a node that dies, a job
cancelled from outside, signals to the anchor, a full disk. No hang, the right exit
code where there is one, and nothing left behind (the kill -9 of the anchor is in
test_slurm.py).

As root: scrun's own command line, with bundles of root's, as runc's is used; what an
ordinary user's podman does is in the tests that run as one.
Some faults (a killed slurmd, slurmctld restarted) need root anyway."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.harness import (
    IMAGE,
    OCI_CONFS,
    Cluster,
    Runtime,
    make_bundle,
    make_runtime,
    make_slurm_runtime,
    podman,
    require,
    slurm,
    wait_for,
)
from tests.integration.reliability import (
    ScopedLeakCheck,
    agent_pids,
    job_state,
    kill_node,
    kill_tree_at_once,
    local_agent_pids,
    podman_background,
    private_runtime,
    reboot_node,
    slurmd_pid,
    start_slurmctld,
    stop_slurmctld,
    wait_container_up,
    wait_running,
    with_root,
)

GATED = "echo started; while [ ! -e /gate/open ]; do sleep 0.1; done; echo done; exit 7"


def _finish(run: subprocess.Popen[bytes], timeout: float) -> tuple[int, bytes, bytes]:
    """podman's exit code and output; the test fails if it does not return in time."""
    try:
        out, err = run.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        run.kill()
        run.communicate()
        pytest.fail(f"podman did not return within {timeout} s")
    return run.returncode, out, err


def _stop(run: subprocess.Popen[bytes]) -> None:
    if run.poll() is None:
        run.kill()
        run.communicate()


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    """A directory the container sees as /gate: it ends once /gate/open exists."""
    path = tmp_path / "gate"
    path.mkdir()
    return path


class InJob:
    """A container podman runs through a 1-node cluster, once it is up."""

    def __init__(self, runtime: Runtime, conf: Path, state: dict[str, object],
                 run: subprocess.Popen[bytes]) -> None:
        self.runtime, self.conf, self.state, self.run = runtime, conf, state, run
        self.job = str(state["job_id"])


@contextmanager
def _container_in_job(cluster: Cluster, tmp_path: Path, *args: str, leak_timeout: float = 15.0,
                      before_stop: Callable[[], None] | None = None,
                      after_stop: Callable[[Path], None] | None = None) -> Iterator[InJob]:
    """`podman run --rm args` through a 1-node cluster, yielded once runc runs the
    container. Afterwards podman is stopped and nothing may be left."""
    conf = cluster.up(1)
    runtime = make_slurm_runtime(tmp_path, conf)
    leaks = ScopedLeakCheck(runtime, str(tmp_path), conf)
    run = podman_background(runtime, "run", "--rm", *args)
    try:
        state = wait_running(runtime)[0]
        wait_container_up(conf, str(state["job_id"]))
        yield InJob(runtime, conf, state, run)
    finally:
        if before_stop is not None:
            before_stop()
        _stop(run)
        if after_stop is not None:
            after_stop(conf)
    leaks.check(timeout=leak_timeout)


@contextmanager
def _gated_container(cluster: Cluster, tmp_path: Path, gate: Path, leak_timeout: float,
                     reboot: bool = False) -> Iterator[tuple[Path, str, subprocess.Popen[bytes]]]:
    """podman running GATED: yields the cluster's slurm.conf, the job and podman once the
    container is up. Afterwards the gate is opened and the node rebooted if asked."""
    with _container_in_job(
            cluster, tmp_path, "-v", f"{gate}:/gate", IMAGE, "sh", "-c", GATED,
            leak_timeout=leak_timeout, before_stop=(gate / "open").touch,
            after_stop=(lambda conf: reboot_node(conf, "n1")) if reboot else None) as it:
        yield it.conf, it.job, it.run


def _assert_gated_end(run: subprocess.Popen[bytes], timeout: float) -> None:
    """The gated container ran to its end and podman passed on its output and exit code."""
    code, out, err = _finish(run, timeout)
    assert code == 7, err
    assert out == b"started\ndone\n"


# -- the node agent -------------------------------------------------------------------

@pytest.mark.parametrize("mode", sorted(OCI_CONFS))
def test_kill_9_of_the_node_agent(cluster: Cluster, tmp_path: Path, mode: str) -> None:
    """The container is ended (its guard deletes it), podman gets a non-zero status at
    once, and no job, runc container or task dir is left."""
    conf = cluster.up(1)
    runtime = make_slurm_runtime(tmp_path, conf, OCI_CONFS[mode])
    leaks = ScopedLeakCheck(runtime, str(tmp_path), conf)
    run = podman_background(runtime, "run", "--rm", IMAGE, "sleep", "1000")
    try:
        wait_container_up(conf, str(wait_running(runtime)[0]["job_id"]))
        killed = time.monotonic()
        os.kill(agent_pids(runtime)[0], signal.SIGKILL)
        code, _, err = _finish(run, 30)
        assert code != 0, err
        assert time.monotonic() - killed < 15
    finally:
        _stop(run)
    leaks.check()


@pytest.mark.parametrize("when", ["at once", "while it starts", "once the container runs"])
def test_kill_9_of_the_local_node_agent_reports_stopped(tmp_path: Path, when: str) -> None:
    """Through scrun itself, the agent killed at any moment: `state` says stopped with a
    non-zero exit status, and nothing is left (its guard deletes a container that
    was still being created, too)."""
    runtime, leaks = private_runtime(tmp_path)
    bundle = make_bundle(tmp_path, ["sleep", "1000"])
    assert runtime.scrun("create", "-b", str(bundle), "victim").returncode == 0
    anchor = runtime.anchor_pid("victim")
    assert runtime.scrun("start", "victim").returncode == 0
    wait_for(lambda: len(local_agent_pids(anchor)) == 1, 10, "the node agent")
    if when == "while it starts":
        time.sleep(0.05)
    elif when == "once the container runs":
        runc = ["runc", "--root", str(leaks.private[0])]

        def running() -> bool:
            names = subprocess.run([*runc, "list", "-q"], capture_output=True, text=True,
                                   check=False).stdout.split()
            return bool(names) and json.loads(subprocess.run(
                [*runc, "state", names[0]], capture_output=True, text=True, check=False,
            ).stdout or "{}").get("status") == "running"

        wait_for(running, 30, "the container to run")
    os.kill(local_agent_pids(anchor)[0], signal.SIGKILL)

    def stopped() -> bool:
        return bool(json.loads(runtime.scrun("state", "victim").stdout)["status"] == "stopped")

    wait_for(stopped, 15, "the container to be reported stopped")
    assert json.loads(runtime.scrun("state", "victim").stdout)["exitStatus"] != 0
    assert runtime.scrun("delete", "victim").returncode == 0
    leaks.check()


def test_runtime_killed_while_it_creates_the_container(tmp_path: Path) -> None:
    """runc SIGKILLed as soon as its state dir appears, before or while it sets up the
    container: the container ends with a non-zero status, and nothing is left, not even
    a state dir runc itself cannot load (which would block the name)."""
    runtime, leaks = private_runtime(tmp_path)
    runc_root = leaks.private[0]
    bundle = make_bundle(tmp_path, ["sleep", "1000"])
    assert runtime.scrun("create", "-b", str(bundle), "victim").returncode == 0
    # start answers once the container runs: runc is killed while start waits.
    start = subprocess.Popen([str(runtime.wrapper), "start", "victim"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (runc_root.is_dir() and any(runc_root.iterdir())):
        assert time.monotonic() < deadline, "runc never started creating the container"
    # runc runs from a sealed copy of itself (argv[0] /proc/self/fd/N): known by its root.
    run = [str(pid) for pid in os.listdir("/proc") if pid.isdigit() and _argv(pid)[1:4] == [
        "--root", str(runc_root), "run"]]
    assert run, "no `runc run` to kill"
    os.kill(int(run[0]), signal.SIGKILL)
    start.wait(30)

    def status() -> str:
        return str(json.loads(runtime.scrun("state", "victim").stdout)["status"])

    # Killed after the container started after all (a very slow runc), it runs on
    # without its runtime, and the agent ends it when told.
    time.sleep(1)
    if status() == "running":
        runtime.scrun("kill", "victim", "KILL")
    wait_for(lambda: status() == "stopped", 15, "the container to be reported stopped")
    assert json.loads(runtime.scrun("state", "victim").stdout)["exitStatus"] != 0
    assert runtime.scrun("delete", "victim").returncode == 0
    leaks.check()


def _argv(pid: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


# -- slurmctld ------------------------------------------------------------------------

def test_slurmctld_restarted_while_a_container_runs(cluster: Cluster, tmp_path: Path,
                                                    gate: Path) -> None:
    with _gated_container(cluster, tmp_path, gate, leak_timeout=30) as (conf, job, run):
        stop_slurmctld(conf)
        start_slurmctld(conf)
        assert job_state(conf, job) == "RUNNING"
        (gate / "open").touch()
        _assert_gated_end(run, 60)


def test_slurmctld_away_when_the_container_ends(cluster: Cluster, tmp_path: Path,
                                                gate: Path) -> None:
    """The exit code arrives, and the job is given back once slurmctld is there again,
    possibly after podman has returned (salloc cannot give it back and says so; the
    anchor then cancels it, retrying).
    Slurm's own slurmstepd keeps the job completing for a minute more (it retries the
    step's completion): the node is restarted at the end rather than waited for."""
    # slurmstepd retries the step's completion for a minute, holding the job in
    # COMPLETING: the node is rebooted instead of waiting for that.
    with _gated_container(cluster, tmp_path, gate, leak_timeout=30, reboot=True) as (
            conf, job, run):
        stop_slurmctld(conf)
        try:
            (gate / "open").touch()
            time.sleep(6)  # the container ends and its job cannot be given back
        finally:
            start_slurmctld(conf)
        _assert_gated_end(run, 150)
        # podman returns with the exit code; the anchor may still be giving the job back.
        wait_for(lambda: job_state(conf, job) != "RUNNING", 150, "the job to be given back")


def test_delete_while_slurmctld_is_away_leaves_the_anchor_to_give_the_job_back(
        cluster: Cluster, tmp_path: Path) -> None:
    """delete returns once the container has stopped; the anchor, still giving the job
    back, is not killed (that would leave the job running to its time limit)."""
    conf = cluster.up(1)
    runtime = make_slurm_runtime(tmp_path, conf)
    leaks = ScopedLeakCheck(runtime, str(tmp_path), conf)
    bundle = make_bundle(tmp_path, ["sleep", "1000"])
    assert runtime.scrun("create", "-b", str(bundle), "d1").returncode == 0
    assert runtime.scrun("start", "d1").returncode == 0
    job = str(wait_running(runtime)[0]["job_id"])
    wait_container_up(conf, job)
    anchor = runtime.anchor_pid("d1")
    stop_slurmctld(conf)
    try:
        deleted = runtime.scrun("delete", "--force", "d1", timeout=120)
        assert deleted.returncode == 0, deleted.stderr
        assert Path(f"/proc/{anchor}").exists(), "delete killed the anchor"
    finally:
        start_slurmctld(conf)
    wait_for(lambda: job_state(conf, job) not in ("RUNNING", "PENDING"), 150,
             "the job to be given back")
    wait_for(lambda: not Path(f"/proc/{anchor}").exists(), 150, "the anchor to finish")
    # slurmstepd retries the step's completion for a minute: reboot rather than wait.
    reboot_node(conf, "n1")
    leaks.check(timeout=30)


# -- a node dies ----------------------------------------------------------------------

def test_the_node_of_the_container_dies(cluster: Cluster, tmp_path: Path) -> None:
    """slurmd and everything on its node killed: podman returns with an error within
    60 s (srun alone would wait for slurmctld to declare the node down, minutes), and
    the job is ended. The node then "reboots": its volatile state is cleared (its /run
    would not survive) and its slurmd started again, after which the job is gone."""
    conf = cluster.up(1)
    runtime = make_slurm_runtime(tmp_path, conf)
    leaks = ScopedLeakCheck(runtime, str(tmp_path), conf)
    # --uts=host: the container lives in its node's namespace and dies with it.
    run = podman_background(runtime, "run", "--rm", "--uts=host", IMAGE, "sleep", "1000")
    try:
        job = str(wait_running(runtime)[0]["job_id"])
        wait_container_up(conf, job)
        killed = time.monotonic()
        kill_node(conf, "n1")
        code, _, err = _finish(run, 60)
        assert code != 0, err
        assert time.monotonic() - killed < 60
        wait_for(lambda: job_state(conf, job) != "RUNNING", 30, "the job to end")
    finally:
        _stop(run)
        reboot_node(conf, "n1")
    leaks.check(timeout=60)


def test_slurmd_killed_while_the_container_runs(cluster: Cluster, tmp_path: Path,
                                                gate: Path) -> None:
    """slurmd alone is not the step: the container runs on under slurmstepd and its exit
    code still reaches podman; the job is given back (slurmctld completes it once the
    node's slurmd is back)."""
    with _gated_container(cluster, tmp_path, gate, leak_timeout=60, reboot=True) as (
            conf, job, run):
        os.kill(slurmd_pid(conf, "n1"), signal.SIGKILL)
        (gate / "open").touch()
        _assert_gated_end(run, 60)
        assert job_state(conf, job) != "RUNNING"


# -- the job and the anchor -----------------------------------------------------------

def test_scancel_from_outside_stops_the_container(cluster: Cluster, tmp_path: Path) -> None:
    """sleep, as a container's init, ignores the step's SIGTERM: KillWait later Slurm
    kills it, and podman says so."""
    with _container_in_job(cluster, tmp_path, IMAGE, "sleep", "1000") as it:
        assert slurm(it.conf, "scancel", it.job).returncode == 0
        code, _, err = _finish(it.run, 30)
        assert code == 128 + signal.SIGKILL, err


def test_scancel_lets_the_container_finish_its_sigterm_handler(cluster: Cluster,
                                                               tmp_path: Path) -> None:
    """Slurm ends a step with SIGTERM and, KillWait later, SIGKILL: a container that
    cleans up on SIGTERM within KillWait ends with its own exit status."""
    with _container_in_job(cluster, tmp_path, IMAGE, "sh", "-c",
                           "trap 'sleep 0.5; exit 3' TERM; while :; do sleep 0.1; done") as it:
        assert slurm(it.conf, "scancel", it.job).returncode == 0
        code, _, err = _finish(it.run, 30)
        assert code == 3, err


def test_step_killed_outright_leaves_no_container(cluster: Cluster, tmp_path: Path) -> None:
    """SIGKILL to every process of the step at once, as when KillWait runs out: the
    node agent and the runtime die together, and the container must still go."""
    with _container_in_job(cluster, tmp_path, IMAGE, "sleep", "1000") as it:
        [agent] = agent_pids(it.runtime)
        kill_tree_at_once(agent)
        code, _, err = _finish(it.run, 30)
        assert code == 128 + signal.SIGKILL, err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_signal_to_the_anchor_ends_the_container_and_its_job(
        cluster: Cluster, tmp_path: Path, signum: int) -> None:
    """As the man page promises for SIGINT (Slurm's own scrun leaves the job)."""
    with _container_in_job(cluster, tmp_path, IMAGE, "sleep", "1000") as it:
        os.kill(int(it.state["pid"]), signum)  # type: ignore[call-overload]
        code, _, err = _finish(it.run, 30)
        assert code == 128 + signal.SIGKILL, err
        wait_for(lambda: job_state(it.conf, it.job) in ("", "COMPLETED", "CANCELLED"),
                 10, "the job to end")


# -- create killed --------------------------------------------------------------------

# stage_in that takes its time on the job's node: create still waits for the anchor.
SLOW_STAGE_IN = """
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
  slurm.remote_command("sleep 3")
  return slurm.SUCCESS
end
function slurm_scrun_stage_out() return slurm.SUCCESS end
"""


def test_create_killed_before_it_heard_leaves_nothing(cluster: Cluster, tmp_path: Path) -> None:
    """create killed outright (containerd kills a cancelled runtime's create so) while
    its job is already allocated and the anchor still stages the container: nobody
    will ever delete that container, so once the anchor finds create gone it ends the
    container, gives the job back and removes its state."""
    conf = cluster.up(1)
    runtime = make_slurm_runtime(tmp_path, conf)
    runtime.write_conf("scrun.lua", SLOW_STAGE_IN)
    leaks = ScopedLeakCheck(runtime, str(tmp_path), conf)
    bundle = make_bundle(tmp_path, ["sleep", "1000"])
    state_file = runtime.root / "unheard" / "state.json"
    # The wrapper and `env` exec scrun: the pid is create's own.
    create = subprocess.Popen(
        runtime.account.command([str(runtime.wrapper), "create", "-b", str(bundle), "unheard"]),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: state_file.exists() and bool(json.loads(state_file.read_text())
                                                      .get("job_id")), 30, "the job")
        job = str(json.loads(state_file.read_text())["job_id"])
        assert create.poll() is None, "create returned before the anchor staged"
    finally:
        create.kill()
        create.wait()
    wait_for(lambda: not state_file.parent.exists(), 60, "the container's state to go")
    assert job_state(conf, job) in ("", "COMPLETED", "CANCELLED")
    assert runtime.scrun("state", "unheard").returncode != 0
    leaks.check(timeout=30)


# -- a full disk ----------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, unmounted afterwards."""
    require("mount", "mount")
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "pyscrun-test",
                           str(mountpoint)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs (the test runs as root): {done.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def _fill(disk: Path, leave: int = 0) -> Path:
    """Fill the file system up, leaving about `leave` bytes free."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError as err:
            assert err.errno == errno.ENOSPC
    if leave:
        with open(filler, "r+b") as out:
            out.truncate(max(0, filler.stat().st_size - leave))
    return filler


def test_disk_full_fails_create_cleanly(cluster: Cluster, tmp_path: Path,
                                        small_disk: Path) -> None:
    """podman run with --root on a full file system: a clear error, no job, no spool."""
    conf = cluster.up(1)
    runtime = with_root(make_slurm_runtime(tmp_path, conf), small_disk / "root")
    runtime.root.mkdir()
    leaks = ScopedLeakCheck(runtime, str(tmp_path), conf)
    _fill(small_disk)
    done = podman(runtime, "run", "--rm", IMAGE, "true")
    assert done.returncode != 0
    assert b"No space left on device" in done.stderr, done.stderr
    assert list(runtime.root.iterdir()) == []
    leaks.check()


def test_disk_full_while_running_keeps_the_last_good_state(cluster: Cluster, tmp_path: Path,
                                                           small_disk: Path) -> None:
    """The final state cannot be saved: the one before it stays whole (never a half
    written file, no temporary file left), `state` says stopped (its anchor is gone),
    the job is given back anyway, and delete cleans up once there is room."""
    conf = cluster.up(1)
    runtime = with_root(make_slurm_runtime(tmp_path, conf), small_disk / "root")
    leaks = ScopedLeakCheck(runtime, str(tmp_path), conf)
    bundle = make_bundle(tmp_path, ["sh", "-c", "while [ ! -e /gate/open ]; do sleep 0.1; done"])
    config = json.loads((bundle / "config.json").read_text())
    # A state of several pages, so that a save can be cut off half way.
    config["annotations"] = {"big": "x" * 20000}
    gate = tmp_path / "gate"
    gate.mkdir()
    config["mounts"].append({"destination": "/gate", "type": "bind", "source": str(gate),
                             "options": ["rbind", "rw"]})
    (bundle / "config.json").write_text(json.dumps(config))
    assert runtime.scrun("create", "-b", str(bundle), "full").returncode == 0
    assert runtime.scrun("start", "full").returncode == 0
    before = json.loads(runtime.scrun("state", "full").stdout)
    assert before["status"] == "running"
    saved = (runtime.root / "full" / "state.json").read_bytes()
    filler = _fill(small_disk, leave=8192)
    (gate / "open").touch()
    wait_for(lambda: json.loads(runtime.scrun("state", "full").stdout)["status"] == "stopped",
             30, "stopped")
    assert (runtime.root / "full" / "state.json").read_bytes() == saved
    assert sorted(p.name for p in (runtime.root / "full").iterdir()) == ["state.json"]
    wait_for(lambda: job_state(conf, str(before["jobId"])) != "RUNNING", 15, "the job to end")
    filler.unlink()
    assert runtime.scrun("delete", "full").returncode == 0
    leaks.check()


def test_half_written_state_is_not_trusted(tmp_path: Path) -> None:
    """A state file cut short (as a crash in the middle of a non-atomic write would
    leave it) is refused with one clear line by every verb, and list skips it."""
    runtime = make_runtime(tmp_path, OCI_CONFS["run"])
    spool = runtime.root / "cut"
    spool.mkdir(parents=True, mode=0o700)
    (spool / "state.json").write_text('{"id": "cut", "status": "running", "pid": ')
    for verb in (["state"], ["start"], ["kill"], ["delete"], ["delete", "--force"]):
        done = runtime.scrun(*verb, "cut")
        assert done.returncode != 0, verb
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "corrupt" in done.stderr, done.stderr
    listed = runtime.scrun("list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) is None  # as runc says it: no container
