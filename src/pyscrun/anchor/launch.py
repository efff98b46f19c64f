"""The container's step: started now or once its queued job runs, a node agent on
every task, and the launcher killed when the step will not end.

A base of the anchor (anchor/daemon.py), which holds the state it works on."""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import _socket
import os

from pyscrun import identity, jsonc, log, mountinfo, poller
from pyscrun.anchor.orders import SLURM_KILL_AFTER, Orders
from pyscrun.anchor.stdio import CallerStdio
from pyscrun.backends.base import MOVE_SIGNAL, LaunchRequest
from pyscrun.channel import frames
from pyscrun.conf import scrun_env
from pyscrun.errors import BackendError, CheckpointError, InvalidState, ScrunError
from pyscrun.oci.state import CREATED, RUNNING
from pyscrun.watch import watch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pyscrun.anchor.agent_port import AgentPort
    from pyscrun.backends.base import Allocation
    from pyscrun.conf.site import Site


class Launch(Orders):
    # What the anchor holds (anchor/daemon.py), beside what Orders uses.
    site: Site
    selector: poller.Poller
    secret: bytes
    allocation: Allocation | None
    step_status: int | None  # once the step ended (and was reaped)
    agent_port: AgentPort | None
    stdio: CallerStdio | None
    bundle_probe: str
    launch_error: str  # why the step launched at create could not be
    # srun's own stdout and stderr, of a step launched before start, until start.
    launcher_output: dict[int, _socket.socket]
    mount_table: mountinfo.MountTable | None  # this host's, read once when first needed

    def _mounts(self) -> mountinfo.MountTable:
        if self.mount_table is None:
            self.mount_table = mountinfo.MountTable()
        return self.mount_table

    def _launches_early(self) -> bool:
        """Whether the step is launched as soon as the job runs, at create, its agents
        held until start: srun's step launch and the agents' own start then overlap
        podman's work between create and start. Through Slurm only (the local backend's
        agent is a fork), and not for a terminal (srun --pty sizes the terminal once,
        at its start, which docker does only after start)."""
        return self.backend.name == "slurm" and not self.request.bundle.terminal

    def _launch_early(self) -> None:
        """At create: the step, if the job runs. A launch that fails is the start's
        failure, as it would have been there."""
        assert self.allocation is not None
        if not self._launches_early() or self.allocation.queued:
            return
        try:
            self._launch()
        except ScrunError as err:
            log.current.error(f"launching the container's step: {err}")
            self.exit_status = None
            self.launch_error = str(err)

    def _start(self) -> bool:
        """Start the container; whether the answer waits until every task runs it: it
        does once a step runs (launched at create, whose agents only now run the
        container, or launched now), not for a job still queued."""
        if self.state.status != CREATED:
            raise InvalidState(f"cannot start a container that is {self.state.status}")
        assert self.allocation is not None
        if self.launch_error:
            self.exit_status = 255
            raise BackendError(self.launch_error)
        self.state.status = RUNNING
        try:
            self.store.save(self.state)
        except ScrunError:
            # Written before it is acted on: nothing started, and start may come again.
            self.state.status = CREATED
            raise
        if self.step is not None:
            self.agents.start()
            self.agents.ask_running()
            if self.stdio is not None:
                for kind, sock in self.launcher_output.items():
                    self.stdio.take(sock, kind, launcher=True)
            self.launcher_output = {}
            return True
        if self.allocation.queued:
            # Started once its job runs. podman shows the container's stderr from now.
            log.tell_caller(f"scrun: job {self.allocation.job_id} queued and waiting for resources")
            return False
        self._launch()
        self.agents.ask_running()
        return True

    def _follow_queued_job(self, fd: int) -> None:
        """The queued job came (stage in, and launch if started) or never will."""
        assert self.allocation is not None
        try:
            self.backend.advance(self.allocation)
            if self.allocation.queued:
                return
            watch(self.selector, fd, 0, "queued")
            self.staging.stage_in(self.allocation)
            if self.state.status == RUNNING:
                self._launch()
            else:
                self._launch_early()
        except ScrunError as err:
            watch(self.selector, fd, 0, "queued")
            log.current.error(str(err))
            log.tell_caller(f"scrun: error: {err}")
            self.exit_status = 255

    def _launch(self) -> None:
        """The step: a node agent on every task."""
        assert self.allocation is not None and self.agent_port is not None
        agent_env = {
            "PYSCRUN_AGENT_CONTAINER_ID": self.state.id,
            "PYSCRUN_AGENT_BUNDLE": self.staging.bundle,
            "PYSCRUN_AGENT_PORT": str(self.agent_port.port),
            "PYSCRUN_AGENT_SECRET": self.secret.hex(),
            "PYSCRUN_AGENT_JOB_ID": self.allocation.job_id,
            # The step's command, as srun gives it: what IgnoreFileConfigJson runs.
            "PYSCRUN_AGENT_ARGS": jsonc.dumps(self.request.bundle.config["process"]["args"]),
        }
        if self.state.status == CREATED:
            agent_env["PYSCRUN_AGENT_HOLD"] = "1"  # until start
        if self.request.restore is not None:
            agent_env["PYSCRUN_AGENT_RESTORE"] = jsonc.dumps(self.request.restore)
        if self.request.move_before_end() and self.allocation.owned:
            # Its agents take the job's warning as the word to move, not the container's.
            agent_env["PYSCRUN_AGENT_MOVE_SIGNAL"] = str(MOVE_SIGNAL)
        if self.backend.name == "local":
            # The agent runs on this machine, with its configuration: it dials the
            # anchor on loopback.
            agent_env["PYSCRUN_AGENT_HOST"] = "127.0.0.1"
            agent_env["PYSCRUN_AGENT_SLURM_CONF"] = self.site.slurm_conf
            # Its stand-in takes the container's namespaces as soon as it runs.
            agent_env["PYSCRUN_AGENT_RUNNING"] = "report"
            if self.request.preserve_fds:
                agent_env["PYSCRUN_AGENT_PRESERVE_FDS"] = str(self.request.preserve_fds)
        else:
            # An ordinary user's container runs on the node in the user namespace
            # rootless podman gave it here, unless scrun.lua gave it one of its own.
            if not self.staging.maps_its_own_users():
                agent_env["PYSCRUN_AGENT_USERNS"] = identity.namespace_maps()
            # The container's /dev/shm, a tmpfs mounted here that no node sees.
            from pyscrun.oci.shm import tmpfs_options

            shm = tmpfs_options(self.request.bundle.config, self._mounts())
            if shm is not None:
                agent_env["PYSCRUN_AGENT_SHM"] = shm
            # A node that does not see the bundle asks for it (anchor/shipping.py, loaded
            # then: not on every container's way to its start); a rootfs mounted here
            # (docker's overlay) no node sees.
            from pyscrun.anchor.checkpointing import place_probe

            self.ships_bundle = True
            if self._mounts().at(self.staging.rootfs) is not None:
                agent_env["PYSCRUN_AGENT_BUNDLE_SHIP"] = "always"
            else:
                try:
                    self.bundle_probe = place_probe(self.staging.bundle)
                    agent_env["PYSCRUN_AGENT_BUNDLE_PROBE"] = os.path.basename(self.bundle_probe)
                except CheckpointError as err:
                    log.current.debug(f"no probe in the bundle ({err}): nodes see it")
        pass_stdio = self.backend.name == "slurm" and self.terminal_fd is None
        if pass_stdio:
            if self.stdio is None:  # a container moved to a new job keeps its caller's
                self.stdio = CallerStdio()
            agent_env["PYSCRUN_AGENT_STDIO"] = "stream"
        # Launched before start, srun's own output (a value it refuses, an agent's
        # error) waits in sockets of the anchor's until start, then joins the
        # container's: the caller attaches to that only once create returned.
        held = {kind: _socket.socketpair() for kind in (frames.STDOUT, frames.STDERR)} \
            if pass_stdio and self.state.status == CREATED else {}
        request = LaunchRequest(
            agent_env=agent_env,
            job_env={**self.staging.output_env(), **self.allocation.env},
            terminal_fd=self.terminal_fd,
            step_args=scrun_env.arguments(self.request.job_options, scrun_env.STEP),
            pass_stdio=pass_stdio,
            preserve_fds=self.request.preserve_fds,
            output=(held[frames.STDOUT][1].fileno(), held[frames.STDERR][1].fileno())
            if held else None,
        )
        try:
            self.step = self.backend.launch(self.site, self.allocation, request)
        except ScrunError:
            self.exit_status = 255
            for ours, _ in held.values():
                ours.close()
            raise
        finally:
            for _, launcher_end in held.values():
                launcher_end.close()
        self.launcher_output = {kind: ours for kind, (ours, _) in held.items()}
        self.selector.register(os.pidfd_open(self.step.pid), poller.READ, "step")
        # The container's stdio now belongs to the step alone.
        _detach_stdio()
        if self.terminal_fd is not None:
            os.close(self.terminal_fd)
            self.terminal_fd = None

    def _kill_through_slurm(self) -> None:
        """SIGKILL did not end the container within SLURM_KILL_AFTER: its node agents
        cannot act on it, most likely because Slurm suspended the job and stopped every
        process of its steps. Slurm's own SIGKILL reaches them, stopped or not (the
        node's guard then cleans up after the agent)."""
        self.slurm_kill_at = None
        if (self.step is None or self.step_status is not None or self.allocation is None
                or not self.agents.step_id):
            return  # no step, or it has ended: nothing of it left to kill
        step = f"{self.allocation.job_id}.{self.agents.step_id}"
        log.current.error(f"the container did not end within {SLURM_KILL_AFTER:.0f} s of "
                          f"SIGKILL (its job suspended?): Slurm kills step {step}")
        try:
            self.backend.kill_step(self.site, self.allocation, self.agents.step_id)
        except ScrunError as err:
            log.current.error(f"cannot kill step {step}: {err}")

    def _force_stop(self) -> None:
        """The step ignored SIGKILL for KILL_GRACE seconds, or outlived its node agents
        by AGENT_LOST_GRACE: kill its launcher."""
        self.kill_deadline = None
        if self.step is None:
            self.exit_status = 128 + _signal.SIGKILL
        elif self.step_status is None:
            log.current.error("the container's step did not end: killing its launcher")
            try:
                os.kill(self.step.pid, _signal.SIGKILL)
            except ProcessLookupError:
                pass
        # A step that ended was reaped (its pid may be another process's now): what is
        # left is the drain, which its own deadline ends.


def _detach_stdio() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    os.close(null)
