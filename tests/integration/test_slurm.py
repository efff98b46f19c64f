"""Containers as Slurm jobs: allocation, options, nodes, output variables, lifecycle,
as an ordinary user's rootless podman makes them (the jobs are the user's)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.harness import (
    IMAGE,
    RUN_OCI_CONF,
    SCRUN,
    Runtime,
    hangs_and_failures,
    make_bundle,
    podman,
    podman_ok,
    processes_mentioning,
    slurm,
    wait_for,
)


def _job_record(cluster_conf: Path, job_id: str) -> dict[str, str]:
    done = slurm(cluster_conf, "scontrol", "-o", "show", "job", job_id)
    assert done.returncode == 0, done.stderr
    return dict(re.findall(r"(\w+)=(\S*)", done.stdout))


def test_container_runs_as_a_job_and_sees_its_variables(users_slurm_runtime: Runtime) -> None:
    done = podman(users_slurm_runtime, "run", "--rm", IMAGE, "sh", "-c",
                  "echo job=$SLURM_JOB_ID nodes=$SLURM_JOB_NODELIST cid=$SLURM_CONTAINER_ID")
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    job = re.search(r"job=(\d+) nodes=(n\d) cid=(\w+)", out)
    assert job, out
    record = _job_record(users_slurm_runtime.slurm_conf.resolve(), job.group(1))
    assert record["JobName"] == "scrun"
    assert record["JobState"] in ("COMPLETED", "COMPLETING")  # given back, not cancelled


@pytest.mark.parametrize("pid_namespace", [[], ["--pid=host"]], ids=["own", "host"])
def test_a_background_process_ends_with_the_container(users_slurm_runtime: Runtime,
                                                      pid_namespace: list[str]) -> None:
    """A process the container left in the background ends with it, before podman has
    the status: with a pid namespace of its own the init's end takes it, with the
    node's the runtime's delete does. podman gets the output and the status at once,
    not when the background process would have let go of stdout."""
    background = f"sleep {7000 + len(pid_namespace) * 100 + os.getpid() % 100}"
    started = time.monotonic()
    done = podman(users_slurm_runtime, "run", "--rm", *pid_namespace, IMAGE, "sh", "-c",
                  f"{background} & echo hi; exit 4", timeout=60)
    took = time.monotonic() - started
    assert (done.returncode, done.stdout) == (4, b"hi\n"), done.stderr
    assert took < 8, f"podman waited {took:.1f} s for the background process"
    assert processes_mentioning(background) == []


@pytest.mark.nodes(3)
def test_three_nodes_three_tasks(users_slurm_runtime: Runtime) -> None:
    done = podman(users_slurm_runtime, "run", "--rm", "--uts=host", "-e", "SCRUN_JOB_NUM_NODES=3",
                  "-e", "SCRUN_NTASKS=3", IMAGE, "hostname")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.decode().split()) == ["n1", "n2", "n3"]


@pytest.mark.nodes(2)
def test_the_task_id_pattern_is_the_tasks_number_on_its_node(
        users_slurm_runtime: Runtime) -> None:
    """oci.conf's %t is the task's id on its node, as slurmstepd fills it in: four tasks
    on two nodes are numbered from 0 on each node, in rank order (MountSpoolDir shows
    it: each container's own mounts). It was the rank."""
    users_slurm_runtime.write_conf("oci.conf", RUN_OCI_CONF + "MountSpoolDir=/spool-%t\n")
    done = podman(users_slurm_runtime, "run", "--rm", "--uts=host", "-e", "SCRUN_NTASKS=4",
                  "-e", "SCRUN_JOB_NUM_NODES=2", IMAGE, "sh", "-c",
                  "echo $SLURM_PROCID $(hostname) "
                  "$(grep -o ' /spool-[0-9]* ' /proc/self/mountinfo)")
    assert done.returncode == 0, done.stderr
    ids: dict[str, list[str]] = {}
    for line in sorted(done.stdout.decode().splitlines()):
        _, node, spool = line.split()
        ids.setdefault(node, []).append(spool)
    assert sorted(ids) == ["n1", "n2"], done.stdout
    for spools in ids.values():
        assert spools == [f"/spool-{local}" for local in range(len(spools))], ids


def test_tasks_asked_for_on_one_node_all_run(users_slurm_runtime: Runtime) -> None:
    """SCRUN_NTASKS without a node count: as many tasks on the job's one node (Slurm
    gives the job's task count to its steps), each with its own rank."""
    done = podman(users_slurm_runtime, "run", "--rm", "-e", "SCRUN_NTASKS=2", IMAGE, "sh",
                  "-c", "echo task$SLURM_PROCID of $SLURM_NTASKS")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.decode().splitlines()) == ["task0 of 2", "task1 of 2"]


