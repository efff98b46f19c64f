"""Shared pieces of the integration tests: the real podman, runc and scrun, and leak checks.

Nothing here fakes a component. A missing one fails the test with what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.accounts import ROOT, Account

REPO = Path(__file__).resolve().parents[2]
SCRUN = Path(sys.executable).parent / "scrun"
IMAGE = "localhost/pyscrun-test:latest"
TASKS_DIR = ROOT.tasks_dir_on(0)

CREATE_START_OCI_CONF = """\
# create/start mode with runc
RunTimeQuery="runc state %n.%u.%j.%s.%t"
RunTimeCreate="runc create --bundle %b %n.%u.%j.%s.%t"
RunTimeStart="runc start %n.%u.%j.%s.%t"
RunTimeKill="runc kill -a %n.%u.%j.%s.%t"
RunTimeDelete="runc delete --force %n.%u.%j.%s.%t"
"""
RUN_OCI_CONF = """\
# run mode with runc, as Slurm's oci.conf example
RunTimeQuery="runc state %n.%u.%j.%s.%t"
RunTimeKill="runc kill -a %n.%u.%j.%s.%t"
RunTimeDelete="runc delete --force %n.%u.%j.%s.%t"
RunTimeRun="runc run %n.%u.%j.%s.%t -b %b"
"""
OCI_CONFS = {"run": RUN_OCI_CONF, "create-start": CREATE_START_OCI_CONF}


# pyscrun.conf's line for a scrun without Slurm (no slurm.conf beside it).
LOCAL_BACKEND = "Backend=local\n"


def require(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.fail(f"{binary} is missing: install it with `make setup` (apt package {package})")
    return path


@dataclass
class Runtime:
    """A scrun set up for one test: its own --root, config dir and podman wrapper, and
    the account whose podman drives it."""

    root: Path
    conf_dir: Path
    wrapper: Path
    account: Account = ROOT

    @property
    def slurm_conf(self) -> Path:
        return self.conf_dir / "slurm.conf"

    @property
    def run_mode(self) -> bool:
        """Whether its runtime runs in run mode (RunTimeRun, or no oci.conf at all)."""
        conf = self.conf_dir / "oci.conf"
        return not conf.exists() or "RunTimeRun=" in conf.read_text()

    @property
    def base(self) -> Path:
        """The test's directory (the account's): the wrapper, the log, what the test makes."""
        return self.wrapper.parent

    @property
    def log(self) -> Path:
        return self.base / "scrun.log"

    def write_conf(self, name: str, text: str) -> None:
        """A configuration file for this scrun, and for every node of the cluster its
        slurm.conf is (if a node reads that file beside its own slurm.conf)."""
        if self.slurm_conf.is_symlink():
            write_node_conf(self.slurm_conf.resolve(), name, text)
        elif name == "pyscrun.conf":
            text = LOCAL_BACKEND + text
        (self.conf_dir / name).write_text(text)

    def anchor_pid(self, container_id: str) -> int:
        """The pid of the container's anchor, from its state file (callers are given
        the stand-in's pid, not this one)."""
        return int(json.loads((self.root / container_id / "state.json").read_text())["pid"])

    def log_errors(self) -> list[str]:
        """The runtime's logged errors, for a failure's message."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []
        return [line for line in lines if " error: " in line]

    def scrun(self, *args: str, input: bytes | None = None, timeout: float = 60,
              env: dict[str, str] | None = None, cwd: Path | None = None,
              ) -> subprocess.CompletedProcess[str]:
        """Run scrun. Its output goes to files, not pipes: after create, the anchor
        holds the caller's stdio for the container, as runc's create does."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            done = self.account.run(
                [str(self.wrapper), *args], input=input, stdout=out, stderr=err,
                stdin=None if input is not None else subprocess.DEVNULL,
                timeout=timeout, env=env, cwd=cwd)
            out.seek(0)
            err.seek(0)
            return subprocess.CompletedProcess(
                done.args, done.returncode, out.read().decode(), err.read().decode())


