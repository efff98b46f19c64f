"""Checkpoint, restore and migration of containers through podman's own commands,
across Slurm jobs and nodes, with real runc and CRIU.

As root: CRIU needs it (an ordinary user's checkpoint is refused in one line, tested
in test_ordinary_users.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.integration.harness import (
    IMAGE,
    REPO,
    Cluster,
    LeakCheck,
    Runtime,
    machine_path,
    machines,
    make_bundle,
    make_slurm_runtime,
    podman,
    process_ended,
    require,
    slurm,
    wait_for,
)

COUNTER = "i=0; while true; do i=$((i+1)); echo \"$i $(hostname)\"; sleep 0.2; done"


@pytest.fixture
def runtime(cluster: Cluster, tmp_path: Path) -> Iterator[Runtime]:
    require("criu", "criu (installed by scripts/criu-setup.sh through `make setup`)")
    conf = cluster.up(3)
    made = make_slurm_runtime(tmp_path, conf)
    leaks = LeakCheck(made, str(tmp_path), conf)
    yield made
    subprocess.run(["podman", "rm", "-f", "-a", "-t", "0"], capture_output=True, check=False,
                   env=_env())
    leaks.check()


def _env() -> dict[str, str]:
    from tests.integration.accounts import podman_env

    return podman_env()


def _ok(runtime: Runtime, *args: str) -> str:
    done = podman(runtime, *args)
    assert done.returncode == 0, f"podman {' '.join(args)}: {done.stderr.decode()}"
    return done.stdout.decode()


def _counts(runtime: Runtime, name: str) -> list[tuple[int, str]]:
    logs = podman(runtime, "logs", name).stdout.decode()
    return [(int(m.group(1)), m.group(2)) for m in re.finditer(r"^(\d+) (\S+)$", logs, re.M)]


def _wait_count(runtime: Runtime, name: str, at_least: int) -> int:
    wait_for(lambda: (_counts(runtime, name) or [(0, "")])[-1][0] >= at_least, 30,
             f"{name} to count to {at_least}")
    return _counts(runtime, name)[-1][0]


def _job(runtime: Runtime) -> tuple[str, str]:
    """(job id, node) of the one running container job."""
    lines = slurm(runtime.slurm_conf.resolve(), "squeue", "-h", "-o", "%i %N").stdout.split("\n")
    jobs = [line.split() for line in lines if line.strip()]
    assert len(jobs) == 1, jobs
    return jobs[0][0], jobs[0][1]


def _assert_continues(counts: list[int], before: int) -> None:
    """The count went on from `before` without ever starting again from zero."""
    assert counts == sorted(counts), f"the count restarted: {counts}"
    assert max(counts) > before + 1, counts


def _export_and_import(runtime: Runtime, tmp_path: Path, name: str) -> int:
    """Checkpoint name to an archive, remove it, restore it as name+'r' (in a new job)
    and wait until that counts on; the count when it was checkpointed."""
    archive = tmp_path / "ck.tar.zst"
    _ok(runtime, "container", "checkpoint", "--export", str(archive), name)
    before = _counts(runtime, name)[-1][0]
    _ok(runtime, "rm", name)
    _ok(runtime, "container", "restore", "--import", str(archive), "--name", name + "r")
    _wait_count(runtime, name + "r", before + 5)
    return before


def test_export_rm_import_continues_in_a_new_job(runtime: Runtime, tmp_path: Path) -> None:
    name = f"c{uuid.uuid4().hex[:8]}"
    _ok(runtime, "run", "-d", "--uts=host", "--name", name, IMAGE, "sh", "-c", COUNTER)
    _wait_count(runtime, name, 5)
    old_job, _ = _job(runtime)
    before = _export_and_import(runtime, tmp_path, name)
    new_job, _ = _job(runtime)
    assert new_job != old_job
    _assert_continues([c for c, _ in _counts(runtime, name + "r")], before)


def test_migration_to_another_node(runtime: Runtime, tmp_path: Path) -> None:
    conf = runtime.slurm_conf.resolve()
    name = f"m{uuid.uuid4().hex[:8]}"
    _ok(runtime, "run", "-d", "--uts=host", "--name", name, IMAGE, "sh", "-c", COUNTER)
    _wait_count(runtime, name, 3)
    _, old_node = _job(runtime)
    assert _counts(runtime, name)[-1][1] == old_node
    archive = tmp_path / "ck.tar.zst"
    _ok(runtime, "container", "checkpoint", "--export", str(archive), name)
    before = _counts(runtime, name)[-1][0]
    _ok(runtime, "rm", name)
    drained = slurm(conf, "scontrol", "update", f"NodeName={old_node}", "State=DRAIN",
                    "Reason=migration-test")
    assert drained.returncode == 0, drained.stderr
    try:
        _ok(runtime, "container", "restore", "--import", str(archive), "--name", name + "r")
        _wait_count(runtime, name + "r", before + 5)
        _, new_node = _job(runtime)
        assert new_node != old_node
        # The restored log holds the original's lines, imported with it, then the new
        # node's. The original's last line may reach its log only after the checkpoint
        # returned (conmon still reading its pipe), so `before` is a lower bound.
        counts = _counts(runtime, name + "r")
        hosts = [host for _, host in counts]
        moved = hosts.index(new_node)
        assert set(hosts[:moved]) <= {old_node} and set(hosts[moved:]) == {new_node}, counts
        _assert_continues([c for c, _ in counts], before)
    finally:
        slurm(conf, "scontrol", "update", f"NodeName={old_node}", "State=RESUME")


def test_leave_running_gives_a_clone(runtime: Runtime, tmp_path: Path) -> None:
    name = f"l{uuid.uuid4().hex[:8]}"
    _ok(runtime, "run", "-d", "--name", name, IMAGE, "sh", "-c", COUNTER)
    _wait_count(runtime, name, 3)
    archive = tmp_path / "ck.tar.zst"
    _ok(runtime, "container", "checkpoint", "--leave-running", "--export", str(archive), name)
    before = _counts(runtime, name)[-1][0]
    _ok(runtime, "container", "restore", "--import", str(archive), "--name", name + "c")
    _wait_count(runtime, name + "c", before + 3)
    _wait_count(runtime, name, before + 3)
    states = _ok(runtime, "inspect", "--format", "{{.State.Status}}", name, name + "c")
    assert states.split() == ["running", "running"]
    jobs = slurm(runtime.slurm_conf.resolve(), "squeue", "-h").stdout.strip().splitlines()
    assert len(jobs) == 2


def test_memory_survives_with_its_checksum(runtime: Runtime, tmp_path: Path) -> None:
    gcc = require("gcc", "gcc and libc6-dev")
    memhog = tmp_path / "memhog"
    subprocess.run([gcc, "-O2", "-static", "-o", str(memhog),
                    str(REPO / "tests/integration/data/memhog.c")], check=True)
    name = f"h{uuid.uuid4().hex[:8]}"
    _ok(runtime, "run", "-d", "--name", name, "-v", f"{memhog}:/memhog:ro", IMAGE,
        "/memhog", "512")

    def sums() -> list[str]:
        return re.findall(r"sum (\w+)", podman(runtime, "logs", name).stdout.decode())

    wait_for(lambda: len(sums()) >= 2, 120, "the memory to be written")
    before = sums()[-1]
    archive = tmp_path / "ck.tar.zst"
    _ok(runtime, "container", "checkpoint", "--export", str(archive), name)
    _ok(runtime, "rm", name)
    _ok(runtime, "container", "restore", "--import", str(archive), "--name", name)
    count = len(sums())
    wait_for(lambda: len(sums()) >= count + 2, 120, "the restored container to report")
    assert set(sums()) == {before}


def test_three_cycles_keep_counting(runtime: Runtime) -> None:
    name = f"t{uuid.uuid4().hex[:8]}"
    _ok(runtime, "run", "-d", "--name", name, IMAGE, "sh", "-c", COUNTER)
    last = _wait_count(runtime, name, 3)
    for _ in range(3):
        _ok(runtime, "container", "checkpoint", name)
        checkpointed = _counts(runtime, name)[-1][0]
        assert checkpointed >= last
        _ok(runtime, "container", "restore", name)
        last = _wait_count(runtime, name, checkpointed + 3)
    _assert_continues([c for c, _ in _counts(runtime, name)], 3)


def test_multi_task_container_is_checkpointed_whole(runtime: Runtime, tmp_path: Path) -> None:
    name = f"n{uuid.uuid4().hex[:8]}"
    script = "i=0; while true; do i=$((i+1)); echo \"$i task$SLURM_PROCID\"; sleep 0.2; done"
    _ok(runtime, "run", "-d", "--name", name, "-e", "SCRUN_NTASKS=2", "-e",
        "SCRUN_JOB_NUM_NODES=2", IMAGE, "sh", "-c", script)
    wait_for(lambda: {t for c, t in _counts(runtime, name) if c >= 3} == {"task0", "task1"},
             30, "both tasks to count")
    archive = tmp_path / "ck.tar.zst"
    _ok(runtime, "container", "checkpoint", "--export", str(archive), name)
    before = {t: max(c for c, tt in _counts(runtime, name) if tt == t) for t in ("task0", "task1")}
    _ok(runtime, "rm", name)
    _ok(runtime, "container", "restore", "--import", str(archive), "--name", name + "r")

    def progressed() -> bool:
        counts = _counts(runtime, name + "r")
        return all(max((c for c, tt in counts if tt == t), default=0) >= before[t] + 3
                   for t in before)

    wait_for(progressed, 30, "both restored tasks to count on")
    for task, last in before.items():
        _assert_continues([c for c, t in _counts(runtime, name + "r") if t == task], last)


def test_a_checkpoint_that_stops_tasks_leaves_nothing_run_after_their_images(
        runtime: Runtime, tmp_path: Path) -> None:
    """Each task is paused before its dump and ended only once every image is safe: no
    task runs past its images, so after a restore every count goes on from where it
    stopped, none said twice (dumped left running and ended at the end, a task counted
    on while the others were dumped, and said those numbers again once restored)."""
    name = f"q{uuid.uuid4().hex[:8]}"
    # Task 1 holds 64 MiB: its dump takes a while, during which task 0, dumped, waits.
    script = ("[ $SLURM_PROCID = 1 ] && held=$(head -c 67108864 /dev/zero | tr '\\0' x); "
              "i=0; while true; do i=$((i+1)); echo \"$i task$SLURM_PROCID\"; sleep 0.01; done")
    _ok(runtime, "run", "-d", "--name", name, "-e", "SCRUN_NTASKS=2", IMAGE, "sh", "-c", script)
    wait_for(lambda: {t for c, t in _counts(runtime, name) if c >= 20} == {"task0", "task1"},
             30, "both tasks to count")
    archive = tmp_path / "ck.tar.zst"
    _ok(runtime, "container", "checkpoint", "--export", str(archive), name)
    before = _counts(runtime, name)
    _ok(runtime, "rm", name)
    _ok(runtime, "container", "restore", "--import", str(archive), "--name", name + "r")
    last = {t: max(c for c, tt in before if tt == t) for t in ("task0", "task1")}
    wait_for(lambda: all(max((c for c, tt in _counts(runtime, name + "r") if tt == t),
                             default=0) >= last[t] + 20 for t in last),
             30, "both restored tasks to count on")
    # The restored container's log begins with the checkpointed one's (the archive
    # carries it).
    after = _counts(runtime, name + "r")
    for task, stopped in last.items():
        counts = [c for c, t in after if t == task]
        said_twice = sorted({c for c in counts if counts.count(c) > 1})
        assert not said_twice, f"{task} ran past its images (stopped at {stopped}): {said_twice}"
        assert counts == list(range(1, len(counts) + 1)), f"{task} skipped a count"


def test_a_checkpoint_whose_images_cannot_be_kept_leaves_the_container_running(
        runtime: Runtime, tmp_path: Path) -> None:
    """The login host's image path is full (a tmpfs of 64 KiB that no node sees: the
    images come over the channel): the checkpoint fails in one line and the container,
    paused for its dump, runs on (CRIU had ended it, and its images went: both lost)."""
    small = Path(f"/tmp/pyscrun-small-{uuid.uuid4().hex[:8]}")
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)], check=True)
    try:
        bundle = make_bundle(tmp_path, ["sh", "-c", COUNTER])
        output = tmp_path / "output"
        with output.open("w") as out:
            created = subprocess.run([str(runtime.wrapper), "create", "-b", str(bundle), "full0"],
                                     stdout=out, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, check=False)
        assert created.returncode == 0

        def count() -> int:
            lines = output.read_text().split("\n")[:-1]  # the last one may be half written
            return int(lines[-1].split()[0]) if lines else 0

        _scrun_ok(runtime, "start", "full0")
        wait_for(lambda: count() >= 3, 30, "the container to count")
        done = runtime.scrun("checkpoint", "--image-path", str(small / "img"), "full0")
        assert done.returncode != 0
        assert "No space left on device" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert _status(runtime, "full0") == "running"
        assert not list((small / "img").glob("*.img"))
        failed_at = count()
        wait_for(lambda: count() >= failed_at + 3, 30, "the container to count on")
        _scrun_ok(runtime, "delete", "--force", "full0")
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)
        small.rmdir()


# -- failures, through scrun's own command line -------------------------------------------

def _scrun_ok(runtime: Runtime, *args: str, env: dict[str, str] | None = None) -> str:
    done = runtime.scrun(*args, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _status(runtime: Runtime, container_id: str) -> str:
    return str(json.loads(runtime.scrun("state", container_id).stdout)["status"])


def test_checkpoint_of_a_stopped_container_fails(runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["true"])
    _scrun_ok(runtime, "create", "-b", str(bundle), "s1")
    _scrun_ok(runtime, "start", "s1")
    wait_for(lambda: _status(runtime, "s1") == "stopped", 30, "the container to stop")
    done = runtime.scrun("checkpoint", "--image-path", str(tmp_path / "img"), "s1")
    assert done.returncode != 0
    assert "cannot checkpoint a container that is stopped" in done.stderr
    _scrun_ok(runtime, "delete", "s1")


def _failed_checkpoint_leaves_it_running(runtime: Runtime, tmp_path: Path,
                                         stdout: int | IO[str]) -> None:
    bundle = make_bundle(tmp_path, ["sh", "-c", "while true; do echo tick; sleep 0.2; done"])
    created = subprocess.run([str(runtime.wrapper), "create", "-b", str(bundle), "f1"],
                             stdout=stdout, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL, check=False)
    assert created.returncode == 0
    _scrun_ok(runtime, "start", "f1")
    time.sleep(1)
    done = runtime.scrun("checkpoint", "--image-path", str(tmp_path / "img"), "f1")
    assert done.returncode != 0
    assert "checkpoint failed" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert _status(runtime, "f1") == "running"
    assert not list((tmp_path / "img").glob("*.img"))
    _scrun_ok(runtime, "delete", "--force", "f1")


def test_checkpoint_without_criu_fails_cleanly(runtime: Runtime, tmp_path: Path) -> None:
    runtime.write_conf(
        "pyscrun.conf",
        'RunTimeCheckpoint="runc --criu /nonexistent/criu checkpoint %@ %n.%u.%j.%s.%t"\n')
    _failed_checkpoint_leaves_it_running(runtime, tmp_path, subprocess.DEVNULL)


def test_checkpoint_that_criu_refuses_fails_cleanly(runtime: Runtime) -> None:
    name = f"e{uuid.uuid4().hex[:8]}"
    # An established TCP connection: CRIU refuses it without --tcp-established.
    _ok(runtime, "run", "-d", "--name", name, IMAGE, "sh", "-c",
        "sleep 1000 | nc -l -p 7777 & sleep 0.3; sleep 1000 | nc 127.0.0.1 7777")
    time.sleep(1)
    done = podman(runtime, "container", "checkpoint", name)
    assert done.returncode != 0
    assert b"checkpoint failed: task 0: RunTimeCheckpoint failed" in done.stderr
    # CRIU's own reason, from its log (runc says only where that is).
    assert b"; CRIU: inet: Connected TCP socket, consider using --tcp-established" \
        in done.stderr, done.stderr
    assert _ok(runtime, "inspect", "--format", "{{.State.Status}}", name).strip() == "running"


def test_restore_from_missing_or_corrupt_images(runtime: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["sh", "-c", "while true; do sleep 0.2; done"])
    missing = runtime.scrun("restore", "-b", str(bundle), "--image-path",
                            str(tmp_path / "nothing"), "r1")
    assert missing.returncode != 0
    assert "no checkpoint to restore" in missing.stderr
    _scrun_ok(runtime, "create", "-b", str(bundle), "r0")
    _scrun_ok(runtime, "start", "r0")
    time.sleep(0.5)
    pid = json.loads(_scrun_ok(runtime, "state", "r0"))["pid"]
    images = tmp_path / "img"
    _scrun_ok(runtime, "checkpoint", "--image-path", str(images), "r0")
    # As with runc: once checkpoint returns, the container has stopped, and so has the
    # pid conmon waits on (podman removes conmon's files next, which conmon writes then).
    assert process_ended(pid), f"pid {pid} still runs after checkpoint returned"
    assert json.loads(_scrun_ok(runtime, "state", "r0"))["status"] == "stopped"
    _scrun_ok(runtime, "delete", "r0")
    for core in images.glob("core-*.img"):
        core.write_bytes(b"garbage")
    corrupt = runtime.scrun("restore", "-b", str(bundle), "--image-path", str(images), "r1")
    assert corrupt.returncode != 0
    assert "restore failed: RunTimeRestore exited 1" in corrupt.stderr
    assert runtime.scrun("state", "r1").returncode != 0
    shutil.rmtree(images)


def _checkpointed_and_deleted(runtime: Runtime, bundle: Path, container_id: str,
                              images: Path) -> Path:
    """Images of a container of bundle, run for a second through scrun's own verbs,
    checkpointed into images and deleted."""
    _scrun_ok(runtime, "create", "-b", str(bundle), container_id)
    _scrun_ok(runtime, "start", container_id)
    time.sleep(1)
    _scrun_ok(runtime, "checkpoint", "--image-path", str(images), container_id)
    _scrun_ok(runtime, "delete", container_id)
    return images


def test_a_restore_whose_one_task_fails_fails_whole_and_leaves_nothing(
        runtime: Runtime, tmp_path: Path) -> None:
    """Two tasks, one of whose images are broken: the restore fails at once, naming the
    task, and the task that came back is not left running (the fixture's leak check)."""
    bundle = make_bundle(tmp_path, ["sh", "-c", COUNTER])
    tasks = {"SCRUN_NTASKS": "2"}
    _scrun_ok(runtime, "create", "-b", str(bundle), "mt0", env=tasks)
    _scrun_ok(runtime, "start", "mt0")
    time.sleep(1)
    images = tmp_path / "img"
    _scrun_ok(runtime, "checkpoint", "--image-path", str(images), "mt0")
    _scrun_ok(runtime, "delete", "mt0")
    broken = list((images / "task-1").glob("core-*.img"))
    assert broken, sorted(str(p.relative_to(images)) for p in images.rglob("*"))
    for core in broken:
        core.write_bytes(b"garbage")
    started = time.monotonic()
    done = runtime.scrun("restore", "-b", str(bundle), "--image-path", str(images), "mt1",
                         env=tasks, timeout=120)
    assert done.returncode != 0
    assert time.monotonic() - started < 30, "the restore waited for a task that had failed"
    # After what runc and srun said of the task: which task failed, and why.
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("scrun: error: restore failed: task 1: RunTimeRestore exited 1; "
                           "CRIU: Head magic doesn't match"), done.stderr
    assert runtime.scrun("state", "mt1").returncode != 0
    shutil.rmtree(images)


def test_restore_from_a_read_only_image_path(runtime: Runtime, tmp_path: Path) -> None:
    """Images that can be read but not written beside (a read-only share) restore, as
    with runc given a --work-path elsewhere: the nodes are sent them."""
    bundle = make_bundle(tmp_path, ["sh", "-c", COUNTER])
    images = _checkpointed_and_deleted(runtime, bundle, "ro0", tmp_path / "img")
    subprocess.run(["mount", "--bind", str(images), str(images)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(images)], check=True)
        done = runtime.scrun("restore", "--image-path", str(images), "--work-path",
                             str(tmp_path / "work"), "-b", str(bundle), "ro1")
        assert done.returncode == 0, done.stderr
        assert _status(runtime, "ro1") == "running"
        # What the node was sent is not kept (its /run is memory) once CRIU let go.
        fetched = [str(found) for machine in machines(runtime.slurm_conf)
                   for found in machine_path(machine, str(runtime.account.tasks_dir_on(machine)))
                   .glob("*/task-*/checkpoint")]
        assert fetched == []
        _scrun_ok(runtime, "delete", "--force", "ro1")
    finally:
        subprocess.run(["umount", str(images)], check=True)
    assert sorted(p.name for p in images.iterdir() if p.name.startswith(".")) == []


# Slurm's container guide gives runc a --root of its own in every oci.conf example.
OWN_ROOT_OCI_CONF = "".join(
    f'{directive}="runc --root /run/pyscrun-own-root {rest}"\n' for directive, rest in (
        ("RunTimeQuery", "state %n.%u.%j.%s.%t"), ("RunTimeKill", "kill -a %n.%u.%j.%s.%t"),
        ("RunTimeDelete", "delete --force %n.%u.%j.%s.%t"),
        ("RunTimeRun", "run %n.%u.%j.%s.%t -b %b")))


def test_a_runtime_with_a_root_of_its_own_is_checkpointed_and_restored(
        runtime: Runtime, tmp_path: Path) -> None:
    """With no pyscrun.conf, checkpoint and restore call the runtime as oci.conf does."""
    runtime.write_conf("oci.conf", OWN_ROOT_OCI_CONF)
    name = f"o{uuid.uuid4().hex[:8]}"
    _ok(runtime, "run", "-d", "--name", name, IMAGE, "sh", "-c", COUNTER)
    _wait_count(runtime, name, 5)
    before = _export_and_import(runtime, tmp_path, name)
    _assert_continues([c for c, _ in _counts(runtime, name + "r")], before)


def test_a_container_deleted_as_soon_as_it_is_restored_leaves_nothing(
        runtime: Runtime, tmp_path: Path) -> None:
    """restore returns once the container runs again, and a `delete --force` right
    after (podman's `restore` then `rm -f`) ends it at once, every time: the kill no
    longer reaches tasks CRIU still holds (which left `runc restore` hung for the
    agent to kill after 5 s, its criu-root mount behind and the container's runc
    state undeletable)."""
    bundle = make_bundle(tmp_path, ["sh", "-c", "while true; do sleep 0.2; done"])
    images = _checkpointed_and_deleted(runtime, bundle, "orig", tmp_path / "img")
    for attempt in range(4):
        name = f"again{attempt}"
        _scrun_ok(runtime, "restore", "--image-path", str(images), "-b", str(bundle), name)
        started = time.monotonic()
        _scrun_ok(runtime, "delete", "--force", name)
        took = time.monotonic() - started
        assert took < 4, f"delete --force of a restored container took {took:.1f} s"


def test_the_global_criu_flag_names_the_criu_that_dumps_and_restores(runtime: Runtime,
                                                                     tmp_path: Path) -> None:
    real = require("criu", "criu (installed by scripts/criu-setup.sh through `make setup`)")
    used = tmp_path / "criu-used"
    criu = tmp_path / "my-criu"
    criu.write_text(f"#!/bin/sh\necho \"$1\" >> {used}\nexec {real} \"$@\"\n")
    criu.chmod(0o755)
    refused = runtime.scrun("--criu", str(tmp_path / "none"), "checkpoint", "x")
    assert refused.returncode == 2 and "not an executable file" in refused.stderr
    bundle = make_bundle(tmp_path, ["sh", "-c", "while true; do sleep 0.2; done"])
    _scrun_ok(runtime, "create", "-b", str(bundle), "cr1")
    _scrun_ok(runtime, "start", "cr1")
    time.sleep(1)
    images = tmp_path / "img"
    _scrun_ok(runtime, "--criu", str(criu), "checkpoint", "--image-path", str(images), "cr1")
    # runc runs criu as a service (`criu swrk`), once for the dump, once for the restore.
    dumped = len(used.read_text().splitlines())
    assert dumped >= 1
    _scrun_ok(runtime, "delete", "cr1")
    _scrun_ok(runtime, "--criu", str(criu), "restore", "--image-path", str(images),
              "-b", str(bundle), "cr2")
    assert len(used.read_text().splitlines()) > dumped
    assert _status(runtime, "cr2") == "running"
    _scrun_ok(runtime, "delete", "--force", "cr2")
