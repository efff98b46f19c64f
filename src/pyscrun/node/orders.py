"""The anchor's orders to one task's agent, and what the agent reports back: kill,
checkpoint, pause, resume, update, ps and stats of the task's container."""

from __future__ import annotations

import os

from pyscrun import jsonc, log, messages
from pyscrun.channel import frames, peer
from pyscrun.conf.ociconf import OciConf
from pyscrun.errors import RuntimeCommandError, ScrunError
from pyscrun.node import processes
from pyscrun.node.runtime import RuntimeCommands
from pyscrun.node.stdio import ContainerStdio
from pyscrun.node.task import TaskIdentity

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# How long a paused container's last output may take to leave its pipes before its dump.
OUTPUT_WAIT = 2.0
# The orders an agent carries out with a runtime verb of its own (pyscrun.conf's or
# derived from oci.conf's RunTimeDelete).
_TASK_ORDERS = {"pause": "RunTimePause", "resume": "RunTimeResume", "update": "RunTimeUpdate"}


class AgentOrders:
    """What the agent (node/agent.py) does when the anchor orders it."""

    conf: OciConf
    ident: TaskIdentity
    control: peer.Peer | None
    stdio: ContainerStdio | None
    task_dir: str | None
    commands: RuntimeCommands | None
    running_wanted: bool
    paused: bool
    derived_commands: Callable[[str], dict[str, str]]

    def _send(self, message: dict[str, object]) -> None:
        raise NotImplementedError

    def deliver(self, signum: int, every: bool = False) -> None:
        raise NotImplementedError

    def _container_init(self) -> int:
        raise NotImplementedError

    def _go(self) -> None:
        raise NotImplementedError

    def _handle(self, received: list[tuple[int, bytes]]) -> None:
        for kind, payload in received:
            if kind == frames.STDIN:
                if self.stdio is not None:
                    self.stdio.on_stdin(payload)
                continue
            if kind != frames.MESSAGE:
                continue
            try:
                message = messages.check(frames.decode_message(payload), "orders")
                op = message.get("op")
                if op == "kill":
                    self.deliver(message["signal"], bool(message.get("all")))
                elif op == "checkpoint":
                    self._checkpoint(message)
                elif op == "go":
                    self._go()
                elif op == "report-running":
                    self.running_wanted = True
                elif op == "ps":
                    self._send({"event": "ordered", "order": "ps", "error": None,
                                "pids": self._processes()})
                elif op == "stats":
                    self._stats()
                elif op in _TASK_ORDERS:
                    self._carry_out(message)
            except ValueError as err:
                log.current.error(f"ignored an order from the anchor: {err}")
            except (ScrunError, OSError) as err:
                # A command or a call that failed (a full disk, no process left to
                # spawn) fails the order, not the container the agent keeps.
                log.current.error(f"an order from the anchor failed: {err}")

    def _checkpoint(self, order: dict[str, Any]) -> None:
        """Dump the task's container. One the checkpoint stops (freeze) is paused first
        and dumped left running, and stays paused: the anchor ends it once the images
        of every task are safe, or resumes it if any failed. Nothing of it runs after
        its images, and nothing is lost if they cannot be kept. A runtime without pause
        and resume dumps as ordered."""
        from pyscrun.node import images  # a checkpoint's only, off the way to the start

        error, frozen = None, False
        try:
            if self.commands is None or self.task_dir is None:
                raise RuntimeCommandError("the container is not running yet")
            if os.isatty(0) and not self.conf.run_mode:
                raise RuntimeCommandError(
                    "a container with a terminal can be checkpointed only in run mode "
                    "(RunTimeRun in oci.conf): in create/start mode its terminal is outside "
                    "the container, where CRIU cannot take it along")
            if order.get("freeze") and all(self.commands.pattern(directive) for directive
                                           in ("RunTimePause", "RunTimeResume")):
                self.commands.run_checked("RunTimePause")
                self.paused = frozen = True
                order = {**order, "leave_running": True}
                if not processes.wait_output_taken(self._container_init(), OUTPUT_WAIT):
                    log.current.info("the container's output was not all read before its "
                                     "dump: a restore may say its last lines again")
            images.checkpoint(self.control, self._for(order), order, self.ident.task_id,
                              self.task_dir)
        except (ScrunError, OSError) as err:
            error = str(err)
        self._send({"event": "checkpointed", "error": error, "frozen": frozen})

    def _carry_out(self, order: dict[str, Any]) -> None:
        """pause, resume or update the task's container, with the runtime's own verb."""
        op = order["op"]
        error = None
        try:
            if self.commands is None or self.task_dir is None:
                raise RuntimeCommandError("the container is not running yet")
            directive = _TASK_ORDERS[op]
            self.commands.require(directive)
            args = None
            if op == "update":
                # runc update --resources FILE, the file in the task dir of this node.
                resources = os.path.join(self.task_dir, "resources.json")
                with open(resources, "w") as out:
                    out.write(jsonc.dumps(order["resources"]))
                args = [resources]
            self.commands.run_checked(directive, args)
            if op != "update":
                self.paused = op == "pause"
        except (ScrunError, OSError) as err:
            error = str(err)
        self._send({"event": "ordered", "order": op, "error": error})

    def _stats(self) -> None:
        """The figures of the task's container, as the runtime's `events --stats` prints
        them: `{"type": "stats", "id": ..., "data": FIGURES}`."""
        figures, error = None, None
        try:
            if self.commands is None:
                raise RuntimeCommandError("the container is not running yet")
            self.commands.require("RunTimeStats")
            printed = self.commands.run_checked("RunTimeStats")
            try:
                figures = jsonc.loads(printed).get("data")
            except (ValueError, AttributeError):
                figures = None
            if not isinstance(figures, dict):
                raise RuntimeCommandError(f"RunTimeStats printed no figures: {printed[:200]!r}")
        except (ScrunError, OSError) as err:
            error = str(err)
        self._send({"event": "ordered", "order": "stats", "error": error, "stats": figures})

    def _processes(self) -> list[int]:
        """Every process of the task's container: its init and all below it."""
        pid = self._container_init()
        return [pid, *processes.descendants(pid)] if pid else []

    def _for(self, order: dict[str, Any]) -> RuntimeCommands:
        """The runtime commands a checkpoint or restore order asks for: with the
        criu it names (`scrun --criu PATH`), if any."""
        assert self.commands is not None
        path = order.get("criu")
        return self.commands.with_more(self.derived_commands(path)) if path else self.commands

