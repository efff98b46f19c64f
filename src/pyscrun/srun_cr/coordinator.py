"""srun_cr's view of its step: the tasks' launchers, and checkpoints as all-or-nothing.

A checkpoint goes in two phases. Every launcher dumps its task into a staging
directory while the task keeps running (`--leave-running`), or stays stopped when the
checkpoint is to end the step (`--leave-stopped`). Only when every task is dumped is
the manifest written and the directory put in place; then, with --stop, the tasks are
ended. If any task fails, the staging directory is removed, stopped tasks are resumed,
and the requester gets the reasons: no partial checkpoint ever exists.

No sockets here: each launcher and requester is represented by a `send` function, so
the logic is testable without processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyscrun import log
from pyscrun.errors import CheckpointError
from pyscrun.srun_cr import images

Send = Callable[[dict[str, Any]], object]  # what it returns is not looked at
# How long a checkpoint request waits for every task to have reported.
WAIT_FOR_TASKS = 30.0


@dataclass
class Launcher:
    rank: int
    node: str
    pid: int
    send: Send


@dataclass
class Request:
    directory: str | None
    stop: bool
    reply: Send | None  # None: asked by signal, the result is logged
    deadline: float = 0.0


@dataclass
class Round:
    request: Request
    staging: images.Staging
    waiting: set[int]
    # Each task's node when the round began: a task that ends once it has dumped is
    # still in the checkpoint.
    nodes: dict[int, str]
    errors: dict[int, str] = field(default_factory=dict)


class Coordinator:
    def __init__(self, command: list[str], cwd: str, environ: dict[str, str],
                 on_registered: Callable[[str, str], None] | None = None) -> None:
        self.command = command
        self.cwd = cwd
        self.environ = environ
        self.on_registered = on_registered
        self.job: str | None = None
        self.step: str | None = None
        self.ntasks: int | None = None
        self.launchers: dict[int, Launcher] = {}
        self.ended: set[int] = set()
        self.pending: list[Request] = []
        self.round: Round | None = None
        self.finished = False

    @property
    def name(self) -> str:
        return f"{self.job}.{self.step}" if self.job is not None else "(not started yet)"

    # --- launchers -----------------------------------------------------------------

    def hello(self, message: dict[str, Any], send: Send) -> int:
        rank = int(message["rank"])
        if self.job is None:
            self.job, self.step = str(message["job"]), str(message["step"])
            self.ntasks = int(message["ntasks"])
            if self.on_registered is not None:
                self.on_registered(self.job, self.step)
        self.launchers[rank] = Launcher(rank, str(message.get("node", "?")), int(message["pid"]), send)
        log.current.debug(f"step {self.name}: task {rank} on {message.get('node')} reported")
        self._start_pending()
        return rank

    def gone(self, rank: int) -> None:
        current = self.round
        if current is not None and rank in current.waiting:
            self._dumped(rank, "the task ended during the checkpoint")
        self.launchers.pop(rank, None)
        self.ended.add(rank)

    def message(self, rank: int, message: dict[str, Any]) -> None:
        if message.get("op") == "dumped":
            self._dumped(rank, None if message.get("ok") else str(message.get("error")))

    # --- requests ------------------------------------------------------------------

    def request(self, request: Request) -> None:
        if self.finished:
            self._answer(request, error=f"step {self.name} has ended")
            return
        request.deadline = time.monotonic() + WAIT_FOR_TASKS
        self.pending.append(request)
        self._start_pending()

    def tick(self, now: float) -> None:
        """Fail requests that waited too long for the tasks to report (not those
        waiting behind a checkpoint under way: it ends, however long it takes)."""
        if self._ready():
            return
        for request in [r for r in self.pending if r.deadline <= now]:
            self.pending.remove(request)
            have = len(self.launchers)
            want = self.ntasks if self.ntasks is not None else "?"
            self._answer(request, error=f"only {have} of {want} task(s) of step {self.name} "
                                        f"reported to srun_cr within {WAIT_FOR_TASKS:.0f} s")

    def step_ended(self) -> None:
        self.finished = True
        for request in self.pending:
            self._answer(request, error=f"step {self.name} ended before it could be checkpointed")
        self.pending.clear()
        if self.round is not None:
            for rank in list(self.round.waiting):
                self._dumped(rank, "the step ended during the checkpoint")

    def next_deadline(self) -> float | None:
        if self._ready():
            return None
        return min((r.deadline for r in self.pending), default=None)

    def _ready(self) -> bool:
        return self.ntasks is not None and len(self.launchers) == self.ntasks

    def _start_pending(self) -> None:
        while self.pending and self.round is None:
            if self.ended:
                request = self.pending.pop(0)
                ranks = ", ".join(str(r) for r in sorted(self.ended))
                self._answer(request, error=f"task(s) {ranks} of step {self.name} have ended: a step "
                                           f"is checkpointed only while all its tasks run")
                continue
            if not self._ready():
                return
            self._start(self.pending.pop(0))

    def _start(self, request: Request) -> None:
        assert self.job is not None and self.step is not None
        final = request.directory or images.default_dir(self.environ, self.cwd, self.job, self.step)
        try:
            staging = images.Staging(final)
        except CheckpointError as err:
            self._answer(request, error=str(err))
            return
        self.round = Round(request, staging, set(self.launchers),
                           {rank: launcher.node for rank, launcher in self.launchers.items()})
        log.current.verbose(f"step {self.name}: checkpoint into {staging.final} started")
        order = {"op": "dump", "dir": staging.path, "stop": request.stop}
        for launcher in list(self.launchers.values()):
            try:
                launcher.send(order)
            except OSError as err:
                self._dumped(launcher.rank, f"cannot reach the launcher of task {launcher.rank}: {err}")

    def _dumped(self, rank: int, error: str | None) -> None:
        current = self.round
        if current is None or rank not in current.waiting:
            return
        current.waiting.discard(rank)
        if error is not None:
            node = self.launchers[rank].node if rank in self.launchers else "?"
            current.errors[rank] = f"task {rank} ({node}): {error}"
        if not current.waiting:
            self._finish(current)

    def _finish(self, current: Round) -> None:
        self.round = None
        request = current.request
        if not current.errors:
            assert self.job is not None and self.step is not None
            nodes = [current.nodes[rank] for rank in sorted(current.nodes)]
            try:
                current.staging.commit(images.make_manifest(
                    self.job, self.step, nodes, self.command, self.cwd, request.stop))
            except CheckpointError as err:
                current.errors[-1] = str(err)
        else:
            current.staging.discard()
        if request.stop:
            action = "resume" if current.errors else "kill"
            for launcher in list(self.launchers.values()):
                try:
                    launcher.send({"op": "finish", "action": action})
                except OSError:
                    pass
        if current.errors:
            reasons = "; ".join(current.errors[r] for r in sorted(current.errors))
            self._answer(request, error=f"checkpoint of step {self.name} failed, nothing written: "
                                        f"{reasons}")
        else:
            self._answer(request, directory=current.staging.final)
        self._start_pending()

    def _answer(self, request: Request, error: str | None = None, directory: str | None = None) -> None:
        if request.reply is None:
            if error is not None:
                log.current.error(error)
            else:
                log.current.info(f"step {self.name} checkpointed to {directory}")
            return
        reply: dict[str, Any] = {"ok": error is None, "step": self.name}
        if error is not None:
            reply["error"] = error
        else:
            reply["dir"] = directory
        try:
            request.reply(reply)
        except OSError:
            pass
