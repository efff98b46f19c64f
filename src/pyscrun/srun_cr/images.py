"""A checkpoint directory: one CRIU image directory per task and a manifest.

    DIR/manifest.json        job, step, task count, node of each rank, command, time
    DIR/task-<rank>/         CRIU's images of that task's pid namespace, its dump.log
    DIR/task-<rank>/task.json  what the task's descriptors were (see criu.resource_key)

A checkpoint is written into a hidden sibling directory and renamed to DIR only once
every task is in it, so DIR always holds a whole checkpoint (the previous one until the
new one is complete and on disk, so after a crash too) and a failed checkpoint leaves
nothing behind.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from pyscrun import linux
from pyscrun.errors import CheckpointError
from pyscrun.fs import sync_directory, sync_tree, write_atomic

MANIFEST = "manifest.json"
TASK_META = "task.json"
FORMAT = "pyscrun-srun_cr/1"


def task_dir(root: str, rank: int) -> str:
    return os.path.join(root, f"task-{rank}")


def default_dir(environ: dict[str, str], cwd: str, job: str, step: str) -> str:
    """Where a checkpoint goes unless named: $SLURM_CHECKPOINT_DIR, else srun_cr's
    working directory (the job's), in srun_cr-<job>.<step>."""
    return os.path.join(environ.get("SLURM_CHECKPOINT_DIR") or cwd, f"srun_cr-{job}.{step}")


def write_json(path: str, data: dict[str, Any]) -> None:
    """A manifest, whole or not at all, on disk before it is in place (0o666 as
    open() makes a file, less the umask)."""
    write_atomic(path, (json.dumps(data, indent=1) + "\n").encode(), 0o666, durable=True)


def read_json(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as file:
        try:
            data = json.load(file)
        except RecursionError:
            raise ValueError("nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _is_task_dir_name(name: str) -> bool:
    return name.startswith("task-") and name[5:].isdigit()


def _check_replaceable(path: str) -> None:
    """A directory a new checkpoint may replace: empty, or an srun_cr checkpoint and
    nothing else, since replacing it deletes whatever it holds."""
    try:
        entries = os.listdir(path)
    except OSError as err:
        raise CheckpointError(f"checkpoint directory {path}: {err.strerror}") from None
    if not entries:
        return
    foreign = sorted(e for e in entries if e != MANIFEST and not _is_task_dir_name(e))
    try:
        ours = MANIFEST in entries and read_json(os.path.join(path, MANIFEST)).get("format") == FORMAT
    except (OSError, ValueError):
        ours = False
    if not ours or foreign:
        what = (f"holds {foreign[0]!r}, which is not part of an srun_cr checkpoint" if ours
                else "holds no srun_cr checkpoint")
        raise CheckpointError(f"checkpoint directory {path} is not empty and {what}; "
                              f"name a new or empty directory")


class Staging:
    """A checkpoint being written next to its final directory."""

    def __init__(self, final: str) -> None:
        self.final = os.path.abspath(final)
        if os.path.lexists(self.final):
            if not os.path.isdir(self.final):
                raise CheckpointError(f"checkpoint directory {self.final} exists and is not a directory")
            _check_replaceable(self.final)
        parent, name = os.path.split(self.final)
        try:
            if os.path.exists(parent) and not os.path.isdir(parent):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
            os.makedirs(parent, exist_ok=True)
            self.path = tempfile.mkdtemp(prefix=f".{name}.", suffix=".partial", dir=parent)
        except OSError as err:
            raise CheckpointError(
                f"checkpoint directory {self.final} is not writable: {err.strerror or err}") from None

    def commit(self, manifest: dict[str, Any]) -> None:
        """Write the manifest and put the checkpoint in place of any previous one."""
        old = None
        try:
            # On disk in this order, so that a crash at any point leaves a whole
            # checkpoint: the images, the manifest, the new one's name; only then does
            # the previous one go.
            sync_tree(self.path)
            write_json(os.path.join(self.path, MANIFEST), manifest)
            if os.path.isdir(self.final) and os.listdir(self.final):
                old = self._swap_in()
            else:
                os.rename(self.path, self.final)
        except OSError as err:
            self.discard()
            raise CheckpointError(
                f"cannot put the checkpoint in {self.final}: {err.strerror or err}") from None
        try:
            sync_directory(os.path.dirname(self.final))
        except OSError as err:
            # Not surely on disk: not in place either, the previous one back in DIR.
            self._swap_out(old)
            raise CheckpointError(f"cannot put the checkpoint in {self.final} on disk: "
                                  f"{err.strerror or err}") from None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def _swap_in(self) -> str:
        """The new checkpoint in DIR in one step, where the file system can: DIR is
        never missing (elsewhere, between two renames). Where the previous one is now."""
        try:
            linux.exchange(self.path, self.final)
            return self.path
        except OSError as err:
            if err.errno != errno.EINVAL:
                raise
        old = tempfile.mkdtemp(prefix=f".{os.path.basename(self.final)}.", suffix=".old",
                               dir=os.path.dirname(self.final))
        previous = os.path.join(old, "previous")
        try:
            os.rename(self.final, previous)
            try:
                os.rename(self.path, self.final)
            except OSError:
                os.rename(previous, self.final)  # the previous checkpoint back in place
                raise
        except OSError:
            try:
                os.rmdir(old)  # empty unless the previous checkpoint could not go back
            except OSError:
                pass
            raise
        return old

    def _swap_out(self, old: str | None) -> None:
        """Undo _swap_in (or the rename of a first checkpoint), as far as the file
        system lets: the new checkpoint discarded, the previous one (in old) in DIR."""
        try:
            if old == self.path:
                linux.exchange(self.path, self.final)
            else:
                os.rename(self.final, self.path)
                if old is not None:
                    os.rename(os.path.join(old, "previous"), self.final)
                    os.rmdir(old)
        except OSError:
            pass
        self.discard()

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def make_manifest(job: str, step: str, nodes: list[str], command: list[str], cwd: str,
                  stopped: bool) -> dict[str, Any]:
    return {
        "format": FORMAT, "job": job, "step": step, "tasks": len(nodes), "nodes": nodes,
        "command": command, "cwd": cwd, "stopped": stopped,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        # Which checkpoint this is: a restart's tasks each make sure they restore this
        # one, not one put in its place meanwhile.
        "id": os.urandom(16).hex(),
    }


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint directory, checked for a restart."""

    path: str
    job: str
    step: str
    tasks: int
    nodes: list[str]
    command: list[str]
    id: str  # '' in a checkpoint of a version before ids

    @classmethod
    def load(cls, path: str) -> Checkpoint:
        path = os.path.abspath(path)
        if not os.path.exists(path):
            raise CheckpointError(f"restart directory {path} does not exist")
        if not os.path.isdir(path):
            raise CheckpointError(f"restart directory {path} is not a directory")
        try:
            data = read_json(os.path.join(path, MANIFEST))
        except FileNotFoundError:
            raise CheckpointError(f"restart directory {path} holds no srun_cr checkpoint "
                                  f"(no {MANIFEST})") from None
        except (OSError, ValueError) as err:
            raise CheckpointError(f"restart directory {path}: cannot read {MANIFEST}: {err}") from None
        try:
            if data.get("format") != FORMAT:
                raise ValueError(f"unknown format {data.get('format')!r}")
            tasks = data["tasks"]
            if not isinstance(tasks, int) or isinstance(tasks, bool) or not 1 <= tasks <= 1 << 16:
                raise ValueError(f"tasks must be a count, not {str(tasks)[:20]!r}")
            checkpoint = cls(path, str(data["job"]), str(data["step"]), tasks,
                             [str(n) for n in data["nodes"]], [str(a) for a in data["command"]],
                             str(data.get("id") or ""))
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"restart directory {path}: bad {MANIFEST}: {err}") from None
        for rank in range(checkpoint.tasks):
            if not os.path.isdir(task_dir(path, rank)):
                raise CheckpointError(f"restart directory {path} lacks the images of task {rank}")
        return checkpoint

    def check_same(self, expected_id: str) -> None:
        """The checkpoint a restart began with: CheckpointError if another one was put
        in its place since (a checkpoint into the same directory meanwhile), whose
        tasks mixed with the first one's would be no state the program ever had."""
        if self.id != expected_id:
            raise CheckpointError(f"restart directory {self.path} holds another checkpoint "
                                  "than when the restart began: restart again")

    def check_tasks(self, ntasks: int) -> None:
        if ntasks != self.tasks:
            raise CheckpointError(
                f"restart directory {self.path} holds {self.tasks} task(s), the new step has "
                f"{ntasks}: restart with -n {self.tasks}")


def left_before_requeue(environ: dict[str, str], cwd: str, command: list[str]) -> str | None:
    """Where a batch job that Slurm requeued (a preemption, `scontrol requeue`) goes on
    from: the newest checkpoint its earlier runs made of this command in the default
    place (`default_dir`, any step: a requeued job numbers its steps from 0 again).
    None outside a requeued job, or when there is none."""
    job = environ.get("SLURM_JOB_ID", "")
    if not job or environ.get("SLURM_RESTART_COUNT", "0") in ("", "0"):
        return None
    parent, prefix = os.path.split(default_dir(environ, cwd, job, ""))
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix) and n[len(prefix):].isdigit()]
    except OSError:
        return None
    newest: tuple[int, str] | None = None
    for name in names:
        path = os.path.join(parent, name)
        try:
            checkpoint = Checkpoint.load(path)
            made = os.stat(os.path.join(path, MANIFEST)).st_mtime_ns
        except (CheckpointError, OSError):
            continue
        if checkpoint.command == command and (newest is None or made > newest[0]):
            newest = (made, checkpoint.path)
    return newest[1] if newest else None
