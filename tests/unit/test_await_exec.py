"""processes.await_exec: a container's init counts as the container's once it runs the
container's program, not while it runs its runtime's code (which a signal would end
with a status of its own). Real processes stand in for the runtime's init."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from pyscrun.node import processes

SLEEP = "/bin/sleep"


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as comm:
        return comm.read().strip()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(") ")[2][:1]


def _execs_after(delay: float, program: str) -> subprocess.Popen[bytes]:
    """A process that runs Python's code for delay seconds, then execs program."""
    code = f"import os, time; time.sleep({delay}); os.execv({program!r}, ['x', '30'])"
    return subprocess.Popen([sys.executable, "-c", code])


def test_the_wait_ends_once_the_init_runs_the_containers_program() -> None:
    init = _execs_after(0.3, SLEEP)
    try:
        processes.await_exec(init.pid, [SLEEP, "30"], 10)
        assert _comm(init.pid) == "sleep"
    finally:
        init.kill()
        init.wait()


def test_a_program_run_under_another_name_ends_the_wait_at_its_exec() -> None:
    # args[0] names a link whose target execve takes the name of, say.
    init = _execs_after(0.3, SLEEP)
    try:
        processes.await_exec(init.pid, ["/usr/local/bin/snooze"], 10)
        assert _comm(init.pid) == "sleep"
    finally:
        init.kill()
        init.wait()


def test_a_program_that_runs_already_under_another_name_waits_the_timeout_out() -> None:
    init = subprocess.Popen([SLEEP, "30"])
    try:
        while _comm(init.pid) != "sleep":
            time.sleep(0.001)
        started = time.monotonic()
        processes.await_exec(init.pid, ["/usr/local/bin/snooze"], 0.2)
        assert time.monotonic() - started >= 0.2
        assert init.poll() is None
    finally:
        init.kill()
        init.wait()


def test_an_init_already_gone_ends_the_wait() -> None:
    init = subprocess.Popen(["/bin/true"])
    init.wait()
    started = time.monotonic()
    processes.await_exec(init.pid, ["/bin/sh"], 10)
    assert time.monotonic() - started < 5
    assert not os.path.exists(f"/proc/{init.pid}")


def test_an_init_that_ended_unreaped_ends_the_wait() -> None:
    init = subprocess.Popen([SLEEP, "0"])
    while _state(init.pid) != "Z":
        time.sleep(0.001)
    started = time.monotonic()
    processes.await_exec(init.pid, ["/usr/local/bin/snooze"], 10)
    assert time.monotonic() - started < 5
    init.wait()