def test_srun_args_come_before_the_steps_own_options(users_slurm_runtime: Runtime) -> None:
    """oci.conf's SrunArgs go first, as Slurm's scrun puts them: the step's own options
    win (an --export=NONE there took the agent's variables away and no container ran),
    and the others reach srun (the task sees its --cpus-per-task)."""
    users_slurm_runtime.write_conf(
        "oci.conf", RUN_OCI_CONF + 'SrunArgs="--export=NONE"\nSrunArgs="--cpus-per-task=1"\n')
    done = podman(users_slurm_runtime, "run", "--rm", IMAGE, "sh", "-c",
                  "echo cpus=$SLURM_CPUS_PER_TASK")
    assert (done.returncode, done.stdout) == (0, b"cpus=1\n"), done.stderr


def test_labelled_output_is_srun_s(users_slurm_runtime: Runtime) -> None:
    """SCRUN_LABELIO: every line of every task's output starts with its task number, as
    srun --label gives it, whole (a line written in parts is not cut by the other task's),
    and a last line without a newline gets one."""
    done = podman(users_slurm_runtime, "run", "--rm", "-e", "SCRUN_LABELIO=1", "-e",
                  "SCRUN_NTASKS=2", IMAGE, "sh", "-c",
                  "echo out; echo err >&2; printf la; sleep 0.3; printf st")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.decode().splitlines(keepends=True)) == \
        ["0: last\n", "0: out\n", "1: last\n", "1: out\n"]
    assert sorted(done.stderr.decode().splitlines()) == ["0: err", "1: err"]


def test_tasks_lines_reach_podman_whole_as_srun_gives_them(users_slurm_runtime: Runtime) -> None:
    """Without labels too: task 1's line, written while task 0's is half written, does
    not cut it (srun's output is line-buffered)."""
    done = podman(users_slurm_runtime, "run", "--rm", "-e", "SCRUN_NTASKS=2", IMAGE, "sh", "-c",
                  "if [ $SLURM_PROCID = 0 ]; then printf 'task 0 half, '; sleep 0.6; "
                  "echo 'other half'; else sleep 0.3; echo 'task 1 line'; fi")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.decode().splitlines()) == ["task 0 half, other half", "task 1 line"]


def test_job_options_reach_the_job_record(users_slurm_runtime: Runtime) -> None:
    done = podman(users_slurm_runtime, "run", "--rm", "-e", "SCRUN_TIMELIMIT=1", "-e",
                  "SCRUN_PARTITION=other", "-e", "SCRUN_JOB_NAME=named-by-test", "-e",
                  "SCRUN_NTASKS=2", "-e", "SCRUN_EXCLUSIVE=user", IMAGE, "sh", "-c",
                  "echo $SLURM_JOB_ID")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.decode().split()[0]
    record = _job_record(users_slurm_runtime.slurm_conf.resolve(), job_id)
    assert record["TimeLimit"] == "00:01:00"
    assert record["Partition"] == "other"
    assert record["JobName"] == "named-by-test"
    assert record["NumTasks"] == "2"
    assert record["OverSubscribe"] == "USER"


def test_unknown_partition_fails_create_and_leaves_no_job(users_slurm_runtime: Runtime) -> None:
    done = podman(users_slurm_runtime, "run", "--rm", "-e", "SCRUN_PARTITION=nosuch", IMAGE, "true")
    assert done.returncode != 0
    assert b"Invalid partition name" in done.stderr


def test_invalid_option_value_fails_create(users_slurm_runtime: Runtime) -> None:
    done = podman(users_slurm_runtime, "run", "--rm", "-e", "SCRUN_TIMELIMIT=soon", IMAGE, "true")
    assert done.returncode != 0
    assert b"job allocation failed" in done.stderr


