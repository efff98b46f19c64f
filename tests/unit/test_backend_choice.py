"""Which backend a slurm.conf path gives (pyscrun.conf's Backend): a machine without
Slurm runs containers itself, a slurm.conf named but missing is an error, not a run on
the login host."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyscrun.conf import site
from pyscrun.errors import ConfigError

_NAME_IT = r"does not exist: name the cluster's slurm\.conf with -f or SLURM_CONF"


def _named(tmp_path: Path, pyscrun_conf: str | None = None, slurm_conf: bool = False) -> str:
    if pyscrun_conf is not None:
        (tmp_path / "pyscrun.conf").write_text(pyscrun_conf)
    if slurm_conf:
        (tmp_path / "slurm.conf").write_text("ClusterName=c\n")
    return str(tmp_path / "slurm.conf")


def test_a_named_slurm_conf_gives_slurm(tmp_path: Path) -> None:
    assert site.load(_named(tmp_path, slurm_conf=True)).backend == "slurm"


@pytest.mark.parametrize("pyscrun_conf", [None, "Backend=auto\n", "Backend=slurm\n"])
def test_a_named_slurm_conf_that_is_missing_is_one_line(tmp_path: Path,
                                                        pyscrun_conf: str | None) -> None:
    path = _named(tmp_path, pyscrun_conf)
    with pytest.raises(ConfigError) as raised:
        site.load(path)
    assert str(raised.value) == (
        f"{path} does not exist: name the cluster's slurm.conf with -f or SLURM_CONF "
        f"(Backend=local in {tmp_path / 'pyscrun.conf'} runs containers on this machine)")


def test_backend_local_runs_containers_here_with_no_slurm_conf(tmp_path: Path) -> None:
    assert site.load(_named(tmp_path, "Backend=local\n")).backend == "local"


def test_backend_local_wins_over_an_existing_slurm_conf(tmp_path: Path) -> None:
    assert site.load(_named(tmp_path, "Backend=local\n", slurm_conf=True)).backend == "local"


def _default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, salloc: bool) -> str:
    """The default slurm.conf path (missing), with salloc on PATH or not."""
    default = _named(tmp_path / "etc")
    monkeypatch.setattr(site, "DEFAULT_SLURM_CONF", default)
    commands = tmp_path / "bin"
    commands.mkdir()
    if salloc:
        (commands / "salloc").write_text("#!/bin/sh\n")
        (commands / "salloc").chmod(0o755)
    monkeypatch.setenv("PATH", str(commands))
    return default


def test_a_machine_without_slurm_runs_containers_itself(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "etc").mkdir()
    default = _default_path(tmp_path, monkeypatch, salloc=False)
    assert site.load(default).backend == "local"
    (tmp_path / "etc" / "pyscrun.conf").write_text("Backend=slurm\n")
    with pytest.raises(ConfigError, match=_NAME_IT):
        site.load(default)


def test_a_login_node_with_slurm_but_no_slurm_conf_runs_nothing_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A configless cluster's login node whose Slurm commands fetch their files from
    slurmctld, with no cache of them: salloc works, and the containers must go there."""
    (tmp_path / "etc").mkdir()
    default = _default_path(tmp_path, monkeypatch, salloc=True)
    with pytest.raises(ConfigError, match=_NAME_IT):
        site.load(default)
    (tmp_path / "etc" / "pyscrun.conf").write_text("Backend=local\n")
    assert site.load(default).backend == "local"
