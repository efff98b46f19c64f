"""Helpers of the reliability and security tests (faults, load, hostile input, access).

A leak check scoped to what one test can have made, the test cluster's daemons (found
through their pid files, never by name), and the processes of one container.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from pyscrun.node import agent_command
from tests.integration.harness import (
    CLUSTER_SCRIPT,
    RUN_OCI_CONF,
    LeakCheck,
    Runtime,
    machines,
    make_runtime,
    on_machine,
    require,
    runc_containers,
    slurm,
    wait_for,
)

# -- the leak check -------------------------------------------------------------------

def first_job_id(slurm_conf: Path | None) -> int:
    """The cluster's FirstJobId: runtimes name containers and task dirs after job ids."""
    if slurm_conf is None:
        return 0
    found = re.search(r"^FirstJobId=(\d+)", slurm_conf.resolve().read_text(), re.MULTILINE)
    return int(found.group(1)) if found else 1


def _job_of_runc_name(name: str) -> str:
    """%n.%u.%j.%s.%t: the job part."""
    parts = name.rsplit(".", 3)
    return parts[1] if len(parts) == 4 else ""


def _job_of_task_dir(name: str) -> str:
    found = re.fullmatch(r"oci-job(.+)-\d+", name)
    return found.group(1) if found else ""


def _environ_mentions(pid: str, needles: tuple[bytes, ...]) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X") and any(e.startswith(n) for e in environ for n in needles)


class ScopedLeakCheck(LeakCheck):
    """The harness's leak check, limited to what this test can have made (other
    checkouts may run their tests on the same machine at the same time), and extended:

    - runc containers and task dirs of this cluster's jobs (ids from its FirstJobId on)
      and everything in the test's private runc root or ContainerPath;
    - processes that mention the test's paths, and node agents, guards and runtime
      commands of the test's --root (found by their environment);
    - mounts under the test's paths.
    """

    def __init__(self, runtime: Runtime, marker: str, slurm_conf: Path | None = None,
                 private: tuple[Path, ...] = ()) -> None:
        self.first_job = first_job_id(slurm_conf)
        self.private = private
        super().__init__(runtime, marker, slurm_conf)

    def _mine(self, job: str) -> bool:
        return bool(self.first_job) and job.isdigit() and int(job) >= self.first_job

    def _snapshot(self) -> dict[str, set[str]]:
        found = super()._snapshot()
        found["runc containers"] = {n for n in found["runc containers"]
                                    if self._mine(_job_of_runc_name(n))}
        found["task dirs"] = {n for n in found["task dirs"] if self._mine(_job_of_task_dir(n))}
        found["runc state dirs"] = {n for n in found["runc state dirs"]
                                    if self._mine(_job_of_runc_name(n))}
        for where in self.private:
            found[f"entries of {where}"] = (
                {p.name for p in where.iterdir()} if where.is_dir() else set())
        root = str(self.runtime.root).encode()
        needles = (b"SCRUN_ROOT=" + root,)
        found["processes"] |= {
            f"{pid}: {_cmdline(pid)}" for pid in os.listdir("/proc")
            if pid.isdigit() and int(pid) != os.getpid() and _environ_mentions(pid, needles)}
        found["mounts"] = {line.split()[4] for line in
                           Path("/proc/self/mountinfo").read_text().splitlines()
                           if line.split()[4].startswith(self.marker)}
        return found


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace").strip()
    except OSError:
        return "?"


def private_runtime(base: Path) -> tuple[Runtime, ScopedLeakCheck]:
    """A local runtime in run mode with runc's state and the task dirs under base, and
    its leak check, which takes all of those as the test's own (runc's root is
    `leaks.private[0]`)."""
    runc_root, tasks = base / "runc", base / "tasks"
    text = RUN_OCI_CONF.replace("runc ", f"runc --root {runc_root} ")
    runtime = make_runtime(base, f"ContainerPath={tasks}\n{text}")
    return runtime, ScopedLeakCheck(runtime, str(base), private=(runc_root, tasks))


def with_root(runtime: Runtime, root: Path) -> Runtime:
    """runtime with its --root moved to root."""
    text = runtime.wrapper.read_text()
    runtime.wrapper.write_text(text.replace(f"--root {runtime.root} ", f"--root {root} "))
    runtime.root = root
    return runtime


