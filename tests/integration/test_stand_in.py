"""The pid podman is given stands for the container and is never a process of the host:
podman enters its namespaces (`podman cp`, buildah's network set-up), so what it does
there must reach the container's files or nothing, never the host's."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.harness import (
    IMAGE,
    RUN_OCI_CONF,
    Cluster,
    LeakCheck,
    Runtime,
    make_bundle,
    make_runtime,
    make_slurm_runtime,
    podman,
    processes_mentioning,
    wait_for,
)

NAMESPACES = ("mnt", "net", "uts", "ipc", "pid")


def _ns(pid: int, name: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{name}")


def _run_detached(runtime: Runtime, *command: str) -> str:
    """A container started with `podman run -d`; command may begin with run's options."""
    name = f"s{uuid.uuid4().hex[:10]}"
    options = [c for c in command if c.startswith("--")]
    done = podman(runtime, "run", "-d", "--name", name, *options, IMAGE,
                  *command[len(options):])
    assert done.returncode == 0, done.stderr
    return name


def _reported_pid(runtime: Runtime, name: str) -> int:
    done = podman(runtime, "inspect", "--format", "{{.State.Pid}}", name)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def _container_process(tag: str) -> int:
    """The pid, in this host's pid namespace, of the container's `sleep TAG`."""
    wait_for(lambda: bool(_pids_running(tag)), 60, "the container's process")
    return _pids_running(tag)[0]


def _pids_running(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == f"sleep\0{tag}\0".encode():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_the_reported_pid_is_in_namespaces_of_its_own(runtime: Runtime) -> None:
    tag = str(900000 + uuid.uuid4().int % 99999)
    name = _run_detached(runtime, "sleep", tag)
    try:
        pid = _reported_pid(runtime, name)
        container = _container_process(tag)
        for kind in NAMESPACES:
            assert _ns(pid, kind) != _ns(os.getpid(), kind), f"the {kind} namespace is the host's"
        # Its network is loopback alone: nothing set up through it reaches an interface.
        devices = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
        assert [line.split(":")[0].strip() for line in devices] == ["lo"]
        if not runtime.slurm_conf.exists():
            # On this host the stand-in takes the container's own namespaces, as soon
            # as the agent has found the container's init.
            def joined() -> bool:
                return all(_ns(pid, kind) == _ns(container, kind)
                           for kind in ("mnt", "net", "uts", "ipc"))

            wait_for(joined, 10, "the stand-in to join the container's namespaces")
        state = podman(runtime, "inspect", "--format", "{{.State.Status}}", name)
        assert state.stdout.strip() == b"running"
    finally:
        podman(runtime, "rm", "-f", "-t", "0", name)
    wait_for(lambda: not processes_mentioning(f"sleep {tag}"), 30, "the container to end")


def test_podman_cp_reaches_the_container_and_never_the_host(runtime: Runtime) -> None:
    tag = uuid.uuid4().hex[:12]
    copied_in, answer, planted = f"in-{tag}", f"out-{tag}", Path(f"/tmp/host-{tag}")
    planted.write_text("the host's\n")
    name = _run_detached(runtime, "sh", "-c",
                         f"while [ ! -f /tmp/{copied_in} ]; do sleep 0.1; done; "
                         f"tr a-z A-Z < /tmp/{copied_in} > /tmp/{answer}.part && "
                         f"mv /tmp/{answer}.part /tmp/{answer}; sleep 1000")
    # Files of the account's own, on the cluster file system (the test's directory).
    source = runtime.base / copied_in
    target = runtime.base / answer
    try:
        source.write_text("from the caller\n")
        os.chown(source, runtime.account.uid, runtime.account.gid)
        done = podman(runtime, "cp", str(source), f"{name}:/tmp/")
        assert done.returncode == 0, done.stderr
        assert not Path(f"/tmp/{copied_in}").exists(), "podman cp wrote into the host's /tmp"

        def answered() -> bool:
            return podman(runtime, "cp", f"{name}:/tmp/{answer}", str(target)).returncode == 0

        wait_for(answered, 60, "the container to answer the file copied in")
        assert target.read_text() == "FROM THE CALLER\n"
        # The host's own /tmp is not the container's.
        leak = runtime.base / f"leak-{tag}"
        read = podman(runtime, "cp", f"{name}:{planted}", str(leak))
        assert read.returncode != 0
        assert not leak.exists()
        assert planted.read_text() == "the host's\n"
    finally:
        podman(runtime, "rm", "-f", "-t", "0", name)
        for path in (planted, source, target):
            path.unlink(missing_ok=True)


def test_missing_and_unrunnable_commands_exit_as_with_runc(runtime: Runtime) -> None:
    missing = podman(runtime, "run", "--rm", IMAGE, "/no/such/command")
    assert missing.returncode == 127, missing.stderr
    not_found = podman(runtime, "run", "--rm", IMAGE, "no-such-command")
    assert not_found.returncode == 127, not_found.stderr
    unrunnable = podman(runtime, "run", "--rm", IMAGE, "/etc/passwd")
    assert unrunnable.returncode == 126, unrunnable.stderr
    name = f"s{uuid.uuid4().hex[:10]}"
    assert podman(runtime, "create", "--name", name, IMAGE, "/no/such").returncode == 0
    try:
        started = podman(runtime, "start", name)
        assert started.returncode == 125, started.stderr
        assert b"no such file or directory" in started.stderr
    finally:
        podman(runtime, "rm", "-f", name)


def test_no_slurm_variable_without_a_job(local_runtime: Runtime) -> None:
    done = podman(local_runtime, "run", "--unsetenv-all", "--rm", IMAGE, "/bin/env")
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.decode().splitlines() if line.startswith("SLURM")] == []