def make_runtime(base: Path, oci_conf: str | None, extra_files: dict[str, str] | None = None,
                 account: Account = ROOT, default_root: bool = False,
                 cluster_conf: Path | None = None) -> Runtime:
    """scrun in base for account, through the cluster of cluster_conf (None: the local
    backend). default_root: no --root, scrun's own default (the account's runtime dir),
    as a user who passes none."""
    root = account.runtime_dir / "pyscrun" if default_root else base / "root"
    conf_dir = base / "etc"
    conf_dir.mkdir(parents=True, exist_ok=True)
    if oci_conf is not None:
        (conf_dir / "oci.conf").write_text(oci_conf)
    files = {**(extra_files or {})}
    if cluster_conf is not None:
        (conf_dir / "slurm.conf").symlink_to(cluster_conf)
    else:
        # The slurm.conf scrun is given is missing: it runs containers on this machine
        # only when told so.
        files["pyscrun.conf"] = LOCAL_BACKEND + files.get("pyscrun.conf", "")
    for name, text in files.items():
        (conf_dir / name).write_text(text)
    wrapper = base / "scrun"
    # podman passes no --log: without one the anchor's and agents' messages would be
    # lost, and a failure could not say why (a caller's own --log, later, wins).
    root_option = "" if default_root else f" --root {root}"
    wrapper.write_text(
        f"#!/bin/sh\nexec {SCRUN}{root_option} -f {conf_dir / 'slurm.conf'}"
        f" --log {base / 'scrun.log'} \"$@\"\n")
    wrapper.chmod(0o755)
    for path in (base, conf_dir):
        os.chown(path, account.uid, account.gid)
    return Runtime(root, conf_dir, wrapper, account)


def podman(runtime: Runtime, *args: str, input: bytes | None = None, timeout: float = 120,
           ) -> subprocess.CompletedProcess[bytes]:
    require("podman", "podman")
    return runtime.account.run(["podman", "--runtime", str(runtime.wrapper), *args],
                               input=input, timeout=timeout)


def checkout_reachable(user: Account) -> None:
    """The users run the checkout's scrun: say how to fix it when they cannot."""
    done = user.run(["test", "-x", str(SCRUN)])
    if done.returncode != 0:
        pytest.fail(f"{user.name} cannot run {SCRUN}: run `make setup` (scripts/users-setup.sh "
                    f"lets others traverse the directories above {REPO})")


def podman_ok(runtime: Runtime, *args: str) -> str:
    """podman's output (stripped); a failure says podman's error and the runtime's."""
    done = podman(runtime, *args)
    assert done.returncode == 0, (f"podman {' '.join(args)}: {done.stderr.decode()}",
                                  runtime.log_errors())
    return done.stdout.decode().strip()


def podman_command_line(runtime: Runtime, *args: str) -> str:
    """podman with the account's configuration and the runtime as one shell command
    line, for a terminal to run (tmux passes no environment of the test's)."""
    return runtime.account.command_line(["podman", "--runtime", str(runtime.wrapper), *args])


