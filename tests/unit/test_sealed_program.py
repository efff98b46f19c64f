"""The runtime run from a sealed copy of its program (node/sealed_program.py), with
the real runc."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pyscrun import linux
from pyscrun.conf import ociconf, patterns
from pyscrun.node import sealed_program
from pyscrun.node.runtime import RuntimeCommands
from pyscrun.node.sealed_program import Sealing

F_GET_SEALS = 1034
ALL_SEALS = 0xF
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
OCI_CONF = ('RunTimeRun="runc run %n -b %b"\nRunTimeKill="runc kill %n"\n'
            'RunTimeDelete="runc delete %n"\n')


def commands_for(pattern: str, path: str = PATH) -> RuntimeCommands:
    conf = ociconf.parse(OCI_CONF, "oci.conf")
    conf.RunTimeQuery = pattern
    return RuntimeCommands(conf, patterns.PatternValues(), cwd="/", environ={"PATH": path})


def real_runc() -> str:
    found = shutil.which("runc", path=PATH)
    if found is None:
        pytest.fail("runc is missing: install package runc (make setup does)")
    return found


def test_runc_runs_from_a_fully_sealed_copy_of_itself() -> None:
    """runc then finds its program sealed and skips copying itself at the container's
    start; it still answers as runc does."""
    runc = real_runc()
    commands = commands_for("runc --version")
    commands.seal_programs(("RunTimeQuery",))
    fd = commands.sealed["runc"]
    assert fcntl.fcntl(fd, F_GET_SEALS) == ALL_SEALS
    assert commands.command("RunTimeQuery") == f"/proc/self/fd/{fd} --version"
    code, output = commands.run("RunTimeQuery")
    expected = subprocess.run([runc, "--version"], capture_output=True, text=True, check=True)
    assert (code, output) == (0, expected.stdout)
    with open(runc, "rb") as program:
        assert Path(f"/proc/self/fd/{fd}").read_bytes() == program.read()


@pytest.mark.parametrize("pattern", ["echo runc", "nosuchruntime-anywhere --version"])
def test_other_programs_run_from_their_files(pattern: str) -> None:
    """Only a runtime known to copy itself is copied; one not found is left to fail
    as it would."""
    commands = commands_for(pattern)
    commands.seal_programs(("RunTimeQuery",))
    assert commands.sealed == {}
    assert commands.command("RunTimeQuery") == pattern


def test_a_runc_not_on_path_runs_as_named() -> None:
    commands = commands_for("runc state x", path="/nonexistent")
    commands.seal_programs(("RunTimeQuery",))
    assert commands.sealed == {}
    code, output = commands.run("RunTimeQuery")
    assert code == 127 and "runc: not found" in output


def test_the_copy_made_while_the_agent_loads_is_the_one_run() -> None:
    """The agent starts copying runc before its modules load (node/early.py): that
    copy, sealed, is what runc then runs from; none is made a second time."""
    runc = real_runc()
    sealing = Sealing([runc, runc])
    sealing.wait()
    made = sealing.copies[runc]
    commands = commands_for("runc --version")
    commands.seal_programs(("RunTimeQuery",), sealing)
    assert commands.sealed == {"runc": made}
    assert fcntl.fcntl(made, F_GET_SEALS) == ALL_SEALS
    assert sealing.copies == {}


def test_a_copy_made_early_and_not_run_is_closed() -> None:
    """oci.conf names another program after all: its copy goes, nothing is left open."""
    runc = real_runc()
    sealing = Sealing([runc])
    commands = commands_for("echo runc")
    commands.seal_programs(("RunTimeQuery",), sealing)
    assert commands.sealed == {}
    sealing.wait()
    made = sealing.copies[runc]
    sealing.close()
    with pytest.raises(OSError):
        os.fstat(made)


@pytest.mark.parametrize(("flags", "copies"), [
    (0, False),  # root on the host: runc bind-mounts itself
    (linux.CLONE_NEWUSER, True),  # a user namespace alone: the host's mounts are not its
    (linux.CLONE_NEWUSER | linux.CLONE_NEWNS, False),  # the node agent's namespaces
])
def test_runc_is_known_to_copy_itself_only_where_it_may_not_mount(flags: int,
                                                                  copies: bool) -> None:
    if os.geteuid() != 0:
        pytest.fail("the unit tests run as root (make test)")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            if flags:
                linux.unshare(flags)
            os.write(write, b"1" if sealed_program.needed() else b"0")
        finally:
            os._exit(0)
    os.close(write)
    said = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert said == (b"1" if copies else b"0")
