"""A container outlives its job's time limit: pyscrun.conf's MoveBeforeEnd moves it to a
new job before the end (checkpointed, the job given back, restored in a new one),
while podman sees it run on; with real podman, Slurm, runc and CRIU.

As root: CRIU needs it."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from pyscrun.backends.base import MOVE_SIGNAL
from tests.integration.harness import (
    IMAGE,
    Cluster,
    LeakCheck,
    Runtime,
    make_slurm_runtime,
    podman,
    require,
    slurm,
    wait_for,
    whole_cluster_job,
)

# Each line: the count, the task, the node, and the job the container was started in
# (its environment, restored with its memory).
COUNTER = ("i=0; while true; do i=$((i+1)); echo \"$i task$SLURM_PROCID $(hostname) "
           "$SLURM_JOB_ID\"; sleep 0.2; done")
# With a one-minute limit the warning is due 5 s into each job; slurmctld sends it at
# its next look at the jobs' limits (every 30 s here at the most).
WARNING = 55


@pytest.fixture
def runtime(cluster: Cluster, tmp_path: Path) -> Iterator[Runtime]:
    require("criu", "criu (installed by scripts/criu-setup.sh through `make setup`)")
    conf = cluster.up(3)
    made = make_slurm_runtime(tmp_path, conf,
                              extra_files={"pyscrun.conf": f"MoveBeforeEnd={WARNING}\n"})
    leaks = LeakCheck(made, str(tmp_path), conf)
    yield made
    from tests.integration.accounts import podman_env

    subprocess.run(["podman", "rm", "-f", "-a", "-t", "0"], capture_output=True, check=False,
                   env=podman_env())
    leaks.check()


def _ok(runtime: Runtime, *args: str) -> str:
    done = podman(runtime, *args)
    assert done.returncode == 0, f"podman {' '.join(args)}: {done.stderr.decode()}"
    return done.stdout.decode()


def _counts(runtime: Runtime, name: str, task: int = 0) -> list[int]:
    logs = podman(runtime, "logs", name).stdout.decode()
    return [int(m.group(1)) for m in re.finditer(rf"^(\d+) task{task} \S+ \d+$", logs, re.M)]


def _job_states(runtime: Runtime) -> dict[str, str]:
    out = slurm(runtime.slurm_conf.resolve(), "squeue", "-h", "-o", "%i %T").stdout
    return dict(line.split() for line in out.splitlines())


def _jobs(runtime: Runtime) -> list[str]:
    return list(_job_states(runtime))


def _moved(runtime: Runtime, seen: list[str], jobs_wanted: int) -> bool:
    """Notes each new job the container runs in; true once it has run in that many."""
    jobs = _jobs(runtime)
    if len(jobs) == 1 and jobs[0] != seen[-1]:
        seen.append(jobs[0])
    return len(seen) >= jobs_wanted


def _run_counter(runtime: Runtime, prefix: str, *options: str,
                 script: str = COUNTER) -> tuple[str, str]:
    """A counting container run detached with those podman options: its name, and the id
    of the job it starts in."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    _ok(runtime, "run", "-d", "--name", name, *options, IMAGE, "sh", "-c", script)
    wait_for(lambda: len(_jobs(runtime)) == 1, 30, "the container's job")
    return name, _jobs(runtime)[0]


def _waits_behind_then_counts_on(runtime: Runtime, name: str, first: str, blocker: str,
                                 timeout: float) -> None:
    """The container leaves its first job within timeout and its new job waits while the
    blocker holds the nodes, podman seeing it run; once the new job starts it counts on,
    every number once. The blocker is cancelled whatever happens."""
    def queued_behind() -> bool:
        states = _job_states(runtime)
        return (first not in states and states.get(blocker) == "RUNNING"
                and any(s == "PENDING" for j, s in states.items() if j != blocker))

    try:
        wait_for(queued_behind, timeout,
                 f"the container to leave job {first} and queue behind job {blocker}")
        assert _ok(runtime, "inspect", name, "--format", "{{.State.Status}}").strip() == "running"
        at_move = _counts(runtime, name)[-1]
        wait_for(lambda: _counts(runtime, name)[-1] >= at_move + 10, 60,
                 "the count to go on once the new job runs")
    finally:
        slurm(runtime.slurm_conf.resolve(), "scancel", blocker)
    counts = _counts(runtime, name)
    assert counts == list(range(1, len(counts) + 1)), counts


