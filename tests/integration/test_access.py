"""Who may act on a container: its owner (and root), nobody else.

The spool dir and the control socket are reachable by the owner only, and even where a
careless administrator opened them up, the anchor refuses every peer whose uid is not
the owner's or root's (SO_PEERCRED, checked by the kernel). Another user, here `nobody`
through util-linux's setpriv, can neither act on the container nor read its state or
its console.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import Runtime, make_bundle, require, wait_for
from tests.integration.reliability import private_runtime

VERBS = ("start", "kill", "delete", "checkpoint", "state")

# Run as the other user with nothing but the standard library: what it can reach.
PROBE = r"""
import json, os, socket, sys
root, spool, ctl, state, console = sys.argv[1:6]
seen = {}
def attempt(name, action):
    try:
        action()
        seen[name] = "allowed"
    except OSError as err:
        seen[name] = f"{type(err).__name__}: {err.strerror or err}"
attempt("list root", lambda: os.listdir(root))
attempt("list spool", lambda: os.listdir(spool))
attempt("read state", lambda: open(state, "rb").read())
if console:
    attempt("open console", lambda: os.close(os.open(console, os.O_RDWR | os.O_NOCTTY)))
for op in ("start", "kill", "delete", "checkpoint", "state", "agent-hello", "agent-error"):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(10)
            conn.connect(ctl)
            conn.sendall(json.dumps({"op": op, "signal": 9, "token": "0" * 32,
                                     "image_path": "/tmp/x"}).encode() + b"\n")
            reply = conn.recv(65536)
        seen["op " + op] = "reply: " + reply.decode(errors="replace") if reply else "closed"
    except OSError as err:
        seen["op " + op] = f"{type(err).__name__}: {err.strerror or err}"
