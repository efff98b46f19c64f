"""Compute nodes that are other machines: what crosses between them and the login side
(the channel, the container's stdio) and who may use the anchor's port.

As root: scrun's own command line, with bundles of root's, as runc's is used; what an
ordinary user's podman does is in the tests that run as one."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyscrun.channel import auth, frames
from pyscrun.node import agent_command
from tests.integration import starving
from tests.integration.harness import (
    TASKS_DIR,
    Cluster,
    Runtime,
    machines,
    make_bundle,
    make_slurm_runtime,
    on_machine,
    require,
    slurm,
    wait_for,
)
from tests.integration.reliability import ScopedLeakCheck, agent_pids


def test_the_nodes_are_machines_of_their_own(cluster: Cluster, tmp_path: Path) -> None:
    """Each node has its own hostname, /run, /tmp and pid space: nothing the login side
    keeps there is seen on a node."""
    conf = cluster.up(3)
    marker = f"pyscrun-login-side-{os.getpid()}"
    for where in ("/run", "/tmp"):
        (Path(where) / marker).touch()
    try:
        done = slurm(conf, "srun", "-N3", "--ntasks-per-node=1", "sh", "-c",
                     f"echo $(hostname) $(ls /run /tmp | grep -c {marker}) "
                     f"$(ls /proc | grep -c '^{os.getpid()}$')")
    finally:
        for where in ("/run", "/tmp"):
            (Path(where) / marker).unlink()
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["n1 0 0", "n2 0 0", "n3 0 0"]


class Running:
    """A container started through scrun on the one-node cluster, its stdout in a file."""

    def __init__(self, runtime: Runtime, bundle: Path, out: Path, name: str) -> None:
        self.runtime, self.name, self.out = runtime, name, out
        with open(out, "wb") as stdout:
            created = subprocess.run([str(runtime.wrapper), "create", "-b", str(bundle), name],
                                     stdout=stdout, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, check=False)
        assert created.returncode == 0, runtime.log_errors()
        assert runtime.scrun("start", name).returncode == 0
        wait_for(lambda: agent_pids(runtime), 30, "the node agent")
        environ = Path(f"/proc/{agent_pids(runtime)[0]}/environ").read_bytes().split(b"\0")
        env = dict(e.decode().partition("=")[::2] for e in environ if b"=" in e)
        self.port = int(env["PYSCRUN_AGENT_PORT"])
        self.secret = bytes.fromhex(env["PYSCRUN_AGENT_SECRET"])
        self.agent_env = env

    def state(self) -> dict[str, object]:
        done = self.runtime.scrun("state", self.name)
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    def exit_status(self) -> object:
        state = json.loads((self.runtime.root / self.name / "state.json").read_text())
        return state.get("exit_status")


COUNTER = ["sh", "-c", "i=0; while [ $i -lt 40 ]; do echo $i; i=$((i+1)); sleep 0.1; done; exit 7"]


@pytest.fixture
def counting(cluster: Cluster, tmp_path: Path) -> Iterator[Running]:
    conf = cluster.up(1)
    runtime = make_slurm_runtime(tmp_path, conf)
    leaks = ScopedLeakCheck(runtime, str(tmp_path), conf)
    running = Running(runtime, make_bundle(tmp_path, COUNTER), tmp_path / "out", "c1")
    yield running
    runtime.scrun("delete", "--force", "c1")
    leaks.check()


def _closed_without_a_word(conn: socket.socket) -> bool:
    try:
        return conn.recv(4096) == b""
    except ConnectionResetError:
        return True
    finally:
        conn.close()


def test_strangers_on_the_agents_port_get_nothing_and_change_nothing(counting: Running) -> None:
    """Garbage, a wrong secret, a recorded exchange replayed and a proven connection
    that skips the hello are each dropped with a log line; the container counts on to
    its end and its exit status is its own."""
    garbage, _ = starving.challenge(counting.port)
    garbage.sendall(b"GET / HTTP/1.0\r\n\r\n")
    assert _closed_without_a_word(garbage)

    wrong, challenge = starving.challenge(counting.port)
    wrong.sendall(frames.frame(frames.RESPONSE, auth.answer(b"x" * 32, challenge)))
    assert _closed_without_a_word(wrong)

    recorded, challenge = starving.challenge(counting.port)
    answer = frames.frame(frames.RESPONSE, auth.answer(counting.secret, challenge))
    recorded.sendall(answer)
    proof = recorded.recv(4096)
    assert frames.HEADER.unpack_from(proof)[0] == frames.RESPONSE
    # Proven, but an exit report instead of a hello: not an agent.
    recorded.sendall(frames.message({"event": "exit", "status": 0}))
    assert _closed_without_a_word(recorded)

    replay, _ = starving.challenge(counting.port)
    replay.sendall(answer + frames.message({"op": "agent-hello", "task": "0", "node": "x"}))
    assert _closed_without_a_word(replay)

    assert counting.state()["status"] == "running"
    wait_for(lambda: counting.state()["status"] == "stopped", 30, "the container to end")
    assert counting.exit_status() == 7
    assert counting.out.read_text().split() == [str(i) for i in range(40)]
    refusals = [line for line in counting.runtime.log_errors() if "refused a connection" in line]
    assert len(refusals) == 4, refusals


def test_an_anchor_out_of_descriptors_neither_spins_nor_stops_accepting(
        cluster: Cluster, tmp_path: Path) -> None:
    conf = cluster.up(1)
    runtime = make_slurm_runtime(tmp_path, conf)
    leaks = ScopedLeakCheck(runtime, str(tmp_path), conf)
    counter = ["sh", "-c", "i=0; while [ $i -lt 100 ]; do echo $i; i=$((i+1)); sleep 0.1; done; "
               "exit 7"]
    running = Running(runtime, make_bundle(tmp_path, counter), tmp_path / "out", "c2")
    anchor = int(json.loads((runtime.root / "c2" / "state.json").read_text())["pid"])
    starving.out_of_descriptors(anchor, running.port, lambda: "\n".join(runtime.log_errors()),
                       "the agents' port: Too many open files")
    wait_for(lambda: running.state()["status"] == "stopped", 30, "the container to end")
    assert running.exit_status() == 7
    assert running.out.read_text().split() == [str(i) for i in range(100)]
    runtime.scrun("delete", "--force", "c2")
    leaks.check()


def _agent_on_node(conf: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A node agent started by hand on the cluster's first node."""
    node = machines(conf)[1]
    argv = on_machine(node, ["env", "-i", *(f"{k}={v}" for k, v in env.items()),
                             *agent_command()])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_an_agent_with_a_wrong_secret_is_refused(counting: Running) -> None:
    env = {k: v for k, v in counting.agent_env.items()
           if k.startswith(("PYSCRUN_AGENT_", "SLURM_")) or k == "PATH"}
    env["PYSCRUN_AGENT_SECRET"] = (b"y" * 32).hex()
    conf = counting.runtime.slurm_conf.resolve()
    done = _agent_on_node(conf, env)
    assert done.returncode == 255
    assert "wrong secret" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert counting.state()["status"] == "running"
    wait_for(lambda: counting.state()["status"] == "stopped", 30, "the container to end")
    assert counting.exit_status() == 7


