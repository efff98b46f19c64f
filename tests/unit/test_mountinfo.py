"""mountinfo.MountTable: mount points as the mount table has them."""

from __future__ import annotations

from pathlib import Path

from pyscrun.mountinfo import MountTable


def _mountinfo(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "mountinfo"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_a_bind_of_a_directory_of_the_same_file_system_is_a_mount_point(tmp_path: Path) -> None:
    """What os.path.ismount misses (one device on both sides): podman 5's intermediate
    mountpoint of a rootless container's rootfs."""
    table = _mountinfo(
        tmp_path,
        "25 1 8:1 / / rw - ext4 /dev/vda rw",
        "50 25 8:1 /home/u/storage/vfs/dir/abc /var/tmp/intermediate-mountpoint-1000.0 rw "
        "- ext4 /dev/vda rw")
    found = MountTable(table).at("/var/tmp/intermediate-mountpoint-1000.0")
    assert found is not None and found.root == "/home/u/storage/vfs/dir/abc"
    assert MountTable(table).at("/var/tmp") is None
    assert MountTable(str(tmp_path / "no-table")).at("/") is None
