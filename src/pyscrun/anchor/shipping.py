"""A container's bundle, shipped to the nodes that do not see it.

docker's bundle lives under containerd's state dir on the login host and its rootfs is
an overlay mounted there (rootless docker's, inside rootlesskit's mount namespace
only); no compute node sees either. Before the step starts the anchor puts a file of a
random name in the bundle dir; an agent that does not find it asks for the bundle and
gets, over the channel:

    config.json   root.path `rootfs`, shipped bind-mount sources `mounts/N`, and no
                  hook that names a process of the login host (`/proc/PID/exe`: it
                  cannot run on another machine)
    rootfs.tar    the rootfs, owners as numbers, sent as tar writes it (the agent
                  unpacks it as it arrives, as the same root the rootfs had here:
                  podman's or rootlesskit's mapping)
    mounts/N      each bind-mounted regular file up to 1 MiB (hosts, hostname,
                  resolv.conf), and mounts/owners.json: each one's mode, uid and gid

Once the container has ended, task 0's agent sends back what the container changed in
its copy (node/rootfs_changes.py): the new and changed entries as one archive, put in
place over the rootfs here (rsync), and the removed ones as a list, removed here. What
the container changed, made or removed is seen by `podman diff`, `docker commit` or a
build's next step, as if it had run here. The other tasks' copies are dropped.

Where the node sees the bundle (the cluster file system) nothing moves.
"""

from __future__ import annotations

import os

from pyscrun import log
from pyscrun.anchor.agents import AgentLink
from pyscrun.channel import files, frames
from pyscrun.errors import ChannelError, ScrunError
from pyscrun.fs import remove_beneath, remove_tree
from pyscrun.node.rootfs_changes import CHANGES_ARCHIVE, REMOVED_LIST
from pyscrun.node.shipped import ROOTFS_ARCHIVE
from pyscrun.oci.bundle import is_bind

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Generator

MOUNTS = "mounts"
MAX_MOUNTED_FILE = 1 << 20


class Shipment:
    """config.json and the mounted files built once, at the first agent's asking, in
    the container's spool dir; the rootfs archived for each agent as it is sent."""

    def __init__(self, bundle: str, spool_dir: str) -> None:
        self.bundle = bundle
        self.dir = os.path.join(spool_dir, "shipment")
        self.back = os.path.join(self.dir, "back")  # where task 0's changes come back
        self.rootfs = ""  # the rootfs here, once built

    def frames_for(self, link: AgentLink) -> Generator[bytes, None, None]:
        """The bundle for link's node, as frames made while its connection takes them
        (the anchor serves its other nodes and clients meanwhile), ending with
        `bundle-sent`. Task 0's link also gets where its container's changes come back,
        made here first: a container whose changes could not come back does not run,
        and what this disk cannot do fails the shipping, not the link."""
        error = None
        try:
            if not self.rootfs:
                self._build()
            if link.task == "0":
                os.makedirs(self.back, mode=0o700, exist_ok=True)
                link.receiver = files.TreeReceiver({"rootfs": self.back})
            yield from files.tree_frames(self.dir, "bundle", skip=lambda name: name == "back")
            yield from files.tar_frames(self.rootfs, "bundle", ROOTFS_ARCHIVE)
        except (ScrunError, OSError, ValueError, KeyError, TypeError) as err:
            error = f"shipping the bundle to {link.node or 'a node'}: {err}"
            log.current.error(error)
        yield frames.message({"op": "bundle-sent", "error": error})

    def bring_back(self, rootfs: str, failed: str | None) -> None:
        """What the container changed, as task 0 sent it, put in place in the rootfs
        here, unless it could not all be written here (failed: why); errors logged:
        the container has ended either way."""
        archive = os.path.join(self.back, CHANGES_ARCHIVE)
        removed = os.path.join(self.back, REMOVED_LIST)
        try:
            if failed is not None:
                raise ChannelError(failed)  # a part is no change to put in place
            if os.path.exists(archive):
                files.unpack(archive, os.path.join(self.back, "rootfs"))
                os.unlink(archive)
                files.copy_over(os.path.join(self.back, "rootfs"), rootfs)
            if os.path.exists(removed):
                with open(removed, "rb") as listing:
                    for path in listing.read().split(b"\0")[:-1]:
                        remove_beneath(rootfs, os.fsdecode(path))
        except (ScrunError, OSError, ValueError) as err:
            log.current.error(f"the container's changes to its rootfs did not come back: {err}")
        finally:
            remove_tree(self.back)

    def remove(self) -> None:
        remove_tree(self.dir)

    def _build(self) -> None:
        # Only for a bundle no node sees: not worth their import on every create.
        import json
        import shutil

        remove_tree(self.dir)
        os.makedirs(os.path.join(self.dir, MOUNTS), mode=0o700)
        with open(os.path.join(self.bundle, "config.json"), "rb") as source:
            config = json.load(source)
        root = os.path.join(self.bundle, config["root"]["path"])
        config["root"]["path"] = "rootfs"
        owners = {}
        for number, mount in enumerate(config.get("mounts") or []):
            source = mount.get("source", "")
            if is_bind(mount) and _small_file(source):
                shipped = os.path.join(MOUNTS, str(number))
                shutil.copyfile(source, os.path.join(self.dir, shipped))
                info = os.stat(source)
                owners[str(number)] = [info.st_mode & 0o7777, info.st_uid, info.st_gid]
                mount["source"] = shipped
        with open(os.path.join(self.dir, MOUNTS, "owners.json"), "w", encoding="utf-8") as out:
            json.dump(owners, out)
        hooks = config.get("hooks") or {}
        for kind, entries in hooks.items():
            kept = [h for h in entries if not str(h.get("path", "")).startswith("/proc/")]
            if len(kept) != len(entries):
                log.current.info(f"{kind} hooks of a process of this host left out on the node")
            hooks[kind] = kept
        with open(os.path.join(self.dir, "config.json"), "w", encoding="utf-8") as out:
            json.dump(config, out)
        self.rootfs = root


def _small_file(path: object) -> bool:
    if not isinstance(path, str) or not os.path.isabs(path):
        return False
    try:
        info = os.stat(path)
    except OSError:
        return False
    import stat

    return stat.S_ISREG(info.st_mode) and info.st_size <= MAX_MOUNTED_FILE

