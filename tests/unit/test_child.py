"""Child processes started with posix_spawn (child.py): what a runtime command started
by the agent gets, as subprocess would have given it, and how a command that overstays is
ended."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from pyscrun import child
from pyscrun.backends.salloc import HeldAllocation
from pyscrun.conf import ociconf, patterns
from pyscrun.errors import BackendError
from pyscrun.node.runtime import RuntimeCommands

ENV = {"PATH": "/usr/bin:/bin"}


def test_a_command_gets_the_descriptors_it_is_given_and_no_other() -> None:
    given_read, given_write = os.pipe()
    stray_read, stray_write = os.pipe()
    os.set_inheritable(stray_write, True)  # as a descriptor from the agent's parent is
    try:
        code, out, err = child.run(["/bin/sh", "-c", "ls /proc/self/fd"], ENV, 10,
                                   pass_fds=[given_write])
    finally:
        for fd in (given_read, given_write, stray_read, stray_write):
            os.close(fd)
    assert (code, err) == (0, b"")
    open_fds = {int(fd) for fd in out.split()}
    assert given_write in open_fds
    assert stray_write not in open_fds


def test_a_command_takes_sigpipe_as_programs_expect() -> None:
    """Python ignores SIGPIPE; a program the agent starts must not inherit that."""
    code, out, _ = child.run(["/bin/sh", "-c", "grep SigIgn /proc/self/status"], ENV, 10)
    ignored = int(out.split()[1], 16)
    assert code == 0
    assert not ignored & (1 << (signal.SIGPIPE - 1))


def test_a_command_gets_its_stdio_and_its_exit_code_is_known() -> None:
    out_read, out_write = os.pipe()
    started = child.spawn(["/bin/sh", "-c", "echo out; exit 3"], ENV, (None, out_write, None))
    os.close(out_write)
    assert started.wait() == 3
    assert os.read(out_read, 100) == b"out\n"
    os.close(out_read)


def test_a_killed_command_says_by_which_signal() -> None:
    started = child.spawn(["/bin/sleep", "30"], ENV)
    assert started.poll() is None
    os.kill(started.pid, signal.SIGTERM)
    assert started.wait() == -signal.SIGTERM


def test_a_command_that_overstays_is_killed() -> None:
    marker = f"{30 + os.getpid() / 1e7:.7f}"  # sleep's argument, to find it by
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        child.run(["/bin/sh", "-c", f"exec sleep {marker}"], ENV, 0.5)
    assert time.monotonic() - began < 10
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit()
                and _command_line(pid) == b"sleep\0" + marker.encode() + b"\0"]


def test_what_an_overstaying_command_started_is_killed_with_it() -> None:
    """A runtime command runs in a shell, which starts runc (and runc CRIU) as children
    of its own: they must not go on dumping after the command was given up."""
    marker = f"{31 + os.getpid() / 1e7:.7f}"
    with pytest.raises(TimeoutError):
        child.run(["/bin/sh", "-c", f"sleep {marker}; echo never"], ENV, 0.5)
    time.sleep(0.2)  # a SIGKILLed process leaves /proc once its parent has seen it
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit()
                and _command_line(pid) == b"sleep\0" + marker.encode() + b"\0"]


def _command_line(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_output_and_errors_are_told_apart() -> None:
    code, out, err = child.run(["/bin/sh", "-c", "echo said; echo failed >&2; exit 1"], ENV, 10)
    assert (code, out, err) == (1, b"said\n", b"failed\n")


def test_runtime_commands_run_in_the_task_dir_whatever_its_name(tmp_path: Path) -> None:
    task_dir = tmp_path / "task 'x' $(dir)"
    task_dir.mkdir()
    conf = ociconf.parse('RunTimeRun="runc run %n"\nRunTimeKill="pwd"\nRunTimeDelete="d"\n',
                         "oci.conf")
    commands = RuntimeCommands(conf, patterns.PatternValues(), str(task_dir), ENV)
    assert commands.run("RunTimeKill") == (0, f"{task_dir}\n")


def test_a_program_named_without_a_path_is_found_in_path_and_a_missing_one_said() -> None:
    done = child.spawn(["true"], os.environ)
    assert done.wait() == 0
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(BackendError, match=r"^no-such-salloc not found: install slurm-client$"):
        HeldAllocation.start(["no-such-salloc"], dict(os.environ))
    assert set(os.listdir("/proc/self/fd")) == before, "its pipes are left open"