def test_job_environment_carries_the_output_variables(users_slurm_runtime: Runtime) -> None:
    runtime = users_slurm_runtime
    seen = runtime.base / "agent-env"
    oci_conf = (
        f'RunTimeQuery="runc state %n.%u.%j.%s.%t"\n'
        f'RunTimeKill="runc kill -a %n.%u.%j.%s.%t"\n'
        f'RunTimeDelete="runc delete --force %n.%u.%j.%s.%t"\n'
        f'RunTimeRun="env > {seen}; runc run %n.%u.%j.%s.%t -b %b"\n'
    )
    runtime.write_conf("oci.conf", oci_conf)
    done = podman(runtime, "run", "--rm", "--annotation", "org.example.tag=v1", IMAGE, "true")
    assert done.returncode == 0, done.stderr
    env = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    for name in ("SCRUN_OCI_VERSION", "SCRUN_CONTAINER_ID", "SCRUN_PID", "SCRUN_BUNDLE",
                 "SCRUN_SUBMISSION_BUNDLE", "SCRUN_PID_FILE", "SCRUN_SOCKET", "SCRUN_SPOOL_DIR",
                 "SCRUN_SUBMISSION_CONFIG_FILE", "SCRUN_USER", "SCRUN_USER_ID", "SCRUN_GROUP",
                 "SCRUN_GROUP_ID", "SCRUN_ROOT", "SCRUN_ROOTFS_PATH",
                 "SCRUN_SUBMISSION_ROOTFS_PATH", "SCRUN_LOG_FORMAT", "SLURM_JOB_ID",
                 "SLURM_CONTAINER_ID"):
        assert env.get(name), f"{name} missing from the job environment"
    assert env["SCRUN_USER"] == runtime.account.name
    assert env["SCRUN_USER_ID"] == str(runtime.account.uid)
    assert env["SCRUN_ROOT"] == str(runtime.root)
    assert env["SCRUN_ANNOTATION_ORG_EXAMPLE_TAG"] == "v1"


def test_existing_job_is_used_and_not_ended(users_slurm_runtime: Runtime) -> None:
    conf = users_slurm_runtime.slurm_conf.resolve()
    # The user's own allocation: a job of another user's is not the user's to use.
    alloc = users_slurm_runtime.account.run(["salloc", "--no-shell", "--job-name=given"],
                                            env={"SLURM_CONF": str(conf)})
    job_id = re.search(r"Granted job allocation (\d+)", alloc.stderr.decode())
    assert job_id, alloc.stderr
    try:
        done = podman(users_slurm_runtime, "run", "--rm", "-e", f"SLURM_JOB_ID={job_id.group(1)}",
                      IMAGE, "sh", "-c", "echo $SLURM_JOB_ID")
        assert done.returncode == 0, done.stderr
        assert done.stdout.decode().split() == [job_id.group(1)]
        assert _job_record(conf, job_id.group(1))["JobState"] == "RUNNING"
    finally:
        slurm(conf, "scancel", job_id.group(1))


def test_a_given_job_that_is_no_live_job_fails_create_in_one_line(
        users_slurm_runtime: Runtime) -> None:
    """SLURM_JOB_ID that is no job id, no job of the cluster, or a job that has ended:
    create fails in one line naming it, as Slurm's scrun does, and nothing is left (the
    fixture's leak check). It used to pass create and fail at start, in srun's words."""
    runtime = users_slurm_runtime
    conf = runtime.slurm_conf.resolve()
    alloc = runtime.account.run(["salloc", "--no-shell", "--job-name=given"],
                                env={"SLURM_CONF": str(conf)})
    ended = re.search(r"Granted job allocation (\d+)", alloc.stderr.decode())
    assert ended, alloc.stderr
    slurm(conf, "scancel", ended.group(1))
    wait_for(lambda: _job_record(conf, ended.group(1))["JobState"] == "CANCELLED", 30,
             "the job to end")
    for given, said in (("12ab", "invalid SLURM_JOB_ID '12ab': not a job id"),
                        ("999999", "job 999999 (SLURM_JOB_ID) is unknown to this cluster"),
                        (ended.group(1), f"job {ended.group(1)} (SLURM_JOB_ID) is CANCELLED")):
        done = podman(runtime, "run", "--rm", "-e", f"SLURM_JOB_ID={given}", IMAGE, "true")
        assert done.returncode != 0
        errors = [line for line in done.stderr.decode().splitlines() if "scrun: error" in line]
        assert len(errors) == 1 and said in errors[0], done.stderr.decode()


