"""Checkpoint and restore of one task's container with the low-level runtime and CRIU.

The commands come from pyscrun.conf (RunTimeCheckpoint, RunTimeRestore); `%@` in them
stands for the options built here, each shell-quoted.
"""

from __future__ import annotations

import os

from pyscrun.errors import RuntimeCommandError

# typing costs milliseconds at every start of the CLI: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from pyscrun.node.runtime import RuntimeCommands

# runc's checkpoint/restore flags that pyscrun passes on: option name -> takes a value.
PASSED_ON = {
    "tcp_established": False, "ext_unix_sk": False, "shell_job": False, "file_locks": False,
    "empty_ns": True, "auto_dedup": False, "manage_cgroups_mode": True,
}
MANIFEST = "pyscrun-checkpoint.json"
PROBE = "probe"
# The probe of an image path the anchor could not write in: no node looks for it.
UNPROBED = "unprobed"
# runc's names for CRIU's logs in --work-path.
DUMP_LOG, RESTORE_LOG = "dump.log", "restore.log"


def task_image_dir(image_path: str, task_id: str) -> str:
    """Task 0's images sit at the top (where podman looks for them), others below."""
    return image_path if task_id == "0" else os.path.join(image_path, f"task-{task_id}")


def other_task(name: str) -> bool:
    """Whether an entry at the top of the image path holds another task's images (task
    0's sit at the top itself)."""
    return name.startswith("task-") and name[5:].isdigit()


def task_work_dir(order: Mapping[str, Any], task_id: str) -> str:
    """CRIU's logs and stats-dump; podman reads task 0's from the top of --work-path."""
    work_path = str(order.get("work_path") or "")
    return task_image_dir(work_path or str(order["image_path"]), task_id)


def _work_dir(order: Mapping[str, Any], task_id: str) -> str:
    work_dir = task_work_dir(order, task_id)
    os.makedirs(work_dir, exist_ok=True)
    return work_dir


def images_here(order: Mapping[str, Any]) -> bool:
    """Whether this node sees the image path the caller gave (the cluster file system):
    the anchor left a probe file of a random name there for the nodes to find, or
    could not (UNPROBED: a read-only image path) and sends the images."""
    probe = order.get(PROBE)
    if probe == UNPROBED:
        return False
    return not probe or os.path.exists(os.path.join(str(order["image_path"]), str(probe)))


def local_order(order: Mapping[str, Any], local_dir: str) -> dict[str, Any]:
    """The order with images and logs in a directory of this node: what the channel
    then carries to or from the caller's image path."""
    return {**order, "image_path": os.path.join(local_dir, "images"),
            "work_path": os.path.join(local_dir, "work"), PROBE: None}


def _options(order: Mapping[str, Any]) -> list[str]:
    args = []
    for name, takes_value in PASSED_ON.items():
        value = order.get(name)
        if not value:
            continue
        flag = "--" + name.replace("_", "-")
        args += [flag, str(value)] if takes_value else [flag]
    return args


def checkpoint(commands: RuntimeCommands, order: Mapping[str, Any], task_id: str) -> str:
    """Dump the container into its task's image dir; returns that dir."""
    image_dir = task_image_dir(str(order["image_path"]), task_id)
    os.makedirs(image_dir, exist_ok=True)
    work_dir = _work_dir(order, task_id)
    args = ["--image-path", image_dir, "--work-path", work_dir, *_options(order)]
    if order.get("leave_running"):
        args.append("--leave-running")
    commands.require("RunTimeCheckpoint")
    try:
        commands.run_checked("RunTimeCheckpoint", args, timeout=600)
    except RuntimeCommandError as err:
        raise RuntimeCommandError(with_criu_error(str(err), work_dir, DUMP_LOG)) from None
    return image_dir


def with_criu_error(failure: str, work_dir: str, log_name: str) -> str:
    """A runtime's failure, with what CRIU's log in work_dir says of it, if anything."""
    from pyscrun.criu_log import log_reason  # a failure's only

    reason = log_reason(os.path.join(work_dir, log_name))
    return f"{failure}; CRIU: {reason}" if reason else failure


def restore_args(order: Mapping[str, Any], task_id: str, pid_file: str) -> list[str]:
    """The runtime's restore options; it writes the restored init's pid to pid_file
    once CRIU has let the tasks go."""
    image_dir = task_image_dir(str(order["image_path"]), task_id)
    if not os.path.isfile(os.path.join(image_dir, "inventory.img")):
        raise RuntimeCommandError(f"no checkpoint images for task {task_id} in {image_dir}")
    work_dir = _work_dir(order, task_id)
    return ["--image-path", image_dir, "--work-path", work_dir, "--pid-file", pid_file,
            *_options(order)]
