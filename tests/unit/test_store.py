"""The spool store's removal of a container's directory."""

from __future__ import annotations

from pathlib import Path

from pyscrun.anchor.store import Store


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
