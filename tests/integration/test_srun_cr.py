"""srun_cr on the real loopback Slurm cluster (3 nodes) with real CRIU.

Each task prints its rank and a count; a checkpoint, the job's end and a restart in a
new job must leave every rank counting on from where it was. Nothing may be left
behind: no job in squeue, no task, launcher or CRIU process.

As root: CRIU needs it (an ordinary user is told why not, in test_ordinary_users.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration import starving
from tests.integration.harness import (
    Cluster,
    processes_mentioning,
    require,
    slurm,
    slurm_jobs,
    wait_for,
    whole_cluster_job,
)

SRUN_CR = Path(sys.executable).parent / "srun_cr"
COUNTER = """#!/bin/sh
i=0
while :; do
    echo "rank $SLURM_PROCID count $i host $(hostname)"
    i=$((i + 1))
    sleep 1
done
"""
MEMORY = """import hashlib, random, sys, time
rng = random.Random(7)
memory = bytearray(b"".join(rng.randbytes(1 << 20) for _ in range(256)))
i = 0
while True:
    print("sum", i, hashlib.sha256(memory).hexdigest(), flush=True)
    i += 1
    time.sleep(0.5)
"""
# Rank 1 holds a TCP connection, which CRIU refuses to dump without --tcp-established.
TCP_COUNTER = """import os, socket, sys, time
rank = int(os.environ["SLURM_PROCID"])
if rank == 1:
    held = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
i = 0
while True:
    print(f"rank {rank} count {i} host -", flush=True)
    i += 1
    time.sleep(1)