def _stop_and_remove(runtime: Runtime, name: str) -> None:
    podman(runtime, "stop", "-t", "1", name)
    assert _ok(runtime, "inspect", name, "--format", "{{.State.ExitCode}}").strip() == "137"
    _ok(runtime, "rm", name)
    wait_for(lambda: not _jobs(runtime), 30, "the last job to end with the container")


def test_a_container_outlives_its_jobs_time_limit(runtime: Runtime) -> None:
    name, first = _run_counter(runtime, "m", "-e", "SCRUN_TIMELIMIT=1")
    # Two moves: the second from a job the first made.
    seen = [first]
    wait_for(lambda: _moved(runtime, seen, 3), 150,
             f"the container to move twice (jobs so far: {seen})")
    at_move = _counts(runtime, name)[-1]
    wait_for(lambda: _counts(runtime, name)[-1] >= at_move + 10, 30,
             "the count to go on in the new job")
    assert _ok(runtime, "inspect", name, "--format", "{{.State.Status}}").strip() == "running"
    counts = _counts(runtime, name)
    # Every number once, in order: nothing counted twice after a restore, nothing lost.
    assert counts == list(range(1, len(counts) + 1)), counts
    _stop_and_remove(runtime, name)


def test_every_task_of_a_two_node_container_moves(runtime: Runtime) -> None:
    """Both tasks, on two nodes, are dumped together and restored in the new job, each
    going on from its own count."""
    name, first = _run_counter(runtime, "t", "-e", "SCRUN_TIMELIMIT=1", "-e", "SCRUN_NTASKS=2",
                               "-e", "SCRUN_JOB_NUM_NODES=2")
    seen = [first]
    wait_for(lambda: _moved(runtime, seen, 2), 100, "the container to move")
    at_move = {task: _counts(runtime, name, task)[-1] for task in (0, 1)}
    wait_for(lambda: all(_counts(runtime, name, task)[-1] >= at_move[task] + 10
                         for task in (0, 1)), 30, "both tasks to count on in the new job")
    assert _ok(runtime, "inspect", name, "--format", "{{.State.Status}}").strip() == "running"
    for task in (0, 1):
        counts = _counts(runtime, name, task)
        assert counts == list(range(1, len(counts) + 1)), (task, counts)
    _stop_and_remove(runtime, name)


def test_a_move_waits_for_its_new_job_while_podman_sees_it_run(runtime: Runtime) -> None:
    """The new job queues (a whole-cluster job, waiting since before the move, takes the
    nodes first): the container waits dumped, podman seeing it run, and goes on once
    its new job starts."""
    name, first = _run_counter(runtime, "w", "-e", "SCRUN_TIMELIMIT=1")
    blocker = whole_cluster_job(runtime.slurm_conf.resolve(), 20)
    _waits_behind_then_counts_on(runtime, name, first, blocker, 100)
    _stop_and_remove(runtime, name)


def _dump_held() -> list[int]:
    """Stops each `runc checkpoint` there is (on any node) and the CRIU it runs: their
    pids, none if no dump is under way."""
    held = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with suppress(OSError):
            args = cmdline.read_bytes().split(b"\0")
            if os.path.basename(args[0]) != b"runc" or b"checkpoint" not in args:
                continue
            runc = int(cmdline.parent.name)
            os.kill(runc, signal.SIGSTOP)
            held.append(runc)
            for children in Path(f"/proc/{runc}/task").glob("*/children"):
                for child in children.read_text().split():
                    os.kill(int(child), signal.SIGSTOP)
                    held.append(int(child))
    return held