def test_exec_reaches_its_own_container_among_two_in_one_job(
        users_slurm_runtime: Runtime) -> None:
    """Two containers in the user's own job are two steps on the same node (each taking
    only its own CPU: SCRUN_EXACT, else the second waits for the first): each exec runs
    in the container it names."""
    runtime = users_slurm_runtime
    conf = runtime.slurm_conf.resolve()
    alloc = runtime.account.run(["salloc", "--no-shell", "--job-name=given", "--ntasks=2"],
                                env={"SLURM_CONF": str(conf)})
    job_id = re.search(r"Granted job allocation (\d+)", alloc.stderr.decode())
    assert job_id, alloc.stderr
    names = []
    try:
        for who in ("first", "second"):
            name = podman_ok(runtime, "run", "-d", "-e", f"SLURM_JOB_ID={job_id.group(1)}",
                             "-e", "SCRUN_EXACT=1", IMAGE, "sh", "-c",
                             f"echo {who} > /tmp/who; sleep 1000")
            names.append(name)
            deadline = time.monotonic() + 60
            while (done := podman(runtime, "exec", name, "test", "-s", "/tmp/who")).returncode:
                assert time.monotonic() < deadline, (who, done.stderr.decode())
                time.sleep(0.5)
        for who, name in zip(("first", "second"), names, strict=True):
            assert podman_ok(runtime, "exec", name, "cat", "/tmp/who") == who
    finally:
        for name in names:
            podman(runtime, "rm", "-f", "-t", "0", name)
        slurm(conf, "scancel", job_id.group(1))


def _anchor_pid(runtime: Runtime) -> int:
    states = [json.loads(p.read_text()) for p in runtime.root.glob("*/state.json")]
    assert len(states) == 1
    return int(states[0]["pid"])


