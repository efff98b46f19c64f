"""processes.await_exec: a container's init counts as the container's once it runs the
container's program, not while it runs its runtime's code (which a signal would end
with a status of its own). A forked process, as a runtime's init is, stands in for it:
Python's code is the runtime's, the sleep it execs the container's program."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pyscrun.node import processes

SLEEP = "/bin/sleep"


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as comm:
        return comm.read().strip()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(") ")[2][:1]


@contextmanager
def _forked_init(exec_after: float | None) -> Iterator[int]:
    """A forked process that execs sleep after exec_after seconds (None: never), as a
    runtime's init execs the container's program once it is told to go on."""
    pid = os.fork()
    if pid == 0:
        try:
            time.sleep(30 if exec_after is None else exec_after)
            if exec_after is not None:
                os.execv(SLEEP, [SLEEP, "30"])
        finally:
            os._exit(0)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_the_wait_ends_once_the_init_execs_the_containers_program() -> None:
    with _forked_init(exec_after=0.3) as init:
        assert not processes.ran_exec(init)
        processes.await_exec(init, 10)
        assert _comm(init) == "sleep"


def test_an_init_that_execd_already_ends_the_wait_at_once_whatever_it_is_called() -> None:
    # A program that renamed itself, or an entrypoint that exec'd another: neither
    # name nor executable is the one the container's process.args named.
    init = subprocess.Popen([SLEEP, "30"])
    try:
        while _comm(init.pid) != "sleep":
            time.sleep(0.001)
        started = time.monotonic()
        processes.await_exec(init.pid, 10)
        assert time.monotonic() - started < 1
        assert init.poll() is None
    finally:
        init.kill()
        init.wait()


def test_an_init_that_never_execs_waits_the_timeout_out() -> None:
    with _forked_init(exec_after=None) as init:
        started = time.monotonic()
        processes.await_exec(init, 0.2)
        assert time.monotonic() - started >= 0.2
        assert _state(init) != "Z"
        assert not processes.ran_exec(init)


def test_an_init_already_gone_ends_the_wait() -> None:
    init = subprocess.Popen(["/bin/true"])
    init.wait()
    started = time.monotonic()
    processes.await_exec(init.pid, 10)
    assert time.monotonic() - started < 5
    assert not os.path.exists(f"/proc/{init.pid}")


def test_an_init_that_ended_unreaped_ends_the_wait() -> None:
    with _forked_init(exec_after=None) as init:
        os.kill(init, signal.SIGTERM)
        while _state(init) != "Z":
            time.sleep(0.001)
        started = time.monotonic()
        processes.await_exec(init, 10)
        assert time.monotonic() - started < 5
