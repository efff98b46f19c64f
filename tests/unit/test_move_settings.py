"""When a container moves to a new job before its job's end (pyscrun.conf's
MoveBeforeEnd): the setting, where it applies, and what salloc is asked for. The move
itself runs on the cluster (tests/integration/test_move.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pyscrun import identity
from pyscrun.anchor.request import CreateRequest
from pyscrun.backends.base import MOVE_SIGNAL
from pyscrun.backends.slurm import _salloc_argv
from pyscrun.conf import ociconf, site
from pyscrun.errors import ConfigError
from pyscrun.oci.bundle import Bundle


def _conf(tmp_path: Path, text: str) -> site.PyscrunConf:
    path = tmp_path / "pyscrun.conf"
    path.write_text(text)
    return site._parse_pyscrun_conf(str(path))


def test_seconds_are_taken(tmp_path: Path) -> None:
    assert _conf(tmp_path, "MoveBeforeEnd=120\n").MoveBeforeEnd == "120"
    assert _conf(tmp_path, "").MoveBeforeEnd == ""


@pytest.mark.parametrize("value", ["0", "-5", "2m", "65536", "1.5"])
def test_anything_else_is_one_line_naming_the_file(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(
            f"pyscrun.conf:1: MoveBeforeEnd must be a number of seconds from 1 to 65535, "
            f"not '{value}'")):
        _conf(tmp_path, f"MoveBeforeEnd={value}\n")


def test_a_move_image_path_is_for_its_user(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "MoveImagePath=/shared/moves/%u-%U\n")
    the_site = site.Site(str(tmp_path / "slurm.conf"), ociconf.OciConf(), "slurm", conf)
    assert the_site.move_image_path("ann", 1001) == "/shared/moves/ann-1001"
    assert site.Site("", ociconf.OciConf(), "slurm", site.PyscrunConf()
                     ).move_image_path("ann", 1001) == ""


@pytest.mark.parametrize(("value", "said"), [
    ("moves", "MoveImagePath must be an absolute path, not 'moves'"),
    ("/shared/%j", "MoveImagePath cannot hold %j (it may hold %u %U and %%)"),
])
def test_a_move_image_path_of_another_shape_is_one_line(tmp_path: Path, value: str,
                                                         said: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"pyscrun.conf:1: {said}")):
        _conf(tmp_path, f"MoveImagePath={value}\n")


def _request(tmp_path: Path, seconds: str = "120", backend: str = "slurm",
             terminal: bool = False, options: dict[str, str] | None = None,
             environ: dict[str, str] | None = None) -> CreateRequest:
    the_site = site.Site(str(tmp_path / "slurm.conf"), ociconf.OciConf(), backend,
                         site.PyscrunConf(MoveBeforeEnd=seconds))
    bundle = Bundle("/b", {"process": {"args": ["true"], "env": [], "terminal": terminal}})
    return CreateRequest("c", bundle, None, the_site, None, None,  # type: ignore[arg-type]
                         environ or {}, options or {})


@pytest.fixture
def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity, "is_root", lambda: True)


@pytest.mark.usefixtures("as_root")
def test_root_s_container_in_a_job_of_its_own_moves(tmp_path: Path) -> None:
    assert _request(tmp_path).move_before_end() == 120


@pytest.mark.usefixtures("as_root")
@pytest.mark.parametrize("case", [
    {"seconds": ""},
    {"backend": "local"},
    {"terminal": True},
    {"options": {"SCRUN_SIGNAL": "USR1@60"}},
    {"environ": {"SLURM_JOB_ID": "7"}},
])
def test_where_it_cannot_move_it_does_not(tmp_path: Path, case: dict[str, object]) -> None:
    assert _request(tmp_path, **case).move_before_end() == 0  # type: ignore[arg-type]


def test_an_ordinary_user_s_container_does_not_move(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity, "is_root", lambda: False)
    assert _request(tmp_path).move_before_end() == 0


def test_salloc_asks_for_the_warning_only_for_a_container_that_moves() -> None:
    assert f"--signal={MOVE_SIGNAL}@120" in _salloc_argv("c", {}, 120)
    assert not [a for a in _salloc_argv("c", {}, 0) if a.startswith("--signal")]