"""
TRAP_INT = """#!/bin/sh
trap 'echo "rank $SLURM_PROCID got INT"; exit 3' INT
echo "rank $SLURM_PROCID ready"
while :; do sleep 0.2; done
"""
_COUNT = re.compile(r"^rank (\d+) count (\d+) host (\S+)$")


def _counts(output: str) -> list[tuple[int, int, str]]:
    """(rank, count, host) of each counter line."""
    found = []
    for line in output.splitlines():
        match = _COUNT.match(line)
        if match:
            found.append((int(match.group(1)), int(match.group(2)), match.group(3)))
    return found


def _last(counts: list[tuple[int, int, str]], rank: int) -> int:
    return max((c for r, c, _ in counts if r == rank), default=-1)


class Running:
    """One srun_cr (or srun) started in the background, its output in files."""

    def __init__(self, proc: subprocess.Popen[bytes], out: Path, err: Path, run_dir: Path) -> None:
        self.proc = proc
        self.out = out
        self.err = err
        self.run_dir = run_dir

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def counts(self) -> list[tuple[int, int, str]]:
        return _counts(self.stdout())

    def last(self, rank: int) -> int:
        return _last(self.counts(), rank)

    def wait_counts(self, ranks: int, at_least: int, timeout: float = 30) -> None:
        wait_for(lambda: all(self.last(r) >= at_least for r in range(ranks)) or self.ended(),
                 timeout, f"every rank to count to {at_least}")
        assert not self.ended(), f"ended early:\n{self.stdout()}\n{self.stderr()}"

    def ended(self) -> bool:
        return self.proc.poll() is not None

    def step(self, timeout: float = 30) -> str:
        """The job.step srun_cr registered once its tasks reported."""
        names: list[str] = []

        def registered() -> bool:
            names[:] = [p.name for p in self.run_dir.iterdir() if re.fullmatch(r"\d+\.\d+", p.name)]
            return bool(names) or self.ended()

        wait_for(registered, timeout, "srun_cr to register its step")
        assert names, f"srun_cr ended:\n{self.stderr()}"
        return names[0]

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"did not end within {timeout} s:\n{self.stderr()}")


class SrunCr:
    def __init__(self, conf: Path, base: Path) -> None:
        self.conf = conf
        self.base = base
        self.run_dir = base / "run"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SRUN_CR_"))}
        env.update({"SLURM_CONF": str(conf), "SRUN_CR_RUN_DIR": str(self.run_dir),
                    "PATH": f"{SRUN_CR.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"})
        self.env = env
        self.started: list[Running] = []
        self.serial = 0

    def script(self, name: str, text: str) -> Path:
        path = self.base / name
        path.write_text(text)
        path.chmod(0o755)
        return path

    def start(self, *args: str, program: str = str(SRUN_CR), env: dict[str, str] | None = None,
              ) -> Running:
        self.serial += 1
        out, err = self.base / f"out.{self.serial}", self.base / f"err.{self.serial}"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen([program, *args], stdin=subprocess.DEVNULL, stdout=stdout,
                                    stderr=stderr, cwd=self.base, env={**self.env, **(env or {})})
        running = Running(proc, out, err, self.run_dir)
        self.started.append(running)
        return running

    def run(self, *args: str, program: str = str(SRUN_CR), env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([program, *args], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, cwd=self.base, env={**self.env, **(env or {})},
                              timeout=timeout, check=False)

    def checkpoint(self, step: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("checkpoint", step, *args, timeout=120)

    def stop_with_checkpoint(self, running: Running, step: str, directory: Path) -> None:
        """Checkpoint the step into directory with --stop: the step then ends as a
        success, not a failure."""
        done = self.checkpoint(step, "--dir", str(directory), "--stop")
        assert done.returncode == 0, done.stderr
        assert running.wait() == 0, running.stderr()

    def scancel(self, step: str) -> None:
        done = slurm(self.conf, "scancel", step.split(".")[0])
        assert done.returncode == 0, done.stderr


@pytest.fixture
def srun_cr(cluster: Cluster, tmp_path: Path) -> Iterator[SrunCr]:
    require("criu", "criu (Debian 13) or scripts/criu-setup.sh (Debian 12)")
    require("srun", "slurm-client")
    assert SRUN_CR.exists(), f"{SRUN_CR} is missing: run `.venv/bin/pip install -e .`"
    conf = cluster.up(3)
    jobs_before = slurm_jobs(conf)
    helper = SrunCr(conf, tmp_path)
    helper.run_dir.mkdir(mode=0o700)
    yield helper
    for running in helper.started:
        if not running.ended():
            running.proc.send_signal(signal.SIGTERM)
            running.wait(30)
    marker = str(tmp_path)
    deadline = time.monotonic() + 20
    while True:
        left = {"slurm jobs": sorted(slurm_jobs(conf) - jobs_before),
                "processes": processes_mentioning(marker),
                "registry": [p.name for p in helper.run_dir.iterdir()]}
        if not any(left.values()):
            break
        if time.monotonic() > deadline:
            pytest.fail(f"left behind: {left}")
        time.sleep(0.2)


def _manifest(path: Path) -> dict[str, object]:
    return json.loads((path / "manifest.json").read_text())  # type: ignore[no-any-return]


def test_three_ranks_count_on_after_checkpoint_scancel_and_restart(srun_cr: SrunCr) -> None:
    counter = srun_cr.script("counter.sh", COUNTER)
    first = srun_cr.start("-N3", "-n3", str(counter))
    step = first.step()
    first.wait_counts(3, 2)
    before = [first.last(r) for r in range(3)]
    ckpt = srun_cr.base / "ckpt"
    done = srun_cr.checkpoint(step, "--dir", str(ckpt))
    assert done.returncode == 0, done.stderr
    after = [first.last(r) for r in range(3)]
    assert f"checkpointed to {ckpt}" in done.stdout
    manifest = _manifest(ckpt)
    assert manifest["tasks"] == 3 and manifest["nodes"] == ["n1", "n2", "n3"]
    assert manifest["command"] == [str(counter)] and f"{manifest['job']}.{manifest['step']}" == step
    srun_cr.scancel(step)
    assert first.wait() != 0
    assert not list(srun_cr.run_dir.iterdir())

    # A restart with the wrong task count is refused before any job exists.
    wrong = srun_cr.run("--restart", str(ckpt), "-n2")
    assert wrong.returncode == 1
    assert f"restart directory {ckpt} holds 3 task(s), the new step has 2" in wrong.stderr

    second = srun_cr.start("--restart", str(ckpt), "-N3", "-n3")
    new_step = second.step()
    assert new_step.split(".")[0] != step.split(".")[0]
    second.wait_counts(3, 0)
    for rank in range(3):
        restarted = [c for r, c, _ in second.counts() if r == rank]
        # The dump came after the count seen before the request, before the one seen after.
        assert before[rank] + 1 <= restarted[0] <= after[rank] + 1, (rank, before, after, restarted)
    srun_cr.scancel(new_step)
    second.wait()


def test_restart_on_other_and_fewer_nodes_continues_exactly(srun_cr: SrunCr) -> None:
    counter = srun_cr.script("counter.sh", COUNTER)
    first = srun_cr.start("-N2", "-n2", "-w", "n1,n2", str(counter))
    step = first.step()
    first.wait_counts(2, 1)
    ckpt = srun_cr.base / "ckpt"
    srun_cr.stop_with_checkpoint(first, step, ckpt)
    last = [first.last(r) for r in range(2)]
    assert {h for _, _, h in first.counts()} == {"n1", "n2"}

    # Both ranks on n3 alone; the task count comes from the checkpoint.
    second = srun_cr.start("-N1", "-w", "n3", env={"SLURM_RESTART_DIR": str(ckpt)})
    step2 = second.step()
    second.wait_counts(2, last[0] + 1)
    for rank in range(2):
        mine = [(c, h) for r, c, h in second.counts() if r == rank]
        assert mine[0][0] == last[rank] + 1, (rank, last, mine)
        assert {h for _, h in mine} == {"n3"}
    # The restored step checkpoints again, into the same directory (replaced whole).
    srun_cr.stop_with_checkpoint(second, step2, ckpt)
    assert _manifest(ckpt)["nodes"] == ["n3", "n3"]
    assert sorted(p.name for p in srun_cr.base.iterdir() if p.name.startswith((".ckpt", "ckpt"))) \
        == ["ckpt"]


def test_256_mib_of_memory_keeps_its_checksum(srun_cr: SrunCr) -> None:
    program = srun_cr.script("memory.py", MEMORY)
    first = srun_cr.start("-n1", "-w", "n1", sys.executable, str(program))
    step = first.step()
    wait_for(lambda: "sum 0 " in first.stdout() or first.ended(), 60, "the memory checksum")
    checksum = first.stdout().split("sum 0 ")[1].split()[0]
    ckpt = srun_cr.base / "ckpt"
    srun_cr.stop_with_checkpoint(first, step, ckpt)
    pages = sum(f.stat().st_size for f in (ckpt / "task-0").glob("pages-*.img"))
    assert pages >= 256 << 20
    last = max(int(n) for n in re.findall(r"^sum (\d+) ", first.stdout(), re.M))

    second = srun_cr.start("--restart", str(ckpt), "-w", "n2")
    second.step()
    wait_for(lambda: f"sum {last + 2} " in second.stdout() or second.ended(), 60,
             "checksums after the restart")
    sums = re.findall(r"^sum (\d+) (\w+)$", second.stdout(), re.M)
    assert int(sums[0][0]) == last + 1
    assert {s for _, s in sums} == {checksum}
    second.proc.send_signal(signal.SIGTERM)
    second.wait()


def test_exit_status_and_bad_options_as_srun(srun_cr: SrunCr) -> None:
    done = srun_cr.run("-n1", "sh", "-c", "exit 7")
    assert done.returncode == 7, done.stderr
    for args in (["-n1", "sh", "-c", "kill -TERM $$"], ["--bogus-option", "true"], ["-n"],
                 ["-n1", "--label=yes", "true"], ["-n1", "/nonexistent/program"]):
        ours = srun_cr.run(*args)
        theirs = srun_cr.run(*args, program="srun")
        assert ours.returncode == theirs.returncode, (args, ours.stderr, theirs.stderr)
        if args[0].startswith("--") or args == ["-n"]:
            assert ours.stderr == theirs.stderr
    missing = srun_cr.run("--restart", str(srun_cr.base / "nowhere"), "-n1")
    assert missing.returncode == 1
    assert "restart directory" in missing.stderr and "does not exist" in missing.stderr
    no_criu = srun_cr.run("-n1", "true", env={"SRUN_CR_CRIU": "/nonexistent/criu"})
    assert no_criu.returncode == 1 and "criu not found" in no_criu.stderr


def _interrupt(srun_cr: SrunCr, program: str, trap: Path, *options: str,
               ) -> tuple[int, list[str]]:
    """Start 2 tasks that trap SIGINT; interrupt srun(_cr) as a user would: once, and
    (unless -X makes one enough) twice within a second. Exit status, the tasks' lines."""
    running = srun_cr.start(*options, "-N2", "-n2", str(trap), program=program)
    wait_for(lambda: running.stdout().count("ready") == 2 or running.ended(), 30, "tasks ready")
    running.proc.send_signal(signal.SIGINT)
    if "-X" not in options:
        time.sleep(1.5)  # srun only printed the tasks' state
        assert not running.ended() and "got INT" not in running.stdout(), running.stderr()
        running.proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        running.proc.send_signal(signal.SIGINT)  # two within a second: srun sends Ctrl-C
    status = running.wait()
    return status, sorted(line for line in running.stdout().splitlines() if "got" in line)


