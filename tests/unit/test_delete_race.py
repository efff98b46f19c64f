"""delete signals an anchor it saw alive; one that exited meanwhile (a concurrent
delete, a create failing at that moment) must not turn into an internal error."""

import os

from pyscrun.cli.ending import _signal_anchor


def test_signalling_an_anchor_that_already_exited_is_not_an_error() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # gone, as an anchor that exited between the check and the kill
    _signal_anchor(pid, 15)
    _signal_anchor(pid, 9)
