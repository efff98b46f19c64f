"""Who the caller is behind a user namespace's map, and which configs map their own users."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from pyscrun import identity, linux
from pyscrun.node import userns

# Rootless podman's namespace: 0 is the user, 1.. the user's subordinate ids.
PODMAN_MAP = "         0       1001          1\n         1     100000      65536\n"


def test_ids_map_through_the_namespace(tmp_path: Path) -> None:
    uid_map = tmp_path / "uid_map"
    uid_map.write_text(PODMAN_MAP)
    assert identity._outside(str(uid_map), 0) == 1001
    assert identity._outside(str(uid_map), 1) == 100000
    assert identity._outside(str(uid_map), 65536) == 165535
    # Outside every range (or an unreadable map): the id as it is.
    assert identity._outside(str(uid_map), 70000) == 70000
    assert identity._outside(str(tmp_path / "missing"), 5) == 5


def test_outside_any_namespace_the_ids_are_the_processs_own() -> None:
    assert identity.real_uid() == os.getuid()
    assert identity.is_root() == (os.getuid() == 0)
    assert identity.namespace_maps() == ""


def test_a_runtime_dir_must_be_the_users_alone(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    passable = tmp_path / "passable"
    passable.mkdir(mode=0o711)
    listable = tmp_path / "listable"
    listable.mkdir(mode=0o740)
    link = tmp_path / "link"
    link.symlink_to(private)
    assert identity.private_dir(str(private))
    assert identity.private_dir(str(passable))
    assert not identity.private_dir(str(listable))
    assert not identity.private_dir(str(shared))
    assert not identity.private_dir(str(link))
    assert not identity.private_dir(str(tmp_path / "missing"))
    assert not identity.private_dir("")


def test_no_namespace_is_made_where_none_is_asked_for(tmp_path: Path) -> None:
    before = os.readlink("/proc/self/ns/user")
    userns.Entering({"PYSCRUN_AGENT_BUNDLE": str(tmp_path)}).finish()
    userns.Entering({userns.ENV: "", "PYSCRUN_AGENT_BUNDLE": str(tmp_path)}).finish()
    assert os.readlink("/proc/self/ns/user") == before


def test_slurm_commands_run_as_the_real_user_from_podmans_namespace() -> None:
    """In a namespace mapped as rootless podman maps its user's (0 is uid 1001), a
    command run through as_real_user has the real ids as its own; outside one the
    command is left as it is."""
    assert identity.as_real_user(["id", "-u"]) == ["id", "-u"]
    entered, go = os.pipe(), os.pipe()
    said_read, said_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            # The user's own ids, as podman's are: the map makes them 0 inside.
            os.setgroups([])
            os.setgid(1002)
            os.setuid(1001)
            linux.unshare(linux.CLONE_NEWUSER)
            os.write(entered[1], b".")
            os.read(go[0], 1)
            ids = subprocess.run(identity.as_real_user(["sh", "-c", "id -u; id -g"]), capture_output=True,
                                 text=True, check=False)
            os.write(said_write, f"{os.getuid()} {os.getgid()} {ids.stdout} {ids.stderr}".encode())
        finally:
            os._exit(0)
    os.read(entered[0], 1)
    # As newuidmap writes rootless podman's maps: from outside, for the process.
    Path(f"/proc/{pid}/uid_map").write_text("0 1001 1\n")
    Path(f"/proc/{pid}/gid_map").write_text("0 1002 1\n")
    os.write(go[1], b".")
    os.waitpid(pid, 0)
    os.close(said_write)
    said = os.read(said_read, 4096).decode()
    assert said.split() == ["0", "0", "1001", "1002"], said
