"""scrun's own words: one line for a failure, whatever the input it quotes holds, and
its own status, never a traceback, when started with stdout or stderr closed (`>&-`,
`2>&-`), as runc does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRUN = Path(sys.executable).parent / "scrun"


def _scrun(closed_fd: int | None, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRUN), "--root", str(tmp_path / "root"), *args],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "SLURM_CONF": str(tmp_path / "none.conf")},
                          preexec_fn=None if closed_fd is None else lambda: os.close(closed_fd))


@pytest.mark.parametrize("closed_fd", [1, 2])
def test_a_command_that_succeeds_exits_0(closed_fd: int, tmp_path: Path) -> None:
    done = _scrun(closed_fd, tmp_path, "features")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_a_failure_with_stdout_closed_is_one_line_and_its_status(tmp_path: Path) -> None:
    done = _scrun(1, tmp_path, "state", "nosuch")
    assert done.returncode == 1
    assert done.stderr == "scrun: error: container 'nosuch' does not exist\n"


def test_a_newline_in_the_input_a_failure_quotes_stays_inside_its_line(tmp_path: Path) -> None:
    done = _scrun(None, tmp_path, "create", "-b", str(tmp_path / "x\ny"), "c1")
    assert done.returncode == 1
    assert done.stderr == f"scrun: error: bundle {tmp_path}/x\\ny is not a directory\n"
