"""The OCI lifecycle through scrun's own command line, with real runc underneath: as
root, with bundles of root's, as runc's own command line is used."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from tests.integration.harness import Runtime, make_bundle, processes_mentioning, wait_for


def _state(runtime: Runtime, container_id: str) -> dict[str, object]:
    done = runtime.scrun("state", container_id)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_create_start_kill_delete(local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sh", "-c", "trap 'exit 9' TERM; touch /tmp/ready; "
                                                "while true; do sleep 0.1; done"])
    pid_file = tmp_path / "pid"
    done = local_runtime.scrun("create", "--bundle", str(bundle), "--pid-file", str(pid_file), "c1")
    assert done.returncode == 0, done.stderr
    state = _state(local_runtime, "c1")
    assert state["status"] == "created"
    assert state["id"] == "c1"
    assert state["bundle"] == str(bundle)
    assert isinstance(state["pid"], int) and state["pid"] > 0
    assert pid_file.read_text() == str(state["pid"])  # no trailing newline

    assert local_runtime.scrun("start", "c1").returncode == 0
    assert _state(local_runtime, "c1")["status"] == "running"
    again = local_runtime.scrun("start", "c1")
    assert again.returncode != 0 and "running" in again.stderr

    refused = local_runtime.scrun("delete", "c1")
    assert refused.returncode != 0
    assert "running" in refused.stderr

    # Until its trap is set, a shell as pid 1 ignores TERM: wait for it, as with runc.
    wait_for((bundle / "rootfs/tmp/ready").exists, 10, "the trap")
    assert local_runtime.scrun("kill", "c1", "TERM").returncode == 0
    wait_for(lambda: _state(local_runtime, "c1")["status"] == "stopped", 10, "stopped")
    assert _state(local_runtime, "c1").get("exitStatus") == 9

    assert local_runtime.scrun("delete", "c1").returncode == 0
    gone = local_runtime.scrun("state", "c1")
    assert gone.returncode != 0
    assert "does not exist" in gone.stderr


def test_start_returns_once_the_containers_program_runs(local_runtime: Runtime,
                                                       tmp_path: Path) -> None:
    """As runc's start does: a signal sent then reaches that program (here sleep as pid
    1, which ignores TERM), not the runtime's own code before its exec (runc's, which
    TERM ends with status 2), nor nothing yet."""
    bundle = make_bundle(tmp_path, ["sleep", "917332"])  # a number no other test uses
    for attempt in range(5):
        container_id = f"quick{attempt}"
        assert local_runtime.scrun("create", "-b", str(bundle), container_id).returncode == 0
        assert local_runtime.scrun("start", container_id).returncode == 0
        assert processes_mentioning("sleep 917332"), attempt
        assert local_runtime.scrun("kill", container_id, "TERM").returncode == 0
        assert local_runtime.scrun("kill", container_id, "KILL").returncode == 0
        wait_for(lambda name=container_id: _state(local_runtime, name)["status"] == "stopped",
                 10, "stopped")
        assert _state(local_runtime, container_id).get("exitStatus") == 137
        assert local_runtime.scrun("delete", container_id).returncode == 0


def test_duplicate_id_is_refused_and_leaves_the_first(local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sleep", "100"])
    assert local_runtime.scrun("create", "-b", str(bundle), "dup").returncode == 0
    second = local_runtime.scrun("create", "-b", str(bundle), "dup")
    assert second.returncode != 0
    assert "already exists" in second.stderr
    assert _state(local_runtime, "dup")["status"] == "created"
    assert local_runtime.scrun("delete", "--force", "dup").returncode == 0


def test_kill_of_created_container_stops_it(local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sleep", "100"])
    assert local_runtime.scrun("create", "-b", str(bundle), "k1").returncode == 0
    assert local_runtime.scrun("kill", "k1", "KILL").returncode == 0
    wait_for(lambda: _state(local_runtime, "k1")["status"] == "stopped", 10, "stopped")
    assert local_runtime.scrun("delete", "k1").returncode == 0


def test_state_says_stopped_after_the_anchor_crashes(local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sleep", "917331"])  # a number no other test uses
    assert local_runtime.scrun("create", "-b", str(bundle), "crash").returncode == 0
    assert local_runtime.scrun("start", "crash").returncode == 0
    anchor = local_runtime.anchor_pid("crash")
    os.kill(anchor, signal.SIGKILL)
    wait_for(lambda: _state(local_runtime, "crash")["status"] == "stopped", 10, "stopped")
    # The node agent notices its anchor is gone and ends the container.
    wait_for(lambda: not processes_mentioning("sleep 917331"), 10, "the container to end")
    assert local_runtime.scrun("delete", "crash").returncode == 0


def test_run_verb_returns_exit_code(local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sh", "-c", "echo out; exit 4"])
    done = local_runtime.scrun("run", "-b", str(bundle), "r1")
    assert done.returncode == 4
    assert done.stdout == "out\n"


def test_kill_accepts_names_and_numbers(local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sh", "-c",
                                    "trap 'exit 10' USR1; touch /tmp/ready; "
                                    "while true; do sleep 0.1; done"])
    assert local_runtime.scrun("create", "-b", str(bundle), "sig").returncode == 0
    assert local_runtime.scrun("start", "sig").returncode == 0
    # Until its trap is set, a shell as pid 1 ignores USR1: wait for it, as with runc.
    wait_for((bundle / "rootfs/tmp/ready").exists, 10, "the trap")
    assert local_runtime.scrun("kill", "sig", "BOGUS").returncode != 0
    assert local_runtime.scrun("kill", "sig", str(int(signal.SIGUSR1))).returncode == 0
    wait_for(lambda: _state(local_runtime, "sig")["status"] == "stopped", 10, "stopped")
    assert _state(local_runtime, "sig")["exitStatus"] == 10
    assert local_runtime.scrun("delete", "sig").returncode == 0


def test_list_and_features(local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sleep", "100"])
    assert local_runtime.scrun("create", "-b", str(bundle), "l1").returncode == 0
    listed = json.loads(local_runtime.scrun("list", "--format", "json").stdout)
    assert [c["id"] for c in listed] == ["l1"]
    assert local_runtime.scrun("list", "-q").stdout.split() == ["l1"]
    features = json.loads(local_runtime.scrun("features").stdout)
    assert features["ociVersionMax"].startswith("1.")
    assert local_runtime.scrun("delete", "-f", "l1").returncode == 0


def test_json_log_is_written_for_conmon(local_runtime: Runtime, tmp_path: Path) -> None:
    log = tmp_path / "log.json"
    done = local_runtime.scrun("--log-format=json", "--log", str(log), "state", "nope")
    assert done.returncode == 1
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines[-1]["level"] == "error"
    assert "does not exist" in lines[-1]["msg"]
    text_log = tmp_path / "log.txt"
    assert local_runtime.scrun("--log-format", "text", "--log", str(text_log),
                               "state", "nope").returncode == 1
    assert "does not exist" in text_log.read_text()


def test_kill_all_signals_every_process_of_the_container(root_runtime: Runtime,
        tmp_path: Path) -> None:
    """`kill` reaches the container's init alone, `kill --all` each of its processes."""
    child = "trap 'echo child-term; exit 0' TERM; while true; do sleep 0.1; done"
    bundle = make_bundle(tmp_path, ["sh", "-c", f"trap 'echo init-term' TERM; sh -c \"{child}\" & "
                                                "echo ready; while true; do sleep 0.1; done"])
    output = tmp_path / "out"
    with open(output, "wb") as out:
        created = subprocess.run([str(root_runtime.wrapper), "create", "-b", str(bundle), "ka"],
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL,
                                 check=False)
    assert created.returncode == 0, root_runtime.log_errors()
    try:
        assert root_runtime.scrun("start", "ka").returncode == 0
        wait_for(lambda: "ready" in output.read_text(), 60, "the container to start")
        assert root_runtime.scrun("kill", "ka", "TERM").returncode == 0
        wait_for(lambda: "init-term" in output.read_text(), 30, "the init to get SIGTERM")
        assert "child-term" not in output.read_text()
        assert root_runtime.scrun("kill", "--all", "ka", "TERM").returncode == 0
        wait_for(lambda: "child-term" in output.read_text(), 30, "the child to get SIGTERM")
    finally:
        root_runtime.scrun("kill", "ka", "KILL")
        wait_for(lambda: _state(root_runtime, "ka")["status"] == "stopped", 30, "stopped")
        assert root_runtime.scrun("delete", "ka").returncode == 0


def test_ctrl_c_on_run_goes_to_the_container(root_runtime: Runtime, tmp_path: Path) -> None:
    """As with `runc run`: the container gets SIGINT and decides how it ends."""
    bundle = make_bundle(tmp_path, ["sh", "-c", "trap 'echo got-int; exit 7' INT; echo ready; "
                                                "while true; do sleep 0.1; done"])
    output = tmp_path / "out"
    with open(output, "wb") as out:
        run = subprocess.Popen([str(root_runtime.wrapper), "run", "-b", str(bundle), "cc"],
                               stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: "ready" in output.read_text(), 60, "the container to start")
        run.send_signal(signal.SIGINT)
        assert run.wait(30) == 7
        assert output.read_text() == "ready\ngot-int\n"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
            root_runtime.scrun("delete", "--force", "cc")
