"""The container's bundle where this node does not see it: fetched from the anchor
(anchor/shipping.py) into a directory of the task's own, the rootfs unpacked there as
the root it had on the login host, and config.json pointed at them. Once the container
has ended, task 0 sends back what the container changed in it, so that its changes
reach the login host."""

from __future__ import annotations

import os

from pyscrun import identity, jsonc
from pyscrun.channel import files, peer
from pyscrun.errors import ChannelError, RuntimeCommandError
from pyscrun.node.rootfs_changes import CHANGES_ARCHIVE, REMOVED_LIST, Baseline

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

ROOTFS_ARCHIVE = "rootfs.tar"  # how the rootfs arrives, unpacked as it does


def fetch(control: peer.Peer | None, into: str,
          other: Callable[[list[tuple[int, bytes]]], None]) -> str:
    if control is None:
        raise RuntimeCommandError("the bundle is not on this node and no anchor sends it")
    os.makedirs(into, mode=0o700)
    rootfs = os.path.join(into, "rootfs")
    receiver = files.TreeReceiver({"bundle": into}, archives={("bundle", ROOTFS_ARCHIVE): rootfs})
    try:
        files.fetch_tree(control, "send-bundle", "bundle-sent", receiver, other)
    except ChannelError as err:
        raise RuntimeCommandError(f"fetching the bundle failed: {err}") from None
    config_path = os.path.join(into, "config.json")
    with open(config_path, "rb") as source:
        config = jsonc.loads(source.read())
    config["root"]["path"] = rootfs
    for mount in config.get("mounts") or []:
        source = mount.get("source")
        if isinstance(source, str) and source.startswith("mounts/"):
            mount["source"] = os.path.join(into, source)
    with open(config_path, "w") as out:
        out.write(jsonc.dumps(config))
    _own_mounted_files(os.path.join(into, "mounts"))
    if (config.get("linux") or {}).get("uidMappings") and not identity.is_root():
        _let_the_containers_root_through(into)
    return into


def _let_the_containers_root_through(into: str) -> None:
    """A container with uid mappings of its own (podman 5 ships the rootfs of a
    `--uidmap` container that leaves the user out) has a root that is not this user:
    the runtime, as that root, passes through the directories above the copy and the
    files it binds, and those of the runtime's own state, which are the user's alone.
    They let others through (as podman makes its user's runtime dir 0711 for such a
    container), from the copy up to the user's runtime dir, while they are the user's;
    what is in them stays the user's to list and read."""
    import stat

    top = os.environ.get("XDG_RUNTIME_DIR", "")
    here = os.path.join(into, "mounts")
    while True:
        info = os.lstat(here)
        if info.st_uid != os.getuid() or not stat.S_ISDIR(info.st_mode):
            return
        os.chmod(here, stat.S_IMODE(info.st_mode) | 0o011)
        parent = os.path.dirname(here)
        if here == top or parent == here:
            return
        here = parent


def _own_mounted_files(mounts: str) -> None:
    """The shipped files get the mode and owner they had (files arrive 0600, the
    agent's): hosts stays readable by all, a secret by its owner alone."""
    with open(os.path.join(mounts, "owners.json"), "rb") as source:
        owners = jsonc.loads(source.read())
    for name, (mode, uid, gid) in owners.items():
        path = os.path.join(mounts, os.path.basename(name))
        try:
            os.chown(path, uid, gid)
        except PermissionError:
            pass  # an agent that is no root here keeps them its own
        os.chmod(path, mode & 0o7777)


def send_back(control: peer.Peer | None, into: str, baseline: Baseline) -> None:
    """What task 0's container changed in its rootfs since baseline, to the anchor,
    which puts it in place on the login host (`podman diff`, `docker commit`, a build's
    RUN): the new and changed entries as one archive, the removed ones as a list."""
    if control is None:
        return
    changed, removed = baseline.changes()
    back = os.path.join(into, "back")
    os.mkdir(back, mode=0o700)
    if changed:
        files.pack_listed(os.path.join(into, "rootfs"), changed,
                          os.path.join(back, CHANGES_ARCHIVE))
    with open(os.path.join(back, REMOVED_LIST), "wb") as listing:
        listing.write(b"".join(os.fsencode(path) + b"\0" for path in removed))
    files.send_all(control, files.tree_frames(back, "rootfs"))
