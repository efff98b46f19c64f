"""Ordinary users: rootless podman pointed at scrun, through Slurm on the cluster of
separate machines and on the local backend, as the user and nobody else.

podman runs scrun as uid 0 of its user namespace; the jobs, the files and the
processes must all be the real user's, and a second user must reach none of them.
What every podman user does (run, stdin, exit codes, -it, -d, stop, kill, rm, exec)
is tested as the ordinary user in test_podman.py and test_exec.py; here, what is the
user's own: its jobs, its files, its allocation, other users, its mistakes.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.accounts import OTHER_USER, USER, account
from tests.integration.conftest import MODES, runtime_on
from tests.integration.harness import (
    IMAGE,
    SCRUN,
    Cluster,
    Runtime,
    make_bundle,
    make_runtime,
    podman,
    podman_ok,
    require,
    slurm,
    wait_for,
)
from tests.integration.reliability import job_state
from tests.integration.terminal import at_a_terminal

NODES = 3


def _users(backend: str, mode: str, cluster: Cluster, tmp_path: Path) -> Iterator[Runtime]:
    """The user's rootless podman with scrun as its runtime, on scrun's defaults (no
    --root): the spool dir is the user's runtime dir's."""
    nodes = NODES if backend == "slurm" else 1
    with runtime_on(backend, mode, cluster, tmp_path, account(USER), nodes,
                    default_root=True) as made:
        yield made


@pytest.fixture
def slurm_user(cluster: Cluster, tmp_path: Path) -> Iterator[Runtime]:
    yield from _users("slurm", "built-in", cluster, tmp_path)


@pytest.fixture
def local_user(cluster: Cluster, tmp_path: Path) -> Iterator[Runtime]:
    yield from _users("local", "built-in", cluster, tmp_path)


@pytest.fixture(params=MODES)
def any_user(request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path,
             ) -> Iterator[Runtime]:
    """The user on each backend in each oci.conf mode (runc run, or create and start)."""
    backend, mode = request.param.split("/")
    yield from _users(backend, mode, cluster, tmp_path)


def test_the_container_runs_as_the_users_own_job_on_a_node(slurm_user: Runtime) -> None:
    cid = podman_ok(slurm_user, "run", "-d", "--uts=host", IMAGE, "sh", "-c",
                               "hostname; id -u; echo $SLURM_JOB_ID; sleep 60")
    try:
        wait_for(lambda: len(podman_ok(slurm_user, "logs", cid).split()) == 3, 60, "its output")
        node, uid_inside, job = podman_ok(slurm_user, "logs", cid).split()
        assert node.startswith("n"), node
        # podman's mapping, made again on the node: root inside is the user outside.
        assert uid_inside == "0"
        shown = slurm(slurm_user.slurm_conf, "scontrol", "show", "job", job)
        assert f"UserId={USER}({slurm_user.account.uid})" in shown.stdout, shown.stdout
        assert f"NodeList={node}" in shown.stdout
        started = time.monotonic()
        podman_ok(slurm_user, "stop", "-t", "2", cid)
        assert time.monotonic() - started < 30
    finally:
        podman(slurm_user, "rm", "-f", cid)


def test_files_the_container_writes_belong_to_the_user(slurm_user: Runtime) -> None:
    out = slurm_user.base / "out"
    out.mkdir()
    os.chown(out, slurm_user.account.uid, slurm_user.account.gid)
    podman_ok(slurm_user, "run", "--rm", "-v", f"{out}:/out", IMAGE, "touch", "/out/made")
    assert (out / "made").stat().st_uid == slurm_user.account.uid


def test_three_nodes_three_tasks(slurm_user: Runtime) -> None:
    names = podman_ok(slurm_user, "run", "--rm", "--uts=host", "-e", "SCRUN_JOB_NUM_NODES=3",
                                 "-e", "SCRUN_NTASKS=3", IMAGE, "hostname").split()
    assert sorted(names) == ["n1", "n2", "n3"]


def test_each_task_has_a_dev_shm_of_its_own(slurm_user: Runtime) -> None:
    """Two tasks on two nodes: what one writes in /dev/shm the other does not see
    (podman's /dev/shm is on the login host, where no node sees it)."""
    lines = podman_ok(slurm_user, "run", "--rm", "-e", "SCRUN_JOB_NUM_NODES=2", "-e",
                      "SCRUN_NTASKS=2", IMAGE, "sh", "-c",
                      "echo $SLURM_PROCID > /dev/shm/mine && sleep 1 && "
                      "echo $SLURM_PROCID $(cat /dev/shm/mine) $(ls /dev/shm)").splitlines()
    assert sorted(lines) == ["0 0 mine", "1 1 mine"]


def test_joining_another_containers_namespace_is_refused_in_one_line(slurm_user: Runtime,
                                                                     ) -> None:
    """--pid container:NAME names a namespace of the login host (the other container's
    stand-in), which no compute node can open: create says so, and no job is asked for
    (the fixture's leak check)."""
    base = podman_ok(slurm_user, "run", "-d", IMAGE, "sleep", "60")
    try:
        done = podman(slurm_user, "run", "--rm", "--pid", f"container:{base}", IMAGE, "true")
        assert done.returncode == 126, done.stderr
        errors = [line for line in done.stderr.decode().splitlines() if "scrun" in line]
        assert len(errors) == 1 and "namespace pid path /proc/" in errors[0], done.stderr
        assert "Backend=local" in errors[0]
    finally:
        podman(slurm_user, "rm", "-f", "-t", "0", base)


def test_a_bind_mount_of_a_path_only_the_login_host_has_says_so(slurm_user: Runtime,
                                                                 tmp_path: Path) -> None:
    """The login host's /tmp is its own: a node has none of it. runc's bare `no such
    file or directory` becomes a line that names the node, the path and why."""
    login_only = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        login_only.chmod(0o755)
        done = podman(slurm_user, "run", "--rm", "-v", f"{login_only}:/v", IMAGE, "true")
        assert done.returncode == 255, done.stderr
        assert (f"the source of the bind mount on /v, {login_only}, does not exist on this "
                "node") in done.stderr.decode()
    finally:
        login_only.rmdir()


def test_a_container_with_a_user_namespace_of_its_own_runs_on_a_node(slurm_user: Runtime,
                                                                       ) -> None:
    """--userns keep-id: podman writes the container's own uid mappings, ids of its
    namespace, into config.json. The node makes podman's namespace again and the
    runtime makes the container's inside it (once the agent read config.json itself,
    took the mappings for scrun.lua's and ran the runtime as the plain user, which
    failed where it could read the bundle: podman 5)."""
    said = podman_ok(slurm_user, "run", "--rm", "--userns", "keep-id", IMAGE, "id", "-u")
    assert said == str(slurm_user.account.uid)


def test_a_container_whose_uid_map_leaves_the_user_out_runs_on_a_node(slurm_user: Runtime,
                                                                       ) -> None:
    """--uidmap 0:1:1000: the container's root is not the user. podman 5 then binds the
    rootfs at an "intermediate mountpoint" under /var/tmp for the runtime's call, a
    mount of the login host's that no node sees: scrun ships it (it took it for a plain
    directory, the same file system on both sides), and the node lets the container's
    root through the user's directories above the copy (runc: permission denied).
    podman 4 makes the user's runtime dir 0711 on the way, put back afterwards."""
    runtime_dir = slurm_user.account.runtime_dir
    mode = runtime_dir.stat().st_mode & 0o7777
    try:
        said = podman_ok(slurm_user, "run", "--rm", "--uidmap", "0:1:1000", IMAGE, "sh", "-c",
                         "id -u; head -n 1 /proc/self/uid_map").splitlines()
    finally:
        runtime_dir.chmod(mode)
    assert said[0] == "0"
    assert said[1].split() == ["0", "1", "1000"]


def test_exec_into_a_container_on_its_node(slurm_user: Runtime) -> None:
    cid = podman_ok(slurm_user, "run", "-d", IMAGE, "sleep", "60")
    try:
        assert podman_ok(slurm_user, "exec", cid, "echo", "inside") == "inside"
        done = podman(slurm_user, "exec", cid, "sh", "-c", "exit 5")
        assert done.returncode == 5, done.stderr.decode()
    finally:
        podman(slurm_user, "rm", "-f", "-t", "0", cid)


def test_exec_with_a_terminal_and_top(any_user: Runtime) -> None:
    """`podman exec -it` gives the user a working terminal in the container; `podman top`
    with ps options lists the container's processes (podman 4 runs ps through exec, on
    its node) or the stand-in's (podman 5 runs ps in its pid namespace), never the
    host's. podman drops every line holding the options as written, so they are ones
    no path of the stand-in's command line can hold (`-ef` was in a random user dir)."""
    cid = podman_ok(any_user, "run", "-d", IMAGE, "sleep", "971")
    try:
        command = shlex.join(any_user.account.command(
            ["podman", "--runtime", str(any_user.wrapper), "exec", "-it", cid, "sh"]))
        at_a_terminal(command, any_user.base / "result", status=3, resize=False)
        listed = podman_ok(any_user, "top", cid, "-e -o pid,args")
        version = podman_ok(any_user, "version", "--format", "{{.Client.Version}}")
        if int(version.split(".")[0]) < 5:
            assert "sleep 971" in listed, listed
        else:
            # pid 1 of a pid namespace of its own: the stand-in (scrun create of cid).
            pids = [int(line.split()[0]) for line in listed.splitlines()[1:]]
            assert pids == [1] and cid in listed, listed
    finally:
        podman(any_user, "rm", "-f", "-t", "0", cid)


def test_a_container_in_the_users_own_allocation(slurm_user: Runtime) -> None:
    """`SLURM_JOB_ID` of an salloc of the user's: the container is a step of that job."""
    script = (f"podman --runtime {slurm_user.wrapper} run --rm -e SLURM_JOB_ID=$SLURM_JOB_ID "
              f"{IMAGE} sh -c 'echo job=$SLURM_JOB_ID'; echo outer=$SLURM_JOB_ID")
    done = slurm_user.account.run(["salloc", "-N1", "--", "sh", "-c", script],
                                  env={"SLURM_CONF": str(slurm_user.slurm_conf)})
    said = done.stdout.decode()
    assert done.returncode == 0, (said, done.stderr.decode(), slurm_user.log_errors())
    inner = [line.split("=")[1] for line in said.split() if line.startswith("job=")]
    outer = [line.split("=")[1] for line in said.split() if line.startswith("outer=")]
    assert inner and inner == outer, said


def test_a_queued_job_leaves_the_queue_when_its_anchor_is_killed_outright(
        slurm_user: Runtime) -> None:
    """The container waits in the queue behind a held job of the user's. Its anchor
    killed with SIGKILL runs no clean-up of its own, and with its conmon stopped,
    podman's clean-up cannot come: the job is withdrawn all the same."""
    env = {"SLURM_CONF": str(slurm_user.slurm_conf)}
    held = slurm_user.account.run(["sbatch", "--hold", "--parsable", "--output=/dev/null",
                                   "--wrap", "true"], env=env)
    assert held.returncode == 0, held.stderr.decode()
    held_job = held.stdout.decode().strip().split(";")[0]
    cid = podman_ok(slurm_user, "run", "-d", "-e", f"SCRUN_DEPENDENCY=afterok:{held_job}",
                    IMAGE, "true")
    conmon = int(podman_ok(slurm_user, "inspect", "-f", "{{.State.ConmonPid}}", cid))
    os.kill(conmon, signal.SIGSTOP)
    try:
        queue = slurm(slurm_user.slurm_conf, "squeue", "-h", "-u", USER, "-t", "PD",
                      "-o", "%i").stdout.split()
        waiting = [job for job in queue if job != held_job]
        assert len(waiting) == 1, queue
        os.kill(slurm_user.anchor_pid(cid), signal.SIGKILL)
        wait_for(lambda: job_state(slurm_user.slurm_conf, waiting[0]) in ("", "CANCELLED"),
                 10, "the queued job to be withdrawn")
    finally:
        os.kill(conmon, signal.SIGCONT)
        removed = podman(slurm_user, "rm", "-f", cid)
        slurm(slurm_user.slurm_conf, "scancel", held_job)
    assert removed.returncode == 0, removed.stderr.decode()


def test_checkpoint_of_an_ordinary_users_container_says_why_not(local_user: Runtime) -> None:
    cid = podman_ok(local_user, "run", "-d", IMAGE, "sleep", "60")
    try:
        done = local_user.scrun("checkpoint", "--image-path",
                                str(local_user.base / "images"), cid)
        said = done.stderr.strip()
        assert done.returncode != 0
        assert len(said.splitlines()) == 1 and "ordinary user" in said, said
        assert podman_ok(local_user, "inspect", "-f", "{{.State.Status}}", cid) == "running"
    finally:
        podman(local_user, "rm", "-f", "-t", "0", cid)


def test_another_user_can_neither_see_nor_touch_the_containers(any_user: Runtime) -> None:
    cid = podman_ok(any_user, "run", "-d", IMAGE, "sleep", "60")
    other_base = any_user.base / "other"
    other_base.mkdir()
    other = make_runtime(other_base, None, account=account(OTHER_USER), default_root=True,
                         cluster_conf=(any_user.slurm_conf.resolve()
                                       if any_user.slurm_conf.exists() else None))
    try:
        root = any_user.account.runtime_dir / "pyscrun"
        state = json.loads(any_user.scrun("state", cid).stdout)
        assert state["status"] == "running"
        for verb in (["list"], ["state", cid], ["kill", cid, "KILL"], ["delete", "--force", cid]):
            done = other.scrun("--root", str(root), *verb)
            said = done.stderr.strip()
            assert done.returncode != 0, (verb, done.stdout)
            assert len(said.splitlines()) == 1, said
        # The control socket refuses a stranger even when it is reached by path.
        socket_path = root / cid / "ctl"
        probe = ("import socket,sys; s=socket.socket(socket.AF_UNIX); "
                 f"s.connect({str(socket_path)!r}); s.sendall(b'{{\"op\":\"kill\",\"signal\":9}}\\n');"
                 "print(s.recv(100))")
        other.account.run(["python3", "-c", probe])
        assert other.account.run(["podman", "ps", "-aq"]).stdout.strip() == b""
        assert podman_ok(any_user, "inspect", "-f", "{{.State.Status}}", cid) == "running"
    finally:
        podman(any_user, "rm", "-f", "-t", "0", cid)


def test_a_user_without_subordinate_ids_is_told_what_to_fix(slurm_user: Runtime,
                                                            tmp_path: Path) -> None:
    """The node makes podman's mapping again with newuidmap, which checks /etc/subuid: a
    range taken away after podman set up its namespace is refused there, in one line."""
    cid = podman_ok(slurm_user, "create", IMAGE, "true")
    saved = Path("/etc/subuid").read_text()
    try:
        Path("/etc/subuid").write_text("".join(
            line for line in saved.splitlines(keepends=True) if not line.startswith(f"{USER}:")))
        done = podman(slurm_user, "start", "-a", cid)
        said = done.stderr.decode()
        assert done.returncode != 0
        assert "/etc/subuid" in said, said
    finally:
        Path("/etc/subuid").write_text(saved)
        podman(slurm_user, "rm", "-f", cid)


def test_a_runtime_dir_others_may_pass_through_is_used(slurm_user: Runtime) -> None:
    """podman 4 makes its user's runtime dir 0711 once a container has a uid map
    (--uidmap): nobody else may list or write it, and scrun keeps using it (it refused
    every container from then on)."""
    runtime_dir = slurm_user.account.runtime_dir
    mode = runtime_dir.stat().st_mode & 0o7777
    try:
        runtime_dir.chmod(0o711)
        assert podman_ok(slurm_user, "run", "--rm", IMAGE, "echo", "next") == "next"
    finally:
        runtime_dir.chmod(mode)


def test_an_unusable_runtime_dir_is_one_line_naming_the_fix(local_user: Runtime) -> None:
    """XDG_RUNTIME_DIR that is not the user's alone (here /tmp) is refused before
    anything is made."""
    done = local_user.scrun("list", env={"XDG_RUNTIME_DIR": "/tmp"})
    said = done.stderr.strip()
    assert done.returncode != 0
    assert len(said.splitlines()) == 1 and "XDG_RUNTIME_DIR=/tmp" in said, said
    assert "mode 0700" in said
    assert not Path("/tmp/pyscrun").exists()


@pytest.fixture
def socketless_dir(local_user: Runtime, tmp_path: Path) -> Iterator[Path]:
    """A directory of the user's alone on a file system that holds no sockets: exFAT,
    through FUSE, on a loop device."""
    for binary, package in (("losetup", "mount"), ("mkfs.exfat", "exfatprogs"),
                            ("mount.exfat-fuse", "exfat-fuse")):
        require(binary, package)
    image = tmp_path / "exfat.img"
    with image.open("wb") as made:
        made.truncate(8 << 20)
    subprocess.run(["mkfs.exfat", str(image)], check=True, capture_output=True)
    device = subprocess.run(["losetup", "--find", "--show", str(image)], check=True,
                            capture_output=True, text=True).stdout.strip()
    mountpoint = local_user.base / "exfat"
    mountpoint.mkdir()
    try:
        subprocess.run(["mount.exfat-fuse", "-o",
                        f"uid={local_user.account.uid},gid={local_user.account.gid},umask=077",
                        device, str(mountpoint)], check=True, capture_output=True)
        try:
            yield mountpoint
        finally:
            subprocess.run(["umount", str(mountpoint)], check=True)
    finally:
        subprocess.run(["losetup", "-d", device], check=True)


def test_a_runtime_dir_that_cannot_hold_sockets_is_one_line_naming_the_fix(
        local_user: Runtime, socketless_dir: Path) -> None:
    """create fails in one line that names the directory and the fix, and leaves no
    spool dir, anchor or container behind."""
    bundle = make_bundle(local_user.base, ["true"])
    done = local_user.scrun("create", "--bundle", str(bundle), "c1",
                            env={"XDG_RUNTIME_DIR": str(socketless_dir)})
    said = done.stderr.strip()
    assert done.returncode != 0
    assert len(said.splitlines()) == 1, said
    assert f"cannot make a socket in {socketless_dir}/pyscrun/c1" in said, said
    assert "cannot hold Unix sockets" in said and "XDG_RUNTIME_DIR" in said, said
    assert list((socketless_dir / "pyscrun").iterdir()) == []


def test_man_page_rsync_example_for_an_ordinary_user(slurm_user: Runtime) -> None:
    """The man page's scrun.lua, its scratch path on the cluster file system: it stages
    the rootfs and config.json as the user and maps the user onto the container's root
    (the runtime then makes that namespace itself, as under Slurm's scrun)."""
    from tests.unit.test_lua_example import with_scratch_path

    scratch = slurm_user.base / "scratch"
    (slurm_user.conf_dir / "scrun.lua").write_text(with_scratch_path(scratch))
    said = podman_ok(slurm_user, "run", "--rm", "--uts=host", IMAGE, "sh", "-c",
                                "echo staged on $(hostname) as $(id -u); "
                                "awk '$5 == \"/\" {print $4}' /proc/self/mountinfo")
    first, root_source = said.splitlines()
    assert first.startswith("staged on n") and first.endswith("as 0"), said
    assert f"/{slurm_user.account.uid}/slurm/scrun/" in root_source, root_source
    stage_root = scratch / str(slurm_user.account.uid) / "slurm" / "scrun"
    assert not stage_root.exists() or list(stage_root.iterdir()) == []


def test_srun_cr_tells_an_ordinary_user_why_not(slurm_user: Runtime) -> None:
    """srun_cr runs each task ready for CRIU, which needs root: one line, and no job."""
    srun_cr = str(Path(SCRUN).parent / "srun_cr")
    done = slurm_user.account.run([srun_cr, "-N2", "-n2", "hostname"],
                                  env={"SLURM_CONF": str(slurm_user.slurm_conf)})
    said = done.stderr.decode().strip()
    assert done.returncode == 1
    assert said.splitlines() == [said] and "needs root" in said and "srun" in said, said
    assert done.stdout == b""


def test_a_launcher_that_may_not_make_the_tasks_pid_namespace_says_so_in_one_line() -> None:
    """As srun --uid would start it: the task's pid namespace needs root."""
    from pyscrun.srun_cr.wrapper import launcher_command

    done = account(USER).run([*launcher_command(), "--", "true"], env={"SLURM_PROCID": "1"})
    assert done.returncode == 1
    said = done.stderr.decode()
    assert said.startswith("srun_cr: error: task 1: cannot run the task: "), said
    assert said.endswith("Operation not permitted\n") and said.count("\n") == 1, said
