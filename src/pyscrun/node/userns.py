"""The user namespace of rootless podman, made again on the compute node.

Rootless podman ran scrun as uid 0 of a user namespace mapping 0 to the user and
1..65536 to the user's subordinate ids; the container's rootfs is owned through that
mapping. The agent gets the login side's maps (PYSCRUN_AGENT_USERNS) and, before
anything else, enters a namespace with the same maps, as podman does (`newuidmap` and
`newgidmap`, which check /etc/subuid and /etc/subgid), so the runtime runs the
container there just as podman's runtime would have on the login host.
"""

from __future__ import annotations

import os
import subprocess

from pyscrun import identity, jsonc
from pyscrun.errors import ScrunError

ENV = "PYSCRUN_AGENT_USERNS"
_TOOLS = ("newuidmap", "newgidmap")


def enter_from(env: dict[str, str]) -> None:
    """Enter the namespace env asks for; nothing where it asks for none."""
    wanted = env.get(ENV, "")
    if not wanted or _maps_its_own_users(env.get("PYSCRUN_AGENT_BUNDLE", "")):
        return
    if identity.namespace_maps() == wanted:
        return  # already there (an agent forked inside it)
    uid_map, _, gid_map = wanted.partition(";")
    _enter(uid_map, gid_map)


def _maps_its_own_users(bundle: str) -> bool:
    """A config.json with a user namespace and uid mappings of its own (scrun.lua may
    write one, as the man page's example does) says how to map: the runtime then runs
    as the user, as under Slurm's scrun, and makes that namespace itself."""
    try:
        with open(os.path.join(bundle, "config.json"), "rb") as source:
            config = jsonc.loads(source.read())
        linux = config["linux"]
        return bool(linux.get("uidMappings")) and any(
            entry.get("type") == "user" for entry in linux.get("namespaces") or [])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _enter(uid_map: str, gid_map: str) -> None:
    from pyscrun import linux

    go_read, go_write = os.pipe()
    said_read, said_write = os.pipe()
    target = os.getpid()
    helper = os.fork()
    if helper == 0:
        code = 1
        try:
            os.close(go_write)
            os.close(said_read)
            os.read(go_read, 1)  # the agent has made its namespace
            code = _write_maps(target, uid_map, gid_map, said_write)
        finally:
            os._exit(code)
    os.close(go_read)
    os.close(said_write)
    try:
        linux.unshare(linux.CLONE_NEWUSER)
    finally:
        os.write(go_write, b"x")
        os.close(go_write)
        _, status = os.waitpid(helper, 0)
        with os.fdopen(said_read, "rb") as said:
            why = said.read().decode(errors="replace").strip()
    if status != 0:
        raise ScrunError(f"cannot give the container the user's subordinate ids on this node: "
                         f"{why or 'newuidmap failed'} (an ordinary user needs ranges in "
                         f"/etc/subuid and /etc/subgid, and package uidmap)")


def _write_maps(target: int, uid_map: str, gid_map: str, said_fd: int) -> int:
    # Both at once: each is a setuid program of its own, and the agent waits on them.
    running: list[subprocess.Popen[bytes]] = []
    why = b""
    for tool, wanted in zip(_TOOLS, (uid_map, gid_map), strict=True):
        fields = [field for triple in wanted.split(",") for field in triple.split()]
        try:
            running.append(subprocess.Popen(
                [tool, str(target), *fields], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        except FileNotFoundError:
            why = f"{tool} not found".encode()
            break
    for process in running:
        said, _ = process.communicate()
        if process.returncode != 0 and not why:
            why = said.strip()[-400:] or b"failed"
    if why:
        os.write(said_fd, why)
    return 1 if why else 0
