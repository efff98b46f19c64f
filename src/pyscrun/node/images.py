"""A task's checkpoint images where the node does not see the caller's image path:
dumped into the task dir and sent to the anchor over the channel, or fetched from it
before a restore. Where the node sees the path (the cluster file system) nothing moves.
"""

from __future__ import annotations

import os

from pyscrun.channel import files, peer
from pyscrun.errors import ChannelError, RuntimeCommandError
from pyscrun.fs import remove_tree
from pyscrun.node import criu
from pyscrun.node.runtime import RuntimeCommands

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

LOCAL_DIR = "checkpoint"


def checkpoint(control: peer.Peer | None, commands: RuntimeCommands, order: dict[str, Any],
               task_id: str, task_dir: str) -> None:
    if criu.images_here(order):
        criu.checkpoint(commands, order, task_id)
        return
    if control is None:
        raise RuntimeCommandError("no anchor to send the checkpoint images to")
    here = criu.local_order(order, os.path.join(task_dir, LOCAL_DIR))
    discard_local(task_dir)  # what a restore may have left: no file of this checkpoint
    try:
        criu.checkpoint(commands, here, task_id)
        for directory, area in ((criu.task_image_dir(here["image_path"], task_id), "image"),
                                (criu.task_work_dir(here, task_id), "work")):
            files.send_all(control, files.tree_frames(directory, area))
    finally:
        discard_local(task_dir)


def discard_local(task_dir: str) -> None:
    """The images this node holds for its task (dumped to be sent, or fetched)."""
    remove_tree(os.path.join(task_dir, LOCAL_DIR))


def fetch(control: peer.Peer | None, order: dict[str, Any], task_id: str, task_dir: str,
          other: Callable[[list[tuple[int, bytes]]], None]) -> dict[str, Any]:
    """The task's images from the anchor into the task dir (frames that are not part
    of them go to other); the order that restores from there."""
    if control is None:
        raise RuntimeCommandError("no anchor to fetch the checkpoint images from")
    here = criu.local_order(order, os.path.join(task_dir, LOCAL_DIR))
    receiver = files.TreeReceiver({"image": criu.task_image_dir(here["image_path"], task_id)})
    os.makedirs(receiver.areas["image"], exist_ok=True)
    try:
        files.fetch_tree(control, "send-images", "images-sent", receiver, other)
    except ChannelError as err:
        raise RuntimeCommandError(f"fetching the checkpoint images failed: {err}") from None
    return here
