"""Nothing a process sends an anchor, or leaves behind for scrun to read, kills the
anchor or prints a traceback.

As root: scrun's own command line, with bundles of root's, as runc's is used; what an
ordinary user's podman does is in the tests that run as one."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.integration.harness import LOCAL_BACKEND, SCRUN, Runtime, make_bundle, wait_for

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


@pytest.mark.parametrize("content", ["[]", '{"id": "f1", "status": "running", "pid": "12x"}',
                                     '{"id": 5}', '{"id": "f1", "annotations": []}', "[" * 50000])
def test_a_state_file_of_the_wrong_shape_is_one_line_and_list_skips_it(
        local_runtime: Runtime, content: str) -> None:
    spool = local_runtime.root / "f1"
    spool.mkdir(parents=True, mode=0o700)
    (spool / "state.json").write_text(content)
    listed = local_runtime.scrun("list")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    assert "f1" not in listed.stdout
    for verb in (["state", "f1"], ["kill", "f1"], ["delete", "f1"]):
        done = local_runtime.scrun(*verb)
        assert done.returncode == 1, verb
        assert done.stderr.strip().splitlines() == [
            f"scrun: error: state of 'f1' is corrupt: {spool / 'state.json'}"], verb
    (spool / "state.json").unlink()
    spool.rmdir()


@pytest.mark.parametrize("manifest", ["[1]", '{"tasks": "many"}', '{"tasks": 0}', "{"])
def test_a_checkpoint_manifest_of_the_wrong_shape_is_one_line(local_runtime: Runtime,
                                                               tmp_path: Path, manifest: str) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "inventory.img").write_bytes(b"")
    (images / "pyscrun-checkpoint.json").write_text(manifest)
    bundle = make_bundle(tmp_path, ["sleep", "1"])
    done = local_runtime.scrun("restore", "--image-path", str(images), "-b", str(bundle), "r1")
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("scrun: error: checkpoint manifest in ") and "Traceback" not in line
    assert not (local_runtime.root / "r1").exists()


def test_a_container_named_tasks_under_the_default_root(tmp_path: Path) -> None:
    """The default task dir is not inside the default --root: an id is never taken
    by another container's task dir."""
    leftover = Path("/run/pyscrun/tasks")  # the task dirs of a pyscrun before this one
    if leftover.is_dir() and not any(leftover.iterdir()):
        leftover.rmdir()
    assert not leftover.exists(), f"{leftover} is in the way: a container of that name runs"
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    (conf_dir / "pyscrun.conf").write_text(LOCAL_BACKEND)
    scrun = [str(SCRUN), "-f", str(conf_dir / "slurm.conf")]  # no --root: the default
    other = make_bundle(tmp_path / "other", ["sleep", "1000"])
    bundle = make_bundle(tmp_path, ["echo", "named tasks"])
    assert _scrun(scrun, "create", "-b", str(other), f"other-{tmp_path.name}")[0] == 0
    try:
        assert _scrun(scrun, "start", f"other-{tmp_path.name}")[0] == 0
        code, out = _scrun(scrun, "run", "-b", str(bundle), "tasks")
        assert (code, out) == (0, "named tasks\n")
    finally:
        _scrun(scrun, "delete", "--force", f"other-{tmp_path.name}")
    assert not Path("/run/pyscrun/tasks").exists()


def _scrun(scrun: list[str], *args: str) -> tuple[int, str]:
    with open(os.devnull, "rb") as null, tempfile.TemporaryFile() as out:
        done = subprocess.run([*scrun, *args], stdin=null, stdout=out, stderr=subprocess.DEVNULL,
                              timeout=60, check=False)
        out.seek(0)
        return done.returncode, out.read().decode()
