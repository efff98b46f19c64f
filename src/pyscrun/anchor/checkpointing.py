"""One checkpoint of a container, across all of its tasks: all of them or none.

A checkpoint that stops the container (not --leave-running) has every agent pause its
task and dump it left running, paused: only once the images of every task are safe
(and the manifest written) is the container ended, so that it runs no further than
its images and is not lost with them. A failure resumes every task and leaves no
images behind. A runtime without pause and resume dumps as runc's checkpoint does:
CRIU ends a lone task; several are dumped left running and ended once all succeeded.
"""

from __future__ import annotations

import os
import stat
import time

from pyscrun import jsonc
from pyscrun.anchor.answers import Answers
from pyscrun.channel.files import TreeReceiver
from pyscrun.errors import CheckpointError
from pyscrun.fs import remove_tree, write_atomic
from pyscrun.node.criu import MANIFEST, PROBE, task_image_dir, task_work_dir
from pyscrun.snapshot import ROOT, settle, walk

# typing costs milliseconds at every start of the CLI: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def place_probe(image_path: str) -> str:
    """A file of a random name in the image path: a node that sees it shares the
    directory (the cluster file system) and writes or reads the images there itself;
    one that does not gets them over the channel. CheckpointError if it cannot be
    written there."""
    probe = os.path.join(image_path, f".pyscrun-probe-{os.urandom(8).hex()}")
    try:
        os.makedirs(image_path, exist_ok=True)
        with open(probe, "x"):
            pass
    except OSError as err:
        raise CheckpointError(f"cannot write in {image_path}: {err.strerror}") from None
    return probe


def remove_probe(probe: str) -> str | None:
    """Why probe is still there, if it is."""
    try:
        os.unlink(probe)
    except FileNotFoundError:
        pass
    except OSError as err:
        return f"cannot remove {probe}: {err.strerror}"
    return None


class CheckpointRound(Answers):
    def __init__(self, order: dict[str, Any], tasks: dict[object, str]) -> None:
        """tasks: each agent's connection (any hashable) -> its task id."""
        super().__init__(tasks)
        self.order = order
        self.stops = not order.get("leave_running")
        image_path = str(order["image_path"])
        # The dirs of its tasks below the image path (task 0's is the top of it).
        self.task_dirs = {os.path.relpath(task_image_dir(image_path, task_id), image_path)
                          for task_id in tasks.values()} - {ROOT}
        self.probe = place_probe(image_path)
        # What the image path held before, its tasks' dirs to their depths: a failed
        # round removes only what it wrote.
        try:
            self.before = walk(image_path, self._dumped_into)
        except OSError as err:
            remove_probe(self.probe)
            raise CheckpointError(f"cannot read {image_path}: {err.strerror}") from None
        settle(self.before)
        self.receivers: dict[object, TreeReceiver] = {}

    def order_for_agents(self) -> dict[str, Any]:
        order = dict(self.order)
        order[PROBE] = os.path.basename(self.probe)
        order["freeze"] = self.stops
        if self.stops and len(self.tasks) > 1:
            # Where a task cannot be paused: ended once every task is dumped.
            order["leave_running"] = True
        return order

    def receiver(self, agent: object) -> TreeReceiver:
        """Where a task's images go when its node sends them over the channel."""
        task_id = self.tasks[agent]
        receiver = TreeReceiver({"image": task_image_dir(str(self.order["image_path"]), task_id),
                                 "work": task_work_dir(self.order, task_id)})
        self.receivers[agent] = receiver
        return receiver

    def record(self, agent: object, error: str | None) -> bool:
        """An agent's answer: one whose images could not be written here failed too,
        though it did its part."""
        receiver = self.receivers.get(agent)
        return super().record(agent, error or (receiver.failed if receiver else None))

    def close_receivers(self) -> None:
        """What a task was still sending (its agent gone half-way) is given up."""
        for receiver in self.receivers.values():
            receiver.close()

    def remove_probe(self) -> str | None:
        return remove_probe(self.probe)

    def discard_images(self) -> str | None:
        """What this round wrote in the image path (the caller's directory): a file it
        made or rewrote, of the names a dump writes or in one of its tasks' dirs, and a
        directory it made there; nothing else. Why not all of it could be removed, if
        so."""
        image_path = str(self.order["image_path"])
        try:
            now = walk(image_path, self._dumped_into)
        except OSError as err:
            return f"cannot read {image_path}: {err.strerror}"
        left: list[str] = []
        why = ""
        for relative, (inode, changed, kind) in sorted(now.items()):  # directories first
            was = self.before.get(relative)
            if was == (inode, changed, kind) or not self._dumped(relative):
                continue
            path = os.path.join(image_path, relative)
            if stat.S_ISDIR(kind):
                if was is not None and (was[0], was[2]) == (inode, kind):
                    continue  # there before: only what changed in it goes
                remove_tree(path)  # says nothing of what it could not remove
            else:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass  # in a directory gone already
                except OSError as err:
                    why = why or err.strerror or str(err)
            if os.path.lexists(path):
                left.append(relative)
        return _left(left, image_path, why)

    def _dumped_into(self, relative: str) -> bool:
        """Whether a directory below the image path is one a dump writes into."""
        return relative.split("/", 1)[0] in self.task_dirs

    def _dumped(self, relative: str) -> bool:
        """Whether an entry below the image path is one a dump writes (the walks go
        below the top into the tasks' dirs only)."""
        return relative != ROOT and (self._dumped_into(relative) or relative.endswith(".img")
                                     or relative in (MANIFEST, "descriptors.json"))

    def write_manifest(self, container_id: str, job_id: str, nodes: list[str]) -> None:
        manifest = {
            "container": container_id,
            "job": job_id,
            "tasks": len(self.tasks),
            "nodes": nodes,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        write_atomic(os.path.join(str(self.order["image_path"]), MANIFEST),
                     jsonc.dumps(manifest).encode(), 0o644, durable=True)


def _left(names: list[str], directory: str, why: str) -> str | None:
    """One line for what could not be removed from directory, if anything."""
    if not names:
        return None
    more = f" and {len(names) - 1} more" if len(names) > 1 else ""
    return f"cannot remove {sorted(names)[0]}{more} from {directory}" + (f": {why}" if why else "")
