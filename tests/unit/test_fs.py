"""How files are written: whole or not at all, and synced where they must outlive the
machine.

A power cut cannot be produced here: a spy on os.fsync (which still syncs) stands in for
one, showing what would be on disk when it came."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pyscrun.fs import sync_tree, write_atomic


def _synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        seen.append(("directory " if stat.S_ISDIR(mode) else "file ")
                    + os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


def test_a_durable_write_is_synced_and_then_so_is_its_new_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _synced(monkeypatch)
    target = tmp_path / "manifest.json"
    write_atomic(str(target), b"{}\n", 0o644, durable=True)
    assert target.read_bytes() == b"{}\n"
    assert len(seen) == 2
    assert seen[0].startswith(f"file {tmp_path}/.manifest.json.")  # before the rename
    assert seen[1] == f"directory {tmp_path}"  # the rename itself
    assert os.listdir(tmp_path) == ["manifest.json"]


def test_runtime_state_is_written_without_a_sync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _synced(monkeypatch)
    write_atomic(str(tmp_path / "state.json"), b"{}\n")
    assert seen == []
    assert (tmp_path / "state.json").read_bytes() == b"{}\n"


def test_a_write_whose_rename_fails_leaves_no_temporary_file(tmp_path: Path) -> None:
    # A real fault: the name is taken by a directory that is not empty.
    (tmp_path / "state.json").mkdir()
    (tmp_path / "state.json/kept").write_text("")
    with pytest.raises(OSError):
        write_atomic(str(tmp_path / "state.json"), b"{}\n")
    assert os.listdir(tmp_path) == ["state.json"]
    assert os.listdir(tmp_path / "state.json") == ["kept"]


def test_a_tree_is_synced_file_by_file_and_every_directory_after_its_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "task-0").mkdir()
    (tmp_path / "task-0/pages-1.img").write_bytes(b"p" * 4096)
    (tmp_path / "task-0/link").symlink_to("/etc/passwd")  # not followed out of the tree
    os.mkfifo(tmp_path / "task-0/fifo")  # not opened: it would block
    (tmp_path / "task.json").write_text("{}")
    seen = _synced(monkeypatch)
    sync_tree(str(tmp_path))
    assert sorted(seen) == sorted([f"file {tmp_path}/task-0/pages-1.img",
                                   f"directory {tmp_path}/task-0",
                                   f"file {tmp_path}/task.json", f"directory {tmp_path}"])
    assert seen.index(f"directory {tmp_path}/task-0") > seen.index(
        f"file {tmp_path}/task-0/pages-1.img")
    assert seen[-1] == f"directory {tmp_path}"
