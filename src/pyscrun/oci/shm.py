"""The container's /dev/shm on a node that cannot see the one its engine made.

podman and docker give a container a /dev/shm of its own by mounting a tmpfs on the
login host (podman's userdata/shm, sized by --shm-size) and binding it in config.json.
A compute node sees only the directory under that mount: the container's /dev/shm
would be a directory on the cluster file system, shared by every task of every node
and unusable by any user but root. Where the node sees no mount there, its runtime
mounts a tmpfs of the same size instead: private to the task, as with runc. A node
that does see a mount at the source (the local backend, or `--ipc host`, whose source
is the node's own /dev/shm) binds it as asked.
"""

from __future__ import annotations

from pyscrun import mountinfo
from pyscrun.oci.bundle import is_bind

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DESTINATION = "/dev/shm"
# The tmpfs options that shape the file system itself. The owner's uid and gid are the
# login host's view of the engine's user namespace: on the node, the runtime mounts it
# from inside the container's own, whose root then owns it, as podman's did.
_KEPT = ("size", "nr_inodes", "mode")


def _shm_bind(config: dict[str, Any]) -> dict[str, Any] | None:
    for mount in config.get("mounts") or []:
        if is_bind(mount) and mount.get("destination") == DESTINATION:
            return mount  # type: ignore[no-any-return]
    return None


def tmpfs_options(config: dict[str, Any], mounts: mountinfo.MountTable) -> str | None:
    """On the login host (its mount table): the options of the tmpfs whose root the
    config's /dev/shm bind names, comma-separated (empty: a tmpfs with the defaults);
    None if it binds no tmpfs root here."""
    mount = _shm_bind(config)
    source = mount.get("source") if mount is not None else None
    if not isinstance(source, str) or not source:
        return None
    found = mounts.at(source)
    if found is None or found.fs_type != "tmpfs" or found.root != "/":
        return None
    return ",".join(o for o in found.fs_options if o.partition("=")[0] in _KEPT)


def make_private(config: dict[str, Any], options: str) -> None:
    """On the node: the /dev/shm bind becomes a tmpfs of its own with the login host's
    options, unless the node sees a mount at its source."""
    mount = _shm_bind(config)
    if mount is None or mountinfo.MountTable().at(str(mount.get("source", ""))) is not None:
        return
    kept = [o for o in options.split(",") if o]
    if not any(o.startswith("mode=") for o in kept):
        kept.append("mode=1777")
    mount.clear()
    mount.update({"destination": DESTINATION, "type": "tmpfs", "source": "shm",
                  "options": ["nosuid", "noexec", "nodev", *kept]})
