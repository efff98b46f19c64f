"""How the node agent brings its container up: `run` or `restore` in the foreground
(the runtime's process is the container's, waited for to its end); `run` detached or
`create` then `start` (the container's init, adopted by the agent as subreaper, is
waited for); and how the runtime's own end is told from the container's.

A base of the agent (node/agent.py), which holds the state it works on.
"""

from __future__ import annotations

import os
import time

from pyscrun import jsonc
from pyscrun.child import Child
from pyscrun.errors import RuntimeCommandError
from pyscrun.node import processes
from pyscrun.node.guard import Guard
from pyscrun.node.orders import AgentOrders
from pyscrun.node.runtime import RuntimeCommands, delete_ended, stop_and_delete

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# How long create/start mode waits for the runtime to report the container created.
CREATE_TIMEOUT = 60.0


class ContainerModes(AgentOrders):
    # What the agent holds (node/agent.py), beside what AgentOrders uses.
    env: dict[str, str]
    process: Child | None
    runtime_pid: int
    created_init: int
    ended_by_itself: bool
    running_reported: bool
    preserve_fds: int
    guard: Guard | None
    # A container whose init has ended, deleted only once its end is reported.
    delete_after_report: RuntimeCommands | None

    def wait_for(self, pid: int) -> int:
        raise NotImplementedError

    def _set_pid(self, pid: int, runtime: bool = False) -> None:
        raise NotImplementedError

    def _report_running(self) -> None:
        raise NotImplementedError

    def _wait_runtime(self) -> int:
        """Wait for the runtime's process; its exit status.

        The step's SIGTERM reaches every process of the step, the `/bin/sh -c` that runs
        the runtime included. The runtime then lives on, adopted by this agent (a child
        subreaper), and still decides how the container ends: it is waited for in turn,
        and the container is made sure of afterwards (stop_and_delete), as the shell's
        end was not the runtime's. A runtime killed itself before the container ran
        leaves only its own half-made init behind, whose end says nothing of a container:
        the runtime's status stands.
        """
        status = self.wait_for(self.runtime_pid)
        if self.ended_by_itself:
            return status
        adopted = processes.children()
        if not adopted:
            return status
        ran = bool(self._container_init())
        # The oldest is the runtime; any other is a helper command (RunTimeQuery, say)
        # whose shell the same signal killed. They are waited for too, not heard.
        self.runtime_pid = adopted[0]
        if self.guard is not None:
            self.guard.tell_runtime(self.runtime_pid)
        after = self.wait_for(self.runtime_pid)
        while helpers := processes.children():
            self.wait_for(helpers[0])
        self.ended_by_itself = False
        return after if ran else status

    def _spawn(self, commands: RuntimeCommands, directive: str,
               args: list[str] | None = None, detach: bool = False,
               ) -> Child:
        """Start the runtime command that brings the container up, with the streamed
        stdio when there is one (else this process's own)."""
        stdio = (self.stdio.child_ends(not detach and commands.copies_output(directive))
                 if self.stdio is not None else None)
        preserve = self.preserve_fds if directive in ("RunTimeRun", "RunTimeCreate") else 0
        process = commands.spawn(directive, args, stdio, preserve, detach)
        if self.stdio is not None:
            self.stdio.spawned()
        return process

    def run_mode(self, commands: RuntimeCommands) -> int:
        self.process = self._spawn(commands, "RunTimeRun")
        self.runtime_pid = self.process.pid
        self._set_pid(self.process.pid, runtime=True)
        return self._wait_runtime()

    def detached_run_mode(self, commands: RuntimeCommands) -> int:
        """Run mode for a runtime that in the foreground would copy the container's
        output through pipes of its own (runc): run detached instead, the container
        inheriting the agent's stdio (the caller's own, or pipes spliced into the
        streams in chunks as large as the pipe holds) rather than the runtime copying
        its every small write. The runtime ends once the container runs; its init,
        adopted by this agent as subreaper, is waited for."""
        run = self._spawn(commands, "RunTimeRun", detach=True)
        if self.guard is not None:
            self.guard.tell_runtime(run.pid)
        if run.wait() != 0:
            raise RuntimeCommandError(f"RunTimeRun exited {run.returncode}")
        adopted = processes.children()
        if not adopted:
            raise RuntimeCommandError("RunTimeRun --detach left no container process")
        self.container_pid = adopted[0]
        # The runtime's run returns once it told its init to go on: maybe before the
        # init's exec (runc's often, under load).
        processes.await_exec(self.container_pid)
        self._set_pid(self.container_pid)
        self._report_running()
        return self.wait_for(self.container_pid)

    def restore_mode(self, commands: RuntimeCommands, order: dict[str, Any]) -> int:
        """Restore the task's container from its images, in the foreground like run."""
        from pyscrun.node import criu, images  # a restore's only, off every run's way

        assert self.task_dir is not None
        if not criu.images_here(order):
            order = images.fetch(self.control, order, self.ident.task_id, self.task_dir,
                                 self._handle)
        commands = self._for(order)
        commands.require("RunTimeRestore")
        pid_file = os.path.join(self.task_dir, "restored.pid")
        self.process = self._spawn(commands, "RunTimeRestore",
                                   criu.restore_args(order, self.ident.task_id, pid_file))
        self.runtime_pid = self.process.pid
        self._set_pid(self.process.pid, runtime=True)
        # create (and so podman) waits until every task runs again, or failed to. The
        # runtime's state says running while CRIU still holds the tasks; its pid file
        # comes once CRIU let them go (a kill before that left `runc restore` hung and
        # its criu-root mount behind, blocking the container's delete).
        while True:
            exited = self.process.poll() is not None
            # Read after the poll: a pid file written just before the runtime's exit (a
            # container that ended at once) still says the restore worked.
            pid = processes.pid_in(pid_file)
            if pid:
                self.running_reported = True
                self._send({"event": "running", "pid": pid})
                # Fetched images are of no more use once CRIU let the tasks go, and
                # would take the node's memory (/run) while the container runs.
                images.discard_local(self.task_dir)
                break
            if exited:
                raise RuntimeCommandError(criu.with_criu_error(
                    f"RunTimeRestore exited {self.process.returncode}",
                    criu.task_work_dir(order, self.ident.task_id), criu.RESTORE_LOG))
            time.sleep(0.02)
        return self._wait_runtime()

    def create_start_mode(self, commands: RuntimeCommands) -> int:
        # The runtime's create forks the container and exits: as subreaper this agent
        # inherits the container process and so learns its exit status.
        created = self._spawn(commands, "RunTimeCreate")
        if self.guard is not None:
            self.guard.tell_runtime(created.pid)
        if created.wait() != 0:
            raise RuntimeCommandError(f"RunTimeCreate exited {created.returncode}")
        deadline = time.monotonic() + CREATE_TIMEOUT
        while True:
            document = commands.query() or {}
            if document.get("status") == "created":
                break
            if time.monotonic() > deadline:
                raise RuntimeCommandError("the runtime did not report the container created")
            time.sleep(0.02)
        pid = int(document.get("pid", 0))
        self.created_init = pid
        self._set_pid(pid)
        code, _ = commands.run("RunTimeStart")
        if code != 0:
            raise RuntimeCommandError(f"RunTimeStart exited {code}")
        self._report_running()
        return self.wait_for(pid)

    def _run_container(self, commands: RuntimeCommands, own_pid_namespace: bool,
                       terminal: bool) -> int:
        """Bring the container up in the way the configuration says; its exit status.
        own_pid_namespace: its init is pid 1 of a pid namespace of its own. terminal:
        the container's stdio is this process's terminal, which the runtime's
        foreground run sets up for it."""
        restore = self.env.get("PYSCRUN_AGENT_RESTORE")
        detached = (not restore and self.conf.run_mode and not terminal
                    and commands.copies_output("RunTimeRun"))
        # Whether the mode waits for the container's init rather than the runtime.
        waits_for_init = not restore and (detached or not self.conf.run_mode)
        status: int | None = None
        try:
            if restore:
                status = self.restore_mode(commands, jsonc.loads(restore))
            elif detached:
                status = self.detached_run_mode(commands)
            elif self.conf.run_mode:
                status = self.run_mode(commands)
            else:
                status = self.create_start_mode(commands)
        finally:
            if status is not None and not own_pid_namespace:
                # Its init's end ended nothing else of it: what it left, adopted by
                # this agent, ends now, holding its output no longer (the runtime's
                # delete cannot always do it: rootless runc without a cgroup).
                processes.end_adopted()
            if status is None:
                stop_and_delete(commands)
            elif waits_for_init and own_pid_namespace:
                # Nothing of it is left to hold its output or to end: the runtime's
                # delete can wait until the anchor has the status.
                self.delete_after_report = commands
            elif waits_for_init:
                delete_ended(commands)
            elif not self.ended_by_itself:
                # A foreground run or restore that ended by itself has removed its
                # container; one killed may have left it to kill and delete.
                stop_and_delete(commands)
        return status
