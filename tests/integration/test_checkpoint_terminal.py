"""Checkpoint and restore of a container with a terminal (`podman run -it`), typed into
under tmux as a person would, on each backend and oci.conf mode."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.conftest import runtime_on
from tests.integration.harness import (
    IMAGE,
    Cluster,
    Runtime,
    podman,
    podman_command_line,
    require,
    wait_for,
)
from tests.integration.terminal import Terminal, terminal


@pytest.fixture(params=["local", "slurm"])
def run_mode(request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path,
             ) -> Iterator[Runtime]:
    """scrun in run mode (Slurm's example oci.conf) on each backend."""
    require("criu", "criu (installed by scripts/criu-setup.sh through `make setup`)")
    with runtime_on(request.param, "run", cluster, tmp_path) as made:
        yield made


@pytest.fixture(params=["local", "slurm"])
def create_start(request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path,
                 ) -> Iterator[Runtime]:
    with runtime_on(request.param, "create-start", cluster, tmp_path) as made:
        yield made


def _inspect(runtime: Runtime, name: str, what: str) -> str:
    return podman(runtime, "inspect", "--format", what, name).stdout.decode().strip()


@contextmanager
def _shell(runtime: Runtime, result: Path) -> Iterator[tuple[Terminal, str]]:
    """`podman run -it IMAGE sh` at a terminal, with a variable set in that shell (state
    only it holds); the terminal and the container's name. The container is removed
    after."""
    name = f"t{uuid.uuid4().hex[:8]}"
    with terminal() as term:
        term.run(podman_command_line(runtime, "run", "-it", "--name", name, IMAGE, "sh"),
                 result)
        try:
            wait_for(lambda: "#" in term.screen(), 60, "the container's prompt")
            term.type("X=kept; echo typed$((40+2))")
            term.shows("typed42", 20)
            yield term, name
        finally:
            podman(runtime, "rm", "-f", "-t", "0", name)


def test_the_shell_answers_after_checkpoint_and_restore(run_mode: Runtime, tmp_path: Path,
                                                        ) -> None:
    with _shell(run_mode, tmp_path / "run-result") as (term, name):
        done = podman(run_mode, "container", "checkpoint", name)
        assert done.returncode == 0, done.stderr.decode()
        wait_for((tmp_path / "run-result").exists, 30, "podman run to end at the checkpoint")
        assert _inspect(run_mode, name, "{{.State.Status}}") == "exited"
        restored = podman(run_mode, "container", "restore", name)
        assert restored.returncode == 0, restored.stderr.decode()
        term.run(podman_command_line(run_mode, "attach", name), tmp_path / "attach-result")
        term.type("echo $X-after$((1+1))")
        term.shows("kept-after2", 30)
        term.type("stty size")
        term.shows("30 100", 10)
        term.type("exit 7")
        wait_for(lambda: _inspect(run_mode, name, "{{.State.Status}}") == "exited", 30,
                 "the restored shell to exit")
        assert _inspect(run_mode, name, "{{.State.ExitCode}}") == "7"


def test_create_start_mode_refuses_and_the_shell_goes_on(create_start: Runtime,
                                                         tmp_path: Path) -> None:
    """In create/start mode the terminal is srun's (or the anchor's), outside the
    container: refused before anything is dumped."""
    with _shell(create_start, tmp_path / "run-result") as (term, name):
        done = podman(create_start, "container", "checkpoint", name)
        assert done.returncode != 0
        error = done.stderr.decode()
        assert "checkpointed only in run mode (RunTimeRun in oci.conf)" in error, error
        assert _inspect(create_start, name, "{{.State.Status}}") == "running"
        term.type("echo $X-still$((1+2))")
        term.shows("kept-still3", 20)
