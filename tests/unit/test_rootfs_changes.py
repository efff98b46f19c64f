"""What a shipped container changed in its rootfs goes back to the login host, and only
that: the node's side (rootfs_changes, shipped's archive) and the anchor's (Shipment's
bring_back) with real files, tar and rsync, as root owns a rootfs."""

from __future__ import annotations

import io
import os
import stat
import subprocess
from pathlib import Path

import pytest

from pyscrun.anchor.shipping import Shipment
from pyscrun.channel import files
from pyscrun.fs import remove_beneath
from pyscrun.node.rootfs_changes import CHANGES_ARCHIVE, REMOVED_LIST, Baseline


def _image(root: Path) -> None:
    """A small rootfs: directories, files of other owners, a hard link, symlinks."""
    for directory in ("bin", "etc/conf.d", "var/lib/app", "home/user", "tmp"):
        (root / directory).mkdir(parents=True)
    (root / "bin/tool").write_bytes(b"#!/bin/sh\n")
    (root / "bin/tool").chmod(0o755)
    os.link(root / "bin/tool", root / "bin/alias")
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (root / "etc/conf.d/a").write_text("a\n")
    (root / "etc/conf.d/b").write_text("b\n")
    (root / "var/lib/app/data").write_text("data\n")
    (root / "home/user/.profile").write_text("profile\n")
    os.chown(root / "home/user", 1000, 1000)
    os.chown(root / "home/user/.profile", 1000, 1000)
    (root / "tmp").chmod(0o1777)
    (root / "var/run").symlink_to("/run")


def _view(root: Path) -> dict[str, tuple[object, ...]]:
    """Everything podman diff or a later container could tell apart."""
    seen: dict[str, tuple[object, ...]] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        mode = stat.S_IFMT(info.st_mode)
        body: object = None
        if stat.S_ISREG(info.st_mode):
            body = path.read_bytes()
        elif stat.S_ISLNK(info.st_mode):
            body = os.readlink(path)
        entry: tuple[object, ...] = (mode, stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid,
                                     body)
        if not stat.S_ISDIR(info.st_mode):
            entry += (info.st_nlink,)
        seen[str(path.relative_to(root))] = entry
    return seen


def _ship_back(node: Path, baseline: Baseline, login: Path, spool: Path,
               failed: str | None = None) -> tuple[list[str], list[str]]:
    """What task 0 sends, applied as the anchor applies it (failed: why what it sent
    could not all be written on the login host): (changed, removed) sent."""
    changed, removed = baseline.changes()
    shipment = Shipment(str(login), str(spool))
    os.makedirs(shipment.back)
    if changed:
        files.pack_listed(str(node), changed, os.path.join(shipment.back, CHANGES_ARCHIVE))
    Path(shipment.back, REMOVED_LIST).write_bytes(b"".join(
        os.fsencode(path) + b"\0" for path in removed))
    shipment.bring_back(str(login), failed)
    assert not os.path.exists(shipment.back)
    return changed, removed


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path, Baseline]:
    """The login host's rootfs and the node's unpacked copy of it, with its baseline."""
    if os.geteuid() != 0:
        pytest.fail("run as root: a rootfs holds files of several owners")
    login, node = tmp_path / "login", tmp_path / "node"
    login.mkdir()
    _image(login)
    subprocess.run(["cp", "-a", f"{login}/.", str(node)], check=True)
    return login, node, Baseline(str(node))


def test_nothing_changed_sends_nothing(trees: tuple[Path, Path, Baseline],
                                       tmp_path: Path) -> None:
    login, node, baseline = trees
    before = _view(login)
    assert _ship_back(node, baseline, login, tmp_path / "spool") == ([], [])
    assert _view(login) == before


def test_every_kind_of_change_reaches_the_login_host(trees: tuple[Path, Path, Baseline],
                                                     tmp_path: Path) -> None:
    login, node, baseline = trees
    (node / "etc/passwd").write_text("changed\n")  # same inode, new content
    (node / "made").write_text("new\n")
    (node / "etc/conf.d/a").unlink()
    (node / "etc/conf.d/b").chmod(0o600)
    os.chown(node / "var/lib/app/data", 7, 7)
    (node / "var/lib/app").rename(node / "var/lib/moved")
    os.link(node / "made", node / "tmp/made-too")
    (node / "bin/alias").unlink()  # the tool's other link stays
    subprocess.run(["rm", "-rf", str(node / "home")], check=True)
    (node / "home").symlink_to("/root")  # a directory replaced by a link
    (node / "var/run").unlink()
    (node / "var/run").mkdir()  # a link replaced by a directory
    (node / "var/run/pid").write_text("1\n")
    changed, removed = _ship_back(node, baseline, login, tmp_path / "spool")
    assert _view(login) == _view(node)
    assert "bin/tool" in changed  # one link fewer
    # Named once, at the top; never below what is now a link.
    assert removed == ["bin/alias", "etc/conf.d/a", "var/lib/app"]


def test_only_what_changed_is_sent(trees: tuple[Path, Path, Baseline],
                                   tmp_path: Path) -> None:
    login, node, baseline = trees
    (node / "var/lib/app/data").write_text("more\n")
    sent = _ship_back(node, baseline, login, tmp_path / "spool")
    assert sent == ([".", "var", "var/lib", "var/lib/app", "var/lib/app/data"], [])
    assert (login / "var/lib/app/data").read_text() == "more\n"
    assert _view(login) == _view(node)


def test_a_removal_never_goes_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "d").mkdir(parents=True)
    (outside / "d/keep").write_text("mine\n")
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    remove_beneath(str(root), "link/d/keep")
    remove_beneath(str(root), "link/d")
    assert (outside / "d/keep").read_text() == "mine\n"
    (root / "real/d").mkdir(parents=True)
    (root / "real/d/x").write_text("x\n")
    remove_beneath(str(root), "real/d")
    remove_beneath(str(root), "real/gone")
    assert not (root / "real/d").exists() and (root / "real").is_dir()
    remove_beneath(str(root), "link")
    assert not (root / "link").is_symlink() and (outside / "d/keep").exists()
    for climbing in ("../outside/d/keep", "/etc/passwd", "real/../../outside", ""):
        with pytest.raises(ValueError):
            remove_beneath(str(root), climbing)


def test_changes_that_could_not_all_be_written_here_are_not_put_in_place(
        trees: tuple[Path, Path, Baseline], tmp_path: Path, logged: io.StringIO) -> None:
    """A part of the changes would leave the rootfs neither as it was nor as the
    container left it."""
    login, node, baseline = trees
    before = _view(login)
    (node / "made").write_text("new\n")
    (node / "etc/conf.d/a").unlink()
    failed = f"cannot write in {tmp_path}: No space left on device"
    _ship_back(node, baseline, login, tmp_path / "spool", failed)
    assert _view(login) == before
    assert logged.getvalue().splitlines() == [
        f"t: error: the container's changes to its rootfs did not come back: {failed}"]
