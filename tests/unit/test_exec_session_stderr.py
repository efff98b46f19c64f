"""The exec session's stderr filter (cli/execute.py): what the node says before its
process runs is held as why it did not, and goes to `scrun exec` instead of stderr when
the node never says it runs; srun's word on the status and the mark itself never show."""

from __future__ import annotations

import os

from pyscrun.cli.execute import _pass_stderr
from pyscrun.node import EXEC_RUNNING_MARK

SRUN_STATUS = b"srun: error: n1: task 0: Exited with exit code 3\n"


def _filtered(said: bytes, with_ready: bool) -> tuple[bytes, bytes]:
    """What _pass_stderr writes to stderr and to its ready pipe, given said."""
    source_read, source_write = os.pipe()
    err_read, err_write = os.pipe()
    ready_read, ready_write = os.pipe() if with_ready else (-1, -1)
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(err_write, 2)
            for fd in (source_write, err_read, err_write, ready_read):
                if fd >= 0:
                    os.close(fd)
            _pass_stderr(source_read, ready_write)
        finally:
            os._exit(0)
    for fd in (source_read, err_write, ready_write):
        if fd >= 0:
            os.close(fd)
    os.write(source_write, said)
    os.close(source_write)
    outputs = []
    for fd in (err_read, ready_read):
        data = b""
        while fd >= 0 and (chunk := os.read(fd, 65536)):
            data += chunk
        if fd >= 0:
            os.close(fd)
        outputs.append(data)
    os.waitpid(pid, 0)
    return outputs[0], outputs[1]


def test_lines_before_the_mark_are_passed_on_once_the_process_runs() -> None:
    stderr, ready = _filtered(b"srun: warning: slow\n" + EXEC_RUNNING_MARK
                              + b"oops\n" + SRUN_STATUS + b"last", with_ready=True)
    assert ready == b"+"
    assert stderr == b"srun: warning: slow\noops\nlast"


def test_the_mark_is_known_behind_srun_s_label() -> None:
    stderr, ready = _filtered(b"0: " + EXEC_RUNNING_MARK + b"0: oops\n", with_ready=True)
    assert (stderr, ready) == (b"0: oops\n", b"+")


def test_without_the_mark_the_lines_are_why_and_stay_off_stderr() -> None:
    why = b'scrun: error: unable to start container process: exec: "x": not found\n'
    stderr, ready = _filtered(why + SRUN_STATUS, with_ready=True)
    assert (stderr, ready) == (b"", b"-" + why)


def test_only_the_last_lines_are_kept_as_why() -> None:
    lines = [f"line {n}\n".encode() for n in range(30)]
    stderr, ready = _filtered(b"".join(lines), with_ready=True)
    assert ready == b"-" + b"".join(lines[10:])
    assert stderr == b"".join(lines[:10])


def test_with_nobody_waiting_the_mark_is_dropped_and_the_rest_passed() -> None:
    stderr, ready = _filtered(b"a\n" + EXEC_RUNNING_MARK + b"b\n" + SRUN_STATUS,
                              with_ready=False)
    assert (stderr, ready) == (b"a\nb\n", b"")
