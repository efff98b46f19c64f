"""A failed dump or restore says CRIU's reason, read from its log: runc says only where
the log is, and on a node that does not see the image path the log is gone with the
task's local files before anyone could read it."""

from __future__ import annotations

from pathlib import Path

from pyscrun.node.criu import DUMP_LOG, with_criu_error

LOG = """\
(00.001) Version: 4.1.1
(00.002) Error (criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted
(00.120) Error (criu/sk-inet.c:191): inet: Connected TCP socket, consider using --tcp-established option.
(00.121) Error (criu/cr-dump.c:2111): Dumping FAILED.
"""


def test_the_error_that_stopped_criu_is_said(tmp_path: Path) -> None:
    (tmp_path / DUMP_LOG).write_text(LOG)
    assert with_criu_error("RunTimeCheckpoint failed", str(tmp_path), DUMP_LOG) == (
        "RunTimeCheckpoint failed; CRIU: inet: Connected TCP socket, consider using "
        "--tcp-established option. | Dumping FAILED.")


def test_without_a_log_or_an_error_in_it_the_failure_is_as_it_was(tmp_path: Path) -> None:
    assert with_criu_error("RunTimeRestore exited 1", str(tmp_path), DUMP_LOG) == \
        "RunTimeRestore exited 1"
    (tmp_path / DUMP_LOG).write_text("(00.001) Version: 4.1.1\n")
    assert with_criu_error("RunTimeRestore exited 1", str(tmp_path), DUMP_LOG) == \
        "RunTimeRestore exited 1"
