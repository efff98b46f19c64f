"""Child processes started with posix_spawn (child.py): what a runtime command started
by the agent gets, as subprocess would have given it, how a command that overstays or
is interrupted is ended, and how a bound one dies with its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pyscrun import child
from pyscrun.backends.salloc import HeldAllocation
from pyscrun.conf import ociconf, patterns
from pyscrun.errors import BackendError, Interrupted
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


def _sleeping(marker: str) -> list[int]:
    """The pids of `sleep marker` processes (zombies aside)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and _command_line(pid) == b"sleep\0" + marker.encode() + b"\0":
            found.append(int(pid))
    return found


def _gone_within(marker: str, timeout: float) -> bool:
    """Whether the `sleep marker` processes end within timeout seconds (else they are
    killed, for the tests after)."""
    deadline = time.monotonic() + timeout
    while left := _sleeping(marker):
        if time.monotonic() > deadline:
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            return False
        time.sleep(0.05)
    return True


def test_an_interrupted_command_ends_with_what_it_started() -> None:
    """A signal on the anchor's self-pipe ends scrun.lua's command, the shell and its
    sleep alike, at once (both end on SIGTERM)."""
    marker = f"{32 + os.getpid() / 1e7:.7f}"
    reader, writer = os.pipe()
    os.set_blocking(reader, False)
    signalled = threading.Timer(0.3, os.write, (writer, bytes([signal.SIGTERM])))
    signalled.start()
    began = time.monotonic()
    try:
        with pytest.raises(Interrupted, match=r"^interrupted by SIGTERM$"):
            child.run(["/bin/sh", "-c", f"sleep {marker}; echo never"], ENV, None,
                      interrupt_fd=reader, bound=True)
    finally:
        signalled.join()
        os.close(reader)
        os.close(writer)
    assert time.monotonic() - began < child.INTERRUPT_GRACE
    assert _gone_within(marker, 1)


def test_a_bound_command_is_what_it_runs() -> None:
    """Its status, output and descriptors are the command's own."""
    assert child.run(["/bin/sh", "-c", "echo out; echo err >&2; echo more; exit 3"], ENV, 10,
                     merge_output=True, bound=True) == (3, b"out\nerr\nmore\n", b"")
    assert child.run(["/bin/sh", "-c", "kill -TERM $$"], ENV, 10, bound=True)[0] == -15
    code, out, _ = child.run(["/bin/sh", "-c", "ls /proc/self/fd"], ENV, 10, bound=True)
    assert (code, out.split()) == (0, [b"0", b"1", b"2", b"3"])  # 3: ls's own listing


def test_a_bound_command_ends_what_it_left_in_the_background_as_slurm_does() -> None:
    """As Slurm's run_command ends what scrun.lua's commands leave behind; what left
    the command's process group (setsid) is not its any more, there as here."""
    marker = f"{33 + os.getpid() / 1e7:.7f}"
    escaped = f"{34 + os.getpid() / 1e7:.7f}"
    assert child.run(["/bin/sh", "-c", f"sleep {marker} >/dev/null 2>&1 & "
                      f"setsid sleep {escaped} >/dev/null 2>&1 & sleep 0.2; echo started"],
                     ENV, 10, bound=True) == (0, b"started\n", b"")
    assert _gone_within(marker, 2)
    assert not _gone_within(escaped, 0.3)


def test_a_bound_command_dies_with_its_parent() -> None:
    """Killed outright (SIGKILL), the anchor runs no clean-up: the command, and the
    processes it started, end by themselves."""
    marker = f"{34 + os.getpid() / 1e7:.7f}"
    parent = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pyscrun import child; "
         "child.run(['/bin/sh', '-c', sys.argv[1]], {}, None, bound=True)",
         f"sleep {marker}; echo never"])
    try:
        deadline = time.monotonic() + 10
        while not _sleeping(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _sleeping(marker)
    finally:
        parent.kill()
        parent.wait()
    assert _gone_within(marker, 5)


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