def test_sigint_reaches_the_tasks_as_srun_delivers_it(srun_cr: SrunCr) -> None:
    trap = srun_cr.script("trap.sh", TRAP_INT)
    both = ["rank 0 got INT", "rank 1 got INT"]
    # -X: one Ctrl-C is forwarded to the tasks and srun waits for them.
    assert _interrupt(srun_cr, "srun", trap, "-X") == (3, both)
    assert _interrupt(srun_cr, str(SRUN_CR), trap, "-X") == (3, both)
    # Default: the first only reports, the second within a second is forwarded, and srun
    # sends SIGKILL right after it: a task's handler races with that kill (plain srun
    # loses it too when the task is not slurmstepd's direct child).
    for program in ("srun", str(SRUN_CR)):
        status, lines = _interrupt(srun_cr, program, trap)
        assert set(lines) <= set(both) and status in (3, 137), (program, status, lines)
        if status == 3:
            assert lines == both


def test_sigterm_ends_the_step_as_with_srun(srun_cr: SrunCr) -> None:
    counter = srun_cr.script("counter.sh", COUNTER)
    statuses = []
    for program in ("srun", str(SRUN_CR)):
        running = srun_cr.start("-N2", "-n2", str(counter), program=program)
        running.wait_counts(2, 0)
        running.proc.send_signal(signal.SIGTERM)
        statuses.append(running.wait())
    assert statuses[0] == statuses[1], statuses


