"""docker (dockerd + containerd's runc shim) drives scrun end to end: local and Slurm
backends, both oci.conf modes, on a private dockerd the tests start and stop.

Rootful docker, as root (rootless docker is in test_rootless_docker.py)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.dockerd import IMAGE, RUNTIME, Dockerd, DockerLeakCheck
from tests.integration.harness import (
    OCI_CONFS,
    Cluster,
    Runtime,
    hangs_and_failures,
    make_runtime,
    make_slurm_runtime,
    processes_mentioning,
    slurm,
    wait_for,
)
from tests.integration.terminal import at_a_terminal

RUN = ("run", "--runtime", RUNTIME, "--network", "none")


@pytest.fixture(scope="session")
def dockerd() -> Iterator[Dockerd]:
    daemon = Dockerd()
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.stop()


def _docker_runtime(dockerd: Dockerd, tmp_path: Path, conf: Path | None,
                    oci_conf: str | None) -> Iterator[Runtime]:
    made = (make_runtime(tmp_path, oci_conf) if conf is None
            else make_slurm_runtime(tmp_path, conf, oci_conf))
    runtime = dockerd.use(made)
    leaks = DockerLeakCheck(runtime, str(tmp_path), dockerd, conf)
    yield runtime
    leaks.check()


@pytest.fixture(params=["local/run", "local/create-start", "slurm/run", "slurm/create-start"])
def docker_runtime(request: pytest.FixtureRequest, dockerd: Dockerd, cluster: Cluster,
            tmp_path: Path) -> Iterator[Runtime]:
    """pyscrun as docker's runtime on each backend in each oci.conf mode; checked for
    leaks (processes, spool dirs, runc containers, task dirs, shims, containers, jobs)."""
    backend, mode = request.param.split("/")
    conf = cluster.up(1) if backend == "slurm" else None
    yield from _docker_runtime(dockerd, tmp_path, conf, OCI_CONFS[mode])


@pytest.fixture
def docker_slurm_runtime(request: pytest.FixtureRequest, dockerd: Dockerd, cluster: Cluster,
                  tmp_path: Path) -> Iterator[Runtime]:
    """pyscrun (built-in oci.conf) on a cluster of `@pytest.mark.nodes(N)` nodes (1 unless
    marked)."""
    marker = request.node.get_closest_marker("nodes")
    conf = cluster.up(marker.args[0] if marker else 1)
    yield from _docker_runtime(dockerd, tmp_path, conf, None)


def test_docker_info_shows_the_runtime(dockerd: Dockerd) -> None:
    done = dockerd.docker("info", "--format", "{{json .Runtimes}}")
    assert done.returncode == 0, done.stderr
    assert f'"{RUNTIME}"' in done.stdout.decode()


def test_echo_prints_output(dockerd: Dockerd, docker_runtime: Runtime) -> None:
    done = dockerd.docker(*RUN, "--rm", IMAGE, "echo", "hi")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"hi\n"


def test_exit_code_reaches_docker(dockerd: Dockerd, docker_runtime: Runtime) -> None:
    done = dockerd.docker(*RUN, "--rm", IMAGE, "sh", "-c", "exit 3")
    assert done.returncode == 3, done.stderr


def test_stdin_reaches_container(dockerd: Dockerd, docker_runtime: Runtime) -> None:
    done = dockerd.docker(*RUN, "-i", "--rm", IMAGE, "cat", input=b"data\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"data\n"


def test_what_the_container_changes_in_its_rootfs_stays_its_own(
        dockerd: Dockerd, docker_runtime: Runtime) -> None:
    """Through Slurm the rootfs is shipped to the node and what the container changed
    there comes back once it has ended: docker diff and docker cp see what it made and
    removed, as with runc, and a container of the committed image sees owners, modes
    and links; a directory replaced by a link is a link, and where it points is
    untouched."""
    name = f"d{uuid.uuid4().hex[:8]}"
    tag = f"pyscrun-changed-{name}"
    done = dockerd.docker(*RUN, "--name", name, IMAGE, "sh", "-c",
                          "echo made here > /made && ln /made /tmp/made-link && rm /bin/ls"
                          " && mkdir -p /d/e && echo x > /d/e/f && chown 5:6 /d/e/f"
                          " && chmod 640 /d/e/f && rm -rf /var && ln -s /etc /var")
    try:
        assert done.returncode == 0, done.stderr
        changed = dockerd.docker("diff", name).stdout.decode().splitlines()
        assert {"A /made", "D /bin/ls", "A /d/e/f"} <= set(changed), changed
        copied = dockerd.docker("cp", f"{name}:/made", "-")
        assert b"made here" in copied.stdout, copied.stderr
        assert dockerd.docker("commit", name, tag).returncode == 0
        seen = dockerd.docker(*RUN, "--rm", tag, "sh", "-c",
                              "stat -c '%h %u:%g %a' /made /d/e/f; test -e /bin/ls || echo"
                              " ls gone; readlink /var; head -c 5 /etc/passwd")
        assert seen.stdout.decode().splitlines() == [
            "2 0:0 644", "1 5:6 640", "ls gone", "/etc", "root:"], seen.stderr
    finally:
        dockerd.docker("rm", "-f", name)
        dockerd.docker("rmi", "-f", tag)


def _run_detached(dockerd: Dockerd, *command: str) -> str:
    done = dockerd.docker(*RUN, "-d", IMAGE, *command)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def _exit_code(dockerd: Dockerd, container: str) -> int:
    done = dockerd.docker("inspect", "--format", "{{.State.ExitCode}}", container)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def _wait_all_gone(dockerd: Dockerd, container: str) -> None:
    """No shim, anchor or node agent of the container is left (the fixture checks jobs)."""
    wait_for(lambda: not processes_mentioning(container), 10,
             f"the processes of {container[:12]} to end: {processes_mentioning(container)}")


def test_stop_kills_a_process_ignoring_sigterm_after_the_timeout(
        dockerd: Dockerd, docker_runtime: Runtime) -> None:
    # sleep as the container's pid 1 has no handler for SIGTERM: the kernel ignores it.
    container = _run_detached(dockerd, "sleep", "1000")
    started = time.monotonic()
    done = dockerd.docker("stop", "-t", "1", container)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert 1 <= elapsed < 10
    assert _exit_code(dockerd, container) == 137
    assert dockerd.docker("rm", container).returncode == 0
    _wait_all_gone(dockerd, container)


def test_stop_of_a_shell_that_honours_sigterm_is_quick(dockerd: Dockerd, docker_runtime: Runtime) -> None:
    container = _run_detached(dockerd, "sh", "-c",
                              "trap 'exit 143' TERM; echo ready; while true; do sleep 0.1; done")
    # Through Slurm the container starts a moment after `docker run -d` returned; a
    # SIGTERM before the trap would be ignored (the shell is the container's pid 1).
    wait_for(lambda: b"ready" in dockerd.docker("logs", container).stdout, 30, "the trap")
    started = time.monotonic()
    assert dockerd.docker("stop", "-t", "10", container).returncode == 0
    assert time.monotonic() - started < 5
    assert _exit_code(dockerd, container) == 143
    assert dockerd.docker("rm", container).returncode == 0
    _wait_all_gone(dockerd, container)


def test_kill_ends_the_container(dockerd: Dockerd, docker_runtime: Runtime) -> None:
    container = _run_detached(dockerd, "sleep", "1000")
    assert dockerd.docker("kill", container).returncode == 0
    assert dockerd.docker("wait", container, timeout=30).stdout.strip() == b"137"
    assert dockerd.docker("rm", container).returncode == 0
    _wait_all_gone(dockerd, container)


def test_rm_force_removes_a_running_container(dockerd: Dockerd, docker_runtime: Runtime) -> None:
    container = _run_detached(dockerd, "sleep", "1000")
    done = dockerd.docker("rm", "-f", container)
    assert done.returncode == 0, done.stderr
    assert container not in dockerd.containers()
    _wait_all_gone(dockerd, container)


def test_interactive_terminal_under_tmux(dockerd: Dockerd, docker_runtime: Runtime, tmp_path: Path) -> None:
    at_a_terminal(f"env DOCKER_HOST={dockerd.env['DOCKER_HOST']} docker {' '.join(RUN)} -it --rm"
                  f" {IMAGE} sh", tmp_path / "result")


def test_container_prints_its_slurm_job_id(dockerd: Dockerd, docker_slurm_runtime: Runtime) -> None:
    done = dockerd.docker(*RUN, "--rm", IMAGE, "sh", "-c", "echo job=$SLURM_JOB_ID")
    assert done.returncode == 0, done.stderr
    job = re.fullmatch(rb"job=(\d+)\n", done.stdout)
    assert job, done.stdout
    record = slurm(docker_slurm_runtime.slurm_conf.resolve(), "scontrol", "-o", "show", "job",
                   job.group(1).decode())
    assert record.returncode == 0, record.stderr
    assert "JobName=scrun" in record.stdout


def test_hundred_sequential_runs_through_slurm(dockerd: Dockerd, docker_slurm_runtime: Runtime) -> None:
    assert hangs_and_failures(
        100, lambda: dockerd.docker(*RUN, "--rm", IMAGE, "true", timeout=60),
        docker_slurm_runtime) == []


@pytest.mark.nodes(3)
def test_three_nodes_three_tasks(dockerd: Dockerd, docker_slurm_runtime: Runtime) -> None:
    # docker gives a container its own UTS namespace (hostname = container id) unless
    # --uts=host, as Slurm's container guide configures for podman.
    done = dockerd.docker(*RUN, "--rm", "--uts=host", "-e", "SCRUN_JOB_NUM_NODES=3",
                          "-e", "SCRUN_NTASKS=3", IMAGE, "hostname")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.decode().split()) == ["n1", "n2", "n3"]


def test_docker_top_and_pause(dockerd: Dockerd, docker_runtime: Runtime) -> None:
    """docker top lists what `scrun ps` gives: the container's processes on the local
    backend; through Slurm the stand-in (the nodes' pids name nothing here)."""
    tag = str(910000 + int(time.monotonic() * 1000) % 89999)
    container = _run_detached(dockerd, "sleep", tag)
    try:
        top = dockerd.docker("top", container)
        assert top.returncode == 0, top.stderr
        local = not docker_runtime.slurm_conf.exists()
        assert (f"sleep {tag}".encode() in top.stdout) is local, top.stdout
        assert dockerd.docker("pause", container).returncode == 0
        assert dockerd.docker("inspect", "--format", "{{.State.Status}}",
                              container).stdout.strip() == b"paused"
        assert dockerd.docker("unpause", container).returncode == 0
    finally:
        assert dockerd.docker("rm", "-f", container).returncode == 0
    _wait_all_gone(dockerd, container)


def test_docker_exec(dockerd: Dockerd, docker_runtime: Runtime) -> None:
    container = _run_detached(dockerd, "sleep", "1000")
    try:
        echoed = dockerd.docker("exec", container, "echo", "hi")
        assert (echoed.returncode, echoed.stdout) == (0, b"hi\n"), echoed.stderr
        assert dockerd.docker("exec", container, "sh", "-c", "exit 6").returncode == 6
        placed = dockerd.docker("exec", "-e", "X=7", "-w", "/tmp", container, "sh", "-c",
                                "echo $X $(pwd)")
        assert placed.stdout == b"7 /tmp\n", placed.stderr
        as_user = dockerd.docker("exec", "-u", "1234:56", container, "sh", "-c", "echo $(id -u) $(id -g)")
        assert as_user.stdout == b"1234 56\n", as_user.stderr
    finally:
        assert dockerd.docker("rm", "-f", container).returncode == 0
    _wait_all_gone(dockerd, container)
