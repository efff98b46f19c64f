"""What the runtime would refuse in config.json, found at create in runc's words."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from pyscrun.errors import BundleError, CommandRefused
from pyscrun.oci import refusals


def _config(args: list[str], **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"ociVersion": "1.0.2-dev", "process": {
        "args": args, "cwd": "/", "env": ["PATH=/usr/bin:/bin"]}}
    config.update(extra)
    return config


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    tool = tmp_path / "bin" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    (tmp_path / "bin" / "data").write_text("not a program\n")
    # An absolute link resolves inside the rootfs, never on the host.
    (tmp_path / "usr" / "bin" / "linked").symlink_to("/bin/tool")
    (tmp_path / "usr" / "bin" / "escape").symlink_to("../../../../../bin/sh")
    return tmp_path


@pytest.mark.parametrize("args", [["tool"], ["/bin/tool"], ["linked"], ["/usr/../bin/tool"],
                                  ["/usr/bin/linked"]])
def test_commands_the_runtime_would_find_pass(rootfs: Path, args: list[str]) -> None:
    refusals.check(_config(args), str(rootfs))


@pytest.mark.parametrize(("args", "words"), [
    (["nosuch"], 'exec: "nosuch": executable file not found in $PATH'),
    (["/no/such"], 'exec: "/no/such": stat /no/such: no such file or directory'),
    (["/bin/data"], 'exec: "/bin/data": permission denied'),
    (["/bin"], 'exec: "/bin": is a directory'),
    # ../ climbs no higher than the rootfs: the host's /bin/sh is not the container's.
    (["/usr/bin/escape"], "no such file or directory"),
])
def test_commands_the_runtime_would_refuse_fail_in_its_words(rootfs: Path, args: list[str],
                                                             words: str) -> None:
    with pytest.raises(BundleError, match=words.replace("$", r"\$")):
        refusals.check(_config(args), str(rootfs))


@pytest.mark.parametrize(("cwd", "words", "status"), [
    ("/nowhere", 'chdir to cwd ("/nowhere") set in config.json failed: no such file or '
                 "directory", 127),
    ("/bin/tool", 'chdir to cwd ("/bin/tool") set in config.json failed: not a directory', 255),
    ("/bin/tool/x", 'chdir to cwd ("/bin/tool/x") set in config.json failed: not a directory',
     255),
])
def test_a_working_directory_the_runtime_cannot_enter_fails_in_its_words(
        rootfs: Path, cwd: str, words: str, status: int) -> None:
    config = _config(["tool"])
    config["process"]["cwd"] = cwd
    with pytest.raises(CommandRefused, match=re.escape(words)) as raised:
        refusals.check(config, str(rootfs))
    assert raised.value.status == status


@pytest.mark.parametrize("cwd", ["/usr/bin", "/usr/bin/../../bin", "/data/work"])
def test_a_working_directory_there_or_under_a_mount_passes(rootfs: Path, cwd: str) -> None:
    config = _config(["tool"], mounts=[{"destination": "/data"}])
    config["process"]["cwd"] = cwd
    refusals.check(config, str(rootfs))


def test_a_command_under_a_mount_is_left_to_the_runtime(rootfs: Path) -> None:
    refusals.check(_config(["/opt/app/run"], mounts=[{"destination": "/opt/app"}]), str(rootfs))


def test_no_path_means_no_bare_name_is_found(rootfs: Path) -> None:
    config = _config(["tool"])
    config["process"]["env"] = []
    with pytest.raises(BundleError, match="not found in"):
        refusals.check(config, str(rootfs))


@pytest.mark.parametrize(("change", "words"), [
    ({"ociVersion": "invalid"}, "ociVersion 'invalid'"),
    ({"ociVersion": "2.0.0"}, "ociVersion"),
    ({"rlimits": [{"type": "RLIMIT_BOGUS", "soft": 1, "hard": 1}]}, "wrong rlimit value"),
    ({"rlimits": [{"type": "RLIMIT_NOFILE", "soft": 10, "hard": 5}]}, "above the hard limit"),
    ({"rlimits": [{"type": "RLIMIT_NOFILE", "soft": -1, "hard": 5}]}, "non-negative"),
    ({"linux": {"namespaces": [{"type": "bogus"}]}}, "type 'bogus'"),
    ({"linux": {"namespaces": [{"type": "pid"}, {"type": "pid"}]}}, "twice"),
    ({"linux": {"namespaces": [{"type": "network", "path": "/proc/self/ns/uts"}]}},
     "not a network namespace"),
    ({"linux": {"namespaces": [{"type": "network", "path": "/no/such/ns"}]}}, "No such file"),
])
def test_what_runc_refuses_is_refused_at_create(rootfs: Path, change: dict[str, Any],
                                               words: str) -> None:
    config = _config(["tool"])
    if "rlimits" in change:
        config["process"]["rlimits"] = change.pop("rlimits")
    config.update(change)
    with pytest.raises(BundleError, match=words):
        refusals.check(config, str(rootfs))


def test_a_namespace_path_of_the_right_type_passes(rootfs: Path) -> None:
    config = _config(["tool"], linux={"namespaces": [
        {"type": "network", "path": f"/proc/{os.getpid()}/ns/net"}, {"type": "mount"}]})
    refusals.check(config, str(rootfs))
