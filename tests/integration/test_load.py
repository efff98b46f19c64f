"""Load: fifty containers through an ordinary user's podman at once on the three-node
cluster, a thousand `scrun state` calls while they run, and nothing left afterwards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from tests.integration.accounts import USER, account, user_dir
from tests.integration.harness import IMAGE, Cluster, checkout_reachable, make_slurm_runtime
from tests.integration.reliability import ScopedLeakCheck, podman_background, wait_running

CONTAINERS = 50
STATE_CALLS = 1000


def test_fifty_containers_at_once_and_a_thousand_state_calls(cluster: Cluster) -> None:
    conf = cluster.up(3)
    user = account(USER)
    checkout_reachable(user)
    base = user_dir(user)
    runtime = make_slurm_runtime(base, conf, account=user)
    leaks = ScopedLeakCheck(runtime, str(base), conf)
    gate = base / "gate"
    gate.mkdir()
    os.chown(gate, user.uid, user.gid)
    # Each container says hello, waits at the gate (so that all of them run at once
    # while `state` is asked), then prints its number and exits with its own status.
    script = ("echo start-$N-$(hostname); while [ ! -e /gate/open ]; do sleep 0.2; done; "
              "echo out-$N; exit $((N % 8))")
    started = time.monotonic()
    runs = [podman_background(runtime, "run", "--rm", "--uts=host", "-v", f"{gate}:/gate",
                              "-e", f"N={i}", IMAGE, "sh", "-c", script)
            for i in range(CONTAINERS)]
    try:
        running = wait_running(runtime, CONTAINERS, timeout=240)
        ids = [str(s["id"]) for s in running]
        all_running = time.monotonic()

        def ask(k: int) -> str:
            done = runtime.scrun("state", ids[k % len(ids)])
            if done.returncode != 0:
                return f"state {k}: rc={done.returncode} {done.stderr.strip()}"
            document = json.loads(done.stdout)
            if document["id"] != ids[k % len(ids)] or document["status"] != "running":
                return f"state {k}: {document['id']} {document['status']}"
            return ""

        with ThreadPoolExecutor(4) as pool:
            problems = [p for p in pool.map(ask, range(STATE_CALLS)) if p]
        asked = time.monotonic()
        assert problems == []
        (gate / "open").touch()
        wrong = []
        nodes = set()
        for i, run in enumerate(runs):
            out, err = run.communicate(timeout=180)
            lines = out.decode().split()
            if (run.returncode != i % 8 or len(lines) != 2 or not lines[0].startswith(f"start-{i}-")
                    or lines[1] != f"out-{i}"):
                wrong.append(f"container {i}: rc={run.returncode} out={out!r} err={err[-300:]!r}")
            else:
                nodes.add(lines[0].rsplit("-", 1)[1])
        assert wrong == []
        assert len(nodes) > 1, f"every container ran on {nodes}"
    finally:
        (gate / "open").touch()
        for run in runs:
            if run.poll() is None:
                try:
                    run.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    run.kill()
                    run.wait()
    ended = time.monotonic()
    print(f"{CONTAINERS} running after {all_running - started:.1f} s, {STATE_CALLS} state calls "
          f"in {asked - all_running:.1f} s, all ended {ended - asked:.1f} s later")
    leaks.check(timeout=60)
    shutil.rmtree(base, ignore_errors=True)