# -- containers -----------------------------------------------------------------------

def podman_background(runtime: Runtime, *args: str) -> subprocess.Popen[bytes]:
    require("podman", "podman")
    return subprocess.Popen(
        runtime.account.command(["podman", "--runtime", str(runtime.wrapper), *args]),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def states(runtime: Runtime) -> list[dict[str, object]]:
    found = []
    for path in runtime.root.glob("*/state.json"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return found


def wait_running(runtime: Runtime, count: int = 1, timeout: float = 60) -> list[dict[str, object]]:
    """The states of count containers under runtime's root once all of them run."""
    wait_for(lambda: sum(s.get("status") == "running" for s in states(runtime)) >= count,
             timeout, f"{count} container(s) to run")
    return [s for s in states(runtime) if s.get("status") == "running"]


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def agent_pids(runtime: Runtime) -> list[int]:
    """Node agents (srun tasks, node.agent_command()) of containers under runtime's
    root; their guards, which run detached from the step, are left out."""
    needle = b"SCRUN_ROOT=" + str(runtime.root).encode()
    agent_words = [word.encode() for word in agent_command()[1:]]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[1:1 + len(agent_words)] == agent_words and _environ_mentions(entry.name, (needle,)):
            found.append(int(entry.name))
    return [pid for pid in found if _comm(_parent(pid)) == "slurmstepd"]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def kill_tree_at_once(root: int) -> None:
    """SIGKILL root and every descendant, each stopped first so that none can act on
    another's death: what the end of a step does once KillWait has run out."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            children.setdefault(_parent(int(entry.name)), []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    for signum in (signal.SIGSTOP, signal.SIGKILL):
        for pid in tree:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass


def local_agent_pids(anchor: int) -> list[int]:
    """On the local backend the agent is a fork of the anchor: its child."""
    return [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and _parent(int(p.name)) == anchor]


def wait_container_up(slurm_conf: Path, job_id: str, timeout: float = 60) -> None:
    """Wait until runc, on whichever node, runs the container of the job (named
    %n.%u.%j.%s.%t)."""
    def up() -> bool:
        for machine in machines(slurm_conf):
            for name in runc_containers(machine):
                if _job_of_runc_name(name) != job_id:
                    continue
                done = subprocess.run(on_machine(machine, ["runc", "state", name]),
                                      capture_output=True, text=True, check=False)
                if done.returncode == 0 and json.loads(done.stdout).get("status") == "running":
                    return True
        return False

    wait_for(up, timeout, f"the container of job {job_id} to run")


def job_state(slurm_conf: Path, job_id: str) -> str:
    """JobState of a job as slurmctld knows it ('' once it has forgotten the job)."""
    done = slurm(slurm_conf, "scontrol", "-o", "show", "job", job_id)
    found = re.search(r"JobState=(\S+)", done.stdout)
    return found.group(1) if found else ""


# -- the test cluster's daemons -------------------------------------------------------

def cluster_dir(slurm_conf: Path) -> Path:
    return slurm_conf.resolve().parent


def live_daemon(slurm_conf: Path, pid_file: str, comm: str) -> int | None:
    """The pid of a daemon of this cluster, from its pid file, if it lives and is that
    daemon of this cluster (not a reused pid, not another cluster's daemon)."""
    path = cluster_dir(slurm_conf) / "run" / pid_file
    try:
        pid = int(path.read_text().strip())
        alive_comm = Path(f"/proc/{pid}/comm").read_text().strip()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, ValueError):
        return None
    if alive_comm != comm or str(slurm_conf.resolve()) not in cmdline or _gone(pid):
        return None
    return pid


def daemon_pid(slurm_conf: Path, pid_file: str, comm: str) -> int:
    pid = live_daemon(slurm_conf, pid_file, comm)
    if pid is None:
        pytest.fail(f"no live {comm} of this cluster in {cluster_dir(slurm_conf) / 'run' / pid_file}")
    return pid


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def stop_slurmctld(slurm_conf: Path) -> None:
    pid = daemon_pid(slurm_conf, "slurmctld.pid", "slurmctld")
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: _gone(pid), 30, "slurmctld to stop")


def start_slurmctld(slurm_conf: Path) -> None:
    """As scripts/cluster.sh starts it: `slurmctld -f CONF` from /, output to start.log."""
    conf = slurm_conf.resolve()
    with open(cluster_dir(conf) / "log" / "start.log", "ab") as log:
        subprocess.run([require("slurmctld", "slurmctld"), "-f", str(conf)], cwd="/",
                       stdin=subprocess.DEVNULL, stdout=log, stderr=log, check=True,
                       timeout=60)
    wait_for(lambda: slurm(conf, "squeue", "-h").returncode == 0, 30, "slurmctld to answer")


def _cluster(slurm_conf: Path, *args: str) -> None:
    done = subprocess.run(["bash", str(CLUSTER_SCRIPT), *args], capture_output=True, text=True,
                          timeout=120, check=False,
                          env={**os.environ, "PYSCRUN_CLUSTER_DIR": str(cluster_dir(slurm_conf))})
    if done.returncode != 0:
        pytest.fail(f"cluster.sh {' '.join(args)} failed: {done.stderr.strip()}")


def kill_node(slurm_conf: Path, node: str) -> None:
    """The node dies: everything on it at once (a machine of its own: its first process,
    so the kernel ends its whole pid namespace)."""
    _cluster(slurm_conf.resolve(), "node-kill", node)


def slurmd_pid(slurm_conf: Path, node: str) -> int:
    """The pid of the node's slurmd as this side sees it."""
    conf = slurm_conf.resolve()
    pidfile = cluster_dir(conf) / "run" / f"node.{node}.pid"
    if not pidfile.exists():
        return daemon_pid(conf, f"slurmd.{node}.pid", "slurmd")
    machine = pidfile.read_text().strip()
    try:
        first = Path(f"/proc/{machine}/task/{machine}/children").read_text().split()[0]
        namespace = os.readlink(f"/proc/{first}/ns/pid")
    except (OSError, IndexError):
        pytest.fail(f"the machine {node} is not up")
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and _comm(int(entry.name)) == "slurmd"
                    and os.readlink(entry / "ns" / "pid") == namespace):
                return int(entry.name)
        except OSError:
            continue
    pytest.fail(f"no slurmd runs on {node}")


