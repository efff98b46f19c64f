"""Who may act on a container: its owner (and root), nobody else.

Two ordinary users, as `make setup` makes them: the owner runs rootless podman with
scrun; the other tries everything it can with scrun and the standard library. The spool
dir and the control socket are the owner's alone, and even where they were opened up by
mistake, the anchor refuses every peer whose uid is not the owner's or root's
(SO_PEERCRED, checked by the kernel). The other user can neither act on the container
nor read its state or its console.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.accounts import OTHER_USER, USER, Account, account
from tests.integration.conftest import runtime_on
from tests.integration.harness import IMAGE, Cluster, Runtime, podman, wait_for
from tests.integration.reliability import local_agent_pids

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
            # From the spool dir: a socket's path must be short (podman's ids are long).
            os.chdir(os.path.dirname(ctl))
            conn.connect(os.path.basename(ctl))
            conn.sendall(json.dumps({"op": op, "signal": 9, "token": "0" * 32,
                                     "image_path": "/tmp/x"}).encode() + b"\n")
            reply = conn.recv(65536)
        seen["op " + op] = "reply: " + reply.decode(errors="replace") if reply else "closed"
    except OSError as err:
        seen["op " + op] = f"{type(err).__name__}: {err.strerror or err}"
print(json.dumps(seen))
"""


def _other() -> Account:
    return account(OTHER_USER)


@pytest.fixture(autouse=True)
def the_other_user_can_run_scrun() -> None:
    """The other user must be able to run this checkout's scrun, or every refusal
    below would be the loader's, not scrun's."""
    done = _other().run([sys.executable, "-c", "import pyscrun"])
    if done.returncode != 0:
        pytest.fail(f"{OTHER_USER} cannot run {sys.executable} with pyscrun (make setup lets "
                    f"others reach the checkout): {done.stderr.decode().strip()[-300:]}")


@pytest.fixture
def owned(cluster: Cluster, tmp_path: Path) -> Iterator[Runtime]:
    """The owner's scrun (local backend, run mode), driven by the owner's podman."""
    with runtime_on("local", "run", cluster, tmp_path, account(USER)) as made:
        yield made


def _probe(runtime: Runtime, container_id: str, console: str = "") -> dict[str, str]:
    spool = runtime.root / container_id
    done = _other().run([sys.executable, "-c", PROBE, str(runtime.root), str(spool),
                         str(spool / "ctl"), str(spool / "state.json"), console])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _as_other(runtime: Runtime, verb: str, container_id: str) -> tuple[int, str]:
    done = _other().run([str(runtime.wrapper), verb, container_id])
    return done.returncode, done.stderr.decode()


def _running(runtime: Runtime, *options: str) -> str:
    """A container of the owner's, running `sleep`; its id."""
    done = podman(runtime, "run", "-d", *options, "--name", f"a{uuid.uuid4().hex[:8]}", IMAGE,
                  "sleep", "1000")
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def _status(runtime: Runtime, container_id: str) -> str:
    done = podman(runtime, "inspect", "--format", "{{.State.Status}}", container_id)
    return done.stdout.decode().strip()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_spool_and_socket_belong_to_the_owner_alone(owned: Runtime) -> None:
    container_id = _running(owned)
    try:
        spool = owned.root / container_id
        for path, mode in ((owned.root, 0o700), (spool, 0o700), (spool / "ctl", 0o600),
                           (spool / "state.json", 0o600)):
            assert (path.lstat().st_uid, _mode(path)) == (owned.account.uid, mode), path
        assert stat.S_ISSOCK((spool / "ctl").lstat().st_mode)
    finally:
        podman(owned, "rm", "-f", "-t", "0", container_id)


def test_another_user_can_do_nothing(owned: Runtime) -> None:
    """The root, spool, state and socket are out of the other user's reach, and every
    verb of scrun fails; the container is untouched and still does what its owner says."""
    container_id = _running(owned)
    try:
        seen = _probe(owned, container_id)
        assert {k: v for k, v in seen.items() if not v.startswith("PermissionError")} == {}, seen
        for verb in VERBS:
            code, said = _as_other(owned, verb, container_id)
            assert code != 0 and said.startswith("scrun: error:"), (verb, said)
            assert "ermission denied" in said, (verb, said)
        assert _status(owned, container_id) == "running"
        assert podman(owned, "kill", container_id).returncode == 0
        wait_for(lambda: _status(owned, container_id) == "exited", 15, "the kill")
    finally:
        podman(owned, "rm", "-f", "-t", "0", container_id)


def test_anchor_refuses_other_users_even_on_an_open_socket(owned: Runtime) -> None:
    """Permissions opened up by mistake (root and spool 0755, socket 0777): the other
    user reaches the socket, and the anchor closes every connection of theirs without
    an answer, for every verb and for the agents' own messages too. The state file
    stays 0600."""
    container_id = _running(owned)
    try:
        spool = owned.root / container_id
        owned.root.chmod(0o755)
        spool.chmod(0o755)
        (spool / "ctl").chmod(0o777)
        seen = _probe(owned, container_id)
        assert seen.pop("list root") == "allowed"
        assert seen.pop("list spool") == "allowed"
        assert seen.pop("read state").startswith("PermissionError")
        # Closed at once, unread: the peer sees the end of the stream, a reset or a
        # broken pipe, depending on how far it got; never an answer.
        ops = (*VERBS, "agent-hello", "agent-error")
        assert sorted(seen) == sorted(f"op {op}" for op in ops), seen
        assert [v for v in seen.values() if not (
            v == "closed" or v.startswith(("ConnectionResetError", "BrokenPipeError")))] == [], seen
        for verb in VERBS:
            code, said = _as_other(owned, verb, container_id)
            assert code != 0 and said.startswith("scrun: error:"), (verb, said)
        assert _status(owned, container_id) == "running"
    finally:
        podman(owned, "rm", "-f", "-t", "0", container_id)


def test_another_user_cannot_read_the_console(owned: Runtime) -> None:
    """A terminal container: its pty (the node agent's terminal on this backend) is the
    owner's."""
    container_id = _running(owned, "-t")
    try:
        anchor = owned.anchor_pid(container_id)
        wait_for(lambda: bool(local_agent_pids(anchor)), 30, "the node agent")
        tty = os.readlink(f"/proc/{local_agent_pids(anchor)[0]}/fd/0")
        assert tty.startswith("/dev/pts/"), tty
        assert os.stat(tty).st_uid == owned.account.uid
        seen = _probe(owned, container_id, tty)
        assert seen["open console"].startswith("PermissionError"), seen
        assert seen["read state"].startswith("PermissionError"), seen
    finally:
        podman(owned, "rm", "-f", "-t", "0", container_id)