def live_processes(machine: int = 0) -> Iterator[tuple[str, int, str, str]]:
    """(pid, uid, name, command line) of each live process on machine (zombies
    excluded); the name is the kernel's (comm), which a process may set apart from its
    command line."""
    for entry in machine_path(machine, "/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            uid = entry.stat().st_uid
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        name, _, rest = stat.partition("(")[2].rpartition(")")
        if rest.split()[0] not in ("Z", "X"):
            yield entry.name, uid, name, cmdline


def process_ended(pid: int) -> bool:
    """Whether pid has ended: gone, or a zombie its parent has not reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(b")") + 2:].split()[0] in (b"Z", b"X")


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention text (this one aside)."""
    return [f"{pid}: {cmdline.strip()}" for pid, _, _, cmdline in live_processes()
            if text in cmdline and int(pid) != os.getpid()]


def machines(slurm_conf: Path | None) -> list[int]:
    """The login side (0) and, for a cluster of separate machines, the pid of each
    node's first process as this side sees it: /proc/PID/root is the node's own /,
    `nsenter -t PID -m -p` runs a command on the node."""
    found = [0]
    if slurm_conf is None:
        return found
    for pidfile in sorted((slurm_conf.resolve().parent / "run").glob("node.*.pid")):
        try:
            pid = pidfile.read_text().strip()
            found += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def on_machine(machine: int, argv: list[str]) -> list[str]:
    return argv if machine == 0 else ["nsenter", "-t", str(machine), "-m", "-p", "--", *argv]


def machine_path(machine: int, path: str) -> Path:
    return Path(path) if machine == 0 else Path(f"/proc/{machine}/root{path}")


def runc_containers(machine: int = 0, account: Account = ROOT) -> set[str]:
    root = machine_path(machine, str(account.runc_root_on(machine)))
    if not root.is_dir():
        return set()  # runc list would make it (root's, in the way of the user's runc)
    done = subprocess.run(["runc", "--root", str(root), "list", "-q"], capture_output=True,
                          text=True, check=False)
    return set(done.stdout.split())


def runc_state_dirs(machine: int = 0, account: Account = ROOT) -> set[str]:
    """runc list skips a state dir it cannot load (a runtime killed half way through
    create): such a dir still blocks the name."""
    root = machine_path(machine, str(account.runc_root_on(machine)))
    return {p.name for p in root.iterdir()} if root.is_dir() else set()


def _runc_states(names: list[str], on: list[int], account: Account) -> str:
    """What runc says of containers left behind: how they were left tells who failed."""
    said = []
    for name in names:
        for machine in on:
            runc = ["runc", "--root", str(account.runc_root_on(machine)), "state", name]
            done = subprocess.run(on_machine(machine, account.command(runc)),
                                  capture_output=True, text=True, check=False)
            if done.returncode == 0 or machine == on[-1]:
                said.append(f"\nrunc state {name}: {done.stdout or done.stderr}")
                break
    return "".join(said)


def slurm_jobs(slurm_conf: Path) -> set[str]:
    done = subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True,
                          env={**os.environ, "SLURM_CONF": str(slurm_conf)}, check=False)
    if done.returncode != 0:
        pytest.fail(f"squeue failed: {done.stderr.strip()}")
    return set(done.stdout.splitlines())