def test_an_agent_whose_anchor_is_gone_exits_and_leaves_nothing(cluster: Cluster,
                                                                tmp_path: Path) -> None:
    conf = cluster.up(1)
    bundle = make_bundle(tmp_path, ["true"])
    nobody = socket.create_server(("127.0.0.1", 0))
    port = nobody.getsockname()[1]
    nobody.close()
    env = {"PATH": os.environ["PATH"], "PYSCRUN_AGENT_CONTAINER_ID": "gone",
           "PYSCRUN_AGENT_BUNDLE": str(bundle), "PYSCRUN_AGENT_JOB_ID": "999999",
           "PYSCRUN_AGENT_PORT": str(port), "PYSCRUN_AGENT_SECRET": (b"z" * 32).hex(),
           "SLURM_SRUN_COMM_HOST": "127.0.0.1", "SLURM_CONF": str(conf)}
    node = machines(conf)[1]
    before = set(os.listdir(f"/proc/{node}/root{TASKS_DIR}")) \
        if Path(f"/proc/{node}/root{TASKS_DIR}").is_dir() else set()
    started = time.monotonic()
    done = _agent_on_node(conf, env)
    assert done.returncode == 255
    assert "cannot reach 127.0.0.1 port" in done.stderr, done.stderr
    assert time.monotonic() - started < 30
    after = set(os.listdir(f"/proc/{node}/root{TASKS_DIR}")) \
        if Path(f"/proc/{node}/root{TASKS_DIR}").is_dir() else set()
    assert after == before


def test_the_task_dir_is_on_the_node_not_on_the_login_side(counting: Running) -> None:
    state = json.loads((counting.runtime.root / "c1" / "state.json").read_text())
    job = str(state["job_id"])
    node = machines(counting.runtime.slurm_conf.resolve())[1]
    on_node = Path(f"/proc/{node}/root{TASKS_DIR}")
    # The agent runs before it has made the task dir.
    wait_for(lambda: on_node.is_dir() and any(
        p.name.startswith(f"oci-job{job}-") for p in on_node.iterdir()), 30, "the task dir")
    assert not list(TASKS_DIR.glob(f"oci-job{job}-*"))


# 12 000 000 numbers: about 90 MB, far more than the anchor may hold at once.
LINES = 12_000_000
SLOW_READER_PAUSE = 4.0
# The anchor's resident memory while its caller does not read: a few MiB of buffers
# over the interpreter's own (about 20 MiB).
ANCHOR_RSS_LIMIT = 60 << 20