def test_stop_and_remove_of_containers_that_are_gone_succeed(runtime: Runtime) -> None:
    """podman's cleanup of a --rm container and its own stop or rm both delete it: the
    second finds it gone, which runc's `delete --force` takes as done."""
    name = _run_detached(runtime, "sleep", "30")
    stopped = podman(runtime, "--noout", "stop", "-t", "0", name)
    assert stopped.returncode == 0, stopped.stderr
    removing = _run_detached(runtime, "--rm", "sleep", "30")
    stopped = podman(runtime, "stop", "-t", "0", removing)
    assert stopped.returncode == 0, stopped.stderr
    for _ in range(3):
        _run_detached(runtime, "--rm", "sleep", "0.3")
    removed = podman(runtime, "rm", "-af", "-t", "0")
    assert removed.returncode == 0, removed.stderr


def test_delete_force_of_an_unknown_container_succeeds(local_runtime: Runtime) -> None:
    assert local_runtime.scrun("delete", "--force", "never-was").returncode == 0
    plain = local_runtime.scrun("delete", "never-was")
    assert plain.returncode == 1 and "does not exist" in plain.stderr


def test_kill_of_a_container_that_has_ended_gives_runcs_error(local_runtime: Runtime,
                                                             tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["true"])
    assert local_runtime.scrun("create", "-b", str(bundle), "ended").returncode == 0
    stand_in = json.loads(local_runtime.scrun("state", "ended").stdout)["pid"]
    assert local_runtime.scrun("start", "ended").returncode == 0
    wait_for(lambda: not Path(f"/proc/{stand_in}").exists(), 30, "the container to end")
    # Right after its end a kill races it, and succeeds (podman relies on that);
    # afterwards it is runc's error.
    assert local_runtime.scrun("kill", "ended", "KILL").returncode == 0
    time.sleep(6)
    killed = local_runtime.scrun("kill", "ended", "KILL")
    assert killed.returncode == 1 and "container not running" in killed.stderr
    assert local_runtime.scrun("delete", "ended").returncode == 0


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_hooks_see_the_container_they_were_given_for(cluster: Cluster, tmp_path: Path,
                                                     backend: str) -> None:
    conf = cluster.up(1) if backend == "slurm" else None
    runtime = make_runtime(tmp_path, RUN_OCI_CONF) if conf is None else make_slurm_runtime(tmp_path, conf)
    leaks = LeakCheck(runtime, str(tmp_path), conf)
    bundle = make_bundle(tmp_path, ["true"])
    config = json.loads((bundle / "config.json").read_text())
    config["hooks"] = {kind: [{"path": "/bin/sh", "args": [
        "sh", "-c", f"cat > {tmp_path}/{kind}.json"]}] for kind in ("prestart", "poststop")}
    (bundle / "config.json").write_text(json.dumps(config))
    done = runtime.scrun("run", "-b", str(bundle), "hooked")
    assert done.returncode == 0, done.stderr
    for kind in ("prestart", "poststop"):
        state = json.loads((tmp_path / f"{kind}.json").read_text())
        assert (state["id"], state["bundle"]) == ("hooked", str(bundle)), kind
    leaks.check()


def test_podman_build_run_step_leaves_the_host_network_alone(local_runtime: Runtime,
                                                             tmp_path: Path) -> None:
    """buildah's RUN goes through the runtime and sets up networking in the namespaces
    of the pid it is given."""
    context = tmp_path / "context"
    context.mkdir()
    (context / "Containerfile").write_text(
        f"FROM {IMAGE}\nRUN sed -n 's/^ *\\([a-z0-9]*\\):.*/iface \\1/p' /proc/net/dev"
        " && echo built > /built\n")
    tag = f"localhost/pyscrun-built-{uuid.uuid4().hex[:8]}"
    before = _host_network()
    try:
        done = podman(local_runtime, "build", "-t", tag, str(context))
        assert done.returncode == 0, done.stderr
        assert _host_network() == before
        # The RUN step saw its own network: loopback alone.
        assert [line for line in done.stdout.splitlines() if line.startswith(b"iface ")] == [
            b"iface lo"]
        built = podman(local_runtime, "run", "--rm", tag, "cat", "/built")
        assert built.stdout == b"built\n", built.stderr
    finally:
        podman(local_runtime, "rmi", "-f", tag)


def test_podman_build_run_step_through_slurm(slurm_runtime: Runtime, tmp_path: Path) -> None:
    """buildah's bundle (under /var/tmp) and its rootfs mount are the login host's: the
    RUN step's bundle is shipped to the node, and what it changed comes back into the
    image."""
    context = tmp_path / "context"
    context.mkdir()
    (context / "Containerfile").write_text(
        f"FROM {IMAGE}\nRUN echo built on $SLURM_JOB_ID > /built && rm /bin/ls\n")
    tag = f"localhost/pyscrun-built-{uuid.uuid4().hex[:8]}"
    before = _host_network()
    try:
        done = podman(slurm_runtime, "build", "-t", tag, str(context))
        assert done.returncode == 0, done.stderr
        assert b"error" not in done.stderr.lower(), done.stderr
        assert _host_network() == before
        built = podman(slurm_runtime, "run", "--rm", tag, "sh", "-c",
                       "cat /built; test -e /bin/ls || echo ls gone")
        lines = built.stdout.decode().splitlines()
        assert lines[0].startswith("built on ") and lines[0] != "built on ", built.stderr
        assert lines[1:] == ["ls gone"]
    finally:
        podman(slurm_runtime, "rmi", "-f", tag)


def _host_network() -> tuple[str, str]:
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True)
    return links.stdout, routes.stdout
