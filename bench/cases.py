"""The benchmarks of `make bench`, each measured side by side with its reference."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from bench.harness import (
    CREATE_START_OCI_CONF,
    IMAGE,
    QUICK,
    REPO,
    Result,
    Runtimes,
    User,
    interleave,
    make_bundle,
    median,
    podman_env,
    timed,
)

N = 8 if QUICK else 20


def _scrun(wrapper: Path, *args: str) -> None:
    subprocess.run([str(wrapper), *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)


def cli_ops(rt: Runtimes) -> list[Result]:
    bundle = make_bundle(rt.dir / "ops", ["sleep", "100000"])
    runc_root = str(rt.dir / "runc-root")
    runc = ["runc", "--root", runc_root]
    _scrun(rt.local, "create", "-b", str(bundle), "ops")
    _scrun(rt.local, "start", "ops")
    subprocess.run([*runc, "run", "-d", "-b", str(bundle), "ops-runc"], check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bare = [sys.executable, "-I", "-c", "pass"]
    results = []
    try:
        for op, ours, theirs in (
            ("state", [str(rt.local), "state", "ops"], [*runc, "state", "ops-runc"]),
            ("kill", [str(rt.local), "kill", "ops", "CONT"], [*runc, "kill", "ops-runc", "CONT"]),
        ):
            mine, interp = interleave(N, lambda a=ours: timed(a)[0], lambda: timed(bare)[0])
            _, ref = interleave(N, lambda: 0.0, lambda a=theirs: timed(a)[0])
            results.append(_ratio(f"op-{op}", mine, interp, "s", "bare interpreter start",
                                  "<= 2.0" if op == "state" else ""))
            results.append(_ratio(f"op-{op}-vs-runc", mine, ref, "s", f"runc {op}"))
        # The local backend runs the container at start (its runtime's whole run) and
        # answers once it runs; runc's start only lets a created container go on.
        starts, runc_starts = [], []
        for i in range(N):
            _scrun(rt.local, "create", "-b", str(bundle), f"st{i}")
            starts.append(timed([str(rt.local), "start", f"st{i}"])[0])
            _scrun(rt.local, "delete", "--force", f"st{i}")
            subprocess.run([*runc, "create", "-b", str(bundle), f"st{i}"], check=True,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            runc_starts.append(timed([*runc, "start", f"st{i}"])[0])
            subprocess.run([*runc, "delete", "--force", f"st{i}"], check=True)
        interp = [timed(bare)[0] for _ in range(N)]
        results.append(_ratio("op-start", starts, interp, "s", "bare interpreter start"))
        results.append(_ratio("op-start-vs-runc", starts, runc_starts, "s", "runc start"))
    finally:
        subprocess.run([str(rt.local), "delete", "--force", "ops"], check=False)
        subprocess.run([*runc, "delete", "--force", "ops-runc"], check=False)
    return results


def _ratio(name: str, mine: list[float], ref: list[float], unit: str, reference: str,
           target: str = "") -> Result:
    ratio = median(mine) / median(ref)
    met = None
    if target.startswith("<="):
        met = ratio <= float(target[2:])
    elif target.startswith(">="):
        met = ratio >= float(target[2:])
    return Result(name, median(mine), median(ref), unit, len(mine), ratio, reference, target, met)


def _podman(runtime: str, *args: str, timeout: float = 120, user: User | None = None,
            ) -> tuple[float, int]:
    env = podman_env() if user is None else user.env()
    return timed(["podman", "--runtime", runtime, *args], env=env, timeout=timeout, user=user)


def podman_run(rt: Runtimes) -> list[Result]:
    """root's podman (local backend and Slurm), and an ordinary user's rootless podman
    through Slurm (rootless runc, theirs, as reference)."""
    results = []
    for name, wrapper, target, user in (
            ("podman-run-local", rt.local, "<= 1.25", None),
            ("podman-run-slurm", rt.slurm, "<= 1.5", None),
            ("podman-run-slurm-user", rt.users_slurm, "<= 1.5", rt.user)):
        def run(runtime: str, user: User | None = user) -> float:
            took, status = _podman(runtime, "run", "--rm", IMAGE, "/bin/true", user=user)
            if status != 0:
                sys.exit(f"bench: podman run with {runtime} failed (status {status})")
            return took

        mine, ref = interleave(N, lambda w=wrapper: run(str(w)), lambda: run("runc"))
        results.append(_ratio(name, mine, ref, "s", "podman with runc", target))
    return results


def parallel(rt: Runtimes, count: int = 20) -> list[Result]:
    def wave(runtime: str) -> tuple[float, int]:
        codes: list[int] = []
        lock = threading.Lock()

        def one() -> None:
            try:
                code = _podman(runtime, "run", "--rm", IMAGE, "/bin/true", timeout=60)[1]
            except subprocess.TimeoutExpired:
                code = -1
            with lock:
                codes.append(code)

        threads = [threading.Thread(target=one) for _ in range(count)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - started, sum(1 for c in codes if c != 0)

    mine, failures = wave(str(rt.slurm))
    ref, _ = wave("runc")
    result = _ratio("podman-run-parallel", [mine], [ref], "s", f"{count} at once with runc")
    failed = Result("podman-run-parallel-failures", failures, 0, "", count, float(failures),
                    "failures (must be 0)", "== 0", failures == 0)
    return [result, failed]


def hang_rate(rt: Runtimes) -> list[Result]:
    runs = 40 if QUICK else 200
    bad = 0
    durations = []
    for _ in range(runs):
        try:
            seconds, code = _podman(str(rt.slurm), "run", "--rm", IMAGE, "/bin/true", timeout=60)
            durations.append(seconds)
            bad += code != 0
        except subprocess.TimeoutExpired:
            bad += 1
    return [Result("hang-rate", median(durations), 0, "s", runs, bad / runs,
                   "hangs and failures per run (must be 0)", "== 0", bad == 0)]


def stdout_throughput(rt: Runtimes) -> list[Result]:
    mib = 64 if QUICK else 512

    def throughput(runtime: str) -> float:
        """The rate from the first byte to the last: start-up is podman-run's case."""
        process = subprocess.Popen(
            # busybox head takes no size suffix: the count in bytes.
            ["podman", "--runtime", runtime, "run", "--rm", IMAGE, "head", "-c", str(mib << 20),
             "/dev/zero"], env=podman_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert process.stdout is not None
        fd = process.stdout.fileno()
        first = os.read(fd, 1 << 20)
        started, total = time.perf_counter(), len(first)
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
        ended = time.perf_counter()
        process.wait()
        if total != mib << 20:
            raise RuntimeError(f"{runtime}: {total} bytes arrived of {mib} MiB")
        return ((mib << 20) - len(first)) / (1 << 20) / (ended - started)

    results = []
    runs = 2 if QUICK else 3
    # Through Slurm in both oci.conf modes: run mode (the built-in oci.conf, Slurm's
    # example; runc run detached) and create/start mode.
    for name, wrapper, node_conf in (
            ("stdout-throughput-slurm", rt.slurm, None),
            ("stdout-throughput-slurm-create-start", rt.slurm_create_start, CREATE_START_OCI_CONF),
            ("stdout-throughput-local", rt.local, None)):
        rt.node_oci_conf(node_conf)
        try:
            mine, ref = interleave(runs, lambda w=wrapper: throughput(str(w)),
                                   lambda: throughput("runc"))
        finally:
            rt.node_oci_conf(None)
        results.append(_ratio(name, mine, ref, "MiB/s", "podman with runc", ">= 0.8"))
    return results


def anchor_rss(rt: Runtimes) -> list[Result]:
    bundle = make_bundle(rt.dir / "rss", ["sleep", "100000"])
    _scrun(rt.local, "create", "-b", str(bundle), "rss")
    _scrun(rt.local, "start", "rss")
    try:
        state = subprocess.run([str(rt.local), "state", "rss"], capture_output=True, text=True,
                               check=True).stdout
        anchor = int(json.loads(state)["pid"])
        mine = _rss_mib(anchor)
    finally:
        subprocess.run([str(rt.local), "delete", "--force", "rss"], check=False)
    idle = subprocess.Popen([sys.executable, "-I", "-c", "import time; time.sleep(30)"])
    time.sleep(0.5)
    ref = _rss_mib(idle.pid)
    idle.kill()
    idle.wait()
    result = Result("anchor-rss", mine, ref, "MiB", 1, mine / ref, "bare interpreter RSS",
                    "<= 30 MiB", mine <= 30)
    return [result]


def login_memory(rt: Runtimes) -> list[Result]:
    """What pyscrun keeps running on the login host for one container through Slurm
    (the anchor and what it holds: salloc, srun), as proportional set size, beside a
    plain `srun sleep` of the same cluster (what Slurm's own scrun keeps besides its
    anchor)."""
    name = f"mem{uuid.uuid4().hex[:8]}"
    started = subprocess.run(["podman", "--runtime", str(rt.slurm), "run", "-d", "--name", name,
                              IMAGE, "sleep", "100000"], env=podman_env(), capture_output=True,
                             text=True, check=True)
    container_id = started.stdout.strip()
    srun = subprocess.Popen(["srun", "-N1", "sleep", "100000"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**podman_env(), "SLURM_CONF": str(rt.slurm_conf)})
    try:
        state = subprocess.run([str(rt.slurm), "state", container_id], capture_output=True,
                               text=True, check=True).stdout
        anchor = int(json.loads(state)["pid"])
        time.sleep(2)
        mine = sum(_pss_mib(pid) for pid in [anchor, *_descendants(anchor)])
        ref = sum(_pss_mib(pid) for pid in [srun.pid, *_descendants(srun.pid)])
    finally:
        _podman(str(rt.slurm), "rm", "-f", "-t", "0", name)
        srun.terminate()
        srun.wait()
    return [Result("login-memory-per-container", mine, ref, "MiB", 1, mine / ref,
                   "srun of one task", "<= 16 MiB", mine <= 16)]


def _descendants(pid: int) -> list[int]:
    found = []
    for thread in Path(f"/proc/{pid}/task").iterdir():
        for child in (thread / "children").read_text().split():
            found += [int(child), *_descendants(int(child))]
    return found


def _pss_mib(pid: int) -> float:
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    kib = int(re.search(r"^Pss:\s+(\d+)", rollup, re.MULTILINE).group(1))  # type: ignore[union-attr]
    return kib / 1024


def _rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    kib = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    return kib / 1024


def checkpoint_restore(rt: Runtimes) -> list[Result]:
    memhog = rt.shared / "memhog"
    subprocess.run(["gcc", "-O2", "-static", "-o", str(memhog),
                    str(REPO / "tests/integration/data/memhog.c")], check=True)

    def cycle(runtime: str) -> float:
        name = f"b{uuid.uuid4().hex[:8]}"
        archive = rt.dir / f"{name}.tar"
        code = _podman(runtime, "run", "-d", "--name", name, "-v", f"{memhog}:/memhog:ro",
                       IMAGE, "/memhog", "256")[1]
        assert code == 0
        env = podman_env()
        while b"sum" not in subprocess.run(["podman", "logs", name], env=env,
                                           capture_output=True, check=False).stdout:
            time.sleep(0.2)
        dump, code1 = _podman(runtime, "container", "checkpoint", "--export", str(archive), name)
        _podman(runtime, "rm", "-f", name)
        back, code2 = _podman(runtime, "container", "restore", "--import", str(archive),
                              "--name", name)
        _podman(runtime, "rm", "-f", "-t", "0", name)
        archive.unlink(missing_ok=True)
        if code1 or code2:
            raise RuntimeError(f"checkpoint/restore through {runtime} failed")
        return dump + back

    mine, ref = interleave(1 if QUICK else 3, lambda: cycle(str(rt.slurm)), lambda: cycle("runc"))
    return [_ratio("checkpoint-restore", mine, ref, "s", "podman with runc", "<= 1.5")]
