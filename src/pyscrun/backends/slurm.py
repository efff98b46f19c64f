"""The Slurm backend: salloc for the job, srun for the node agents, scancel to end it.

Only command-line interfaces that Slurm 22.05 and 24.11 share are used, and their
output is parsed here alone.
"""

from __future__ import annotations

import os
import sys
import time

from pyscrun import child, identity, log
from pyscrun.backends import salloc
from pyscrun.backends.base import (
    MOVE_SIGNAL,
    Allocation,
    Backend,
    LaunchRequest,
    Step,
    command_missing,
    start_command,
)
from pyscrun.backends.salloc import HeldAllocation
from pyscrun.conf import scrun_env
from pyscrun.conf.site import Site
from pyscrun.digits import only_digits
from pyscrun.errors import BackendError
from pyscrun.fs import which
from pyscrun.node import agent_command, exec_into_command
from pyscrun.oci.state import ContainerState

# The anchor asks for its job (start_allocation) before its own modules load: what
# only later steps need is imported where they run.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess

# salloc waits in the queue for as long as the job waits; podman allows create ~240 s.
SALLOC_TIMEOUT = 3600.0
# How long the release of a job keeps trying while slurmctld cannot be reached.
CANCEL_RETRY_TIMEOUT = 120.0
# How long exec, pause and the other orders wait for squeue to say whether the job is
# suspended.
SQUEUE_TIMEOUT = 30.0
# What squeue says of a job a step can still run in (one of them waits until it runs).
LIVE_JOB_STATES = frozenset(("PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "RESIZING"))
# How long the anchor, which waits for it, lets scancel take to kill a step.
KILL_STEP_TIMEOUT = 10.0
_CONTROLLER_AWAY = ("Unable to contact slurm controller", "Socket timed out")
# How long srun --pty waits for its terminal to be given a size (docker sizes it just
# after start; podman sets it before, in config.json's consoleSize).
TERMINAL_SIZE_WAIT = 1.0


def _env(site: Site, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["SLURM_CONF"] = site.slurm_conf
    env.update(extra or {})
    return env


def _slurm_error(stderr: str, fallback: str) -> str:
    """The most telling line of a Slurm command's stderr, as one line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    chosen = (errors or lines or [fallback])[-1]
    for prefix in ("salloc: ", "srun: ", "scancel: ", "error: "):
        chosen = chosen.removeprefix(prefix)
    return chosen


def run_command(site: Site, argv: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    import subprocess

    log.current.debug(f"slurm: {' '.join(argv)}")
    try:
        return subprocess.run(identity.as_real_user(argv), env=_env(site), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError as err:
        raise command_missing(err, argv) from None
    except subprocess.TimeoutExpired:
        raise BackendError(f"{argv[0]} did not finish within {timeout:.0f} s") from None


def _fork_on_terminal(argv: list[str], env: dict[str, str], terminal_fd: int) -> int:
    """srun --pty, its controlling terminal the container's (code in the child: a fork)."""
    pid = os.fork()
    if pid:
        return pid
    try:
        from pyscrun.console import make_controlling_terminal

        make_controlling_terminal(terminal_fd)
        await_terminal_size()
        os.execvpe(argv[0], argv, env)
    except OSError as err:
        # Where the container's errors go: the caller's stderr, and the log.
        log.current.stderr = sys.stderr
        log.current.error(f"cannot run {argv[0]}: {err.strerror}")
    finally:
        os._exit(127)


def await_terminal_size(timeout: float = TERMINAL_SIZE_WAIT) -> None:
    """Wait (up to timeout) until stdin, a terminal, has a size. srun --pty passes the
    size it finds at its start to the step, and a resize (SIGWINCH) arriving before the
    step connected back ends srun's window-size channel ("pty: accept failure")."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            size = os.get_terminal_size(0)
        except OSError:
            return
        if size.lines and size.columns:
            return
        time.sleep(0.01)


def _salloc_argv(container_id: str, options: dict[str, str], warn_before: int) -> list[str]:
    """warn_before: seconds before the job's end at which its steps get MOVE_SIGNAL
    (0: never)."""
    job_name = options.get("SCRUN_JOB_NAME", "scrun")
    warning = [f"--signal={MOVE_SIGNAL}@{warn_before}"] if warn_before else []
    return ["salloc", f"--job-name={job_name}", f"--comment=scrun container {container_id}",
            *warning, *(a for a in scrun_env.arguments(options, scrun_env.ALLOC)
                        if not a.startswith("--job-name="))]


def _node_count(site: Site, job_id: str, variables: dict[str, str]) -> str:
    """How many nodes the job has: among its variables, else as squeue says. Without it
    srun would start one task on the job's first node only."""
    count = variables.get("SLURM_JOB_NUM_NODES", "")
    if only_digits(count):
        return count
    nodes = run_command(site, ["squeue", "-h", "-j", job_id, "-o", "%D"])
    if nodes.returncode != 0 or not only_digits(nodes.stdout.strip()):
        raise BackendError(f"cannot read the node count of job {job_id}: "
                           f"{_slurm_error(nodes.stderr, 'squeue failed')}")
    return nodes.stdout.strip()


def given_job(job_id: str, environ: dict[str, str]) -> Allocation:
    """The job given with SLURM_JOB_ID: its variables are the caller's, as Slurm's scrun
    scrapes them."""
    return Allocation(job_id=job_id, nodes=[], owned=False,
                      env={**salloc.job_variables_in(environ), "SLURM_JOB_ID": job_id})


class SlurmBackend(Backend):
    name = "slurm"

    def start_allocation(self, site: Site, container_id: str, options: dict[str, str],
                         environ: dict[str, str], variables: bool = False,
                         warn_before: int = 0) -> object:
        """salloc, asking at once: its answer comes while the anchor gets ready. None
        where no job is asked for (SLURM_JOB_ID given), or salloc does not start
        (allocate then says why)."""
        if environ.get("SLURM_JOB_ID"):
            return None
        try:
            return HeldAllocation.start(_salloc_argv(container_id, options, warn_before),
                                        _env(site), variables)
        except BackendError:
            return None

    def abandon_allocation(self, site: Site, started: object) -> None:
        if isinstance(started, HeldAllocation):
            job_id = started.abandon()
            if job_id:
                self._cancel(site, job_id)

    def allocate(self, site: Site, state: ContainerState, options: dict[str, str],
                 environ: dict[str, str], interrupt_fd: int = -1,
                 queued_is_enough: bool = False, started: object = None,
                 variables: bool = False, warn_before: int = 0) -> Allocation:
        given = environ.get("SLURM_JOB_ID")
        if given:
            self._check_given_job(site, given)
            return given_job(given, environ)
        try:
            held = started if isinstance(started, HeldAllocation) else \
                HeldAllocation.start(_salloc_argv(state.id, options, warn_before), _env(site),
                                     variables)
            held.await_job(SALLOC_TIMEOUT, interrupt_fd, queued_is_enough)
        except BackendError as err:
            raise BackendError(
                f"job allocation failed: {_slurm_error(str(err), 'salloc failed')}") from None
        log.current.info(f"container {state.id}: job {held.job_id} "
                         f"{'allocated' if held.granted else 'queued'}")
        allocation = Allocation(job_id=held.job_id, nodes=[], owned=True,
                                env={"SLURM_JOB_ID": held.job_id}, handle=held)
        allocation.queued = not held.granted
        return allocation

    def _check_given_job(self, site: Site, job_id: str) -> None:
        """A job the container is to run in is one of the user's that has not ended:
        else create fails, in one line, as Slurm's scrun does (not the start, with
        srun's own words, after stage_in ran for no job)."""
        if not only_digits(job_id):
            raise BackendError(f"invalid SLURM_JOB_ID {job_id[:40]!r}: not a job id")
        # Every state: a job that ended lately is shown as such.
        argv = identity.as_real_user(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"])
        try:
            status, said, _ = child.run(argv, _env(site), SQUEUE_TIMEOUT)
        except OSError as err:
            raise BackendError(f"cannot ask squeue about job {job_id}: {err}") from None
        state = said.decode(errors="replace").strip() if status == 0 else ""
        if state not in LIVE_JOB_STATES:
            raise BackendError(f"job {job_id} (SLURM_JOB_ID) "
                               f"{'is ' + state if state else 'is unknown to this cluster'}"
                               ": the container cannot run in it")

    def suspended(self, site: Site, job_id: str) -> bool:
        """As squeue says. Through child.run, not subprocess, whose imports every exec
        would pay."""
        argv = identity.as_real_user(["squeue", "-h", "-j", job_id, "-o", "%T"])
        try:
            status, said, _ = child.run(argv, _env(site), SQUEUE_TIMEOUT)
        except OSError:
            return False
        return status == 0 and said.strip() == b"SUSPENDED"

    def exec_command(self, site: Site, job_id: str, env: dict[str, str], terminal: bool,
                     ) -> tuple[list[str], dict[str, str]]:
        """A step of the container's job beside its own (--overlap), on the job's first
        node, where task 0 runs (srun places tasks in block order); with a terminal
        there too (--pty)."""
        srun = site.oci.SrunPath or "srun"
        if which(srun, os.environ.get("PATH")) is None:
            raise BackendError(f"{srun} not found: install slurm-client")
        # --disable-status: a SIGINT goes to the process at once, as runc's exec passes
        # it on (srun's own first one would only say how the step is doing).
        argv = [srun, *site.oci.SrunArgs, f"--jobid={job_id}", "--overlap", "--nodes=1",
                "--ntasks=1", "--job-name=scrun-exec", "--quiet", "--export=ALL",
                "--kill-on-bad-exit=0", "--disable-status", "--chdir=/",
                *(["--pty"] if terminal else []), "--", *exec_into_command()]
        exec_env = _env(site, env)
        exec_env.pop("SLURM_JOBID", None)
        exec_env.pop("SLURM_STEP_ID", None)
        return argv, exec_env

    def job_variables(self, allocation: Allocation) -> dict[str, str]:
        held = allocation.handle
        return held.job_variables() if isinstance(held, HeldAllocation) else allocation.env

    def queue_fd(self, allocation: Allocation) -> int:
        assert isinstance(allocation.handle, HeldAllocation)
        return allocation.handle.fileno()

    def advance(self, allocation: Allocation) -> None:
        held = allocation.handle
        assert isinstance(held, HeldAllocation)
        try:
            held.advance()
        except BackendError as err:
            raise BackendError(
                f"job {allocation.job_id}: {_slurm_error(str(err), 'salloc failed')}") from None
        if held.granted:
            log.current.info(f"job {allocation.job_id} allocated")
            allocation.queued = False

    def launch(self, site: Site, allocation: Allocation, request: LaunchRequest) -> Step:
        srun = site.oci.SrunPath or "srun"
        # --chdir: the caller's working directory (docker's bundle dir, buildah's) is
        # often one no node has, and slurmstepd would say so on the container's stderr.
        # oci.conf's SrunArgs first, as Slurm's scrun puts them: the options the step
        # needs (--export=ALL carries the agent's variables) come after, and win.
        argv = [srun, *site.oci.SrunArgs, f"--jobid={allocation.job_id}", "--job-name=scrun",
                "--export=ALL", "--kill-on-bad-exit=0", "--chdir=/"]
        if request.terminal_fd is not None:
            argv.append("--pty")
        argv += request.step_args
        argv += ["--", *agent_command()]
        env = _env(site, {**request.job_env, **request.agent_env})
        # The allocation's own variables must not leak in from the caller.
        env.pop("SLURM_JOBID", None)
        env.pop("SLURM_STEP_ID", None)
        log.current.debug(f"slurm: {' '.join(argv)}")
        if which(srun, env.get("PATH")) is None:
            raise BackendError(f"{srun} not found: install slurm-client")
        if request.terminal_fd is not None:
            return Step(_fork_on_terminal(identity.as_real_user(argv), env, request.terminal_fd))
        # The agents read stdin themselves; srun must not race them for it.
        stdin = os.open(os.devnull, os.O_RDONLY) if request.pass_stdio else None
        output = request.output or (None, None)
        try:
            return Step(start_command(argv, env, (stdin, *output), new_session=True))
        finally:
            if stdin is not None:
                os.close(stdin)

    def release(self, site: Site, allocation: Allocation) -> None:
        held = allocation.handle
        if isinstance(held, HeldAllocation) and held.release():
            return
        if allocation.owned:
            self._cancel(site, allocation.job_id)

    def remote_command(self, site: Site, allocation: Allocation, script: str,
                       env: dict[str, str], interrupt_fd: int = -1) -> tuple[int, str]:
        nodes = _node_count(site, allocation.job_id, env)
        srun = site.oci.SrunPath or "srun"
        # One task on every node: the job's own task count (SLURM_NTASKS, among its
        # variables) is not the command's.
        argv = [srun, *site.oci.SrunArgs, f"--jobid={allocation.job_id}", "--overlap",
                "--no-kill", "--job-name=lua-command", f"--nodes={nodes}", f"--ntasks={nodes}",
                "--ntasks-per-node=1", "--quiet", "--", "/bin/sh", "-c", script]
        log.current.debug(f"slurm: {' '.join(argv)}")
        # srun takes the job's variables to every task. A missing srun is status 127
        # and the shell's word for it, as in Slurm's scrun (which runs it through sh).
        status, output, _ = child.run(identity.as_real_user(argv), _env(site, env), None,
                                      merge_output=True, interrupt_fd=interrupt_fd,
                                      bound=True)
        return status, output.decode(errors="replace")

    def kill_step(self, site: Site, allocation: Allocation, step_id: str) -> None:
        step = f"{allocation.job_id}.{step_id}"
        done = run_command(site, ["scancel", "--signal=KILL", step], timeout=KILL_STEP_TIMEOUT)
        if done.returncode != 0:
            raise BackendError(f"scancel --signal=KILL {step}: "
                               f"{_slurm_error(done.stderr, 'failed')}")

    def cleanup_orphan(self, site: Site, state: ContainerState) -> None:
        if state.job_owned and state.job_id:
            self._cancel(site, state.job_id)

    def _cancel(self, site: Site, job_id: str) -> None:
        # slurmctld may be away (restarting): a job left behind would run until its
        # time limit, so keep asking for a while.
        deadline = time.monotonic() + CANCEL_RETRY_TIMEOUT
        while True:
            done = run_command(site, ["scancel", job_id])
            if done.returncode == 0 or "already completed" in done.stderr:
                return
            if (not any(m in done.stderr for m in _CONTROLLER_AWAY)
                    or time.monotonic() >= deadline):
                raise BackendError(f"scancel {job_id}: {_slurm_error(done.stderr, 'failed')}")
            log.current.info(f"scancel {job_id}: slurmctld unreachable, trying again")
            time.sleep(1.0)

