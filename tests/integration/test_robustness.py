"""Nothing a process sends an anchor, or leaves behind for scrun to read, kills the
anchor or prints a traceback."""

from __future__ import annotations

import json
import resource
import socket
import subprocess
from pathlib import Path

from tests.integration.harness import Runtime, make_bundle, wait_for

MALFORMED = [
    b'{"op":"kill","signal":"x"}\n',
    b'{"op":"kill"}\n',
    b'{"op":"kill","signal":99}\n',
    b'{"op":"kill","signal":true}\n',
    b'{"op":"checkpoint"}\n',
    b'{"op":"checkpoint","image_path":["a"]}\n',
    b'{"op":"reboot"}\n',
    b"[1]\n",
    b"not json\n",
    b"\xff\xfe\n",
    b"[" * 100000 + b"\n",
    b'{"op":"state"' + b" " * (2 << 20),
]


def _ask_raw(path: Path, raw: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(str(path))
        try:
            client.sendall(raw)
            return client.recv(65536)
        except (BrokenPipeError, ConnectionResetError):
            return b""


def _status(runtime: Runtime, container_id: str) -> str:
    return str(json.loads(runtime.scrun("state", container_id).stdout)["status"])


def test_malformed_requests_are_refused_and_the_container_runs_on(local_runtime: Runtime,
                                                                  tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sleep", "1000"])
    assert local_runtime.scrun("create", "-b", str(bundle), "m1").returncode == 0
    assert local_runtime.scrun("start", "m1").returncode == 0
    control = local_runtime.root / "m1" / "ctl"
    for raw in MALFORMED:
        answer = _ask_raw(control, raw)
        if answer:
            reply = json.loads(answer)
            assert reply["ok"] is False and "\n" not in reply["error"], raw[:40]
        assert _status(local_runtime, "m1") == "running", raw[:40]
    # The anchor still serves its owner.
    assert local_runtime.scrun("kill", "m1", "KILL").returncode == 0
    wait_for(lambda: _status(local_runtime, "m1") == "stopped", 20, "the container to stop")
    assert local_runtime.scrun("delete", "m1").returncode == 0


ANCHOR_DESCRIPTORS = 256


def _few_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (ANCHOR_DESCRIPTORS, ANCHOR_DESCRIPTORS))


def test_more_idle_connections_than_the_anchor_has_descriptors_do_not_starve_it(
        local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sleep", "1000"])
    # runc spec's RLIMIT_NOFILE of 1024 is above the limit below, which the container
    # inherits; raising it needs CAP_SYS_RESOURCE.
    config = json.loads((bundle / "config.json").read_text())
    config["process"].pop("rlimits", None)
    (bundle / "config.json").write_text(json.dumps(config))
    # An anchor of few descriptors, so that the connections outnumber them.
    created = subprocess.run([str(local_runtime.wrapper), "create", "-b", str(bundle), "m2"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, preexec_fn=_few_descriptors, check=False)
    assert created.returncode == 0, local_runtime.log_errors()
    assert local_runtime.scrun("start", "m2").returncode == 0
    control = str(local_runtime.root / "m2" / "ctl")
    idle = []
    try:
        for _ in range(4 * ANCHOR_DESCRIPTORS):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(control)
            idle.append(client)
        assert local_runtime.scrun("kill", "m2", "KILL").returncode == 0
        wait_for(lambda: _status(local_runtime, "m2") == "stopped", 20, "the container to stop")
    finally:
        for client in idle:
            client.close()
    assert local_runtime.scrun("delete", "m2").returncode == 0
