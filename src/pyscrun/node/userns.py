"""The user namespace of rootless podman, made again on the compute node.

Rootless podman ran scrun as uid 0 of a user namespace mapping 0 to the user and
1..65536 to the user's subordinate ids; the container's rootfs is owned through that
mapping. The agent gets the login side's maps (PYSCRUN_AGENT_USERNS) and, before
anything else, enters a namespace with the same maps, as podman does (`newuidmap` and
`newgidmap`, which check /etc/subuid and /etc/subgid), so the runtime runs the
container there just as podman's runtime would have on the login host. With it comes
a mount namespace of its own, as podman's runtime has one: runc may then guard its
program with a read-only bind mount of it rather than copy it (node/sealed_program.py).
"""

from __future__ import annotations

import os

from pyscrun import identity
from pyscrun.errors import ScrunError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

ENV = "PYSCRUN_AGENT_USERNS"
_TOOLS = ("newuidmap", "newgidmap")


class Entering:
    """The namespace env asks for, being entered: this process has made it, and a
    helper runs newuidmap and newgidmap meanwhile (while the agent loads its modules:
    node/__main__.py; unmapped until then, this process reads only what any user may).
    finish() waits for the maps, and raises what went wrong (the agent reports it).
    Nothing to wait for where none is asked for, or this process is in it already (an
    agent forked inside it)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.helper = 0  # the helper writing the maps of the namespace being made
        self.said_fd = -1
        self.error: OSError | None = None
        wanted = env.get(ENV, "")
        if not wanted:
            return
        try:
            if identity.namespace_maps() != wanted:
                uid_map, _, gid_map = wanted.partition(";")
                self._begin(uid_map, gid_map)
        except OSError as err:
            self.error = err

    def _begin(self, uid_map: str, gid_map: str) -> None:
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
        self.helper, self.said_fd = helper, said_read
        try:
            linux.unshare(linux.CLONE_NEWUSER | linux.CLONE_NEWNS)
        finally:
            os.write(go_write, b"x")
            os.close(go_write)

    @property
    def making(self) -> bool:
        """Whether this process is entering namespaces of its own (a user namespace and
        the mount namespace it owns), not yet mapped."""
        return bool(self.helper)

    def finish(self) -> None:
        """Once the namespace has its maps; OSError or ScrunError if it cannot."""
        if not self.helper:
            if self.error is not None:
                raise self.error
            return
        _, status = os.waitpid(self.helper, 0)
        self.helper = 0
        with os.fdopen(self.said_fd, "rb") as said:
            why = said.read().decode(errors="replace").strip()
        if self.error is not None:
            raise self.error
        if status != 0:
            raise ScrunError(f"cannot give the container the user's subordinate ids on this "
                             f"node: {why or 'newuidmap failed'} (an ordinary user needs "
                             f"ranges in /etc/subuid and /etc/subgid, and package uidmap)")


def _write_maps(target: int, uid_map: str, gid_map: str, said_fd: int) -> int:
    """Both at once: each is a setuid program of its own, and the agent waits on them.
    Spawned without subprocess, which the agent is still loading meanwhile."""
    out_read, out_write = os.pipe()
    running: list[int] = []
    why = b""
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
               (os.POSIX_SPAWN_DUP2, out_write, 1), (os.POSIX_SPAWN_DUP2, out_write, 2)]
    for tool, wanted in zip(_TOOLS, (uid_map, gid_map), strict=True):
        fields = [field for triple in wanted.split(",") for field in triple.split()]
        try:
            running.append(os.posix_spawnp(tool, [tool, str(target), *fields], os.environ,
                                           file_actions=actions))
        except FileNotFoundError:
            why = f"{tool} not found".encode()
            break
    os.close(out_write)
    said = b""
    while chunk := os.read(out_read, 65536):
        said += chunk
    failed = [pid for pid in running if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0]
    if failed and not why:
        why = said.strip()[-400:] or b"failed"
    if why:
        os.write(said_fd, why)
    return 1 if why else 0
