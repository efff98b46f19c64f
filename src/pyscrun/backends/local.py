"""The local backend: no scheduler, the node agent runs on this machine.

The default where no Slurm is configured, and the fast path for testing the OCI layer.
The agent is forked, not executed, so a container costs no second interpreter start.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import os
import socket
import sys

from pyscrun import log
from pyscrun.backends.base import Allocation, Backend, LaunchRequest, Step
from pyscrun.conf.site import Site
from pyscrun.console import make_controlling_terminal
from pyscrun.node import exec_into_command
from pyscrun.oci.state import ContainerState
from pyscrun.shell import run_shell


class LocalBackend(Backend):
    name = "local"

    def allocate(self, site: Site, state: ContainerState, options: dict[str, str],
                 environ: dict[str, str], interrupt_fd: int = -1,
                 queued_is_enough: bool = False, started: object = None,
                 variables: bool = False, warn_before: int = 0) -> Allocation:
        # The anchor's pid and start time name the "job": like a Slurm job id, never
        # reused (until reboot), so the task dir and runtime ids a container left behind
        # after a crash cannot stand in the way of a later container with the same pid.
        return Allocation(job_id=f"local{state.pid}.{state.pid_start}",
                          nodes=[socket.gethostname()], owned=True)

    def launch(self, site: Site, allocation: Allocation, request: LaunchRequest) -> Step:
        pid = os.fork()
        if pid:
            return Step(pid)
        code = 255
        try:
            _signal.set_wakeup_fd(-1)
            for signum in range(1, _signal.NSIG):
                try:
                    _signal.signal(signum, _signal.SIG_DFL)
                except (OSError, ValueError):
                    continue
            if request.terminal_fd is not None:
                make_controlling_terminal(request.terminal_fd)
            else:
                os.setsid()
            log.current.close_file()
            # As on a compute node, the agent's errors go to the container's stderr,
            # where podman shows them.
            log.current.stderr = sys.stderr
            # The caller's fds that go to the container (--preserve-fds) stay 3, 4, ...
            os.closerange(3 + request.preserve_fds, 1 << 16)
            from pyscrun.node import entry, userns

            # The caller's own Slurm variables (podman run inside a job) are not ours.
            env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
            env.update(request.job_env)
            env.update(request.agent_env)
            code = entry.main(env, userns.Entering(env))
        finally:
            os._exit(code)

    def exec_command(self, site: Site, job_id: str, env: dict[str, str], terminal: bool,
                     ) -> tuple[list[str], dict[str, str]]:
        return (exec_into_command(),
                {**os.environ, **env, "PYSCRUN_EXEC_SLURM_CONF": site.slurm_conf})

    def release(self, site: Site, allocation: Allocation) -> None:
        """Nothing is held beyond the agent, which is gone by now."""

    def remote_command(self, site: Site, allocation: Allocation, script: str,
                       env: dict[str, str], interrupt_fd: int = -1) -> tuple[int, str]:
        return run_shell(script, env, interrupt_fd)

    def cleanup_orphan(self, site: Site, state: ContainerState) -> None:
        """A local agent notices its anchor is gone and ends the container itself."""