@contextmanager
def _in_the_middle_of_a_move(runtime: Runtime, prefix: str,
                             script: str = COUNTER) -> Iterator[tuple[str, str]]:
    """A counting container whose move's checkpoint is under way, held there until the
    block ends: runc and CRIU are kept stopped, what a dump longer than the time left
    is. The move is set off as Slurm sets one off, by the job's warning signal to its
    steps (sent here rather than waited for, to be looked for at once: a dump can take a
    tenth of a second). Yields the container's name and job."""
    name, first = _run_counter(runtime, prefix, script=script)
    wait_for(lambda: len(_counts(runtime, name)) >= 3, 30, "the container to count")
    held: list[int] = []
    warning = subprocess.Popen(["scancel", f"--signal={MOVE_SIGNAL}", first],
                               env={**os.environ, "SLURM_CONF": str(runtime.slurm_conf.resolve())})
    try:
        deadline = time.monotonic() + 30
        while not held and time.monotonic() < deadline:
            held = _dump_held()
        assert warning.wait() == 0 and held, "no checkpoint began after the job's warning"
        yield name, first
    finally:
        for pid in held:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _ended_without_moving(runtime: Runtime, name: str, statuses: set[str]) -> None:
    """podman sees the container exited with one of those statuses, its job ends, no new
    one is asked for, and nothing of the move is left after `rm`."""
    def state() -> list[str]:
        return _ok(runtime, "inspect", name, "--format",
                   "{{.State.Status}} {{.State.ExitCode}}").split()

    wait_for(lambda: state()[0] == "exited", 60, "the container to end")
    assert state()[1] in statuses, state()
    wait_for(lambda: not _jobs(runtime), 30, "the job to end with the container")
    _ok(runtime, "rm", name)
    assert not _jobs(runtime) and not any(runtime.root.glob("*/move"))


def test_a_stop_in_the_middle_of_a_move_ends_the_container(runtime: Runtime) -> None:
    """`podman stop` while the move's checkpoint is under way: the container ends there
    (no new job), podman sees it exited, and nothing of the move is left."""
    with ThreadPoolExecutor(1) as pool:
        with _in_the_middle_of_a_move(runtime, "s") as (name, _):
            # podman waits for the end, which comes once the dump goes on.
            stopping = pool.submit(podman, runtime, "stop", "-t", "1", name)
            wait_for(lambda: "kill in the middle of the move" in runtime.log.read_text(), 30,
                     "the stop to reach the anchor while the dump is held")
        done = stopping.result()
    assert done.returncode == 0, done.stderr.decode()
    _ended_without_moving(runtime, name, {"137", "143"})


def test_a_stop_in_the_middle_of_a_move_reaches_the_containers_own_handler(
        runtime: Runtime) -> None:
    """`podman stop` while the move's checkpoint is under way, of a container that ends
    on SIGTERM by itself: the move is given up, the task goes on where it was and takes
    the signal, as without a move. It used to be killed once its dump was done (137)."""
    script = f"trap 'exit 7' TERM; {COUNTER}"
    with ThreadPoolExecutor(1) as pool:
        with _in_the_middle_of_a_move(runtime, "g", script=script) as (name, _):
            stopping = pool.submit(podman, runtime, "stop", "-t", "60", name)
            wait_for(lambda: "kill in the middle of the move" in runtime.log.read_text(), 30,
                     "the stop to reach the anchor while the dump is held")
        done = stopping.result()
    assert done.returncode == 0, done.stderr.decode()
    _ended_without_moving(runtime, name, {"7"})


def test_a_task_that_cannot_come_back_in_the_new_job_ends_the_container(
        runtime: Runtime) -> None:
    """The move's restore fails for task 1 (its node's runtime refuses it) while task 0
    comes back: the container ends, every task of it, as a restore podman asks for does.
    Task 0 used to run on alone in the new job, the container half moved."""
    runtime.write_conf("pyscrun.conf", f"MoveBeforeEnd={WARNING}\n"
                       'RunTimeRestore="test $SLURM_PROCID = 0 && '
                       'runc restore %@ --bundle %b %n.%u.%j.%s.%t"\n')
    name, first = _run_counter(runtime, "f", "-e", "SCRUN_NTASKS=2",
                               "-e", "SCRUN_JOB_NUM_NODES=2")
    wait_for(lambda: all(len(_counts(runtime, name, task)) >= 3 for task in (0, 1)), 30,
             "both tasks to count")
    done = slurm(runtime.slurm_conf.resolve(), "scancel", f"--signal={MOVE_SIGNAL}", first)
    assert done.returncode == 0, done.stderr
    # Task 1's agent failed (255), or task 0 was killed first (137).
    _ended_without_moving(runtime, name, {"137", "255"})
    assert "a task could not be restored in job" in runtime.log.read_text()


