"""The anchor: one daemon per container, holding its stdio, job and control socket.

create forks it; it allocates the job, reports `created` through a pipe, then serves
the control socket until the container has run and its job is released. It exits with
the container's exit status, which is what conmon (a subreaper) reports to podman.
A restore is a create that launches the node agents at once and reports only when
every task runs again.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import gc
import os
import time

from pyscrun import backends, identity, log, poller, selfpipe
from pyscrun.anchor.agent_port import AgentPort
from pyscrun.anchor.agents import AgentLink, Agents
from pyscrun.anchor.control import Connection, ControlSocket
from pyscrun.anchor.ending import DRAIN_TIMEOUT, wait_status
from pyscrun.anchor.moving import Moving
from pyscrun.anchor.request import TERMINATING_SIGNALS, CreateRequest
from pyscrun.anchor.staging import Staging
from pyscrun.anchor.stdio import HIGH_WATER, CallerStdio
from pyscrun.anchor.task_orders import TaskOrder
from pyscrun.backends.base import Allocation, Step
from pyscrun.channel import frames
from pyscrun.errors import CheckpointError, ScrunError
from pyscrun.fs import write_all, write_pid_file
from pyscrun.node.criu import PROBE, UNPROBED
from pyscrun.oci.state import (
    CREATED,
    PAUSED,
    RUNNING,
    ContainerState,
    process_start_time,
    timestamp,
)
from pyscrun.watch import watch

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket
    from typing import Any, NoReturn

    from pyscrun.anchor.shipping import Shipment

# Once no node agent is left and one of them went without reporting its container's
# end (killed, or its node died), how long the launcher may take to notice.
AGENT_LOST_GRACE = 10.0


class Anchor(Moving):
    def __init__(self, request: CreateRequest) -> None:
        self.request = request
        self.store = request.store
        self.site = request.site
        self.backend = backends.get(request.site.backend)
        # poll, not epoll: the caller's stdio may be a regular file or /dev/null,
        # which epoll refuses to watch.
        self.selector = poller.Poller()
        self.secret = os.urandom(32)
        self.allocation: Allocation | None = None
        self.step: Step | None = None
        self.step_status: int | None = None  # once the step ended
        self.drain_deadline: float | None = None
        self.control: ControlSocket | None = None
        self.agent_port: AgentPort | None = None
        self.terminal_fd: int | None = None
        self.agents = Agents()
        self.kill_deadline: float | None = None
        self.slurm_kill_at: float | None = None
        self.exit_status: int | None = None
        self.unheard = False  # create ended before the anchor's report reached it
        self.ready_fd: int | None = None  # open while a restore waits for its tasks
        self.restore_probe = ""  # while a restore's nodes look for its image path
        self.bundle_probe = ""  # while the nodes look for the bundle
        self.launch_error = ""
        self.launcher_output: dict[int, _socket.socket] = {}
        self.mount_table = None
        self.move_phase = ""
        self.move_dir = ""
        self.move_wanted = False
        self.move_abandoned = False
        # Clients of a checkpoint that stops the container, answered once it has.
        self.stopped_waiters: list[tuple[Connection, dict[str, Any]]] = []
        self.task_order: TaskOrder | None = None  # a pause or resume in progress
        self.unsaved = False  # the status a pause or resume left is not in the file yet
        # Orders for the tasks that wait for every task to run: (client, order, until).
        self.waiting_orders: list[tuple[Connection, dict[str, Any], float]] = []
        # The caller's stdio, while the agents stream the container's: srun's own
        # forwarding is slower, and ends every signal but USR1/USR2 as SIGKILL.
        self.stdio: CallerStdio | None = None
        self.ships_bundle = False  # to a node that asks for it
        self.shipment: Shipment | None = None  # once one asked
        assert request.stand_in is not None
        self.stand_in = request.stand_in
        bundle = request.bundle
        self.state = ContainerState(
            id=request.container_id, bundle=bundle.path, pid=os.getpid(),
            pid_start=process_start_time(os.getpid()), stand_in=self.stand_in.pid,
            stand_in_start=process_start_time(self.stand_in.pid),
            created=timestamp(time.time_ns()),
            annotations=bundle.annotations, rootfs=bundle.rootfs,
            owner=identity.user_name(), backend=self.backend.name,
        )
        self.staging = Staging(request, self.backend, self.state)

    # -- create ----------------------------------------------------------------------
    def _setup(self) -> None:
        self.store.save(self.state)
        self.control = ControlSocket(self.selector, self.store.socket_path(self.state.id),
                                     self._handle)
        self.agent_port = AgentPort(
            self.selector, self.agents, self.secret, self.site.agent_port_range(),
            loopback_only=self.backend.name == "local", on_event=self._agent_event,
            on_stream=self._agent_stream, on_gone=self._agent_gone)
        if self.request.bundle.terminal:
            assert self.request.console_socket
            from pyscrun import console  # termios, for a terminal only

            self.terminal_fd = console.open_console(
                self.request.console_socket,
                self.request.bundle.config["process"].get("consoleSize"),
            )
        # A job that waits in the queue is given up on SIGTERM, SIGINT or SIGHUP. Once
        # queued, create returns: podman holds the container's lock until it does, and
        # only then can `podman rm -f` (or stop) reach it. A restore waits for its job.
        started, self.request.started_allocation = self.request.started_allocation, None
        self.allocation = self.backend.allocate(
            self.site, self.state, self.request.job_options, self.request.job_environ(),
            self.signals, queued_is_enough=self.request.restore is None,
            started=started, variables=self.request.hooks is not None,
            warn_before=self.request.move_before_end())
        self.state.job_id = self.allocation.job_id
        self.state.job_owned = self.allocation.owned
        self.store.save(self.state)
        if self.allocation.queued:
            self.selector.register(self.backend.queue_fd(self.allocation), poller.READ,
                                   "queued")
            # Staged once the job runs: the copy it runs from is known only then.
            same_rootfs = self.staging.hooks is None
        else:
            self.staging.stage_in(self.allocation)
            same_rootfs = self.staging.rootfs == self.state.rootfs
        self.state.status = CREATED
        if self.request.restore is None:
            # The step first: srun's launch and the agents' start overlap the rest of
            # create and of podman's work from here on (what srun says meanwhile waits
            # for start).
            self._launch_early()
        # The stand-in's root is the container's rootfs where this host sees the copy
        # the container runs from, else nothing: a rootfs mounted here goes to the
        # nodes as a copy (anchor/shipping.py).
        if self.backend.name == "slurm" and self._mounts().at(self.state.rootfs) is not None:
            same_rootfs = False
        self.stand_in.set_root(os.path.realpath(self.state.rootfs) if same_rootfs else "")
        self.selector.register(os.pidfd_open(self.stand_in.pid), poller.READ, "stand-in")
        self.store.save(self.state)
        if self.request.pid_file:
            write_pid_file(os.path.abspath(self.request.pid_file), self.stand_in.pid)
        if self.request.restore is not None:
            from pyscrun.anchor.checkpointing import place_probe

            try:
                self.restore_probe = place_probe(str(self.request.restore["image_path"]))
                self.request.restore[PROBE] = os.path.basename(self.restore_probe)
            except CheckpointError as err:
                # Images that can be read but not written beside (a read-only share):
                # they go to the nodes over the channel.
                log.current.info(f"{err}: the nodes are sent the images")
                self.request.restore[PROBE] = UNPROBED
            self._start()

    def run(self, ready_fd: int) -> NoReturn:
        # Caught since the anchor's start (spawn.py): what came meanwhile is read now.
        assert self.request.signals is not None
        self.signals = self.request.signals
        self.selector.register(self.signals, poller.READ, "signal")
        try:
            self._setup()
        except BaseException as err:
            message = str(err) if isinstance(err, ScrunError | OSError) else repr(err)
            log.current.error(f"create failed: {message}")
            if self.allocation is not None:
                # As Slurm's: once stage_in ran, stage_out does, whatever came after.
                self.staging.stage_out(self.allocation)
            self._release()
            if not write_all(ready_fd, f"error {message}\n".encode()):
                self.store.remove(self.state.id)  # create, gone, cannot
            os._exit(1)
        self.ready_fd = ready_fd
        if self.request.restore is None:
            self._report_ready(None)
            if self.backend.name == "local":
                # The agent runs in a fork of this process: load it while podman is
                # busy starting `scrun start`, not after.
                import pyscrun.node.entry  # noqa: F401
        # Forked without collections (anchor/spawn.py); the anchor may serve for days, so
        # it collects from now on, leaving out what start-up made.
        gc.freeze()
        gc.enable()
        try:
            status = self._serve()
        except Exception as err:
            # A defect: say where, then give the job back rather than die silently.
            import traceback

            where = traceback.extract_tb(err.__traceback__)[-1]
            log.current.error(f"anchor failed: {err!r} at {where.filename}:{where.lineno}")
            self._release()
            status = 255
        if self.unheard:
            self.store.remove(self.state.id)
        # Last: what podman sees end must find the job given back and the state stopped.
        self.stand_in.exit(status)
        os._exit(status & 0xFF)

    def _report_ready(self, error: str | None) -> None:
        self._remove_restore_probe()
        if self.ready_fd is None:
            return
        heard = write_all(self.ready_fd, f"error {error}\n".encode() if error else b"ok\n")
        os.close(self.ready_fd)
        self.ready_fd = None
        if not heard:
            # create (or restore) was killed before it heard (containerd kills a
            # cancelled runtime's create so): nobody knows of this container, and
            # nothing of it may stay, its job least of all.
            log.current.error("create ended before it heard from the anchor: "
                              "ending the container")
            self.unheard = True
            if error is None:
                self._kill(_signal.SIGKILL)

    # -- serving ---------------------------------------------------------------------
    def _deadlines(self) -> list[float]:
        found = self.agent_port.deadlines() if self.agent_port is not None else []
        found += self.control.deadlines() if self.control is not None else []
        found += [deadline for _, _, deadline in self.waiting_orders]
        found += [self.task_order.deadline] if self.task_order is not None else []
        return [d for d in (self.kill_deadline, self.slurm_kill_at, self.drain_deadline, *found)
                if d is not None]

    def _serve(self) -> int:
        while self.exit_status is None:
            deadlines = self._deadlines()
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            for key, events in self.selector.select(timeout):
                self._dispatch(key, events)
                if self.exit_status is not None:
                    break
            now = time.monotonic()
            if self.agent_port is not None:
                self.agent_port.expire(now)
            if self.control is not None:
                self.control.expire(now)
            if self.waiting_orders:
                self._give_waiting_orders(now)
            self._expire_task_order(now)
            if (self.slurm_kill_at is not None and self.exit_status is None
                    and now >= self.slurm_kill_at):
                self._kill_through_slurm()
            if (self.kill_deadline is not None and self.exit_status is None
                    and now >= self.kill_deadline):
                self._force_stop()
            self._end_if_drained()
            self._rearm()
        return self._finish(self.exit_status)

    def _rearm(self) -> None:
        """Watch each descriptor for what can be done now: agents are read, and written
        to while frames wait; the caller's stdin is read while task 0's agent takes it;
        the streams' threads are heard when one ends."""
        if self.agent_port is not None:
            self.agent_port.rearm()
        if self.stdio is None:
            return
        watch(self.selector, self.stdio.wake_fd, poller.READ, "streams")
        taker = self.agents.stdin_taker()
        take = (self.stdio.stdin_fd >= 0 and taker is not None
                and taker.peer.pending < HIGH_WATER
                and taker.stdin_unheard < frames.STDIN_WINDOW)
        if self.stdio.stdin_fd >= 0:
            watch(self.selector, self.stdio.stdin_fd, poller.READ if take else 0, "stdin")

    def _dispatch(self, key: poller.Key, events: int) -> None:
        data = key.data
        if data == "stdin":
            self._read_stdin()
        elif data == "streams":
            assert self.stdio is not None
            self.stdio.reap()
        elif isinstance(data, AgentLink | AgentPort):
            assert self.agent_port is not None
            self.agent_port.ready(data, events)
        elif data == "signal":
            if any(s in TERMINATING_SIGNALS for s in selfpipe.received(key.fileobj)):  # type: ignore[arg-type]
                log.current.info("terminating on signal: cancelling the container")
                self._kill(_signal.SIGKILL)
        elif data == "queued":
            self._follow_queued_job(key.fileobj)  # type: ignore[arg-type]
        elif data == "stand-in":
            self.selector.unregister(key.fileobj)
            os.close(key.fd)
            if self.exit_status is None and self.state.status in (CREATED, RUNNING, PAUSED):
                log.current.error("the container's stand-in was killed: ending the container")
                self._kill(_signal.SIGKILL)
        elif data == "step":
            assert self.step is not None
            self.selector.unregister(key.fileobj)
            os.close(key.fd)
            self.step_status = wait_status(self.step.pid)
            # The agents' last frames (output, then status) may still be on their way.
            self.drain_deadline = time.monotonic() + DRAIN_TIMEOUT
        elif isinstance(data, ControlSocket | Connection):
            assert self.control is not None
            self.control.ready(data)

    def _agent_stream(self, sock: _socket.socket, kind: int, tasks: int) -> bool:
        """A task's output stream to take; False if none is wanted."""
        if self.stdio is None:
            return False
        self.stdio.take(sock, kind, tasks=tasks)
        return True

    def _read_stdin(self) -> None:
        assert self.stdio is not None
        data = self.stdio.read_stdin()
        taker = self.agents.stdin_taker()
        if data is None or taker is None:
            return
        taker.peer.send(frames.frame(frames.STDIN, data))
        taker.stdin_unheard += len(data)
        if not data:
            watch(self.selector, self.stdio.stdin_fd, 0, "stdin")
            self.stdio.close_stdin()

    def _agent_gone(self, link: AgentLink) -> None:
        if self._restore_under_way() and not link.reported_exit:
            # A task that could not come back fails the whole restore, or move (its
            # agent's error says why): the others, restored, would run on alone, as
            # srun runs the step with --kill-on-bad-exit=0.
            self._restore_failed()
        self._answer_checkpoint()
        if self.task_order is not None:
            self.task_order.lost(link)
            self._answer_task_order()
        if self.agents.lost and not self.agents.connected and self.step is not None:
            # srun waits for the task of a dead node until slurmctld declares the
            # node down (SlurmdTimeout, minutes): the anchor does not wait that long.
            deadline = time.monotonic() + AGENT_LOST_GRACE
            if self.kill_deadline is None or deadline < self.kill_deadline:
                self.kill_deadline = deadline
