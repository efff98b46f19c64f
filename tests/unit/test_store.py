"""The spool store's removal of a container's directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pyscrun.anchor.store import Store

SCRUN = Path(sys.executable).parent / "scrun"


def test_remove_takes_the_whole_spool_dir_and_nothing_a_symlink_points_at(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "file").write_text("mine")
    store = Store(str(tmp_path / "root"))
    spool = Path(store.spool_dir("c1"))
    (spool / "work" / "deeper").mkdir(parents=True)
    (spool / "state.json").write_text("{}")
    (spool / "work" / "deeper" / "image").write_bytes(b"\0" * 10)
    (spool / "link-to-dir").symlink_to(outside / "keep")
    (spool / "work" / "link-to-file").symlink_to(outside / "keep" / "file")
    store.remove("c1")
    assert not spool.exists()
    assert (outside / "keep" / "file").read_text() == "mine"


def test_remove_of_what_is_not_there_is_quiet(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "root"))
    store.remove("never-created")
    assert not Path(store.spool_dir("never-created")).exists()


def test_remove_leaves_a_symlink_planted_as_the_spool_dir_and_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    store = Store(str(tmp_path / "root"))
    (tmp_path / "root").mkdir()
    Path(store.spool_dir("s")).symlink_to(victim)
    store.remove("s")
    assert (victim / "keep").read_text() == "precious"
    assert Path(store.spool_dir("s")).is_symlink()


def _create_in_child(store: Store, container_id: str) -> tuple[int, int]:
    """A process that reserved the id as create does (its pid), and a pipe whose closing
    lets it exit (the write end), so that it dies before any state was saved."""
    read_fd, write_fd = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(write_fd)
        store.make_spool_dir(container_id)
        os.write(ready_w, b"x")
        os.read(read_fd, 1)
        os._exit(0)
    os.close(read_fd)
    os.close(ready_w)
    os.read(ready_r, 1)
    os.close(ready_r)
    return pid, write_fd


def test_a_spool_dir_left_by_a_create_that_died_is_removed_by_delete_force(
        tmp_path: Path) -> None:
    store = Store(str(tmp_path / "root"))
    pid, release = _create_in_child(store, "early")
    os.close(release)
    os.waitpid(pid, 0)
    assert Path(store.spool_dir("early")).is_dir()
    done = subprocess.run([str(SCRUN), "--root", store.root, "delete", "--force", "early"],
                          capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert not Path(store.spool_dir("early")).exists()
    store.make_spool_dir("early")  # the id can be created again


def test_a_create_still_running_keeps_its_spool_dir(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "root"))
    pid, release = _create_in_child(store, "busy")
    try:
        store.remove_abandoned("busy")
        assert Path(store.spool_dir("busy")).is_dir()
    finally:
        os.close(release)
        os.waitpid(pid, 0)


def test_a_spool_dir_with_state_is_no_abandoned_one(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "root"))
    spool = Path(store.spool_dir("saved"))
    spool.mkdir(parents=True)
    (spool / "state.json").write_text("{}")
    store.remove_abandoned("saved")
    assert (spool / "state.json").exists()


def test_times_are_written_as_runc_writes_them() -> None:
    """Go's RFC3339Nano, as runc's `created`: nanoseconds without their trailing zeros."""
    from pyscrun.oci.state import timestamp

    assert timestamp(1_764_961_200_336_486_039) == "2025-12-05T19:00:00.336486039Z"
    assert timestamp(1_764_961_200_120_000_000) == "2025-12-05T19:00:00.12Z"
    assert timestamp(1_764_961_200_000_000_000) == "2025-12-05T19:00:00Z"