print(json.dumps(seen))
"""


def _as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    setpriv = require("setpriv", "util-linux")
    return subprocess.run([setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv],
                          capture_output=True, text=True, timeout=60, check=False, cwd="/")


@pytest.fixture(autouse=True)
def nobody_can_run_scrun() -> None:
    """The other user must be able to run this checkout's scrun, or every refusal
    below would be the loader's, not scrun's."""
    done = _as_nobody(sys.executable, "-c", "import pyscrun")
    if done.returncode != 0:
        pytest.fail(f"user nobody cannot run {sys.executable} with pyscrun (make the checkout "
                    f"readable by others): {done.stderr.strip()[-300:]}")


def _probe(runtime: Runtime, container_id: str, console: str = "") -> dict[str, str]:
    spool = runtime.root / container_id
    done = _as_nobody(sys.executable, "-c", PROBE, str(runtime.root), str(spool),
                      str(spool / "ctl"), str(spool / "state.json"), console)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def shared_base() -> Iterator[Path]:
    """A directory everyone may enter (pytest's own tmp dirs are the owner's alone,
    which would make every refusal below trivially true)."""
    base = Path(tempfile.mkdtemp(prefix="pyscrun-access-", dir="/tmp"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def owned(shared_base: Path) -> Iterator[Runtime]:
    runtime, leaks = private_runtime(shared_base)
    yield runtime
    leaks.check()


def _state(runtime: Runtime, container_id: str) -> dict[str, object]:
    done = runtime.scrun("state", container_id)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_spool_and_socket_belong_to_the_owner_alone(owned: Runtime, shared_base: Path) -> None:
    bundle = make_bundle(shared_base, ["sleep", "100"])
    assert owned.scrun("create", "-b", str(bundle), "mine").returncode == 0
    spool = owned.root / "mine"
    for path, mode in ((owned.root, 0o700), (spool, 0o700), (spool / "ctl", 0o600),
                       (spool / "state.json", 0o600)):
        assert (path.lstat().st_uid, _mode(path)) == (os.getuid(), mode), path
    assert stat.S_ISSOCK((spool / "ctl").lstat().st_mode)
    assert owned.scrun("delete", "--force", "mine").returncode == 0


def test_another_user_can_do_nothing(owned: Runtime, shared_base: Path) -> None:
    """As nobody: the root, spool, state and socket are out of reach, and every verb of
    scrun fails; the container is untouched and still does what its owner says."""
    bundle = make_bundle(shared_base, ["sh", "-c", "sleep 100"])
    assert owned.scrun("create", "-b", str(bundle), "mine").returncode == 0
    seen = _probe(owned, "mine")
    assert {k: v for k, v in seen.items() if not v.startswith("PermissionError")} == {}, seen
    for verb in VERBS:
        done = _as_nobody(str(owned.wrapper), verb, "mine")
        assert done.returncode != 0, (verb, done.stdout)
        assert done.stderr.startswith("scrun: error:"), (verb, done.stderr)
        assert "ermission denied" in done.stderr, (verb, done.stderr)
    assert _state(owned, "mine")["status"] == "created"
    assert owned.scrun("start", "mine").returncode == 0
    assert _state(owned, "mine")["status"] == "running"
    assert owned.scrun("kill", "mine", "KILL").returncode == 0
    wait_for(lambda: _state(owned, "mine")["status"] == "stopped", 15, "stopped")
    assert owned.scrun("delete", "mine").returncode == 0


def test_anchor_refuses_other_users_even_on_an_open_socket(owned: Runtime,
                                                           shared_base: Path) -> None:
    """Permissions opened up by mistake (root and spool 0755, socket 0777): the other
    user reaches the socket, and the anchor closes every connection of theirs without
    an answer, for every verb and for the agents' own messages too. The state file
    stays 0600."""
    bundle = make_bundle(shared_base, ["sh", "-c", "sleep 100"])
    assert owned.scrun("create", "-b", str(bundle), "mine").returncode == 0
    spool = owned.root / "mine"
    owned.root.chmod(0o755)
    spool.chmod(0o755)
    (spool / "ctl").chmod(0o777)
    seen = _probe(owned, "mine")
    assert seen.pop("list root") == "allowed"
    assert seen.pop("list spool") == "allowed"
    assert seen.pop("read state").startswith("PermissionError")
    # Closed at once, unread: the peer sees the end of the stream, a reset or a broken
    # pipe, depending on how far it got; never an answer.
    ops = (*VERBS, "agent-hello", "agent-error")
    assert sorted(seen) == sorted(f"op {op}" for op in ops), seen
    assert [v for v in seen.values() if not (
        v == "closed" or v.startswith(("ConnectionResetError", "BrokenPipeError")))] == [], seen
    for verb in VERBS:
        done = _as_nobody(str(owned.wrapper), verb, "mine")
        assert done.returncode != 0, (verb, done.stdout)
        assert done.stderr.startswith("scrun: error:"), (verb, done.stderr)
    assert _state(owned, "mine")["status"] == "created"
    assert owned.scrun("start", "mine").returncode == 0
    assert owned.scrun("delete", "--force", "mine").returncode == 0


def test_another_user_cannot_read_the_console(owned: Runtime, shared_base: Path) -> None:
    """A terminal container: the pty given to the console socket is the owner's."""
    bundle = make_bundle(shared_base, ["sh", "-c", "sleep 100"], terminal=True)
    console_socket = shared_base / "console.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(console_socket))
        listener.listen(1)
        create = subprocess.Popen(
            [str(owned.wrapper), "create", "-b", str(bundle), "--console-socket",
             str(console_socket), "tty"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        listener.settimeout(30)
        conn, _ = listener.accept()
        with conn:
            name, fds, _, _ = socket.recv_fds(conn, 4096, 1)
        _, err = create.communicate(timeout=30)
        assert create.returncode == 0, err
    try:
        tty = name.decode()
        assert tty.startswith("/dev/pts/"), tty
        assert os.stat(tty).st_uid == os.getuid()
        seen = _probe(owned, "tty", tty)
        assert seen["open console"].startswith("PermissionError"), seen
        assert seen["read state"].startswith("PermissionError"), seen
    finally:
        for fd in fds:
            os.close(fd)
    assert owned.scrun("delete", "--force", "tty").returncode == 0
