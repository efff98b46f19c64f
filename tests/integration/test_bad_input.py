"""Bad input: one clear line on stderr, a non-zero exit, and nothing left behind.

As root: scrun's own command line, with bundles of root's, as runc's is used; what an
ordinary user's podman does is in the tests that run as one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.harness import Runtime, make_bundle, processes_mentioning, wait_for


def _assert_clean_failure(done: subprocess.CompletedProcess[str], expect: str) -> None:
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert expect in lines[0]


def test_missing_bundle(run_mode_runtime: Runtime, tmp_path: Path) -> None:
    done = run_mode_runtime.scrun("create", "-b", str(tmp_path / "nowhere"), "x")
    _assert_clean_failure(done, "is not a directory")


@pytest.mark.parametrize(("content", "expect"), [
    ("", "not valid JSON"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "the document must be an object, not a list"),
    ('{"process": {"args": "sh"}}', "process.args must be a list, not a string"),
    ('{"process": {"cwd": "/"}}', "process.args is missing"),
    ('{"process": {"args": ["sh"], "env": [1]}}', "process.env[0] must be a string, not an integer"),
    # Fields runc's create would refuse to decode, which the node's runtime met only at start.
    ('{"process": {"args": ["sh"], "user": {"uid": "x", "gid": 0}}}',
     "process.user.uid must be an integer from 0 to 4294967295"),
    ('{"process": {"args": ["sh"]}, "mounts": [{"destination": "/m", "options": 5}]}',
     "mounts[0].options must be a list, not an integer"),
    ('{"process": {"args": ["sh"]}, "mounts": [{"destination": 5}]}',
     "mounts[0].destination must be a string, not an integer"),
    ('{"process": {"args": ["sh"]}, "hooks": {"prestart": 5}}',
     "hooks.prestart must be a list, not an integer"),
    ('{"process": {"args": ["sh"]}, "linux": {"resources": 5}}',
     "linux.resources must be an object, not an integer"),
    ("[" * 100000 + "]" * 100000, "not valid JSON"),
])
def test_malformed_config(run_mode_runtime: Runtime, tmp_path: Path, content: str, expect: str) -> None:
    bundle = make_bundle(tmp_path, ["true"])
    (bundle / "config.json").write_text(content)
    done = run_mode_runtime.scrun("create", "-b", str(bundle), "x")
    _assert_clean_failure(done, expect)


def test_huge_config(run_mode_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["true"])
    config = json.loads((bundle / "config.json").read_text())
    config["annotations"] = {"big": "x" * (100 * 2**20)}
    (bundle / "config.json").write_text(json.dumps(config))
    done = run_mode_runtime.scrun("create", "-b", str(bundle), "x")
    _assert_clean_failure(done, "larger than")


@pytest.mark.parametrize("bad_id", ["a/b", "..", ".", "x" * 1025, "new\nline", "", "a b"])
def test_bad_ids(run_mode_runtime: Runtime, tmp_path: Path, bad_id: str) -> None:
    bundle = make_bundle(tmp_path, ["true"])
    done = run_mode_runtime.scrun("create", "-b", str(bundle), "--", bad_id)
    _assert_clean_failure(done, "container id")


def test_long_id_within_limit_works(run_mode_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sh", "-c", "exit 6"])
    long_id = "L" * 1024
    done = run_mode_runtime.scrun("run", "-b", str(bundle), long_id)
    assert done.returncode == 6, done.stderr


# `delete --force` of an unknown id succeeds, as runc's does (test_stand_in.py).
@pytest.mark.parametrize("verb", [["start"], ["state"], ["kill"], ["kill", "--all"], ["delete"]])
def test_unknown_id_for_every_verb(run_mode_runtime: Runtime, tmp_path: Path, verb: list[str]) -> None:
    done = run_mode_runtime.scrun(*verb, "ghost")
    _assert_clean_failure(done, "does not exist")


@pytest.mark.parametrize(("conf", "expect"), [
    ("Bogus=1\n", "unknown directive 'Bogus'"),
    ('RunTimeRun="runc run %q"\nRunTimeKill=k\nRunTimeDelete=d\n', "unknown pattern %q"),
    ('RunTimeRun="runc run %"\nRunTimeKill=k\nRunTimeDelete=d\n', "trailing %"),
    ('RunTimeRun=r\nRunTimeCreate=c\nRunTimeKill=k\nRunTimeDelete=d\n', "cannot be combined"),
    ('RunTimeCreate=c\nRunTimeStart=s\nRunTimeKill=k\nRunTimeDelete=d\n', "needs RunTimeQuery"),
    ('RunTimeRun=r\n', "needs RunTimeKill, RunTimeDelete"),
    ('EnvExclude="(unclosed"\nRunTimeRun=r\nRunTimeKill=k\nRunTimeDelete=d\n',
     "invalid regular expression"),
    ('IgnoreFileConfigJson=true\nRunTimeCreate=c\nRunTimeStart=s\nRunTimeQuery=q\n'
     'RunTimeKill=k\nRunTimeDelete=d\n', "IgnoreFileConfigJson"),
    ("DebugFlags\n", "expected Key=Value"),
])
def test_bad_oci_conf(run_mode_runtime: Runtime, tmp_path: Path, conf: str, expect: str) -> None:
    (run_mode_runtime.conf_dir / "oci.conf").write_text(conf)
    bundle = make_bundle(tmp_path, ["true"])
    done = run_mode_runtime.scrun("create", "-b", str(bundle), "x")
    _assert_clean_failure(done, expect)
    assert "oci.conf" in done.stderr


def test_unknown_verb_and_flag(run_mode_runtime: Runtime, tmp_path: Path) -> None:
    _assert_clean_failure(run_mode_runtime.scrun("frobnicate"), "no such command")
    _assert_clean_failure(run_mode_runtime.scrun("state", "--bogus", "x"), "not defined")


def test_terminal_without_console_socket(run_mode_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sh"], terminal=True)
    done = run_mode_runtime.scrun("create", "-b", str(bundle), "x")
    _assert_clean_failure(done, "console-socket")


# The pids controller: its own hierarchy (cgroup v1, as here), or the unified one's.
PIDS_V1 = Path("/sys/fs/cgroup/pids")
UNIFIED = Path("/sys/fs/cgroup")


def _pids_cgroup(tmp_path: Path) -> Path:
    """A new cgroup of the pids controller, for this test."""
    unified = UNIFIED / "cgroup.subtree_control"
    if (PIDS_V1 / "cgroup.procs").exists():
        parent = PIDS_V1
    elif unified.exists() and "pids" in unified.read_text().split():
        parent = UNIFIED
    else:
        pytest.fail("no pids cgroup controller under /sys/fs/cgroup: the kernel's pids "
                    "controller is needed to limit create's processes")
    group = parent / f"pyscrun-test-{tmp_path.name}"
    group.mkdir()
    return group


@pytest.mark.parametrize(("room", "refused"), [(1, "anchor"), (2, "stand-in")])
def test_create_that_cannot_fork_leaves_nothing(run_mode_runtime: Runtime, tmp_path: Path,
                                                room: int, refused: str) -> None:
    """create forks the container's anchor, then its stand-in. Where the machine refuses
    one of them (the pids limit of the caller's cgroup: room for create alone, or for
    create and its anchor), create fails with one line naming it and leaves no anchor,
    no stand-in and no state."""
    bundle = make_bundle(tmp_path, ["true"])
    group = _pids_cgroup(tmp_path)
    try:
        (group / "pids.max").write_text(str(room))
        done = subprocess.run(
            ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs"),
             str(run_mode_runtime.wrapper), "create", "-b", str(bundle), "forkless"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        _assert_clean_failure(
            done, f"cannot start the container's {refused}: Resource temporarily unavailable")
        assert (group / "cgroup.procs").read_text() == "", "a process of create's is left"
        assert not (run_mode_runtime.root / "forkless").exists()
    finally:
        group.rmdir()


def _staging_script(stage_in_body: str, marker: Path) -> str:
    """A scrun.lua whose stage_in runs stage_in_body and whose stage_out writes the
    container's id to marker."""
    return f"""\
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
{stage_in_body}  return slurm.SUCCESS
end
function slurm_scrun_stage_out(id)
  local file = io.open("{marker}", "w")
  file:write(id)
  file:close()
  return slurm.SUCCESS
end
return slurm.SUCCESS
"""


