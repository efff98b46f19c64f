"""exec: a process in the running container (`podman exec`, docker's shim), on the node
of its task 0.

Like runc, exec runs the process in the foreground and exits with its status, or with
--detach returns once the process runs and leaves the pid in --pid-file to be waited
for (conmon and containerd's shim do so, as subreapers). That pid is a process of
pyscrun's: it starts node/exec_into.py where the task runs (through `srun --overlap`
in the container's job), and then, like the container's stand-in, takes namespaces of
its own and an empty root, so that nothing done through its pid reaches the host. It passes on
the process's stdio and exits with its status. srun's word on a non-zero status
("task 0: Exited with exit code N") is not the process's, and is left out of its
stderr.

With a terminal (`-t`, or the process's `terminal`), exec opens a pty and sends its
master to --console-socket as runc does (conmon and the shim relay it to the user);
the slave is the session's controlling terminal and the stdio of what it starts:
`srun --pty` (whose own stderr is still filtered), so the node gives the process a
terminal of its own, sized and resized as the user's; locally, the runtime's exec
itself.
"""

from __future__ import annotations

import json
import os
import re

from pyscrun import identity
from pyscrun.backends.slurm import await_terminal_size
from pyscrun.cli.exec_process import process_of
from pyscrun.cli.main import Context
from pyscrun.console import make_controlling_terminal, open_console
from pyscrun.errors import ExecFailed, InvalidState, NotSupported, UsageError
from pyscrun.fs import write_all
from pyscrun.node import EXEC_RUNNING_MARK
from pyscrun.oci.state import RUNNING, shell_status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_SRUN_SAYS_EXIT = re.compile(rb"^srun: error: \S+: task \d+: Exited with exit code \d+\n?$")
_SRUN_PREFIX = b"srun: error: "
# What the session tells `scrun exec` first: the process runs, or not (why follows).
_RUNNING, _NOT_RUNNING = b"+", b"-"
# The lines kept as why a process did not run: what comes before them is passed on.
_HELD_LINES = 20


def execute(ctx: Context) -> int:
    from pyscrun import backends
    from pyscrun.cli.lifecycle import refuse_while_suspended
    from pyscrun.conf import site
    from pyscrun.fs import check_pid_file, write_pid_file

    state = ctx.store.load(ctx.container_id)
    process = process_of(ctx, state.bundle)
    if (ctx.option("preserve_fds") or "0").lstrip("0"):
        # Silently dropped, the descriptors would be missed only inside the container.
        raise NotSupported("exec --preserve-fds is not supported: the exec'd process gets "
                           "its stdio only")
    terminal = _terminal(ctx, process)
    status = state.effective_status()
    if status != RUNNING:
        # runc's words for paused and stopped. runc can exec into a created container
        # (its init waits inside); here nothing may run yet (the job, or the container
        # in run mode, comes with the start), so it is refused in the same words.
        raise InvalidState(f"cannot exec in a {status} container")
    pid_file = ctx.option("pid_file")
    if pid_file:
        pid_file = os.path.abspath(pid_file)
        check_pid_file(pid_file)  # a session started is not left running for want of it
    the_site = site.load(ctx.slurm_conf)
    # srun would wait, silently, for as long as the job stays suspended.
    refuse_while_suspended(the_site, state, "exec in")
    argv, env = backends.get(state.backend).exec_command(
        the_site, state.job_id, {"PYSCRUN_EXEC_JOB": state.job_id, "PYSCRUN_EXEC_TASK": "0",
                                 "PYSCRUN_EXEC_CONTAINER": state.id,
                                 "PYSCRUN_EXEC_PROCESS": json.dumps(process)}, terminal)
    console = ctx.option("console_socket")
    size = process.get("consoleSize")
    slave = (open_console(console, size if isinstance(size, dict) else None)
             if terminal and console else None)
    # Without a terminal the node says when the process runs (EXEC_RUNNING_MARK), or
    # why it cannot: exec returns then, as runc's does.
    ready_read, ready_write = (-1, -1) if terminal else os.pipe()
    pid = _fork_session(argv, env, through_srun=state.backend == "slurm", terminal=slave,
                        ready=ready_write)
    # Detached too until the process runs: a session left behind would run it anyway.
    _pass_signals_on(lambda signum: os.kill(pid, signum))
    if ready_read >= 0:
        _await_process(ready_read, pid)
    if pid_file:
        write_pid_file(pid_file, pid)
    if ctx.flag("detach"):
        return 0
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status) if os.WIFEXITED(wait_status) else 255


def _await_process(ready: int, session: int) -> None:
    """Until the session says the process runs; if it ends without, ExecFailed with
    why (the lines it passed instead, the node's or srun's)."""
    said = b""
    while chunk := os.read(ready, 65536):
        said += chunk
    os.close(ready)
    if said[:1] == _RUNNING:
        return
    _, wait_status = os.waitpid(session, 0)
    why = "; ".join(line.removeprefix("scrun: error: ").strip()
                    for line in said[1:].decode(errors="replace").splitlines() if line.strip())
    if not why:
        why = f"the process did not start (status {shell_status(wait_status)})"
    raise ExecFailed(f"exec failed: {why}")


