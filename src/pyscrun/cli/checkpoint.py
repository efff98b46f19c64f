"""checkpoint and restore: runc's verbs, carried out by the node agents with CRIU."""

from __future__ import annotations

import json
import os

from pyscrun import identity, log
from pyscrun.anchor import protocol
from pyscrun.cli.main import Context
from pyscrun.errors import BundleError, NotSupported, ScrunError, UsageError
from pyscrun.oci.state import RUNNING, STOPPED

# Flags runc has that CRIU cannot honour here (no dirty-memory tracking, no page server).
_ACCEPTED_ONLY = ("parent_path", "lazy_pages", "page_server", "status_fd",
                  "lsm_profile", "lsm_mount_context", "no_subreaper", "no_pivot")


def _for_root_only(verb: str) -> None:
    """CRIU needs root, and runc refuses to checkpoint rootless containers."""
    if not identity.is_root():
        raise NotSupported(f"{verb} of an ordinary user's container is not supported: CRIU "
                           "needs root (runc refuses to checkpoint rootless containers)")


def _criu_order(ctx: Context, default_image: str) -> dict[str, object]:
    from pyscrun.node.criu import PASSED_ON

    image_path = os.path.abspath(ctx.option("image_path") or default_image)
    work_path = ctx.option("work_path")
    order: dict[str, object] = {
        "image_path": image_path,
        "work_path": os.path.abspath(work_path) if work_path else "",
    }
    for name in PASSED_ON:
        if name in ctx.options:
            order[name] = ctx.options[name]
    for name in _ACCEPTED_ONLY:
        if ctx.options.get(name):
            log.current.info(f"--{name.replace('_', '-')} is accepted but has no effect")
    criu = ctx.option("criu")
    if criu:
        order["criu"] = _criu_path(ctx, criu)
    return order


def _criu_path(ctx: Context, criu: str) -> str:
    """runc's global --criu, for the runtime on the nodes (which share the software)."""
    from pyscrun.conf import site

    path = os.path.abspath(criu)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise UsageError(f"--criu {criu}: not an executable file")
    conf = site.load(ctx.slurm_conf).pyscrun
    if conf.RunTimeCheckpoint or conf.RunTimeRestore:
        raise UsageError("--criu cannot change pyscrun.conf's RunTimeCheckpoint and "
                         "RunTimeRestore: name the criu in them")
    return path


def checkpoint(ctx: Context) -> int:
    from pyscrun.cli.lifecycle import load_for, refuse_while_suspended
    from pyscrun.conf import site

    if ctx.flag("pre_dump"):
        # runc's pre-dump leaves the container running; a whole dump in its place would
        # end it while podman (--pre-checkpoint) believes it runs.
        raise NotSupported("checkpoint --pre-dump is not supported: checkpoint without it")
    order = _criu_order(ctx, "checkpoint")
    store, state = load_for(ctx, "checkpoint", RUNNING)
    _for_root_only("checkpoint")
    refuse_while_suspended(site.load(ctx.slurm_conf), state, "checkpoint")
    order.update(op="checkpoint", leave_running=ctx.flag("leave_running"))
    try:
        os.makedirs(str(order["image_path"]), exist_ok=True)
    except OSError as err:
        raise ScrunError(f"cannot create {order['image_path']}: {err.strerror}") from None
    if not os.access(str(order["image_path"]), os.W_OK):
        raise ScrunError(f"checkpoint directory {order['image_path']} is not writable")
    # No limit of its own, as runc's and podman's: the anchor bounds the round (each
    # task's RunTimeCheckpoint has one) and always answers, or its socket closes. A
    # limit here would report a failure while the anchor goes on to end the container.
    reply = protocol.request(store.socket_path(state.id), order, timeout=None)
    if not reply.get("ok"):
        raise ScrunError(f"checkpoint failed: {reply.get('error', 'unknown error')}")
    return 0


def checkpointed_tasks(image_path: str) -> int:
    """How many tasks the checkpoint in image_path holds (its manifest's count; one
    for a checkpoint of runc's own, which has none)."""
    from pyscrun.node.criu import MANIFEST

    if not os.path.isfile(os.path.join(image_path, "inventory.img")):
        raise BundleError(f"no checkpoint to restore in {image_path} (inventory.img is missing)")
    try:
        with open(os.path.join(image_path, MANIFEST), "rb") as manifest_file:
            manifest = json.loads(manifest_file.read())
    except FileNotFoundError:
        return 1
    except (OSError, ValueError, RecursionError) as err:
        raise BundleError(f"checkpoint manifest in {image_path} is unreadable: {err}") from None
    tasks = manifest.get("tasks", 1) if isinstance(manifest, dict) else None
    if not isinstance(tasks, int) or isinstance(tasks, bool) or not 1 <= tasks <= 1 << 16:
        raise BundleError(f"checkpoint manifest in {image_path} is not one of pyscrun's "
                          "(its tasks must be a count)")
    return tasks


def restore(ctx: Context) -> int:
    from pyscrun.cli.lifecycle import create_container

    order = _criu_order(ctx, "checkpoint")
    order["tasks"] = checkpointed_tasks(str(order["image_path"]))
    _for_root_only("restore")
    store = ctx.store
    try:
        previous = store.load(ctx.container_id)
    except ScrunError:
        previous = None
    # podman restores a checkpointed container under its old id: that one has stopped,
    # and makes way once the restore's input passed its checks.
    stopped = previous if previous is not None and previous.effective_status() == STOPPED else None
    create_container(ctx, restore=order, replacing=stopped)
    return 0
