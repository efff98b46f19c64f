"""Rootless docker (dockerd under rootlesskit, as an ordinary user) with pyscrun as its
runtime, through Slurm on separate machines and on the local backend: containerd's
shim runs scrun inside the user's namespace, as rootless podman does; through Slurm
the bundle and the rootfs, mounted in rootlesskit's namespace only, are shipped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.accounts import USER, account
from tests.integration.conftest import runtime_on
from tests.integration.dockerd import IMAGE, RUNTIME
from tests.integration.harness import Cluster, wait_for
from tests.integration.rootless_dockerd import RootlessDockerd


@pytest.fixture(params=["slurm", "local"])
def rootless_docker(request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path,
                    ) -> Iterator[RootlessDockerd]:
    with runtime_on(request.param, "built-in", cluster, tmp_path, account(USER),
                    default_root=True) as made:
        dockerd = RootlessDockerd(made)
        dockerd.start()
        yield dockerd
        dockerd.stop()


def _ok(dockerd: RootlessDockerd, *args: str) -> str:
    done = dockerd.docker(*args)
    assert done.returncode == 0, (done.stderr.decode(errors="replace"),
                                  dockerd.runtime.log_errors())
    return done.stdout.decode().strip()


def test_echo_exit_code_detach_and_stop(rootless_docker: RootlessDockerd) -> None:
    run = ("run", "--runtime", RUNTIME, "--network", "none")
    assert _ok(rootless_docker, *run, "--rm", IMAGE, "echo", "hi") == "hi"
    done = rootless_docker.docker(*run, "--rm", IMAGE, "sh", "-c", "exit 3")
    assert done.returncode == 3, done.stderr.decode()
    cid = _ok(rootless_docker, *run, "-d", IMAGE, "sh", "-c",
              "trap 'echo got TERM; exit 0' TERM; echo ready; while true; do sleep 0.1; done")
    # scrun keeps the container under the shim's --root, as the user it runs for.
    state = json.loads((rootless_docker.runtime_root / cid / "state.json").read_text())
    backend = "slurm" if rootless_docker.runtime.slurm_conf.exists() else "local"
    assert (state["owner"], state["backend"], state["status"]) == (USER, backend, "running")
    # A SIGTERM before the trap would be ignored (the shell is the container's pid 1).
    wait_for(lambda: "ready" in _ok(rootless_docker, "logs", cid), 30, "the trap")
    _ok(rootless_docker, "stop", "-t", "10", cid)
    assert _ok(rootless_docker, "inspect", "-f", "{{.State.ExitCode}}", cid) == "0"
    assert "got TERM" in _ok(rootless_docker, "logs", cid)
    _ok(rootless_docker, "rm", cid)
