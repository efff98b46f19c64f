"""What scrun's own command line prints and accepts where runc's does something a
tool may rely on: checked against runc 1.1's output, as root on the local backend."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.integration.harness import Runtime, make_bundle, wait_for

LONG_ID = "0123456789abcdef" * 4  # podman's ids are 64 hex digits


def _state(runtime: Runtime, container_id: str) -> dict[str, object]:
    done = runtime.scrun("state", container_id)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_list_sizes_its_columns_as_runc_does(local_runtime: Runtime, tmp_path: Path) -> None:
    empty = local_runtime.scrun("list")
    assert empty.stdout == "ID          PID         STATUS      BUNDLE      CREATED     OWNER\n"

    bundle = make_bundle(tmp_path, ["sleep", "100"])
    for container_id in (LONG_ID, "c1"):
        assert local_runtime.scrun("create", "-b", str(bundle), container_id).returncode == 0
    try:
        listed = local_runtime.scrun("list").stdout.splitlines()
        states = [_state(local_runtime, container_id) for container_id in (LONG_ID, "c1")]
        created = max(len(str(s["created"])) for s in states)
        # Each column as wide as its widest cell and 3 spaces (at least 12), the last as is.
        assert listed == [
            "ID".ljust(67) + "PID".ljust(12) + "STATUS".ljust(12)
            + "BUNDLE".ljust(len(str(bundle)) + 3) + "CREATED".ljust(max(created + 3, 12))
            + "OWNER",
            *(f"{s['id']!s:<67}{s['pid']!s:<12}{'created':<12}{bundle!s:<{len(str(bundle)) + 3}}"
              f"{s['created']!s:<{max(created + 3, 12)}}root" for s in states)]
        assert local_runtime.scrun("list", "-q").stdout == f"{LONG_ID}\nc1\n"
        # Created as runc writes it (Go's RFC3339Nano): to the nanosecond, its trailing
        # zeros dropped.
        for state in states:
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{0,8}[1-9])?Z",
                                str(state["created"])), state["created"]
        assert any("." in str(state["created"]) for state in states)
    finally:
        for container_id in (LONG_ID, "c1"):
            local_runtime.scrun("delete", "--force", container_id)


def test_quiet_list_of_no_containers_prints_nothing(local_runtime: Runtime) -> None:
    quiet = local_runtime.scrun("list", "-q")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    as_json = local_runtime.scrun("list", "--format", "json")
    assert (as_json.returncode, as_json.stdout) == (0, "null\n")


def test_a_bad_signal_fails_as_runc_s_does(local_runtime: Runtime, tmp_path: Path) -> None:
    """runc looks for the container first, then at the signal; either failure is exit
    status 1 (it was 2, a usage error, and came before the unknown container)."""
    bundle = make_bundle(tmp_path, ["sleep", "100"])
    assert local_runtime.scrun("create", "-b", str(bundle), "s9").returncode == 0
    try:
        for signal, said in (("65", "invalid signal number 65"), ("FOO", 'unknown signal "FOO"')):
            done = local_runtime.scrun("kill", "s9", signal)
            assert (done.returncode, done.stderr) == (1, f"scrun: error: {said}\n"), signal
            unknown = local_runtime.scrun("kill", "nosuch", signal)
            assert unknown.returncode == 1 and "does not exist" in unknown.stderr, signal
        assert _state(local_runtime, "s9")["status"] == "created"
    finally:
        local_runtime.scrun("delete", "--force", "s9")


def test_signal_0_checks_that_the_container_lives(local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sleep", "100"])
    assert local_runtime.scrun("create", "-b", str(bundle), "k0").returncode == 0
    try:
        for status in ("created", "running"):
            alive = local_runtime.scrun("kill", "k0", "0")
            assert (alive.returncode, alive.stderr) == (0, ""), status
            assert _state(local_runtime, "k0")["status"] == status
            if status == "created":
                assert local_runtime.scrun("start", "k0").returncode == 0
        assert local_runtime.scrun("kill", "k0", "KILL").returncode == 0
        wait_for(lambda: _state(local_runtime, "k0")["status"] == "stopped", 10, "stopped")
        gone = local_runtime.scrun("kill", "k0", "0")
        assert (gone.returncode, gone.stderr) == (1, "scrun: error: container not running\n")
        # --all: every process is gone already, which runc takes as done.
        everyone = local_runtime.scrun("kill", "--all", "k0", "KILL")
        assert (everyone.returncode, everyone.stderr) == (0, "")
    finally:
        local_runtime.scrun("delete", "--force", "k0")


def _cgroup_file(pid: int, controller: str, name: str) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return (Path("/sys/fs/cgroup", controller) / path.lstrip("/") / name).read_text()
    raise AssertionError(f"no {controller} cgroup for {pid}")


def test_update_takes_runc_sizes_and_spelling(local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sleep", "100"])
    assert local_runtime.scrun("create", "-b", str(bundle), "up").returncode == 0
    try:
        assert local_runtime.scrun("start", "up").returncode == 0
        listed = local_runtime.scrun("ps", "--format", "json", "up")
        assert listed.returncode == 0, listed.stderr
        pid = json.loads(listed.stdout)[0]
        done = local_runtime.scrun("update", "--memory", "512MB", "--cpu-share", "512", "up")
        assert (done.returncode, done.stderr) == (0, "")
        assert _cgroup_file(pid, "memory", "memory.limit_in_bytes") == f"{512 << 20}\n"
        assert _cgroup_file(pid, "cpu", "cpu.shares") == "512\n"
        assert local_runtime.scrun("update", "--memory", "1.5g", "up").returncode == 0
        assert _cgroup_file(pid, "memory", "memory.limit_in_bytes") == f"{3 << 29}\n"
        # As runc's: nothing to change changes nothing, and is no error.
        assert local_runtime.scrun("update", "up").returncode == 0
        assert _cgroup_file(pid, "memory", "memory.limit_in_bytes") == f"{3 << 29}\n"
        assert local_runtime.scrun("update", "no-such-id").returncode == 1
        bad = local_runtime.scrun("update", "--memory", "1e3", "up")
        assert bad.returncode == 2
        assert bad.stderr.startswith("scrun: error: update: --memory needs a size")
    finally:
        local_runtime.scrun("delete", "--force", "up")


def test_ps_passes_the_options_after_the_id_to_ps(local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sleep", "918237"])  # a number no other test uses
    assert local_runtime.scrun("create", "-b", str(bundle), "pso").returncode == 0
    try:
        assert local_runtime.scrun("start", "pso").returncode == 0
        pid = json.loads(local_runtime.scrun("ps", "--format", "json", "pso").stdout)[0]
        chosen = local_runtime.scrun("ps", "pso", "-o", "pid,args")
        assert (chosen.returncode, chosen.stderr) == (0, "")
        assert chosen.stdout.split() == ["PID", "COMMAND", str(pid), "sleep", "918237"]
        full = local_runtime.scrun("ps", "pso", "-ef")
        assert full.stdout.splitlines()[0].split()[:3] == ["UID", "PID", "PPID"]
        assert full.stdout.splitlines()[1].split()[1] == str(pid)
        no_pid = local_runtime.scrun("ps", "pso", "-o", "args")
        assert (no_pid.returncode, no_pid.stderr) == (
            1, "scrun: error: ps: couldn't find PID field in ps output\n")
        assert local_runtime.scrun("kill", "pso", "KILL").returncode == 0
        wait_for(lambda: _state(local_runtime, "pso")["status"] == "stopped", 10,
                 "the container to stop")
        # As runc's: a stopped container has no process, and ps prints its header alone.
        stopped = local_runtime.scrun("ps", "pso", "-o", "pid,args")
        header = subprocess.run(["ps", "-o", "pid,args"], capture_output=True, text=True,
                                check=True).stdout.splitlines()[0]
        assert (stopped.returncode, stopped.stdout, stopped.stderr) == (0, header + "\n", "")
    finally:
        local_runtime.scrun("delete", "--force", "pso")


def test_run_keep_leaves_the_stopped_container(local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sh", "-c", "echo out; exit 3"])
    done = local_runtime.scrun("run", "--keep", "-b", str(bundle), "kept")
    assert (done.returncode, done.stdout) == (3, "out\n")
    state = _state(local_runtime, "kept")
    assert (state["status"], state["pid"], state.get("exitStatus")) == ("stopped", 0, 3)
    assert local_runtime.scrun("list", "-q").stdout == "kept\n"
    again = local_runtime.scrun("run", "-b", str(bundle), "kept")
    assert again.returncode == 1 and "already exists" in again.stderr
    assert local_runtime.scrun("delete", "kept").returncode == 0
    assert local_runtime.scrun("state", "kept").returncode == 1
    assert local_runtime.scrun("list", "-q").stdout == ""


def test_root_that_is_a_file_is_one_clear_error(local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["true"])
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for root in (a_file, a_file / "below"):
        said = f"scrun: error: cannot keep container state in {root} (--root): not a directory\n"
        for verb in (["list"], ["state", "x"], ["create", "-b", str(bundle), "x"],
                     ["delete", "--force", "x"], ["kill", "x"]):
            done = local_runtime.scrun("--root", str(root), *verb)
            assert (done.returncode, done.stderr) == (1, said), verb
    assert a_file.read_text() == ""


def test_a_pre_dump_is_refused_and_the_container_runs_on(local_runtime: Runtime,
                                                        tmp_path: Path) -> None:
    """podman's --pre-checkpoint asks for one; a whole dump in its place would end the
    container podman then believes running."""
    bundle = make_bundle(tmp_path, ["sleep", "100"])
    assert local_runtime.scrun("create", "-b", str(bundle), "pre").returncode == 0
    try:
        assert local_runtime.scrun("start", "pre").returncode == 0
        done = local_runtime.scrun("checkpoint", "--pre-dump", "--image-path",
                                   str(tmp_path / "images"), "pre")
        assert done.returncode != 0
        assert done.stderr == ("scrun: error: checkpoint --pre-dump is not supported: "
                               "checkpoint without it\n")
        assert _state(local_runtime, "pre")["status"] == "running"
        assert not (tmp_path / "images").exists()
    finally:
        local_runtime.scrun("delete", "--force", "pre")
