"""The node agent: prepares one task's container and runs it with the low-level runtime.

Started by the anchor (local backend) or as a Slurm job step task (srun), on a node
that may share nothing with the anchor's host but the network. It dials the anchor's
port on the address Slurm gives the task, proves it holds the container's secret,
keeps that connection for orders (kill, checkpoint) and reports, and streams the
container's stdio over it when the anchor asks for that.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import gc
import os

from pyscrun import log, poller
from pyscrun.channel import frames, peer, streams, tcp
from pyscrun.child import Child
from pyscrun.conf.ociconf import OciConf
from pyscrun.errors import ScrunError
from pyscrun.node import labels, processes, sealed_program
from pyscrun.node.early import CREATING
from pyscrun.node.guard import Guard
from pyscrun.node.runtime import RuntimeCommands, delete_ended
from pyscrun.node.sealed_program import Sealing
from pyscrun.node.signals import ContainerSignals
from pyscrun.node.stdio import ContainerStdio
from pyscrun.node.task import Task, TaskIdentity, bundle_shipped
from pyscrun.watch import watch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

DIAL_TIMEOUT = 10.0
# Once the container ended, how long its output may move nothing before what is left
# is given up (a process of the container may still hold its stdout, or the anchor
# take nothing): then its status goes. A slow reader is waited for.
OUTPUT_DRAIN_TIMEOUT = 10.0
REPORT_TIMEOUT = 30.0


class Agent(ContainerSignals):
    def __init__(self, env: dict[str, str], conf: OciConf,
                 derived_commands: Callable[[str], dict[str, str]],
                 sealing: Sealing | None = None) -> None:
        self.env = env
        self.sealing = sealing  # copies of the runtime's program being made
        self.conf = conf
        self.selector = poller.Poller()
        self.control: peer.Peer | None = None
        self.stdio: ContainerStdio | None = None
        self.task_dir: str | None = None
        self.delete_after_report: RuntimeCommands | None = None
        self.commands: RuntimeCommands | None = None
        self.process: Child | None = None
        # The runtime process waited for: the shell that runs RunTimeRun or
        # RunTimeRestore, or the runtime itself once that shell is gone.
        self.runtime_pid = 0
        self.container_pid = 0
        # create/start mode: the init the runtime created (0: none yet), the container's
        # once it has exec'd the container's process.
        self.created_init = 0
        self.pending_signals: list[tuple[int, bool]] = []
        # When the container was sent SIGKILL: its runtime must end soon after.
        self.killed_at: float | None = None
        self.paused = False
        self.ended_by_itself = False
        self.guard: Guard | None = None
        self.ident = TaskIdentity(env)
        # The runtime commands of pyscrun.conf (RunTimeCheckpoint, RunTimePause, ...), given
        # the criu an order names ('' for the runtime's own choice).
        self.derived_commands = derived_commands
        # The anchor learns when the container runs and its init's pid, when it asks
        # (an order waits for every task to run) or from the start (the local backend's
        # stand-in takes the container's namespaces): RunTimeQuery is asked until then.
        # A restore says so by itself.
        self.restoring = bool(env.get("PYSCRUN_AGENT_RESTORE"))
        self.running_wanted = env.get("PYSCRUN_AGENT_RUNNING") == "report" and not self.restoring
        self.running_reported = False
        # The caller's fds 3.. for the container (--preserve-fds; the local backend only).
        self.preserve_fds = int(env.get("PYSCRUN_AGENT_PRESERVE_FDS") or 0)
        # A step launched at create: the container waits for its start (the anchor's go).
        self.held = env.get("PYSCRUN_AGENT_HOLD") == "1"
        # The job's warning of its end (0: none): the anchor moves the container then.
        self.move_signal = int(env.get("PYSCRUN_AGENT_MOVE_SIGNAL") or 0)

    # -- control channel -------------------------------------------------------------
    def connect(self) -> None:
        """The control connection and, when the anchor streams the container's stdio,
        one connection per output stream: dialed together, as each handshake waits on
        the anchor."""
        if not self.env.get("PYSCRUN_AGENT_PORT"):
            return  # started by hand: no anchor waits
        streaming = self.env.get("PYSCRUN_AGENT_STDIO") == "stream" and not os.isatty(0)
        kinds = (frames.STDOUT, frames.STDERR) if streaming else ()
        self.control, *outputs = peer.dial_all(*anchor_address(self.env), DIAL_TIMEOUT,
                                               1 + len(kinds))
        tasks = int(self.env.get("SLURM_NTASKS") or 1)
        self.control.send(frames.message({
            "op": "agent-hello", "task": self.ident.task_id, "node": self.ident.node,
            "step": self.ident.step_id, "tasks": tasks}))
        if streaming:
            sockets = streams.claim(dict(zip(kinds, outputs, strict=True)), self.ident.task_id,
                                    DIAL_TIMEOUT, tasks)
            self.stdio = ContainerStdio(with_stdin=self.ident.task_id == "0", outputs=sockets,
                                        label=labels.label_of(self.env))
            self.stdio.attach(self.selector)
        self._rearm()
        self._handle(self.control.receive() if self.control.early else [])

    def _rearm(self) -> None:
        """Tell the anchor what the container took of its stdin, and watch the anchor's
        connection for what can be done now: reading unless more stdin came than the
        window lets, writing while frames wait to be sent."""
        if self.control is None:
            return
        taken = self.stdio.taken_to_tell() if self.stdio is not None else 0
        if taken:
            self._send({"event": "stdin-taken", "bytes": taken})
        events = 0 if self.stdio is not None and self.stdio.stdin_full() else poller.READ
        if self.control.pending:
            events |= poller.WRITE
        watch(self.selector, self.control.sock, events, "control")

    def _on_control(self, events: int) -> None:
        assert self.control is not None
        if events & poller.WRITE:
            self.control.flush()
        if not events & poller.READ:
            return
        try:
            received = self.control.receive()
        except peer.PeerGone:
            # The anchor is gone: nobody will collect this container, so end it.
            log.current.info("anchor connection lost: killing the container")
            self.selector.unregister(self.control.sock)
            self.control.close()
            self.control = None
            self.deliver(_signal.SIGKILL)
            return
        self._handle(received)

    def _send(self, message: dict[str, object]) -> None:
        if self.control is not None:
            self.control.send(frames.message(message))
            self._rearm()

    def _running_unreported(self) -> bool:
        return self.running_wanted and not self.running_reported

    def _report_running(self) -> None:
        if not self._running_unreported() or self.commands is None:
            return
        pid = self._container_init()
        if not pid:
            return
        self.running_reported = True
        # Without RunTimeQuery the runtime's own process is all there is to name.
        known = pid != self.runtime_pid
        self._send({"event": "running", "pid": pid if known else None})

    # -- the run ---------------------------------------------------------------------
    def wait_for(self, pid: int) -> int:
        """Serve the control channel and signals until pid exits; its exit status."""
        pidfd = os.pidfd_open(pid)
        self.selector.register(pidfd, poller.READ, "exit")
        try:
            while True:
                # A signal that arrived before the container existed is retried soon,
                # and the container's init looked for until it is found.
                timeout = 0.05 if self.pending_signals or self._running_unreported() else None
                stuck = self._stuck_runtime_wait(pid)
                if stuck is not None:
                    timeout = stuck if timeout is None else min(timeout, stuck)
                for key, events in self.selector.select(timeout):
                    if key.data == "exit":
                        status, self.ended_by_itself = processes.wait_status(pid)
                        return status
                    self._dispatch(key, events)
                self._flush_signals()
                self._report_running()
                self._rearm()
        finally:
            self.selector.unregister(pidfd)
            os.close(pidfd)

    def _dispatch(self, key: poller.Key, events: int) -> None:
        if key.data == "control":
            self._on_control(events)
        elif key.data == "signal":
            self._on_signal(key.fileobj)  # type: ignore[arg-type]
        elif self.stdio is not None and key.data[0] == "stdin":
            self.stdio.write_stdin()

    def _hold(self) -> int | None:
        """A step launched at create waits here for the container's start (the
        anchor's go), serving orders and signals meanwhile: the status of a container
        ended before it started (killed, or its anchor gone), else None."""
        while self.held:
            ending = self._ending_signals()
            if ending:
                return 128 + ending[0]
            self.pending_signals.clear()
            for key, events in self.selector.select():
                self._dispatch(key, events)
            self._rearm()
        return None

    def _go(self) -> None:
        """The anchor's go: the container starts, unless a signal that ends it came
        first (then the go, in the same read, is too late)."""
        if not self._ending_signals():
            self.held = False

    def _start_guard(self, task: Task) -> Callable[[RuntimeCommands], None]:
        def start(commands: RuntimeCommands) -> None:
            # Should this process be killed, the guard ends the container in its place.
            self.guard = Guard.start(commands, task.cleanup)

        return start

    def _set_pid(self, pid: int, runtime: bool = False) -> None:
        """The pid `%p` stands for, here and in the guard (which also learns whether
        it is the runtime's own process)."""
        assert self.commands is not None
        self.commands.set_pid(pid)
        if self.guard is not None:
            self.guard.tell_pid(pid)
            if runtime:
                self.guard.tell_runtime(pid)

    def main(self) -> int:
        task = Task(self.conf, self.ident, self.env)
        self.task_dir = task.dir
        self._catch_signals(task.terminal)
        self.connect()
        try:
            baseline = None
            if bundle_shipped(self.env):
                # Loaded when a bundle comes, off the way of every other container.
                from pyscrun.node import shipped
                from pyscrun.node.rootfs_changes import Baseline

                task.source = shipped.fetch(self.control, task.shipped_dir, self._handle)
                if self.ident.task_id == "0":
                    baseline = Baseline(os.path.join(task.shipped_dir, "rootfs"))
            if self.sealing is not None:
                self.sealing.wait()  # before the guard is forked
            self.commands = commands = task.prepare(lambda: self.derived_commands(""),
                                                    self._start_guard(task))
            if sealed_program.needed():
                # The command that starts the container's process runs from a sealed copy.
                commands.seal_programs(("RunTimeRestore",) if self.restoring else CREATING,
                                       self.sealing)
            if self.sealing is not None:
                self.sealing.close()
            # After the guard started: it must not be adopted back.
            processes.set_child_subreaper()
            # What start-up made stays uncollected (node/__main__.py) from here on.
            gc.freeze()
            gc.enable()
            status = self._hold()
            if status is None:
                status = self._run_container(commands, task.own_pid_namespace, task.terminal)
            if baseline is not None:
                from pyscrun.node import shipped

                try:
                    shipped.send_back(self.control, task.shipped_dir, baseline)
                except (ScrunError, OSError) as err:
                    log.current.error(f"the container's changes to its rootfs stay on "
                                      f"{self.ident.node}: {err}")
            reported = self._report_exit(status)
        finally:
            if self.delete_after_report is not None:
                delete_ended(self.delete_after_report)
            task.cleanup()
            if self.guard is not None:
                self.guard.stand_down()
        return reported

    def _report_exit(self, status: int) -> int:
        """Tell the anchor the container's status, after the last of its output; the
        agent then exits 0 itself.

        A launcher such as srun would otherwise print its own complaint about a non-zero
        task into the container's stderr.
        """
        if self.control is None:
            return status
        if self.stdio is not None:
            self.stdio.finish(OUTPUT_DRAIN_TIMEOUT)
        self.control.send(frames.message({"event": "exit", "status": status}))
        if not self.control.flush_blocking(REPORT_TIMEOUT):
            return status
        # An order that came after the container's end (report-running, say) is
        # still to be read: the anchor closes once it has the status.
        self.control.hang_up(REPORT_TIMEOUT)
        return 0


def anchor_address(env: dict[str, str]) -> tuple[str, int, bytes]:
    """Where the anchor waits, at the address Slurm gives the task (the host srun was
    started on), and the container's secret."""
    host = tcp.launch_host(env) or env.get("PYSCRUN_AGENT_HOST", "")
    if not host:
        raise ScrunError("no address to reach the anchor at (SLURM_SRUN_COMM_HOST is unset)")
    return host, int(env["PYSCRUN_AGENT_PORT"]), bytes.fromhex(env.get("PYSCRUN_AGENT_SECRET", ""))
