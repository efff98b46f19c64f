"""snapshot.settle: a change time stamped by another machine's clock (a file server
ahead of this one, where checkpoint images are written) does not stall its caller,
the anchor's loop among them, until this clock catches up."""

from __future__ import annotations

import time
from pathlib import Path

from pyscrun import snapshot


def test_a_change_time_from_a_clock_an_hour_ahead_is_not_waited_for(tmp_path: Path) -> None:
    entries = snapshot.walk(str(tmp_path))
    inode, _, kind = entries[snapshot.ROOT]
    entries[snapshot.ROOT] = (inode, time.time_ns() + 3600 * 10**9, kind)
    started = time.monotonic()
    snapshot.settle(entries)
    assert time.monotonic() - started < 60  # not the hour


def test_a_change_time_of_this_clock_is_passed_before_settle_returns(tmp_path: Path) -> None:
    (tmp_path / "image").write_bytes(b"dumped")
    entries = snapshot.walk(str(tmp_path))
    snapshot.settle(entries)
    latest = max(change for _, change, _ in entries.values())
    assert time.clock_gettime_ns(snapshot._FILE_CLOCK) > latest
