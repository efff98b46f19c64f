"""What the anchor needs of a scheduler: allocate, launch the node agents, release."""

from __future__ import annotations

import os

from pyscrun import child, identity
from pyscrun.conf.site import Site
from pyscrun.errors import BackendError
from pyscrun.oci.state import ContainerState

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def command_missing(err: FileNotFoundError, argv: list[str]) -> BackendError:
    """A scheduler's command (or the unshare that runs it) not installed, as one line."""
    program = os.path.basename(str(err.filename or argv[0]))
    return BackendError(f"{program} not found: install "
                        f"{'util-linux' if program == 'unshare' else 'slurm-client'}")


def start_command(argv: list[str], env: Mapping[str, str],
                  stdio: tuple[int | None, int | None, int | None],
                  new_session: bool = False, group: int | None = None) -> int:
    """A scheduler's command started as the real user (identity.as_real_user) through
    posix_spawn, with stdio, session and group as child.spawn takes them: its pid.
    BackendError, in one line, if it cannot start."""
    spawned = identity.as_real_user(argv)
    try:
        return child.spawn(spawned, env, stdio, new_session=new_session, group=group).pid
    except FileNotFoundError as err:
        raise command_missing(err, argv) from None
    except OSError as err:
        raise BackendError(f"cannot run {spawned[0]}: {err.strerror}") from None


# The signal a job's steps get shortly before its end (MoveBeforeEnd): SIGURG, whose
# default action is to do nothing, so that whatever else of the job it reaches (srun,
# the shell of a plain step) goes on; the node agents take it as the word to move.
MOVE_SIGNAL = 23


class Allocation:
    def __init__(self, job_id: str, nodes: list[str], owned: bool,
                 env: dict[str, str] | None = None, handle: object = None) -> None:
        self.job_id = job_id
        self.nodes = nodes
        self.owned = owned  # False when the job was given (SLURM_JOB_ID): never end it
        self.env = env or {}  # the job's SLURM_* variables
        self.handle = handle  # whatever the backend holds the job with
        self.queued = False  # the job waits in the queue: the backend's advance follows it


class LaunchRequest:
    """Everything a node agent needs, passed to it as PYSCRUN_AGENT_* variables."""

    def __init__(self, agent_env: dict[str, str], job_env: dict[str, str],
                 terminal_fd: int | None, step_args: list[str] | None = None,
                 pass_stdio: bool = False, preserve_fds: int = 0,
                 output: tuple[int, int] | None = None) -> None:
        self.agent_env = agent_env
        self.job_env = job_env
        self.terminal_fd = terminal_fd  # pty slave for a terminal container, else None
        self.step_args = step_args or []  # scheduler options for the step
        self.pass_stdio = pass_stdio  # agents take the container's stdio from the anchor
        self.preserve_fds = preserve_fds  # fds 3.. the agent keeps for the container
        # The launcher's own stdout and stderr, when not the anchor's (the caller's).
        self.output = output


class Step:
    def __init__(self, pid: int) -> None:
        self.pid = pid  # the process the anchor waits on: the agent itself, or srun


class Backend:
    """The base of every backend (a plain class: typing.Protocol costs an import)."""

    name = "abstract"

    def start_allocation(self, site: Site, container_id: str, options: dict[str, str],
                         environ: dict[str, str], variables: bool = False,
                         warn_before: int = 0) -> object:
        """Start asking for the job and return at once, for allocate to wait on
        (`started`); None if there is nothing to start. Never raises. variables: the
        job's variables will be wanted (job_variables). warn_before: seconds before the
        job's end at which its steps get MOVE_SIGNAL (0: never)."""
        return None

    def abandon_allocation(self, site: Site, started: object) -> None:
        """Give up a started request allocate never waited on, leaving no job."""

    def allocate(self, site: Site, state: ContainerState, options: dict[str, str],
                 environ: dict[str, str], interrupt_fd: int = -1,
                 queued_is_enough: bool = False, started: object = None,
                 variables: bool = False, warn_before: int = 0) -> Allocation:
        """The job the container runs in (from started, what start_allocation began,
        if given). A wait for it (a queued job) gives up, and leaves no job, as soon as
        interrupt_fd is readable. queued_is_enough: return once the job is queued
        (`queued` set; follow it with `advance`). variables and warn_before: as
        start_allocation's."""
        raise NotImplementedError

    def job_variables(self, allocation: Allocation) -> dict[str, str]:
        """The variables Slurm makes for the running job (node list, node count,
        partition...), which scrun.lua gets as job_env; BackendError if they cannot be
        had."""
        return allocation.env

    def exec_command(self, site: Site, job_id: str, env: dict[str, str], terminal: bool,
                     ) -> tuple[list[str], dict[str, str]]:
        """How to run node/exec_into.py (node.exec_into_command) where task 0 of job_id runs,
        with env (PYSCRUN_EXEC_*) beside what it needs, its stdio a terminal there if
        terminal: argv and environment."""
        raise NotImplementedError

    def suspended(self, site: Site, job_id: str) -> bool:
        """Whether the scheduler has suspended job_id, and with it every process of its
        steps (False if it cannot say). Only Slurm suspends."""
        return False

    def queue_fd(self, allocation: Allocation) -> int:
        """Readable when a queued job's fate may have changed."""
        raise NotImplementedError

    def advance(self, allocation: Allocation) -> None:
        """What became of a queued job (queue_fd was readable): `queued` is cleared
        once it is granted; BackendError when it never will be."""
        raise NotImplementedError

    def launch(self, site: Site, allocation: Allocation, request: LaunchRequest) -> Step:
        raise NotImplementedError

    def release(self, site: Site, allocation: Allocation) -> None:
        raise NotImplementedError

    def remote_command(self, site: Site, allocation: Allocation, script: str,
                       env: dict[str, str], interrupt_fd: int = -1) -> tuple[int, str]:
        """Run `/bin/sh -c script` once on every node of the job, with env (the job's
        variables) over the anchor's environment: (status, output). What runs here for
        it dies with the anchor; Interrupted if a signal arrives on interrupt_fd first
        (child.run)."""
        raise NotImplementedError

    def kill_step(self, site: Site, allocation: Allocation, step_id: str) -> None:
        """SIGKILL to every process of the job's step on every node, through the
        scheduler: what no node agent could end (its job suspended). Through Slurm
        only: the local backend's agents are this machine's processes, never stopped
        by a scheduler."""
        raise NotImplementedError

    def cleanup_orphan(self, site: Site, state: ContainerState) -> None:
        """End what a dead anchor left behind (its job)."""
        raise NotImplementedError