def test_a_move_image_path_on_the_cluster_file_system_takes_the_images(
        runtime: Runtime) -> None:
    """MoveImagePath on the cluster file system (/srv here): the nodes write the move's
    images there, nothing goes into the login host's spool dir, the count goes on in the
    new job, and the images are gone once it runs."""
    shared = Path(f"/srv/pyscrun-moves-{uuid.uuid4().hex[:8]}")
    runtime.write_conf("pyscrun.conf", f"MoveBeforeEnd={WARNING}\n"
                       f"MoveImagePath={shared}/%u\n")
    try:
        with _in_the_middle_of_a_move(runtime, "i") as (name, first):
            [images] = list((shared / "root").iterdir())
            assert images.name.endswith(".move") and any(images.iterdir())
            assert not any(runtime.root.glob("*/move"))
        seen = [first]
        wait_for(lambda: _moved(runtime, seen, 2), 60, "the container to move")
        at_move = _counts(runtime, name)[-1]
        wait_for(lambda: _counts(runtime, name)[-1] >= at_move + 5, 30,
                 "the count to go on in the new job")
        counts = _counts(runtime, name)
        assert counts == list(range(1, len(counts) + 1)), counts
        assert list((shared / "root").iterdir()) == []
        _stop_and_remove(runtime, name)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_a_job_that_ends_in_the_middle_of_a_move_takes_the_container_with_it(
        runtime: Runtime) -> None:
    """The job is cancelled while the move's checkpoint is under way, as Slurm cancels a
    preempted job whose grace time runs out before the dump is done: the container ends
    with its job (no new job), podman sees it exited with a failure, and nothing of the
    move is left on the login host or any node (the fixture's leak check)."""
    with _in_the_middle_of_a_move(runtime, "c") as (name, first):
        done = slurm(runtime.slurm_conf.resolve(), "scancel", first)
        assert done.returncode == 0, done.stderr
        # Still held: the dump never ends, as the job's end kills CRIU with the step.
        _ended_without_moving(runtime, name, {"137", "143", "255"})


def test_a_harmless_signal_in_the_middle_of_a_move_lets_it_go_on(runtime: Runtime) -> None:
    """`podman kill -s CONT` while the move's checkpoint is under way: the signal is
    sent on, the move goes on to the new job and the count with it, every number once."""
    with _in_the_middle_of_a_move(runtime, "h") as (name, first):
        done = podman(runtime, "kill", "-s", "CONT", name, timeout=30)
        assert done.returncode == 0, done.stderr.decode()
    seen = [first]
    wait_for(lambda: _moved(runtime, seen, 2), 60, "the container to move")
    at_move = _counts(runtime, name)[-1]
    wait_for(lambda: _counts(runtime, name)[-1] >= at_move + 5, 30,
             "the count to go on in the new job")
    assert "kill in the middle of the move" not in runtime.log.read_text()
    counts = _counts(runtime, name)
    assert counts == list(range(1, len(counts) + 1)), counts
    _stop_and_remove(runtime, name)


@pytest.mark.parametrize("partition", ["debug", "requeue"])
def test_a_preempted_container_moves_and_goes_on_after_the_urgent_job(
        runtime: Runtime, partition: str) -> None:
    """A job of the urgent partition preempts the container's (no time limit). Slurm
    signals the job at once and ends it GraceTime later (scripts/cluster.sh): debug
    cancels it after 60 s; requeue would requeue it after 15 s, which for a job that is
    no batch job is a cancel too. The container moves out before that, its new job
    waits while the urgent one holds every node, and it goes on from its count."""
    name, first = _run_counter(runtime, "p", "-e", f"SCRUN_PARTITION={partition}")
    wait_for(lambda: len(_counts(runtime, name)) >= 5, 30, "the container to count")
    urgent = whole_cluster_job(runtime.slurm_conf.resolve(), 15, "--partition=urgent")
    # Well inside the grace time: the move does not wait for the cancel.
    _waits_behind_then_counts_on(runtime, name, first, urgent, 50)
    _stop_and_remove(runtime, name)