def test_a_create_that_fails_after_stage_in_still_stages_out(run_mode_runtime: Runtime,
                                                              tmp_path: Path) -> None:
    """As in Slurm, stage_out runs whenever stage_in did, also when create fails after
    it: what stage_in made (a copy of the bundle, a scratch directory) would stay."""
    marker = tmp_path / "staged-out"
    run_mode_runtime.write_conf("scrun.lua", _staging_script("", marker))
    bundle = make_bundle(tmp_path, ["true"])
    pid_file = tmp_path / "no-such-dir" / "pid"
    done = run_mode_runtime.scrun("create", "-b", str(bundle), "--pid-file", str(pid_file), "so1")
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "no-such-dir" in done.stderr, done.stderr
    assert marker.read_text() == "so1"
    assert run_mode_runtime.scrun("state", "so1").returncode != 0


# How soon create must give up once told to.
GIVES_UP_WITHIN = 10.0


def _create_hung_in_stage_in(runtime: Runtime, tmp_path: Path, container_id: str, command: str,
                             seconds: str) -> subprocess.Popen[bytes]:
    """create in the background, once its stage_in waits on `sleep seconds` (as on a
    stuck rsync) run by slurm.<command>. Its stderr goes to a file (create.err), not a
    pipe: the anchor holds the caller's stdio."""
    runtime.write_conf("scrun.lua", _staging_script(f'  slurm.{command}("sleep {seconds}")\n',
                                                    tmp_path / "staged-out"))
    bundle = make_bundle(tmp_path, ["true"])
    with open(tmp_path / "create.err", "wb") as err:
        # The wrapper and `env` exec scrun: the pid is create's own.
        create = subprocess.Popen(
            runtime.account.command([str(runtime.wrapper), "create", "-b", str(bundle),
                                     container_id]),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    wait_for(lambda: processes_mentioning(f"sleep {seconds}") or create.poll() is not None, 30,
             "stage_in's command")
    assert create.poll() is None, (tmp_path / "create.err").read_text()
    return create


def _end_of(create: subprocess.Popen[bytes], tmp_path: Path) -> tuple[int, list[str]]:
    """create's exit status and the lines of its stderr, once it exits (soon)."""
    try:
        code = create.wait(GIVES_UP_WITHIN)
    except subprocess.TimeoutExpired:
        create.kill()
        create.wait()
        pytest.fail(f"create did not give up within {GIVES_UP_WITHIN} s")
    return code, (tmp_path / "create.err").read_text().strip().splitlines()


def _kill_leftovers(text: str) -> list[str]:
    """Processes mentioning text, killed (for the tests after): their command lines."""
    left = processes_mentioning(text)
    for line in left:
        try:
            os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


@pytest.mark.parametrize("how", ["SIGTERM to create", "SIGINT to create", "SIGHUP to the anchor",
                                 "delete --force"])
def test_a_stage_in_hung_on_a_command_gives_up_when_told(run_mode_runtime: Runtime,
                                                         tmp_path: Path, how: str) -> None:
    """A scrun.lua whose stage_in waits on a command that never returns: a signal to
    create (Ctrl-C, SIGTERM) or its anchor, or delete, ends the command with what it
    started, and create fails in one line, after stage_out, leaving nothing."""
    seconds = "71234"
    create = _create_hung_in_stage_in(run_mode_runtime, tmp_path, "hung", "allocator_command",
                                      seconds)
    try:
        if how == "SIGTERM to create":
            create.send_signal(signal.SIGTERM)
        elif how == "SIGINT to create":
            create.send_signal(signal.SIGINT)
        elif how == "SIGHUP to the anchor":
            os.kill(run_mode_runtime.anchor_pid("hung"), signal.SIGHUP)
        else:
            deleted = run_mode_runtime.scrun("delete", "--force", "hung", timeout=GIVES_UP_WITHIN)
            assert deleted.returncode == 0, deleted.stderr
        code, lines = _end_of(create, tmp_path)
    finally:
        left = _kill_leftovers(f"sleep {seconds}")
    assert not left, left
    assert code != 0
    assert len(lines) == 1, lines
    assert "slurm.allocator_command: interrupted by SIG" in lines[0], lines
    assert (tmp_path / "staged-out").read_text() == "hung"
    assert run_mode_runtime.scrun("state", "hung").returncode != 0


def test_a_command_of_scrun_lua_dies_with_its_anchor(run_mode_runtime: Runtime,
                                                     tmp_path: Path) -> None:
    """An anchor killed outright (SIGKILL: no clean-up of its own) while stage_in
    waits on a command: the command, and what it started, do not outlive it."""
    seconds = "71235"
    create = _create_hung_in_stage_in(run_mode_runtime, tmp_path, "orphan", "remote_command",
                                      seconds)
    try:
        os.kill(run_mode_runtime.anchor_pid("orphan"), signal.SIGKILL)
        code, lines = _end_of(create, tmp_path)
        deadline = time.monotonic() + GIVES_UP_WITHIN
        while processes_mentioning(f"sleep {seconds}") and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        left = _kill_leftovers(f"sleep {seconds}")
    assert not left, left
    assert code != 0
    assert len(lines) == 1, lines
    assert run_mode_runtime.scrun("state", "orphan").returncode != 0


def test_a_restore_refused_by_its_checks_leaves_the_stopped_container_of_its_id(
        run_mode_runtime: Runtime, tmp_path: Path) -> None:
    """podman restores under the old id, whose stopped container makes way for it, but
    only for a restore that can go ahead: a failed one changes nothing."""
    runtime = run_mode_runtime
    bundle = make_bundle(tmp_path, ["sleep", "100"])
    assert runtime.scrun("create", "-b", str(bundle), "s1").returncode == 0
    assert runtime.scrun("kill", "s1", "KILL").returncode == 0
    wait_for(lambda: json.loads(runtime.scrun("state", "s1").stdout)["status"] == "stopped",
             30, "the container to stop")
    images = tmp_path / "images"
    images.mkdir()
    (images / "inventory.img").write_bytes(b"")
    done = runtime.scrun("restore", "--image-path", str(images), "-b",
                         str(tmp_path / "nowhere"), "s1")
    _assert_clean_failure(done, "is not a directory")
    assert json.loads(runtime.scrun("state", "s1").stdout)["status"] == "stopped"
    assert runtime.scrun("delete", "s1").returncode == 0


def test_exec_refusals_start_no_session(run_mode_runtime: Runtime, tmp_path: Path) -> None:
    """Descriptors to preserve (none reaches an exec'd process: said, rather than dropped
    silently), a pid file that cannot be written (runc ends the process then): one line,
    and nothing runs in the container."""
    runtime = run_mode_runtime
    bundle = make_bundle(tmp_path, ["sleep", "100"])
    assert runtime.scrun("create", "-b", str(bundle), "e1").returncode == 0
    assert runtime.scrun("start", "e1").returncode == 0
    try:
        done = runtime.scrun("exec", "--preserve-fds", "2", "e1", "sleep", "4243")
        _assert_clean_failure(done, "exec --preserve-fds is not supported")
        pid_file = tmp_path / "nowhere" / "exec.pid"
        done = runtime.scrun("exec", "--detach", "--pid-file", str(pid_file), "e1",
                             "sleep", "4243")
        _assert_clean_failure(done, f"cannot write pid file {pid_file}: no directory")
        assert processes_mentioning("sleep 4243") == []
        assert runtime.scrun("exec", "--preserve-fds", "0", "e1", "true").returncode == 0
    finally:
        runtime.scrun("kill", "e1", "KILL")
        wait_for(lambda: json.loads(runtime.scrun("state", "e1").stdout)["status"] == "stopped",
                 30, "the container to stop")
        assert runtime.scrun("delete", "e1").returncode == 0