def _terminal(ctx: Context, process: dict[str, object]) -> bool:
    """Whether the process gets a terminal (then marked so in it), with runc's refusals
    of what cannot go together."""
    terminal = ctx.flag("tty") or bool(process.get("terminal"))
    if ctx.option("console_socket") and not terminal:
        raise UsageError("cannot use console socket if runc will not detach or allocate tty")
    if terminal and ctx.flag("detach") and not ctx.option("console_socket"):
        raise UsageError("cannot allocate tty if runc will detach without setting console socket")
    if terminal:
        process["terminal"] = True
    return terminal


def _fork_session(argv: list[str], env: dict[str, str], through_srun: bool,
                  terminal: int | None, ready: int) -> int:
    """The exec session's own process: it runs argv (on the terminal, a pty slave, if
    given) and exits with its status; what argv says on stderr it passes on (ready: see
    _pass_stderr)."""
    read_fd, write_fd = os.pipe() if through_srun or terminal is None else (-1, -1)
    if through_srun:
        argv = identity.as_real_user(argv)
    pid = os.fork()
    if pid:
        for fd in (read_fd, write_fd, -1 if terminal is None else terminal, ready):
            if fd >= 0:
                os.close(fd)
        return pid
    code = 255
    try:
        child = os.fork()
        if child == 0:
            try:
                if terminal is not None:
                    make_controlling_terminal(os.dup(terminal))
                    if through_srun:
                        await_terminal_size()
                if write_fd >= 0:
                    os.dup2(write_fd, 2)
                    os.close(write_fd)
                    os.close(read_fd)
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        # As runc's exec: the session's signals go to what it runs: locally the
        # runtime's exec, which gives them to the process; through Slurm srun, which
        # gives SIGINT, SIGUSR1 and SIGUSR2 to the step's tasks as they are and ends the
        # step on SIGTERM, SIGHUP or SIGQUIT; on a terminal its session's processes. A
        # session killed outright (SIGKILL) cannot pass it on: what it ran goes on.
        _pass_signals_on((lambda signum: os.killpg(child, signum)) if terminal is not None
                         else (lambda signum: os.kill(child, signum)))
        if write_fd >= 0:
            os.close(write_fd)
        if terminal is not None:
            # What srun says on its stderr belongs on the terminal.
            os.dup2(terminal, 2)
            os.close(terminal)
        _isolate()
        if read_fd >= 0:
            _pass_stderr(read_fd, ready)
        code = shell_status(os.waitpid(child, 0)[1])
    finally:
        os._exit(code)


def _pass_signals_on(to: Callable[[int], None]) -> None:
    """The signals runc's exec passes on, given to `to`. At a terminal, what its keys
    send (Ctrl-C, Ctrl-\\) reaches every process of its foreground group, srun too: it
    is not passed on again."""
    import signal

    from pyscrun.child import pass_signals_on

    pass_signals_on(to, (signal.SIGINT, signal.SIGQUIT) if os.isatty(0) else ())


def _isolate() -> None:
    """Namespaces of its own and an empty root, as the container's stand-in has."""
    from pyscrun.anchor import stand_in

    try:
        stand_in.isolate("")
    except OSError as err:
        os.write(2, f"scrun: error: exec: cannot isolate the session: {err}\n".encode())
        os._exit(255)


def _pass_stderr(read_fd: int, ready: int) -> None:
    """srun's stderr (locally exec_into's) on to ours, line by line, without srun's own
    word on the status. With ready (>= 0), lines wait until the node says the process
    runs, which ready is then told: if the node never says it, they are why, and go to
    ready instead."""
    held: list[bytes] | None = [] if ready >= 0 else None
    pending = b""
    while chunk := os.read(read_fd, 65536):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            line += b"\n"
            # At a line's end: srun's --label (a site's SrunArgs) puts the task first.
            if line.endswith(EXEC_RUNNING_MARK):
                if held is not None:
                    write_all(ready, _RUNNING)
                    os.close(ready)
                    write_all(2, b"".join(held))
                    held = None
            elif _SRUN_SAYS_EXIT.match(line):
                pass
            elif held is not None:
                held.append(line)
                if len(held) > _HELD_LINES:
                    write_all(2, held.pop(0))
            else:
                write_all(2, line)
        # Only what may still become srun's line (or the mark) waits for its end.
        if held is None and not _SRUN_PREFIX.startswith(pending[:len(_SRUN_PREFIX)]):
            write_all(2, pending)
            pending = b""
    if pending and not _SRUN_SAYS_EXIT.match(pending):
        if held is not None:
            held.append(pending)
        else:
            write_all(2, pending)
    if held is not None:
        write_all(ready, _NOT_RUNNING + b"".join(held))
        os.close(ready)
    os.close(read_fd)
