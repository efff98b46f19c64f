"""podman drives scrun end to end: local and Slurm backends, both oci.conf modes, as
an ordinary user with rootless podman (whom scrun is for)."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

from tests.integration.harness import (
    IMAGE,
    Runtime,
    hangs_and_failures,
    podman,
    podman_command_line,
    wait_for,
)
from tests.integration.terminal import at_a_terminal


def test_echo_prints_output(runtime: Runtime) -> None:
    done = podman(runtime, "run", "--rm", IMAGE, "echo", "hi")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"hi\n"


def test_exit_code_reaches_podman(runtime: Runtime) -> None:
    done = podman(runtime, "run", "--rm", IMAGE, "sh", "-c", "exit 3")
    assert done.returncode == 3, done.stderr


def test_stdin_reaches_container(runtime: Runtime) -> None:
    done = podman(runtime, "run", "-i", "--rm", IMAGE, "cat", input=b"data\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"data\n"


def test_relative_command_resolved_inside_container(runtime: Runtime) -> None:
    done = podman(runtime, "run", "--rm", IMAGE, "true")
    assert done.returncode == 0, done.stderr


def _run_detached(runtime: Runtime, *command: str) -> str:
    name = f"t{uuid.uuid4().hex[:10]}"
    done = podman(runtime, "run", "-d", "--name", name, IMAGE, *command)
    assert done.returncode == 0, done.stderr
    return name


def _exit_code(runtime: Runtime, name: str) -> int:
    done = podman(runtime, "inspect", "--format", "{{.State.ExitCode}}", name)
    return int(done.stdout)


def test_stop_kills_a_process_ignoring_sigterm_after_the_timeout(runtime: Runtime) -> None:
    name = _run_detached(runtime, "sh", "-c", "trap '' TERM; while true; do sleep 1; done")
    started = time.monotonic()
    done = podman(runtime, "stop", "-t", "2", name)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    # Stop returning at once, with status 2, was SIGTERM reaching runc's init before its
    # exec (start answered too early). Say how the container ended, should it return.
    assert 2 <= elapsed < 15, (elapsed, _exit_code(runtime, name), done.stderr,
                               podman(runtime, "logs", name).stderr, runtime.log_errors())
    assert _exit_code(runtime, name) == 137
    assert podman(runtime, "rm", name).returncode == 0


def test_stop_of_a_shell_that_honours_sigterm_is_quick(runtime: Runtime) -> None:
    name = _run_detached(
        runtime, "sh", "-c", "trap 'exit 143' TERM; echo ready; while true; do sleep 0.1; done")
    # Until its trap is set, a shell as pid 1 ignores SIGTERM: wait for it, as with runc.
    wait_for(lambda: b"ready" in podman(runtime, "logs", name).stdout, 30, "the trap")
    started = time.monotonic()
    assert podman(runtime, "stop", "-t", "10", name).returncode == 0
    assert time.monotonic() - started < 5
    assert _exit_code(runtime, name) == 143
    assert podman(runtime, "rm", name).returncode == 0


def test_run_timeout_ends_the_container_as_with_runc(runtime: Runtime) -> None:
    """podman run --timeout: once the time is up, conmon kills the process group of the
    pid it was given. That group is the stand-in's own (were it conmon's, conmon would
    kill itself before writing the exit file, and podman would hang, then say the
    container still runs)."""
    name = f"t{uuid.uuid4().hex[:10]}"
    started = time.monotonic()
    done = podman(runtime, "run", "--rm", "--name", name, "--timeout", "2", IMAGE, "sleep", "60")
    elapsed = time.monotonic() - started
    # What podman says with runc: status 255 and no error.
    assert done.returncode == 255, done.stderr
    assert done.stderr == b""
    # conmon's timer is glib's, in whole seconds on a shared tick: it may fire up to a
    # second early.
    assert 1 <= elapsed < 15, elapsed
    listed = podman(runtime, "ps", "-a", "--format", "{{.Names}}").stdout.decode()
    assert name not in listed.split()


def test_dev_shm_is_a_tmpfs_of_the_size_asked_that_any_user_may_write(runtime: Runtime,
                                                                       ) -> None:
    """podman mounts the container's /dev/shm on the login host; a node that cannot see
    that mount gives the container a tmpfs of its own of the same size."""
    done = podman(runtime, "run", "--rm", "--shm-size", "1m", "--user", "1000:1000", IMAGE,
                  "sh", "-c", "echo written > /dev/shm/f && cat /dev/shm/f && "
                  "stat -f -c %T /dev/shm && df -k /dev/shm | awk 'NR == 2 { print $2 }'")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [b"written", b"tmpfs", b"1024"]


def test_kill_ends_the_container(runtime: Runtime) -> None:
    name = _run_detached(runtime, "sleep", "1000")
    assert podman(runtime, "kill", name).returncode == 0
    assert podman(runtime, "wait", name).stdout.strip() == b"137"
    assert podman(runtime, "rm", name).returncode == 0


def test_rm_force_removes_a_running_container(runtime: Runtime) -> None:
    name = _run_detached(runtime, "sleep", "1000")
    done = podman(runtime, "rm", "-f", "-t", "1", name)
    assert done.returncode == 0, done.stderr
    listed = podman(runtime, "ps", "-a", "--format", "{{.Names}}").stdout.decode()
    assert name not in listed.split()


def test_interactive_terminal_under_tmux(runtime: Runtime, tmp_path: Path) -> None:
    at_a_terminal(podman_command_line(runtime, "run", "-it", "--rm", IMAGE, "sh"),
                  tmp_path / "result")


def test_many_sequential_runs_never_hang(users_local_runtime: Runtime) -> None:
    assert hangs_and_failures(
        100, lambda: podman(users_local_runtime, "run", "--rm", IMAGE, "true", timeout=60),
        users_local_runtime) == []


def _run_with_fd3(runtime: Runtime, command: str) -> tuple[subprocess.CompletedProcess[bytes], Path]:
    """podman run --preserve-fds 1 with fd 3 open on a file of the user's, as systemd's
    socket activation hands descriptors on; that file."""
    fd3 = runtime.base / "fd3"
    done = runtime.account.run(
        ["sh", "-c", f'exec 3>"{fd3}"; exec podman --runtime {runtime.wrapper} run --rm '
                     f'--preserve-fds 1 {IMAGE} sh -c "{command}"'])
    return done, fd3


def test_preserved_fds_reach_the_container_on_the_local_backend(users_local_runtime: Runtime,
                                                                ) -> None:
    done, fd3 = _run_with_fd3(users_local_runtime, "echo through fd 3 >&3")
    assert done.returncode == 0, done.stderr
    assert fd3.read_text() == "through fd 3\n"


def test_a_slurm_conf_named_but_missing_runs_nothing_here(users_local_runtime: Runtime) -> None:
    """A slurm.conf named with -f that is not there (a typo, maybe) is an error naming
    it: the container does not run on the login host instead. Only pyscrun.conf's
    Backend=local (removed here) runs containers there."""
    (users_local_runtime.conf_dir / "pyscrun.conf").unlink()
    done = podman(users_local_runtime, "run", "--rm", IMAGE, "echo", "ran")
    assert done.returncode == 126 and b"ran" not in done.stdout, done.stderr
    errors = [line for line in done.stderr.decode().splitlines() if "scrun" in line]
    assert len(errors) == 1, done.stderr
    assert (f"{users_local_runtime.slurm_conf} does not exist: name the cluster's slurm.conf "
            "with -f or SLURM_CONF (Backend=local in ") in errors[0]


def test_preserved_fds_through_slurm_are_refused_in_one_line(users_slurm_runtime: Runtime,
                                                              ) -> None:
    done, _ = _run_with_fd3(users_slurm_runtime, "true")
    assert done.returncode != 0
    said = [line for line in done.stderr.decode().splitlines() if "preserve-fds" in line]
    assert said and "cannot reach a container on another machine" in said[0], done.stderr


def test_stdin_the_container_does_not_read_holds_back_no_stop(
        users_slurm_runtime: Runtime, tmp_path: Path) -> None:
    """4 MiB waiting on stdin for a container that never reads it: podman stop's SIGTERM
    still reaches it at once (stdin and the anchor's orders share one connection), and
    it ends with its own status, not Slurm's SIGKILL."""
    runtime = users_slurm_runtime
    unread = tmp_path / "unread"
    unread.write_bytes(b"x" * (4 << 20))
    name = f"t{uuid.uuid4().hex[:10]}"
    with unread.open("rb") as stdin:
        run = subprocess.Popen(
            runtime.account.command(["podman", "--runtime", str(runtime.wrapper), "run", "-i",
                                     "--name", name, IMAGE, "sh", "-c",
                                     "trap 'exit 7' TERM; sleep 600 & wait"]),
            stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: podman(runtime, "inspect", "--format", "{{.State.Status}}", name
                                ).stdout.strip() == b"running", 60, "the container to run")
        time.sleep(2)  # the stdin the container does not read piles up before it
        stopped = podman(runtime, "stop", "-t", "20", name)
        assert stopped.returncode == 0, stopped.stderr
        assert run.wait(60) == 7, run.stderr.read() if run.stderr else b""
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        podman(runtime, "rm", "-f", "-t", "0", name)
