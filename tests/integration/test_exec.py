"""exec (podman exec): a process in the running container, on its task 0's node.

podman is an ordinary user's; runc's own command line (`scrun exec` of a container made
from a bundle) is root's, as runc is called with a bundle of root's."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

from tests.integration.harness import (
    IMAGE,
    Runtime,
    make_bundle,
    podman,
    podman_command_line,
    process_ended,
    processes_mentioning,
    wait_for,
)
from tests.integration.terminal import at_a_terminal, terminal


def _running(runtime: Runtime, *options: str) -> str:
    name = f"x{uuid.uuid4().hex[:8]}"
    done = podman(runtime, "run", "-d", "--name", name, *options, IMAGE, "sleep", "1000")
    assert done.returncode == 0, done.stderr
    return name


def test_podman_exec_runs_in_the_container_with_its_status_and_stdio(runtime: Runtime) -> None:
    name = _running(runtime, "--uts=host")
    try:
        echoed = podman(runtime, "exec", name, "echo", "hi")
        assert (echoed.returncode, echoed.stdout) == (0, b"hi\n"), echoed.stderr
        failed = podman(runtime, "exec", name, "sh", "-c", "echo oops >&2; exit 5")
        assert failed.returncode == 5
        # The process's stderr, and nothing of srun's about its status.
        assert failed.stderr == b"oops\n"
        read = podman(runtime, "exec", "-i", name, "cat", input=b"data\n")
        assert read.stdout == b"data\n", read.stderr
        placed = podman(runtime, "exec", "-e", "X=42", "-w", "/tmp", name, "sh", "-c",
                        "echo $X $(pwd)")
        assert placed.stdout == b"42 /tmp\n", placed.stderr
        as_user = podman(runtime, "exec", "-u", "1234:56", name, "sh", "-c", "echo $(id -u) $(id -g)")
        assert as_user.stdout == b"1234 56\n", as_user.stderr
        # It runs where the container runs: in its file system and on its node.
        assert podman(runtime, "exec", name, "cat", "/proc/1/cmdline").stdout == b"sleep\x001000\x00"
    finally:
        podman(runtime, "rm", "-f", "-t", "0", name)


def test_a_command_the_container_lacks_gives_podmans_127_and_126(runtime: Runtime) -> None:
    """As with runc: a missing command (or working directory) is 127 and one that cannot
    run 126, and `exec -d` of one fails (exec used to report them only as the process's
    255, once running); the lookup is the container's as it is now, a command it wrote
    since it began included."""
    name = _running(runtime)
    try:
        made = podman(runtime, "exec", name, "sh", "-c",
                      "printf '#!/bin/sh\\necho made\\n' > /tmp/made; chmod +x /tmp/made; "
                      "echo data > /tmp/plain")
        assert made.returncode == 0, made.stderr
        ran = podman(runtime, "exec", name, "/tmp/made")
        assert (ran.returncode, ran.stdout) == (0, b"made\n"), ran.stderr
        missing = podman(runtime, "exec", name, "no-such-command")
        assert missing.returncode == 127, missing.stderr
        assert b"executable file not found" in missing.stderr
        # podman's own code for a detached exec that fails, with runc too.
        detached = podman(runtime, "exec", "-d", name, "/no/such/file")
        assert detached.returncode == 125, detached.stderr
        assert b"no such file or directory" in detached.stderr
        cannot = podman(runtime, "exec", name, "/tmp/plain")
        assert cannot.returncode == 126, cannot.stderr
        assert b"permission denied" in cannot.stderr
        nowhere = podman(runtime, "exec", "-w", "/nowhere", name, "true")
        assert nowhere.returncode == 127, nowhere.stderr
        assert b'chdir to cwd ("/nowhere") set in config.json failed' in nowhere.stderr
        not_a_directory = podman(runtime, "exec", "-w", "/tmp/plain", name, "true")
        assert not_a_directory.returncode == 255, not_a_directory.stderr
        assert b"not a directory" in not_a_directory.stderr
        assert processes_mentioning("--job-name=scrun-exec") == []
    finally:
        podman(runtime, "rm", "-f", "-t", "0", name)


def test_podman_exec_it_gives_a_working_terminal(runtime: Runtime, tmp_path: Path) -> None:
    """`podman exec -it NAME sh` under tmux: typed commands run at the terminal's size,
    a resize reaches the shell, and its exit status is podman's. A command the container
    lacks says so on the terminal, and gives podman 127 as with runc (it was 255)."""
    name = _running(runtime)
    try:
        at_a_terminal(podman_command_line(runtime, "exec", "-it", name, "sh"), tmp_path / "result")
        # The container goes on: the terminal was the exec's alone.
        assert podman(runtime, "exec", name, "true").returncode == 0
        with terminal() as term:
            missing = tmp_path / "missing"
            term.run(podman_command_line(runtime, "exec", "-it", name, "no-such-command"),
                     missing)
            wait_for(missing.exists, 60, "podman exec's end")
            # The whole of what it showed, its wrapped lines joined.
            shown = term.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "t")
            assert missing.read_text().strip() == "127", shown
            assert "executable file not found" in shown, shown
    finally:
        podman(runtime, "rm", "-f", "-t", "0", name)


def test_runc_refuses_what_cannot_go_with_a_terminal(local_runtime: Runtime) -> None:
    name = _running(local_runtime)
    container_id = podman(local_runtime, "inspect", "--format", "{{.Id}}", name).stdout.decode().strip()
    try:
        detached = local_runtime.scrun("exec", "-t", "-d", container_id, "true")
        assert detached.returncode == 2
        assert "cannot allocate tty if runc will detach without setting console socket" in detached.stderr
        socket_only = local_runtime.scrun("exec", "--console-socket", "/nonexistent", container_id,
                                          "true")
        assert socket_only.returncode == 2 and "will not detach or allocate tty" in socket_only.stderr
    finally:
        podman(local_runtime, "rm", "-f", "-t", "0", name)


def test_exec_into_a_container_that_is_not_running(local_runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["true"])
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"args": ["true"], "cwd": "/"}))
    assert local_runtime.scrun("create", "-b", str(bundle), "done").returncode == 0
    assert local_runtime.scrun("start", "done").returncode == 0
    wait_for(lambda: '"stopped"' in local_runtime.scrun("state", "done").stdout, 30, "stopped")
    refused = local_runtime.scrun("exec", "--process", str(process), "done")
    assert refused.returncode == 1
    assert refused.stderr.strip() == "scrun: error: cannot exec in a stopped container"
    missing = local_runtime.scrun("exec", "done")
    assert missing.returncode == 2 and "exec needs a command, or --process" in missing.stderr
    assert local_runtime.scrun("delete", "done").returncode == 0


def test_exec_into_a_created_container_names_its_status(local_runtime: Runtime,
                                                        tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sleep", "100"])
    assert local_runtime.scrun("create", "-b", str(bundle), "early").returncode == 0
    try:
        refused = local_runtime.scrun("exec", "early", "true")
        assert (refused.returncode, refused.stderr) == (
            1, "scrun: error: cannot exec in a created container\n")
        assert '"created"' in local_runtime.scrun("state", "early").stdout
    finally:
        local_runtime.scrun("delete", "--force", "early")


def test_runc_style_exec_of_a_command(root_runtime: Runtime, tmp_path: Path) -> None:
    """`scrun exec [-e NAME=VALUE] [--cwd DIR] [-u UID:GID] [-g GID] ID CMD...`: the
    container's own process running CMD, whose own flags stay its own."""
    bundle = make_bundle(tmp_path, ["sleep", "1000"])
    assert root_runtime.scrun("create", "-b", str(bundle), "rx").returncode == 0
    try:
        assert root_runtime.scrun("start", "rx").returncode == 0
        done = root_runtime.scrun("exec", "-e", "X=42", "--cwd", "/tmp", "rx", "sh", "-c",
                             "echo $X $(pwd); exit 3")
        assert (done.returncode, done.stdout) == (3, "42 /tmp\n"), done.stderr
        as_user = root_runtime.scrun("exec", "-u", "1234:56", "-g", "78", "rx", "sh", "-c",
                                     "echo $(id -u) $(id -g) $(id -G)")
        assert as_user.stdout == "1234 56 56 78\n", as_user.stderr
    finally:
        root_runtime.scrun("delete", "--force", "rx")


