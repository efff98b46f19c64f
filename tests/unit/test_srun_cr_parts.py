"""srun_cr's small parts: signals, CRIU helpers, registry, the ns init, the clients' lines."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pyscrun.errors import CheckpointError, UsageError
from pyscrun.node import python_command
from pyscrun.srun_cr import client, criu, images, launcher, nsinit, registry, signals, srunopts
from pyscrun.srun_cr.wrapper import Plan


def test_decide_relays_what_srun_did_not_get_itself() -> None:
    me = os.getpid()
    assert signals.decide(signal.SIGINT, 0, 4242, signal.SIGUSR2) == "forward"
    assert signals.decide(signal.SIGUSR2, 0, 4242, signal.SIGUSR2) == "checkpoint"
    assert signals.decide(signal.SIGUSR2, 0, 4242, None) == "forward"
    # The terminal signals the whole foreground group: srun got its own.
    assert signals.decide(signal.SIGINT, signals.SI_KERNEL, 0, signal.SIGUSR2) == "ignore"
    assert signals.decide(signal.SIGTSTP, signals.SI_KERNEL, 0, signal.SIGUSR2) == "stop"
    assert signals.decide(signal.SIGPIPE, 0, me, signal.SIGUSR2) == "ignore"
    # A hangup of the terminal reaches the session's leader alone: srun got none.
    assert signals.decide(signal.SIGHUP, signals.SI_KERNEL, 0, signal.SIGUSR2) == "ignore"
    assert signals.decide(signal.SIGHUP, signals.SI_KERNEL, 0, signal.SIGUSR2,
                          session_leader=True) == "forward"


def test_catchable_leaves_out_what_cannot_or_must_not_be_relayed() -> None:
    relayed = signals.catchable()
    assert signal.SIGCHLD not in relayed and signal.SIGKILL not in relayed
    assert {signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGCONT} <= relayed


@pytest.mark.parametrize(("text", "number"), [
    ("", signal.SIGUSR2), ("USR1", signal.SIGUSR1), ("sigterm", signal.SIGTERM),
    ("10", 10), ("none", None),
])
def test_checkpoint_signal_setting(text: str, number: int | None) -> None:
    assert signals.checkpoint_signal({"SRUN_CR_SIGNAL": text}) == number


@pytest.mark.parametrize("text", ["KILL", "NOPE", "9", "17"])
def test_checkpoint_signal_must_be_catchable(text: str) -> None:
    with pytest.raises(UsageError):
        signals.checkpoint_signal({"SRUN_CR_SIGNAL": text})


@pytest.mark.parametrize(("status_code", "expected"), [("exit 7", 7), ("kill -TERM $$", -15),
                                                       ("kill -KILL $$", -9)])
def test_exit_like_mimics_code_and_signal(status_code: str, expected: int) -> None:
    code = (f"import os, sys; sys.path[:0] = {sys.path!r}\n"
            "from pyscrun.srun_cr import signals\n"
            f"pid = os.fork()\n"
            f"if pid == 0: os.execvp('sh', ['sh', '-c', {status_code!r}])\n"
            "signals.exit_like(os.waitpid(pid, 0)[1])\n")
    done = subprocess.run([sys.executable, "-c", code], check=False)
    assert done.returncode == expected


def test_resource_keys() -> None:
    assert criu.resource_key("pipe:[123]") == "pipe:[123]"
    assert criu.resource_key("socket:[9]") == "socket:[9]"
    assert criu.resource_key("/var/log/out.txt") == "var/log/out.txt"
    assert criu.resource_key("/dev/null") is None
    assert criu.resource_key("anon_inode:[eventfd]") is None


def test_log_reason_skips_noise_and_keeps_the_cause(tmp_path: Path) -> None:
    log = tmp_path / "dump.log"
    log.write_text(
        "(00.000) Error (criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self\n"
        "(00.010) Error (criu/sk-inet.c:191): inet: Connected TCP socket, consider using "
        "--tcp-established option.\n"
        "(00.011) Error (criu/cr-dump.c:1681): Dump files (pid: 1) failed with -1\n"
        "(00.012) Error (criu/cr-dump.c:2111): Dumping FAILED.\n")
    assert criu.log_reason(str(log)) == ("inet: Connected TCP socket, consider using "
                                         "--tcp-established option. | Dump files (pid: 1) "
                                         "failed with -1")


def test_criu_missing_is_a_clear_error() -> None:
    with pytest.raises(CheckpointError, match=r"criu not found .*install CRIU"):
        criu.find({"SRUN_CR_CRIU": "/nonexistent/criu", "PATH": "/usr/bin"})


def test_registry_links_steps_to_sockets(tmp_path: Path) -> None:
    run = str(tmp_path / "run")
    registry.prepare(run)
    sock = registry.socket_path(run)
    link = registry.register(run, "12", "0", sock)
    assert registry.lookup(run, "12.0") == ("12.0", link)
    assert registry.lookup(run, "12") == ("12.0", link)
    registry.register(run, "12", "1", sock)
    with pytest.raises(CheckpointError, match="several srun_cr steps"):
        registry.lookup(run, "12")
    with pytest.raises(CheckpointError, match=r"no srun_cr runs step 13\.0"):
        registry.lookup(run, "13.0")
    with pytest.raises(CheckpointError, match="invalid step"):
        registry.lookup(run, "12.x")
    registry.unregister(link, sock)
    assert not os.path.lexists(link)


def test_registry_refuses_a_shared_run_dir(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o777)
    run.chmod(0o777)
    with pytest.raises(CheckpointError, match="writable by it alone"):
        registry.prepare(str(run))


def test_checkpoint_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert client.parse(["5.0"]) == ("5.0", None, False)
    assert client.parse(["5", "--dir", "ck", "--stop"]) == ("5", str(tmp_path / "ck"), True)
    assert client.parse(["--dir=/a", "5.1"]) == ("5.1", "/a", False)
    for bad in ([], ["5", "6"], ["5", "--dir"], ["5", "--bogus"]):
        with pytest.raises(UsageError):
            client.parse(bad)


def test_launcher_command_line() -> None:
    assert launcher._parse(["--port", "9", "--", "a", "--b"]) == ({"port": "9"}, ["a", "--b"])
    assert launcher._parse(["--port", "9", "--restart", "d", "--criu", "/c", "--", "a"]) == (
        {"port": "9", "restart": "d", "criu": "/c"}, ["a"])
    for bad in (["--port", "9", "--"], ["--bogus", "x", "--", "a"], ["--socket", "s", "--", "a"]):
        with pytest.raises(UsageError):
            launcher._parse(bad)


@pytest.mark.parametrize(("script", "status"), [("exit 3", 3 << 8), ("kill -TERM $$", 15)])
def test_nsinit_reports_the_task_wait_status(script: str, status: int) -> None:
    read_fd, write_fd = os.pipe()
    try:
        done = subprocess.run([sys.executable, "-I", "-S", nsinit.__file__, str(write_fd), "--",
                               "sh", "-c", script], pass_fds=(write_fd,), check=False)
        os.close(write_fd)
        assert done.returncode == 0
        assert int(os.read(read_fd, 64)) == status
    finally:
        os.close(read_fd)


def test_nsinit_missing_command_exits_like_slurmstepd() -> None:
    read_fd, write_fd = os.pipe()
    try:
        done = subprocess.run([sys.executable, "-I", "-S", nsinit.__file__, str(write_fd), "--",
                               "/nonexistent/prog"], pass_fds=(write_fd,), capture_output=True,
                              text=True, check=False)
        os.close(write_fd)
        assert int(os.read(read_fd, 64)) == 2 << 8  # ENOENT, as slurmstepd's execve failure
        assert "execve(): /nonexistent/prog: No such file or directory" in done.stderr
    finally:
        os.close(read_fd)


def test_plan_puts_the_launcher_before_the_command_and_names_the_job() -> None:
    plan = Plan(srunopts.parse(["-N2", "prog", "-x"]), {})
    argv = plan.argv(6000, "/usr/sbin/criu")
    assert argv[:3] == ["srun", "-N2", "--job-name=prog"]
    assert argv[3:] == ["--", *python_command("from pyscrun.srun_cr.launcher import main; main()"),
                        "--port", "6000", "--criu", "/usr/sbin/criu", "--", "prog", "-x"]
    assert plan.env({"SLURM_RESTART_DIR": "/old"}, "/s.sock", b"\x01\x02") == {
        "SLURM_SRUN_CR_SOCKET": "/s.sock", "SLURM_SRUN_CR_SECRET": "0102"}
    assert "--job-name=prog" not in Plan(srunopts.parse(["prog"]), {"SLURM_JOB_NAME": "j"}).options


def test_plan_for_a_restart_takes_task_count_and_command_from_the_checkpoint(tmp_path: Path,
                                                                           ) -> None:
    ck = tmp_path / "ck"
    ck.mkdir()
    images.write_json(str(ck / images.MANIFEST),
                      images.make_manifest("1", "0", ["n1", "n2"], ["prog", "a"], "/", False))
    for rank in range(2):
        (ck / f"task-{rank}").mkdir()
    plan = Plan(srunopts.parse(["-N1"]), {"SLURM_RESTART_DIR": str(ck)})
    assert plan.options == ["-N1", "--ntasks=2", "--job-name=prog"]
    assert plan.command == ["prog", "a"]
    made = images.Checkpoint.load(str(ck)).id
    assert plan.argv(6000, "/c")[-7:] == ["--restart", str(ck), "--checkpoint-id", made, "--",
                                          "prog", "a"]
    assert plan.env({}, "/s", b"")["SLURM_RESTART_DIR"] == str(ck)
    with pytest.raises(CheckpointError, match="holds 2 task"):
        Plan(srunopts.parse(["--restart", str(ck), "-n3"]), {})
    with pytest.raises(UsageError, match="multi-prog"):
        Plan(srunopts.parse(["--multi-prog", "conf"]), {})


class _StoppedTask:
    """A task a checkpoint with --stop left stopped: a real process, SIGSTOPped."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(["sleep", "60"])
        os.kill(self.process.pid, signal.SIGSTOP)
        self.pid = self.process.pid

    def members(self) -> list[int]:
        return [self.pid]

    def state(self) -> str:
        with open(f"/proc/{self.pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0]


def _await_state(task: _StoppedTask, wanted: Callable[[str], bool]) -> None:
    deadline = time.monotonic() + 5
    while not wanted(task.state()):
        assert time.monotonic() < deadline, f"the task stayed {task.state()}"
        time.sleep(0.01)


def test_a_launcher_that_loses_srun_cr_while_its_task_waits_stopped_lets_it_go_on() -> None:
    """No kill or resume will come: stopped, the task would not even take the SIGTERM
    srun relays when srun_cr dies."""
    task = _StoppedTask()
    try:
        one = launcher.Launcher(launcher.Identity("7", "0", 0, 1, "n1"), {}, {})
        one.task = task  # type: ignore[assignment]
        one.awaits_finish = True
        _await_state(task, lambda state: state == "T")
        one._lost()
        _await_state(task, lambda state: state != "T")
        assert not one.awaits_finish
    finally:
        task.process.kill()
        task.process.wait()
