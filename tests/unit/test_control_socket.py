"""An anchor's control socket after its container was deleted: the id may already be
another container's, whose socket the old anchor must leave alone when it closes its own
(it can close minutes later, giving its job back while slurmctld is away)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pyscrun import poller
from pyscrun.anchor.control import ControlSocket


def _answer(*_: object) -> dict[str, object]:
    return {"ok": True}


def test_closing_leaves_a_newer_socket_at_the_same_path(tmp_path: Path) -> None:
    path = str(tmp_path / "ctl")
    with poller.Poller() as selector:
        old = ControlSocket(selector, path, _answer)
        # delete removed the spool dir; a new create of the same id made its socket.
        os.unlink(path)
        new = ControlSocket(selector, path, _answer)
        old.close()
        assert os.path.exists(path)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(path)  # the new anchor's socket still takes requests
        client.close()
        new.close()
        assert not os.path.exists(path)


def test_closing_removes_its_own_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "ctl")
    with poller.Poller() as selector:
        ControlSocket(selector, path, _answer).close()
    assert not os.path.exists(path)