def test_output_across_machines_is_complete_ordered_and_waits_for_a_slow_reader(
        cluster: Cluster, tmp_path: Path) -> None:
    conf = cluster.up(1)
    runtime = make_slurm_runtime(tmp_path, conf)
    leaks = ScopedLeakCheck(runtime, str(tmp_path), conf)
    bundle = make_bundle(tmp_path, ["sh", "-c", f"busybox seq 1 {LINES}; echo err >&2; exit 4"])
    read_end, write_end = os.pipe()
    created = subprocess.run([str(runtime.wrapper), "create", "-b", str(bundle), "big"],
                             stdout=write_end, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL, check=False)
    os.close(write_end)
    try:
        assert created.returncode == 0, runtime.log_errors()
        anchor = runtime.anchor_pid("big")
        assert runtime.scrun("start", "big").returncode == 0
        time.sleep(SLOW_READER_PAUSE)
        rss = _rss(anchor)
        assert json.loads(runtime.scrun("state", "big").stdout)["status"] == "running"
        got = bytearray()
        while chunk := os.read(read_end, 1 << 20):
            got += chunk
    finally:
        os.close(read_end)
    assert rss < ANCHOR_RSS_LIMIT, f"the anchor held {rss >> 20} MiB"
    expected = "".join(f"{i}\n" for i in range(1, LINES + 1)).encode()
    assert len(got) == len(expected) and got == expected
    wait_for(lambda: json.loads(runtime.scrun("state", "big").stdout)["status"] == "stopped",
             30, "the container to end")
    assert json.loads((runtime.root / "big" / "state.json").read_text())["exit_status"] == 4
    assert runtime.scrun("delete", "big").returncode == 0
    leaks.check()


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10
    pytest.fail(f"no VmRSS for {pid}")


def _numbers(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split() if word.isdigit()]


def _node_of_the_job(conf: Path) -> str:
    lines = [line.split() for line in slurm(conf, "squeue", "-h", "-o", "%i %N").stdout.splitlines()]
    assert len(lines) == 1, lines
    return lines[0][1]


def test_checkpoint_images_cross_machines_when_only_the_login_side_has_the_image_path(
        cluster: Cluster, tmp_path: Path) -> None:
    """The image path in the login side's own /tmp, which no node sees: the images come
    over the channel from the node that dumps, and go to the node that restores, which
    is another one; the count goes on there."""
    require("criu", "criu (installed by scripts/criu-setup.sh through `make setup`)")
    conf = cluster.up(3)
    runtime = make_slurm_runtime(tmp_path, conf)
    leaks = ScopedLeakCheck(runtime, str(tmp_path), conf)
    bundle = make_bundle(tmp_path, ["sh", "-c", "i=0; while true; do i=$((i+1)); echo $i; "
                                                "sleep 0.2; done"])
    images = Path(tempfile.mkdtemp(prefix="pyscrun-images-", dir="/tmp"))
    old_node = ""
    try:
        before = Running(runtime, bundle, tmp_path / "before", "m1")
        wait_for(lambda: len(_numbers(before.out)) >= 5, 30, "the count")
        old_node = _node_of_the_job(conf)
        done = runtime.scrun("checkpoint", "--image-path", str(images), "m1")
        assert done.returncode == 0, done.stderr
        assert (images / "inventory.img").is_file()
        assert not list(images.glob(".pyscrun-probe-*"))
        assert runtime.scrun("delete", "m1").returncode == 0
        last = _numbers(before.out)[-1]
        drained = slurm(conf, "scontrol", "update", f"NodeName={old_node}", "State=DRAIN",
                        "Reason=pyscrun-test")
        assert drained.returncode == 0, drained.stderr
        after = tmp_path / "after"
        # Files, not pipes: the anchor keeps the caller's stdio for the container.
        with open(after, "wb") as stdout, open(tmp_path / "restore.err", "wb") as stderr:
            restored = subprocess.run(
                [str(runtime.wrapper), "restore", "-b", str(bundle), "--image-path", str(images),
                 "m2"], stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, timeout=120,
                check=False)
        assert restored.returncode == 0, (tmp_path / "restore.err").read_text()
        assert _node_of_the_job(conf) != old_node
        wait_for(lambda: len(_numbers(after)) >= 5, 30, "the restored count")
        counted = _numbers(after)
        assert counted == sorted(counted) and counted[0] > last - 2 and counted[0] > 3, (
            last, counted[:5])
        assert runtime.scrun("delete", "--force", "m2").returncode == 0
    finally:
        if old_node:
            slurm(conf, "scontrol", "update", f"NodeName={old_node}", "State=RESUME")
        shutil.rmtree(images, ignore_errors=True)
    leaks.check()
