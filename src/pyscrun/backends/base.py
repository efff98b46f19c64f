"""What the anchor needs of a scheduler: allocate, launch the node agents, release."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyscrun.conf.site import Site
from pyscrun.oci.state import ContainerState


@dataclass
class Allocation:
    job_id: str
    nodes: list[str]
    owned: bool  # False when the job was given (SLURM_JOB_ID): never end it
    env: dict[str, str] = field(default_factory=dict)  # the job's SLURM_* variables


@dataclass
class LaunchRequest:
    """Everything a node agent needs, passed to it as PYSCRUN_AGENT_* variables."""

    agent_env: dict[str, str]
    job_env: dict[str, str]
    terminal_fd: int | None  # pty slave for a terminal container, else None
    step_args: list[str] = field(default_factory=list)  # scheduler options for the step
    pass_stdio: bool = False  # agents take the container's stdio from the anchor


@dataclass
class Step:
    pid: int  # the process the anchor waits on: the agent itself, or srun


class Backend:
    """The base of every backend (a plain class: typing.Protocol costs an import)."""

    name = "abstract"

    def allocate(self, site: Site, state: ContainerState, options: dict[str, str],
                 environ: dict[str, str]) -> Allocation:
        raise NotImplementedError

    def launch(self, site: Site, allocation: Allocation, request: LaunchRequest) -> Step:
        raise NotImplementedError

    def release(self, site: Site, allocation: Allocation) -> None:
        raise NotImplementedError

    def remote_command(self, site: Site, allocation: Allocation, script: str) -> tuple[int, str]:
        """Run `/bin/sh -c script` once on every node of the job: (status, output)."""
        raise NotImplementedError

    def cleanup_orphan(self, site: Site, state: ContainerState) -> None:
        """End what a dead anchor left behind (its job)."""
        raise NotImplementedError