def test_failed_checkpoint_writes_nothing_and_tasks_go_on(srun_cr: SrunCr) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    program = srun_cr.script("tcp.py", TCP_COUNTER)
    try:
        running = srun_cr.start("-N3", "-n3", sys.executable, str(program),
                                str(listener.getsockname()[1]))
        step = running.step()
        running.wait_counts(3, 1)
        done = srun_cr.checkpoint(step, "--dir", str(srun_cr.base / "ckpt"), "--stop")
        assert done.returncode == 1
        assert "failed, nothing written: task 1 (n2): criu dump failed" in done.stderr
        assert "--tcp-established" in done.stderr
        assert not [p for p in srun_cr.base.iterdir() if "ckpt" in p.name]
        seen = [running.last(r) for r in range(3)]
        running.wait_counts(3, max(seen) + 2)  # resumed after --leave-stopped
        unwritable = srun_cr.checkpoint(step, "--dir", "/proc/srun_cr-test")
        assert unwritable.returncode == 1
        assert "checkpoint directory /proc/srun_cr-test is not writable" in unwritable.stderr
        srun_cr.scancel(step)
        running.wait()
    finally:
        listener.close()


def _batch_counter(srun_cr: SrunCr, out: Path, *options: str) -> tuple[Path, str]:
    """A batch job of two counting ranks on one node whose script execs srun_cr, with
    those sbatch options and its output in out: the counter script and the job's id."""
    counter = srun_cr.script("counter.sh", COUNTER)
    batch = srun_cr.script("job.sh", f"#!/bin/sh\nexec {SRUN_CR} -n2 {counter}\n")
    done = srun_cr.run("--parsable", "-N1", "-n2", *options, "-o", str(out), str(batch),
                       program="sbatch")
    assert done.returncode == 0, done.stderr
    return counter, done.stdout.strip().split(";")[0]


def test_checkpoint_signal_from_sbatch(srun_cr: SrunCr) -> None:
    """What `sbatch --signal=B:USR2@T` does near the time limit: signal the batch shell,
    which is srun_cr once the script execs it. The checkpoint goes under the job's
    working directory and the tasks go on."""
    _, job = _batch_counter(srun_cr, srun_cr.base / "job.out")
    registered = srun_cr.run_dir / f"{job}.0"
    try:
        wait_for(registered.exists, 30, "the batch job's srun_cr")
        wait_for(lambda: (srun_cr.base / "job.out").read_text().count("count 1") == 2, 30,
                 "counting")
        signalled = slurm(srun_cr.conf, "scancel", "--batch", "--signal=USR2", job)
        assert signalled.returncode == 0, signalled.stderr
        ckpt = srun_cr.base / f"srun_cr-{job}.0"
        wait_for(lambda: (ckpt / "manifest.json").exists(), 30, f"{ckpt}")
        assert _manifest(ckpt)["tasks"] == 2
        out = srun_cr.base / "job.out"
        wait_for(lambda: out.read_text().count("count 3") == 2, 30, "counting after it")
        assert f"step {job}.0 checkpointed to {ckpt}" in out.read_text()
    finally:
        slurm(srun_cr.conf, "scancel", job)