def test_kill_9_of_the_anchor_ends_the_job(users_slurm_runtime: Runtime) -> None:
    conf = users_slurm_runtime.slurm_conf.resolve()
    proc = subprocess.Popen(
        users_slurm_runtime.account.command(["podman", "--runtime", str(users_slurm_runtime.wrapper),
                                             "run", "--rm", IMAGE, "sleep", "1000"]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: list(users_slurm_runtime.root.glob("*/state.json"))
                 and json.loads(next(users_slurm_runtime.root.glob("*/state.json")).read_text())
                 ["status"] == "running", 30, "the container to run")
        jobs_before = slurm(conf, "squeue", "-h").stdout.strip()
        assert jobs_before
        os.kill(_anchor_pid(users_slurm_runtime), signal.SIGKILL)
        started = time.monotonic()
        wait_for(lambda: not slurm(conf, "squeue", "-h").stdout.strip(), 10, "the job to end")
        assert time.monotonic() - started < 10
        assert proc.wait(timeout=30) != 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_stop_ends_the_job(users_slurm_runtime: Runtime) -> None:
    conf = users_slurm_runtime.slurm_conf.resolve()
    name = f"stop{uuid.uuid4().hex[:8]}"
    done = podman(users_slurm_runtime, "run", "-d", "--name", name, IMAGE, "sleep", "1000")
    assert done.returncode == 0, done.stderr
    assert slurm(conf, "squeue", "-h").stdout.strip()
    assert podman(users_slurm_runtime, "stop", "-t", "1", name).returncode == 0
    assert podman(users_slurm_runtime, "rm", name).returncode == 0
    wait_for(lambda: not slurm(conf, "squeue", "-h").stdout.strip(), 10, "the job to end")


def test_two_hundred_sequential_runs_never_hang(users_slurm_runtime: Runtime) -> None:
    assert hangs_and_failures(
        200, lambda: podman(users_slurm_runtime, "run", "--rm", IMAGE, "/bin/true", timeout=60),
        users_slurm_runtime) == []


def test_an_srun_that_cannot_run_says_why(slurm_runtime: Runtime, tmp_path: Path) -> None:
    """The container does not start, as runc's own run fails, and leaves nothing behind
    (its job given back: the leak check after every test)."""
    fake = tmp_path / "srun"
    fake.write_text("not a program\n")
    fake.chmod(0o755)
    slurm_runtime.write_conf("oci.conf", RUN_OCI_CONF + f"SrunPath={fake}\n")
    bundle = make_bundle(tmp_path, ["true"])
    done = slurm_runtime.scrun("run", "-b", str(bundle), "nosrun")
    assert done.returncode == 1, done.stderr
    assert f"cannot run {fake}: Exec format error" in done.stderr
    assert slurm_runtime.scrun("state", "nosrun").returncode != 0, "the container is left"


def test_a_configless_login_node_finds_slurm_conf_in_the_cache(slurm_runtime: Runtime,
                                                               tmp_path: Path) -> None:
    """A login node of a "configless" cluster has no /etc/slurm/slurm.conf: its slurmd or
    sackd keeps the files slurmctld hands out in /run/slurm/conf, where Slurm's commands
    look next. scrun, given no -f and no SLURM_CONF, finds them there and runs the
    container as a job (it ran it on the local backend: no job). The cache is made in a
    mount namespace of the test's own, /etc/slurm hidden there; scrun's own command line,
    since rootless podman would join the mount namespace its pause process holds."""
    bundle = make_bundle(tmp_path, ["sh", "-c", "echo job=$SLURM_JOB_ID"])
    scrun = shlex.join([str(SCRUN), "--root", str(slurm_runtime.root), "--log",
                        str(slurm_runtime.log), "run", "-b", str(bundle), "configless"])
    script = (
        "set -e; mkdir -p /run/slurm; mount -t tmpfs configless /run/slurm; "
        "if [ -d /etc/slurm ]; then mount -t tmpfs no-etc-slurm /etc/slurm; fi; "
        f"mkdir /run/slurm/conf; ln -s {slurm_runtime.slurm_conf} /run/slurm/conf/slurm.conf; "
        f"cd /; exec env -u SLURM_CONF {scrun}")
    made_run_slurm = not Path("/run/slurm").exists()
    try:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            done = subprocess.run(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, timeout=120)
            out.seek(0)
            err.seek(0)
            said, errors = out.read().decode(), err.read().decode()
    finally:
        if made_run_slurm:
            Path("/run/slurm").rmdir()
    assert done.returncode == 0, errors
    assert said.removeprefix("job=").strip().isdigit(), (said, errors)


def test_an_initialized_container_waits_for_its_start(users_slurm_runtime: Runtime) -> None:
    """`podman init` runs the runtime's create: the job's step is launched then, and the
    container's process runs only once started, once, with its output and status."""
    conf = users_slurm_runtime.slurm_conf.resolve()
    name = f"init{uuid.uuid4().hex[:8]}"
    done = podman(users_slurm_runtime, "create", "--name", name, IMAGE,
                  "sh", "-c", "echo ran; exit 4")
    assert done.returncode == 0, done.stderr
    try:
        done = podman(users_slurm_runtime, "init", name)
        assert done.returncode == 0, done.stderr
        assert slurm(conf, "squeue", "-h").stdout.strip(), "no job for the created container"
        time.sleep(1)
        logs = podman(users_slurm_runtime, "logs", name)
        assert b"ran" not in logs.stdout + logs.stderr, "the process ran before its start"
        started = podman(users_slurm_runtime, "start", "-a", name)
        assert started.returncode == 4, started.stderr
        assert started.stdout.decode().split() == ["ran"]
    finally:
        podman(users_slurm_runtime, "rm", "-f", name)
    wait_for(lambda: not slurm(conf, "squeue", "-h").stdout.strip(), 10, "the job to end")


def test_an_initialized_container_removed_unstarted_leaves_nothing(
        users_slurm_runtime: Runtime) -> None:
    conf = users_slurm_runtime.slurm_conf.resolve()
    name = f"unstarted{uuid.uuid4().hex[:8]}"
    assert podman(users_slurm_runtime, "create", "--name", name, IMAGE,
                  "sleep", "1000").returncode == 0
    assert podman(users_slurm_runtime, "init", name).returncode == 0
    wait_for(lambda: slurm(conf, "squeue", "-h", "-s").stdout.strip(), 10, "the step to be launched")
    done = podman(users_slurm_runtime, "rm", "-f", name)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: not slurm(conf, "squeue", "-h").stdout.strip(), 10, "the job to end")