def test_runc_style_exec_of_a_missing_command_fails_in_one_line(root_runtime: Runtime,
                                                                tmp_path: Path) -> None:
    """`scrun exec -d --pid-file F ID CMD` of a command the container lacks exits 255
    with runc's words, in one line, writes no pid file and leaves no srun."""
    bundle = make_bundle(tmp_path, ["sleep", "1000"])
    assert root_runtime.scrun("create", "-b", str(bundle), "mx").returncode == 0
    try:
        assert root_runtime.scrun("start", "mx").returncode == 0
        pid_file = tmp_path / "exec.pid"
        done = root_runtime.scrun("exec", "-d", "--pid-file", str(pid_file), "mx",
                                  "no-such-command")
        assert done.returncode == 255
        assert done.stderr == ('scrun: error: exec failed: unable to start container '
                               'process: exec: "no-such-command": executable file not '
                               'found in $PATH\n')
        assert not pid_file.exists()
        assert processes_mentioning("--job-name=scrun-exec") == []
    finally:
        root_runtime.scrun("delete", "--force", "mx")


def test_a_signal_to_an_exec_reaches_its_process_and_leaves_nothing(root_runtime: Runtime,
                                                                   tmp_path: Path) -> None:
    """`scrun exec -d --pid-file F` as conmon and containerd's shim run it, then SIGTERM to
    that pid as they send it (podman stopping an exec session): the exec ends, and no
    srun of it is left; locally the process gets the signal and runs its own trap
    (through Slurm, srun ends the step on SIGTERM: README). Only the exec's own
    session used to end, its srun and step running on."""
    bundle = make_bundle(tmp_path, ["sleep", "1000"])
    assert root_runtime.scrun("create", "-b", str(bundle), "sx").returncode == 0
    try:
        assert root_runtime.scrun("start", "sx").returncode == 0
        pid_file = tmp_path / "exec.pid"
        tag = f"exec-{uuid.uuid4().hex[:8]}"
        done = root_runtime.scrun(
            "exec", "-d", "--pid-file", str(pid_file), "sx", "sh", "-c",
            f"trap 'echo got TERM > /tmp/{tag}; exit 7' TERM; touch /tmp/{tag}.ready; "
            "while :; do sleep 0.1; done")
        assert done.returncode == 0, done.stderr
        wait_for(lambda: root_runtime.scrun("exec", "sx", "cat",
                                            f"/tmp/{tag}.ready").returncode == 0,
                 30, "the exec'd process to run")
        session = int(pid_file.read_text())
        os.kill(session, signal.SIGTERM)
        wait_for(lambda: process_ended(session), 30, "the exec's session to end")
        if not root_runtime.slurm_conf.exists():
            said = root_runtime.scrun("exec", "sx", "cat", f"/tmp/{tag}")
            assert said.stdout == "got TERM\n", said.stderr
            wait_for(lambda: tag not in root_runtime.scrun("exec", "sx", "ps", "-o",
                                                           "args").stdout,
                     30, "the exec'd process to end")
        assert processes_mentioning("--job-name=scrun-exec") == []
    finally:
        root_runtime.scrun("delete", "--force", "sx")


def test_ps_through_exec_lists_the_containers_processes(runtime: Runtime) -> None:
    """`podman exec NAME ps -ef`: ps runs in the container, on its node, and lists its
    processes (what `podman top NAME -ef` does with podman 4)."""
    tag = str(930000 + uuid.uuid4().int % 59999)
    name = f"t{uuid.uuid4().hex[:8]}"
    started = podman(runtime, "run", "-d", "--name", name, IMAGE, "sh", "-c",
                     f"sleep {tag} & sleep {int(tag) + 1}")
    assert started.returncode == 0, started.stderr
    try:
        def listed() -> bytes:
            return podman(runtime, "exec", name, "ps", "-ef").stdout

        wait_for(lambda: f"sleep {int(tag) + 1}".encode() in listed(), 30,
                 "the container's processes in ps")
        assert f"sleep {tag}".encode() in listed()
    finally:
        podman(runtime, "rm", "-f", "-t", "0", name)