def start_slurmd(slurm_conf: Path, node: str) -> None:
    """The node back (booted again if it died, else its slurmd started again), then
    answering slurmctld."""
    conf = slurm_conf.resolve()
    _cluster(conf, "node-start", node)

    def responding() -> bool:
        done = slurm(conf, "sinfo", "-h", "-N", "-n", node, "-o", "%T")
        states = done.stdout.split()
        return done.returncode == 0 and bool(states) and not any(s.endswith("*") for s in states)

    wait_for(responding, 60, f"{node} to answer slurmctld")


def reboot_node(slurm_conf: Path, node: str) -> None:
    """The node restarted as an administrator would after a failure: whatever still runs
    there killed, the node marked down (slurmctld then ends the jobs it still counts
    there, as it does once SlurmdTimeout declares a node dead), slurmd started again and
    the node resumed."""
    conf = slurm_conf.resolve()
    kill_node(conf, node)
    _update_node(conf, node, "state=down", "reason=pyscrun test: node restarted")
    start_slurmd(conf, node)
    # ReturnToService=2 may bring the node back as soon as its slurmd registers.
    if "down" in slurm(conf, "sinfo", "-h", "-N", "-n", node, "-o", "%T").stdout:
        _update_node(conf, node, "state=resume")

    def idle() -> bool:
        # One line per partition the node is in.
        done = slurm(conf, "sinfo", "-h", "-N", "-n", node, "-o", "%T")
        states = set(done.stdout.split())
        return bool(states) and states <= {"idle", "mixed", "allocated"}

    wait_for(idle, 30, f"{node} to be back")


def _update_node(slurm_conf: Path, node: str, *settings: str) -> None:
    done = slurm(slurm_conf, "scontrol", "update", f"nodename={node}", *settings)
    if done.returncode != 0:
        pytest.fail(f"scontrol update nodename={node} {' '.join(settings)}: {done.stderr.strip()}")


def markers_absent(*paths: Path) -> list[str]:
    """Marker files that a shell injection would have created (removed if found)."""
    found = [str(p) for p in paths if p.exists()]
    for path in paths:
        path.unlink(missing_ok=True)
    return found
