"""oci/shm.py: which /dev/shm binds the login host backs with a tmpfs, and what a node
that cannot see it mounts instead. The integration side (a task's /dev/shm on a node of
the test cluster) is in tests/integration/test_ordinary_users.py."""

from __future__ import annotations

import re
from pathlib import Path

from pyscrun.mountinfo import MountTable
from pyscrun.node.rewrite import rewrite
from pyscrun.oci.shm import make_private, tmpfs_options


def _config(source: str, kind: str = "bind") -> dict[str, object]:
    return {"process": {"args": ["sh"], "env": []}, "root": {"path": "rootfs"},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                       {"destination": "/dev/shm", "type": kind, "source": source,
                        "options": ["bind", "rprivate", "nosuid", "noexec", "nodev"]}]}


def _mountinfo(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "mountinfo"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_a_bind_of_a_tmpfs_root_gives_its_size_and_not_its_owner(tmp_path: Path) -> None:
    shm = tmp_path / "user data" / "shm"
    shm.mkdir(parents=True)
    escaped = str(shm).replace(" ", "\\040")
    table = _mountinfo(
        tmp_path,
        "25 1 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683792k",
        f"40 25 0:31 / {escaped} rw,nosuid,nodev,noexec shared:7 - tmpfs shm "
        "rw,size=64000k,nr_inodes=1000,uid=1001,gid=1001")
    assert tmpfs_options(_config(str(shm)), MountTable(table)) == "size=64000k,nr_inodes=1000"


def test_no_tmpfs_root_at_the_source_is_none(tmp_path: Path) -> None:
    table = _mountinfo(
        tmp_path,
        "25 1 0:23 / /srv rw - ext4 /dev/vda rw",
        # A tmpfs's subdirectory bound there is not a tmpfs of the container's own.
        "41 25 0:31 /sub /srv/shm rw - tmpfs shm rw,size=1k",
        # Of two mounts at one place the later is what is seen.
        "42 25 0:32 / /srv/later rw - tmpfs shm rw,size=1k",
        "43 25 8:1 / /srv/later rw - ext4 /dev/vdb rw")
    for source in ("/srv/shm", "/srv/later", "/srv/none"):
        assert tmpfs_options(_config(source), MountTable(table)) is None
    assert tmpfs_options(_config("/srv/later", kind="tmpfs"), MountTable(table)) is None
    assert tmpfs_options({"mounts": []}, MountTable(table)) is None


def test_a_node_that_sees_no_mount_at_the_source_mounts_a_tmpfs_of_its_own(
        tmp_path: Path) -> None:
    config = _config(str(tmp_path))
    make_private(config, "size=64000k")
    assert config["mounts"][1] == {  # type: ignore[index]
        "destination": "/dev/shm", "type": "tmpfs", "source": "shm",
        "options": ["nosuid", "noexec", "nodev", "size=64000k", "mode=1777"]}
    config = _config(str(tmp_path))
    make_private(config, "mode=700")
    assert config["mounts"][1]["options"][-1:] == ["mode=700"]  # type: ignore[index]


def test_a_node_that_sees_a_mount_at_the_source_binds_it() -> None:
    config = _config("/proc")
    make_private(config, "size=1k")
    assert config["mounts"][1]["type"] == "bind"  # type: ignore[index]


def test_rewrite_applies_it_only_when_the_login_host_saw_a_tmpfs(tmp_path: Path) -> None:
    common = {"bundle": "/b", "job_env": {}, "env_exclude": re.compile("^$"),
              "terminal": False, "mount_spool_dir": "", "step_dir": "/s",
              "disable_hooks": ()}
    config = _config(str(tmp_path))
    assert rewrite(config, **common)["mounts"][1]["type"] == "bind"  # type: ignore[arg-type]
    assert rewrite(config, shm="", **common)["mounts"][1]["type"] == "tmpfs"  # type: ignore[arg-type]
    assert config["mounts"][1]["type"] == "bind"  # type: ignore[index]

