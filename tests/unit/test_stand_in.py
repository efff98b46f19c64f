"""create's side of the stand-in (anchor/stand_in.py), with real forks."""

from __future__ import annotations

import os

from pyscrun.anchor.stand_in import StandInPipes


def test_a_stand_in_whose_anchor_is_already_gone_ends_without_an_error() -> None:
    """An anchor that died before it read the stand-in's pid (no process holds its
    ends here) is create's to report from the anchor's own report; telling it the pid
    is no error of its own, and the stand-in, told nothing, exits."""
    pipes = StandInPipes()
    pid = pipes.fork()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 128 + 9