class Leftovers:
    """What a test leaves behind, compared with what was there before it started: each
    kind of check says what it looks at (_snapshot) and how it cleans up (_clean)."""

    label = "left behind"
    before: dict[str, set[str]]

    def _snapshot(self) -> dict[str, set[str]]:
        raise NotImplementedError

    def _clean(self, left: dict[str, list[str]]) -> None:
        raise NotImplementedError

    def _explain(self, left: dict[str, list[str]]) -> str:
        return ""

    def check(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            now = self._snapshot()
            left = {what: sorted(now[what] - self.before.get(what, set()))
                    for what in now if now[what] - self.before.get(what, set())}
            if not left:
                return
            if time.monotonic() > deadline:
                explained = self._explain(left)
                self._clean(left)
                pytest.fail(f"{self.label}: {left}{explained}")
            time.sleep(0.2)


class LeakCheck(Leftovers):
    """The runtime's processes, spool dirs, runc containers and task dirs on every
    machine, and Slurm jobs; for an ordinary user's runtime, every process of the
    user's on every machine too (rootless podman's own pause process aside)."""

    def __init__(self, runtime: Runtime, marker: str, slurm_conf: Path | None = None) -> None:
        self.runtime = runtime
        self.marker = marker
        self.slurm_conf = slurm_conf
        self.before = self._snapshot()

    def _snapshot(self) -> dict[str, set[str]]:
        root = self.runtime.root
        found = {
            "processes": set(processes_mentioning(self.marker)),
            "spool dirs": {p.name for p in root.iterdir()} if root.exists() else set(),
            "runc containers": set(),
            "runc state dirs": set(),
            "task dirs": set(),
        }
        # What each machine of the cluster holds: its own runc state and task dirs.
        account = self.runtime.account
        for machine in machines(self.slurm_conf):
            tasks = machine_path(machine, str(account.tasks_dir_on(machine)))
            found["runc containers"] |= runc_containers(machine, account)
            found["runc state dirs"] |= runc_state_dirs(machine, account)
            found["task dirs"] |= {p.name for p in tasks.iterdir()} if tasks.is_dir() else set()
        if not account.is_root:
            found["the user's processes"] = {
                line for machine in machines(self.slurm_conf)
                for line in _processes_of(account.uid, machine)}
        if self.slurm_conf is not None:
            found["slurm jobs"] = slurm_jobs(self.slurm_conf)
        return found

    def _explain(self, left: dict[str, list[str]]) -> str:
        return _runc_states(left.get("runc containers", []), machines(self.slurm_conf),
                            self.runtime.account)

    def _clean(self, left: dict[str, list[str]]) -> None:
        """Remove what a failed test left, so that the tests after it do not fail too."""
        for container in left.get("spool dirs", []):
            self.runtime.scrun("delete", "--force", container)
        for line in left.get("processes", []):
            try:
                os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass
        for line in left.get("the user's processes", []):
            where, pid = line.split(":", 2)[:2]
            subprocess.run(on_machine(int(where), ["kill", "-9", pid]), check=False,
                           capture_output=True)
        for job in left.get("slurm jobs", []):
            assert self.slurm_conf is not None
            slurm(self.slurm_conf, "scancel", job.split()[0])
        account = self.runtime.account
        for machine in machines(self.slurm_conf):
            runc = ["runc", "--root", str(account.runc_root_on(machine))]
            for container in {*left.get("runc containers", []), *left.get("runc state dirs", [])}:
                subprocess.run(on_machine(machine, account.command([*runc, "delete", "--force",
                                                                    container])),
                               capture_output=True, check=False)
            for name in left.get("task dirs", []):
                shutil.rmtree(machine_path(machine, str(account.tasks_dir_on(machine) / name)),
                              ignore_errors=True)


def _processes_of(uid: int, machine: int) -> set[str]:
    """uid's live processes on machine, as `machine:pid: command line`, rootless
    podman's own pause process aside."""
    return {f"{machine}:{pid}: {cmdline.strip()}"
            for pid, owner, name, cmdline in live_processes(machine)
            if owner == uid and "catatonit" not in cmdline and name != "podman pause"}


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def make_bundle(base: Path, args: Sequence[str], terminal: bool = False) -> Path:
    """An OCI bundle with a busybox rootfs, made with the real `runc spec`."""
    require("runc", "runc")
    busybox = require("busybox", "busybox-static")
    bundle = base / "bundle"
    rootfs = bundle / "rootfs"
    for sub in ("bin", "proc", "sys", "dev", "tmp", "etc"):
        (rootfs / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy(busybox, rootfs / "bin" / "busybox")
    for applet in ("sh", "echo", "cat", "sleep", "true", "env", "hostname", "stty", "ls"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    subprocess.run(["runc", "spec"], cwd=bundle, check=True)
    config = json.loads((bundle / "config.json").read_text())
    config["process"]["args"] = list(args)
    config["process"]["terminal"] = terminal
    config["root"]["readonly"] = False
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


CLUSTER_SCRIPT = REPO / "scripts" / "cluster.sh"


def cluster_up(nodes: int) -> Path:
    """The project's loopback Slurm cluster with this many nodes; its slurm.conf."""
    require("slurmctld", "slurmctld")
    require("slurmd", "slurmd")
    require("munged", "munge")
    # Job ids name runc containers and task dirs: each start of the cluster begins where
    # no earlier one (of this run or a past one) can have reached, so a leftover of one
    # test fails that test's leak check, never a later test's container.
    first_job = int(time.time() * 100) % 60_000_000 + 1
    done = subprocess.run(["bash", str(CLUSTER_SCRIPT), "up", str(nodes)], capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "PYSCRUN_FIRST_JOB_ID": str(first_job)})
    if done.returncode != 0:
        pytest.fail(f"cluster.sh up {nodes} failed:\n{done.stderr[-2000:]}")
    last = done.stdout.strip().splitlines()[-1]
    return Path(last.removeprefix("export SLURM_CONF="))


def cluster_down() -> None:
    subprocess.run(["bash", str(CLUSTER_SCRIPT), "down"], capture_output=True, timeout=120,
                   check=False)


# What each compute node reads beside its own slurm.conf, as slurmstepd does.
NODE_FILES = ("oci.conf", "pyscrun.conf")


def make_slurm_runtime(base: Path, cluster_conf: Path, oci_conf: str | None = None,
                       extra_files: dict[str, str] | None = None, account: Account = ROOT,
                       default_root: bool = False) -> Runtime:
    """scrun for the Slurm backend: a conf dir of the test's own beside the cluster's
    slurm.conf, so the test can add its oci.conf or scrun.lua; the nodes get the same
    oci.conf and pyscrun.conf beside their own slurm.conf."""
    runtime = make_runtime(base, oci_conf, extra_files, account, default_root, cluster_conf)
    files = {"oci.conf": oci_conf, **(extra_files or {})}
    for name in NODE_FILES:
        write_node_conf(cluster_conf, name, files.get(name))
    return runtime


def write_node_conf(cluster_conf: Path, name: str, text: str | None) -> None:
    """name beside each node's own slurm.conf (removed where text is None)."""
    if name not in NODE_FILES:
        return
    for node_dir in sorted((cluster_conf.parent / "nodes").glob("n*")):
        if text is None:
            (node_dir / name).unlink(missing_ok=True)
        else:
            (node_dir / name).write_text(text)


def slurm(cluster_conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "SLURM_CONF": str(cluster_conf)})


def whole_cluster_job(cluster_conf: Path, seconds: int, *options: str) -> str:
    """Submits a job that takes all three nodes for that long; returns its id."""
    submitted = slurm(cluster_conf, "sbatch", "--parsable", "--exclusive", "-N3", "--time=1",
                      "--output=/dev/null", *options, "--wrap", f"sleep {seconds}")
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip().split(";")[0]


class Cluster:
    """The loopback cluster of separate machines, resized on demand: tests ask for the
    node count they need."""

    def __init__(self) -> None:
        self.nodes = 0
        self.conf: Path | None = None

    def up(self, nodes: int) -> Path:
        if nodes != self.nodes or self.conf is None:
            self.conf = cluster_up(nodes)
            self.nodes = nodes
        return self.conf


def hangs_and_failures(count: int, run_once: Callable[[], subprocess.CompletedProcess[bytes]],
                       runtime: Runtime | None = None) -> list[str]:
    """Run count times in a row; what hung (the call timed out) or failed, each a line
    (with the errors runtime logged meanwhile, if given)."""
    failures = []
    for i in range(count):
        logged = len(runtime.log_errors()) if runtime is not None else 0
        try:
            done = run_once()
        except subprocess.TimeoutExpired:
            failures.append(f"run {i}: hung")
            continue
        if done.returncode != 0:
            errors = runtime.log_errors()[logged:] if runtime is not None else []
            failures.append(f"run {i}: rc={done.returncode} {done.stderr[-300:]!r} {errors}")
            # Whole, for a failing test's report (its captured output): the assertion
            # shows the failures cut short.
            print(f"run {i}: exit {done.returncode}, stderr:\n"
                  f"{done.stderr.decode(errors='replace')}\nlogged: {errors}")
    return failures
