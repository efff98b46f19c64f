"""Before a paused container is dumped, what its init wrote to its output pipes has
been read from them: a dump takes what a pipe still holds along and a restore writes it
again, so its reader saw those lines twice (a moved counter said a number twice).

A real process whose stdout is a real pipe stands for the container's init."""

from __future__ import annotations

import os
import subprocess

from pyscrun.node.processes import wait_output_taken


def test_a_pipe_that_still_holds_output_is_waited_for_until_it_is_read() -> None:
    read, write = os.pipe()
    init = subprocess.Popen(["sleep", "30"], stdout=write)
    os.close(write)
    try:
        as_init = os.open(f"/proc/{init.pid}/fd/1", os.O_WRONLY)  # what the init wrote
        os.write(as_init, b"272\n")
        os.close(as_init)
        assert not wait_output_taken(init.pid, 0.2)
        assert os.read(read, 100) == b"272\n"
        assert wait_output_taken(init.pid, 0.2)
    finally:
        init.kill()
        init.wait()
        os.close(read)


def test_output_that_is_no_pipe_is_not_waited_for() -> None:
    init = subprocess.Popen(["sleep", "30"], stdout=subprocess.DEVNULL)
    try:
        assert wait_output_taken(init.pid, 0.2)
    finally:
        init.kill()
        init.wait()