def test_a_preempted_batch_job_checkpoints_on_slurms_signal_and_restarts(srun_cr: SrunCr) -> None:
    """Slurm itself signals the batch shell, srun_cr once the script execs it, when a
    job of the urgent partition preempts it (`--signal=B:USR2@120` and the cluster's
    preempt_send_user_signal, scripts/cluster.sh): the checkpoint is made within the
    grace time, and a restart in a new job goes on with every rank's count."""
    out = srun_cr.base / "job.out"
    _, job = _batch_counter(srun_cr, out, "--signal=B:USR2@120")
    ckpt = srun_cr.base / f"srun_cr-{job}.0"
    urgent = ""
    try:
        wait_for(lambda: all(_last_count(out, r) >= 1 for r in range(2)), 30, "counting")
        before = [_last_count(out, r) for r in range(2)]
        urgent = whole_cluster_job(srun_cr.conf, 1, "--partition=urgent")
        wait_for(lambda: (ckpt / "manifest.json").exists(), 30, f"Slurm's signal to make {ckpt}")
        after = [_last_count(out, r) for r in range(2)]
        # The job's user need not wait out the grace time.
        srun_cr.scancel(job)
        wait_for(lambda: not {line.split()[0] for line in slurm_jobs(srun_cr.conf)} & {job, urgent},
                 30, "the preempted and the urgent job to end")
    finally:
        slurm(srun_cr.conf, "scancel", job, *([urgent] if urgent else []))
    assert f"step {job}.0 checkpointed to {ckpt}" in out.read_text()
    second = srun_cr.start("--restart", str(ckpt), "-N1", "-n2")
    second.step()
    second.wait_counts(2, 0)
    for rank in range(2):
        restarted = [c for r, c, _ in second.counts() if r == rank]
        assert before[rank] + 1 <= restarted[0] <= after[rank] + 1, (rank, before, after, restarted)
    srun_cr.scancel(second.step())
    second.wait()


