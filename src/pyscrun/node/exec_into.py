"""A process run in a task's running container, on the task's node: what `scrun exec`
starts there (a step of the job beside the container's, or, on the local backend, its
child). It runs the runtime's own exec in the foreground, with the stdio it was given,
and exits with the process's status.

    PYSCRUN_EXEC_JOB      the container's job
    PYSCRUN_EXEC_CONTAINER  the container's id (a job may hold several, as steps)
    PYSCRUN_EXEC_TASK     its task (0)
    PYSCRUN_EXEC_PROCESS  the OCI process (JSON), as `runc exec --process` reads it
    PYSCRUN_EXEC_SLURM_CONF  (local backend) the caller's slurm.conf, beside which the
                          configuration is
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from pyscrun import log
from pyscrun.child import PASSED_ON, pass_signals_on
from pyscrun.conf import patterns, site
from pyscrun.errors import CommandRefused, ScrunError
from pyscrun.node import EXEC_RUNNING_MARK, sealed_program
from pyscrun.node.runtime import RuntimeCommands
from pyscrun.node.task import EXEC_RECORD, container_path, node_name, settle_runtime_dir
from pyscrun.oci import refusals

# The status of an exec that could not run the process at all (runc's own).
FAILED = 255
# How long an exec waits for the task's container to run.
RUNNING_WAIT = 60.0


def task_record(container_path: Path, job: str, container: str, task: str,
                ) -> tuple[Path, dict[str, Any]]:
    """The exec record of the container's task on this node, and where it is (its
    agent writes it as it prepares the task: right after `run -d`, it may still be on
    its way). Each step of the job has a directory of its own: another container's,
    or one a step left (DisableCleanup), is not this one's."""
    deadline = time.monotonic() + RUNNING_WAIT
    while True:
        for path in sorted(container_path.glob(f"oci-job{job}-*/task-{task}/{EXEC_RECORD}")):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # going, or not whole yet
            if isinstance(record, dict) and record.get("container") == container:
                return path, record
        if time.monotonic() > deadline:
            raise ScrunError(f"task {task} of container {container} (job {job}) runs no "
                             f"container on {os.uname().nodename}")
        time.sleep(0.05)


def _await_running(commands: RuntimeCommands) -> int:
    """An exec right after `run -d` may come before the runtime has made the container:
    it waits for that, and returns its init (without RunTimeQuery there is no asking,
    and no init: 0)."""
    if not commands.conf.RunTimeQuery:
        return 0
    deadline = time.monotonic() + RUNNING_WAIT
    while not (init := commands.running_pid()):
        if time.monotonic() > deadline:
            raise ScrunError(f"the container did not run within {RUNNING_WAIT:.0f} s")
        time.sleep(0.05)
    return init


def _check_command(process: dict[str, Any], init: int) -> None:
    """The process's command looked up as the runtime will, in the container's file
    system as it is now (what it wrote since it began included), seen through its init's
    root: a missing command is refused in runc's words, from which podman tells its
    127 from its 126."""
    if init:
        refusals.check_command(process, f"/proc/{init}/root", [])


def _join_namespaces(agent: int) -> None:
    """An ordinary user's container runs in the user namespace its agent made (like
    rootless podman's): the runtime reaches it only from inside. The agent's mount
    namespace too, where runc may guard its program with a bind mount, as at the
    container's start, rather than copy it (node/sealed_program.py)."""
    from pyscrun import linux

    proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        linux.join_namespaces(agent, (("user", linux.CLONE_NEWUSER), ("mnt", linux.CLONE_NEWNS)),
                              proc_fd)
    finally:
        os.close(proc_fd)


def run(env: dict[str, str]) -> int:
    settle_runtime_dir(env)
    the_site = site.load(env.get("PYSCRUN_EXEC_SLURM_CONF") or env.get("SLURM_CONF")
                         or site.DEFAULT_SLURM_CONF)
    base = Path(container_path(the_site.oci, env["PYSCRUN_EXEC_JOB"], node_name(env)))
    record, recorded = task_record(base, env["PYSCRUN_EXEC_JOB"],
                                   env.get("PYSCRUN_EXEC_CONTAINER", ""),
                                   env.get("PYSCRUN_EXEC_TASK", "0"))
    _join_namespaces(int(recorded["agent"]))
    values = patterns.PatternValues(**recorded["patterns"])
    process_file = record.parent / f"exec-{os.getpid()}.json"
    process_file.write_text(env["PYSCRUN_EXEC_PROCESS"])
    try:
        runtime_env = {k: v for k, v in env.items() if not k.startswith("PYSCRUN_")}
        commands = RuntimeCommands(the_site.oci, values, str(record.parent), runtime_env,
                                   the_site.derived_commands)
        commands.require("RunTimeExec")
        _check_command(json.loads(env["PYSCRUN_EXEC_PROCESS"]), _await_running(commands))
        if sealed_program.needed():
            commands.seal_programs(("RunTimeExec",))
        if not os.isatty(2):
            os.write(2, EXEC_RUNNING_MARK)
        code = _run_passing_signals_on(commands, str(process_file))
        return 128 - code if code < 0 else code  # as a shell reports a death by signal
    finally:
        process_file.unlink(missing_ok=True)


def _run_passing_signals_on(commands: RuntimeCommands, process_file: str) -> int:
    """The runtime's exec, to its end (its status, negative if killed), given the
    signals this process gets (srun's, or the session's), which it gives the process.
    On a terminal it stays in this process group, the terminal's foreground one (any
    other would be stopped reading it), where those signals reach it anyway."""
    on_terminal = os.isatty(0)
    runtime = commands.spawn("RunTimeExec", [process_file], own_group=not on_terminal)
    pass_signals_on(lambda signum: os.killpg(runtime.pid, signum),
                    PASSED_ON if on_terminal else ())
    return runtime.wait()


def main() -> None:
    try:
        code = run(dict(os.environ))
    except (ScrunError, OSError, KeyError, ValueError) as err:
        log.current.error(str(err))
        # A refused command (or working directory) ends as a shell says it, for a
        # terminal's user (without one, scrun exec fails in runc's words and podman
        # reads the same from them).
        code = err.status if isinstance(err, CommandRefused) else FAILED
    except KeyboardInterrupt:
        code = 130  # interrupted before the process ran: as a shell reports it
    sys.exit(code)


if __name__ == "__main__":
    main()
