"""runc's exec flags on the container's own process (`scrun exec [flags] ID CMD...`),
as runc's exec applies them; --process is taken as it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyscrun.cli.exec_process import process_of
from pyscrun.cli.flags import parse
from pyscrun.cli.main import Context
from pyscrun.errors import UsageError

PROCESS = {"args": ["sleep", "1"], "cwd": "/", "env": ["PATH=/bin", "A=0"],
           "user": {"uid": 0, "gid": 0, "additionalGids": [5]},
           "capabilities": {"bounding": ["CAP_KILL"], "effective": ["CAP_KILL"],
                            "permitted": ["CAP_KILL"]}}


def _process(tmp_path: Path, *argv: str, process: dict[str, object] = PROCESS,
             ) -> dict[str, object]:
    (tmp_path / "config.json").write_text(json.dumps({"ociVersion": "1.0.2",
                                                      "process": process,
                                                      "root": {"path": "rootfs"}}))
    parsed = parse(["exec", *argv])
    return process_of(Context(parsed.options, parsed.args), str(tmp_path))


def test_runcs_flags_change_the_containers_process(tmp_path: Path) -> None:
    process = _process(tmp_path, "-u", "1234:56", "-g", "7", "--additional-gids=8",
                       "--cap", "CAP_NET_ADMIN", "--no-new-privs", "--apparmor", "prof",
                       "--process-label", "lab", "-e", "A=1", "--cwd", "/tmp",
                       "cid", "id", "-u")
    assert process["args"] == ["id", "-u"]
    assert process["user"] == {"uid": 1234, "gid": 56, "additionalGids": [5, 7, 8]}
    caps = process["capabilities"]
    assert isinstance(caps, dict)
    assert caps["bounding"] == caps["effective"] == caps["permitted"] == [
        "CAP_KILL", "CAP_NET_ADMIN"]
    assert "ambient" not in caps  # no inheritable set to raise it with
    assert process["noNewPrivileges"] is True
    assert (process["apparmorProfile"], process["selinuxLabel"]) == ("prof", "lab")
    assert process["env"] == ["PATH=/bin", "A=1"]
    assert (process["cwd"], process["terminal"]) == ("/tmp", False)


def test_a_uid_alone_keeps_the_gid_and_ambient_follows_inheritable(tmp_path: Path) -> None:
    inheriting = {**PROCESS, "capabilities": {"inheritable": []}}
    process = _process(tmp_path, "--user", "9", "-c", "CAP_CHOWN", "cid", "true",
                       process=inheriting)
    assert process["user"] == {"uid": 9, "gid": 0, "additionalGids": [5]}
    caps = process["capabilities"]
    assert isinstance(caps, dict)
    assert caps["ambient"] == ["CAP_CHOWN"]


@pytest.mark.parametrize("flags", [("-u", "root"), ("-u", "1:x"), ("-u", "-1"),
                                   ("-g", "staff"), ("-u", "4294967296")])
def test_ids_that_are_no_numbers_are_refused(tmp_path: Path, flags: tuple[str, str]) -> None:
    with pytest.raises(UsageError, match="must be a number"):
        _process(tmp_path, *flags, "cid", "true")


def test_a_process_file_is_taken_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "process.json"
    path.write_text(json.dumps({"args": ["x"], "cwd": "/w"}))
    assert _process(tmp_path, "--process", str(path), "-u", "5", "cid") == {
        "args": ["x"], "cwd": "/w"}
