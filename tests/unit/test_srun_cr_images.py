"""A checkpoint directory replaced by a newer checkpoint: whole, in one step, on disk."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pyscrun import linux
from pyscrun.errors import CheckpointError
from pyscrun.srun_cr import images


def _checkpoint(root: Path, content: str) -> images.Staging:
    staging = images.Staging(str(root / "ck"))
    os.makedirs(images.task_dir(staging.path, 0))
    Path(images.task_dir(staging.path, 0), "pages-1.img").write_text(content)
    staging.commit(images.make_manifest("7", "0", ["n1"], ["counter"], "/", False))
    return staging


def _pages(root: Path) -> str:
    return Path(images.task_dir(str(root / "ck"), 0), "pages-1.img").read_text()


def _cannot_exchange(first: str, second: str) -> None:
    """Stand-in for a file system without RENAME_EXCHANGE (none here to mount)."""
    raise OSError(errno.EINVAL, "renameat2: Invalid argument")


def _failing_sync(path: str) -> None:
    """Stand-in for a disk failing under fsync of a directory (EIO), which cannot be
    produced here."""
    raise OSError(errno.EIO, "Input/output error")


def test_exchange_swaps_two_directories(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a/from-a").touch()
    (tmp_path / "b").mkdir()
    (tmp_path / "b/from-b").touch()
    linux.exchange(str(tmp_path / "a"), str(tmp_path / "b"))
    assert os.listdir(tmp_path / "a") == ["from-b"]
    assert os.listdir(tmp_path / "b") == ["from-a"]


def test_a_new_checkpoint_replaces_the_previous_and_nothing_else_is_left(tmp_path: Path) -> None:
    _checkpoint(tmp_path, "first")
    _checkpoint(tmp_path, "second")
    assert _pages(tmp_path) == "second"
    assert images.Checkpoint.load(str(tmp_path / "ck")).tasks == 1
    assert os.listdir(tmp_path) == ["ck"]  # no staging, no previous checkpoint


def test_a_restart_knows_a_checkpoint_put_in_place_of_the_one_it_began_with(
        tmp_path: Path) -> None:
    """The restart reads the manifest once, each task's launcher again: a checkpoint
    made into the same directory in between is refused, not restored beside the
    first one's tasks."""
    _checkpoint(tmp_path, "first")
    began = images.Checkpoint.load(str(tmp_path / "ck"))
    began.check_same(images.Checkpoint.load(str(tmp_path / "ck")).id)
    _checkpoint(tmp_path, "second")
    with pytest.raises(CheckpointError, match="holds another checkpoint than when the "
                                              "restart began"):
        images.Checkpoint.load(str(tmp_path / "ck")).check_same(began.id)


def test_where_the_file_system_cannot_swap_two_renames_do_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _checkpoint(tmp_path, "first")
    monkeypatch.setattr(linux, "exchange", _cannot_exchange)
    _checkpoint(tmp_path, "second")
    assert _pages(tmp_path) == "second"
    assert os.listdir(tmp_path) == ["ck"]


@pytest.mark.parametrize("exchange", [True, False])
def test_a_checkpoint_whose_place_cannot_be_synced_leaves_the_previous_one_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool) -> None:
    _checkpoint(tmp_path, "first")
    monkeypatch.setattr(images, "sync_directory", _failing_sync)
    if not exchange:
        monkeypatch.setattr(linux, "exchange", _cannot_exchange)
    with pytest.raises(CheckpointError, match=r"on disk: Input/output error"):
        _checkpoint(tmp_path, "second")
    assert _pages(tmp_path) == "first"
    assert os.listdir(tmp_path) == ["ck"]


def test_a_first_checkpoint_whose_place_cannot_be_synced_is_not_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "sync_directory", _failing_sync)
    with pytest.raises(CheckpointError):
        _checkpoint(tmp_path, "first")
    assert os.listdir(tmp_path) == []


def test_a_directory_with_someone_elses_manifest_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "manifest.json").write_text('{"name": "my web app"}\n')
    (tmp_path / "ck" / "results.csv").write_text("1,2\n")
    with pytest.raises(CheckpointError, match="is not empty and holds no srun_cr checkpoint"):
        images.Staging(str(tmp_path / "ck"))
    assert sorted(os.listdir(tmp_path / "ck")) == ["manifest.json", "results.csv"]
    assert os.listdir(tmp_path) == ["ck"]


def test_a_checkpoint_with_files_of_the_users_beside_it_is_not_replaced(tmp_path: Path) -> None:
    _checkpoint(tmp_path, "first")
    (tmp_path / "ck" / "notes.txt").write_text("keep me\n")
    with pytest.raises(CheckpointError, match=r"holds 'notes\.txt', which is not part of an srun_cr"):
        images.Staging(str(tmp_path / "ck"))
    assert (tmp_path / "ck" / "notes.txt").read_text() == "keep me\n"
    assert _pages(tmp_path) == "first"


def _made(root: Path, name: str, command: list[str], mtime: int) -> str:
    staging = images.Staging(str(root / name))
    os.makedirs(images.task_dir(staging.path, 0))
    staging.commit(images.make_manifest("7", name.rsplit(".", 1)[1], ["n1"], command, "/", False))
    os.utime(root / name / images.MANIFEST, ns=(mtime, mtime))
    return str(root / name)


def test_a_requeued_job_goes_on_from_the_newest_checkpoint_of_its_command(tmp_path: Path) -> None:
    older = _made(tmp_path, "srun_cr-7.0", ["counter"], 1_000)
    newer = _made(tmp_path, "srun_cr-7.3", ["counter"], 2_000)
    _made(tmp_path, "srun_cr-7.4", ["other"], 3_000)  # another command of the script
    _made(tmp_path, "srun_cr-8.5", ["counter"], 4_000)  # another job
    (tmp_path / "srun_cr-7.6").mkdir()  # no checkpoint (a crash before its manifest)
    requeued = {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1"}
    assert images.left_before_requeue(requeued, str(tmp_path), ["counter"]) == newer
    os.utime(Path(older, images.MANIFEST), ns=(5_000, 5_000))
    assert images.left_before_requeue(requeued, str(tmp_path), ["counter"]) == older
    assert images.left_before_requeue(requeued, str(tmp_path), ["counter", "-v"]) is None


def test_a_job_run_for_the_first_time_starts_afresh(tmp_path: Path) -> None:
    _made(tmp_path, "srun_cr-7.0", ["counter"], 1_000)
    for environ in ({"SLURM_JOB_ID": "7"}, {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "0"},
                    {"SLURM_RESTART_COUNT": "1"}):
        assert images.left_before_requeue(environ, str(tmp_path), ["counter"]) is None


def test_a_requeued_job_looks_in_its_checkpoint_dir(tmp_path: Path) -> None:
    (tmp_path / "ck").mkdir()
    made = _made(tmp_path / "ck", "srun_cr-7.0", ["counter"], 1_000)
    requeued = {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "2",
                "SLURM_CHECKPOINT_DIR": str(tmp_path / "ck")}
    assert images.left_before_requeue(requeued, "/nonexistent", ["counter"]) == made
    del requeued["SLURM_CHECKPOINT_DIR"]
    assert images.left_before_requeue(requeued, "/nonexistent", ["counter"]) is None