def test_a_requeued_batch_job_goes_on_from_its_checkpoint(srun_cr: SrunCr) -> None:
    """In a partition whose preempted jobs Slurm requeues (scripts/cluster.sh), the
    batch job checkpoints on Slurm's signal within the grace time; once requeued and
    run again, the same script's srun_cr goes on from that checkpoint by itself."""
    out = srun_cr.base / "job.out"
    counter, job = _batch_counter(srun_cr, out, "--partition=requeue", "--requeue",
                                  "--open-mode=append", "--signal=B:USR2@120")
    ckpt = srun_cr.base / f"srun_cr-{job}.0"
    urgent = ""

    def state() -> str:
        return slurm(srun_cr.conf, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip()

    try:
        wait_for(lambda: all(_last_count(out, r) >= 1 for r in range(2)), 30, "counting")
        urgent = whole_cluster_job(srun_cr.conf, 1, "--partition=urgent")
        wait_for(lambda: (ckpt / "manifest.json").exists(), 30, f"Slurm's signal to make {ckpt}")
        wait_for(lambda: state() == "PENDING", 90, "the grace time's end to requeue the job")
        at_requeue = [_last_count(out, r) for r in range(2)]
        # A requeued job waits out the credentials' lifetime (120 s) before it may start
        # again: let it start now.
        released = slurm(srun_cr.conf, "scontrol", "update", f"JobId={job}", "StartTime=now")
        assert released.returncode == 0, released.stderr
        going_on = f"job {job} was requeued: '{counter}' goes on from {ckpt}"
        wait_for(lambda: going_on in out.read_text(), 60, "the requeued job to run again")

        def counted_again() -> list[tuple[int, int, str]]:
            return _counts(out.read_text().split(going_on, 1)[1])

        wait_for(lambda: all(_last(counted_again(), r) >= 0 for r in range(2)), 30,
                 "counting again")
        again = counted_again()
    finally:
        slurm(srun_cr.conf, "scancel", job, *([urgent] if urgent else []))
    for rank in range(2):
        counts = [c for r, c, _ in again if r == rank]
        # On from the checkpoint: no count from 0 again, none skipped after what was dumped.
        assert 1 <= counts[0] <= at_requeue[rank] + 1, (rank, at_requeue, counts)
        assert counts == list(range(counts[0], counts[0] + len(counts))), (rank, counts)


def _last_count(out: Path, rank: int) -> int:
    """The last count of that rank in a batch job's output (-1 before the job writes it)."""
    return _last(_counts(out.read_text(errors="replace") if out.exists() else ""), rank)


def test_export_none_checkpoints_and_the_task_never_sees_the_secret(srun_cr: SrunCr) -> None:
    counter = srun_cr.script("counter.sh", COUNTER)
    program = srun_cr.script("env-then-count.sh",
                             f"#!/bin/sh\nenv > {srun_cr.base}/env.$SLURM_PROCID\nexec {counter}\n")
    first = srun_cr.start("--export=NONE", "-n1", "-w", "n1", str(program))
    step = first.step()
    first.wait_counts(1, 1)
    ckpt = srun_cr.base / "ckpt"
    srun_cr.stop_with_checkpoint(first, step, ckpt)
    seen = (srun_cr.base / "env.0").read_text()
    assert "SLURM_PROCID=0" in seen and "SRUN_CR_SECRET" not in seen


def _launchers_port(wrapper: int) -> int:
    """The port srun_cr gave its launchers, from its srun's command line."""
    srun = int(Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()[0])
    argv = Path(f"/proc/{srun}/cmdline").read_bytes().split(b"\0")
    return int(argv[argv.index(b"--port") + 1])


def test_a_flood_of_strangers_on_the_launchers_port_takes_neither_descriptors_nor_cpu(
        srun_cr: SrunCr) -> None:
    counter = srun_cr.script("counter.sh", COUNTER)
    first = srun_cr.start("-n1", "-w", "n1", str(counter))
    step = first.step()
    first.wait_counts(1, 1)
    wrapper = first.proc.pid
    port = _launchers_port(wrapper)
    before = starving.descriptors(wrapper)
    held = [starving.challenge(port)[0] for _ in range(100)]
    # At most 64 strangers at once: the oldest are closed as new ones come.
    assert starving.descriptors(wrapper) <= before + 64
    assert "too many connections are waiting to say hello" in first.stderr()

    for conn in held:
        conn.close()
    wait_for(lambda: starving.descriptors(wrapper) == before, 10,
             "the wrapper to close the strangers' connections")
    starving.out_of_descriptors(wrapper, port, first.stderr,
                                "the launchers' port: Too many open files")

    srun_cr.stop_with_checkpoint(first, step, srun_cr.base / "ckpt")


def test_a_bad_srun_port_range_fails_in_one_line_and_leaves_nothing(srun_cr: SrunCr) -> None:
    conf = srun_cr.base / "slurm.conf"
    conf.write_text(srun_cr.conf.read_text() + "\nSrunPortRange=60001-60000\n")
    done = srun_cr.run("-n1", "true", env={"SLURM_CONF": str(conf)})
    assert done.returncode == 1
    assert done.stderr.startswith(f"srun_cr: error: {conf}: SrunPortRange"), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert list(srun_cr.run_dir.iterdir()) == []


def test_a_prefix_srun_accepts_runs_under_srun_cr_and_bcast_is_refused(srun_cr: SrunCr) -> None:
    # --ext is --extra-node-info to 22.05's srun, ambiguous to 24.11's: as srun has it.
    theirs = srun_cr.run("--ext=1", "-n1", "true", program="srun")
    if theirs.returncode == 0:
        counter = srun_cr.script("counter.sh", COUNTER)
        first = srun_cr.start("--ext=1", "-n1", "-w", "n1", str(counter))
        step = first.step()  # registered: the step is srun_cr's, checkpointable
        srun_cr.scancel(step)
        first.wait()
    else:
        ours = srun_cr.run("--ext=1", "-n1", "true")
        assert (ours.returncode, ours.stderr) == (theirs.returncode, theirs.stderr)
    refused = srun_cr.run("--bcast", "-n1", "true")
    assert refused.returncode == 2  # a usage error, as --multi-prog
    assert refused.stderr.startswith("srun_cr: error: srun_cr does not support --bcast: ")
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
