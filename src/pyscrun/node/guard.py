"""A task's last resort: ends and deletes its container if the node agent dies.

Killing the agent (SIGKILL, the OOM killer) would otherwise leave the container running
outside any job: the runtime's processes are re-parented away from the step, where
Slurm's process tracking no longer finds them, and nobody runs RunTimeDelete.

The agent forks the guard once the task is worked out, before it writes the task dir
(so that nothing the task leaves is ever unguarded). The guard holds the read end of a
pipe whose write end only the agent has; the agent tells it the pid `%p` stands for,
the runtime processes it starts (RunTimeRun, RunTimeCreate) and says `done` once it has
cleaned up itself. End of file without `done` means the agent died: the guard waits
until the runtime knows the container or its processes are gone (a runtime that was
still creating the container would otherwise finish after the clean-up), runs
RunTimeKill/RunTimeDelete if the runtime knows the container, removes the task dir and
exits. It holds nothing else of the agent's (not the control socket, not the
container's stdio) and outlives the signals a step receives as a whole: scancel's
SIGTERM, which the agent handles, and the SIGKILL of every process of the step once
KillWait has run out, which kills the agent and the runtime alike. For that it runs
detached from the agent's process tree; a site whose proctrack plugin kills by cgroup
or process group (proctrack/cgroup, pgid) kills it too.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import os
import time

from pyscrun import linux, log
from pyscrun.node.runtime import RuntimeCommands, stop_and_delete

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_DONE = b"done"
# How long the guard waits for a runtime that is still creating the container.
SETTLE_TIMEOUT = 60.0
_OUTLIVED_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGQUIT,
                     _signal.SIGUSR1, _signal.SIGUSR2, _signal.SIGPIPE)


class Guard:
    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    @classmethod
    def start(cls, commands: RuntimeCommands, cleanup: Callable[[], None]) -> Guard:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(write_fd)
                # A grandchild: once its parent is gone it is no descendant of the
                # step, so the SIGKILL that ends a step whose KillWait ran out
                # (proctrack/linuxproc) does not reach it. Not a session of its own:
                # that made docker's multi-task containers fail now and then to join
                # their network namespace.
                if os.fork() == 0:
                    _watch(read_fd, commands, cleanup)
            finally:
                os._exit(0)
        os.close(read_fd)
        os.waitpid(pid, 0)
        return cls(write_fd)

    def tell_pid(self, pid: int) -> None:
        """The pid `%p` stands for."""
        self._say(f"pid {pid}\n".encode())

    def tell_runtime(self, pid: int) -> None:
        """A runtime process that may bring the container into existence."""
        self._say(f"runtime {pid}\n".encode())

    def stand_down(self) -> None:
        """The agent cleaned up itself: the guard leaves without doing anything. It is
        not waited for (that would cost the container's end milliseconds): whoever
        inherits it reaps it."""
        self._say(_DONE + b"\n")
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _say(self, line: bytes) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, line)
        except OSError:
            pass


def _watch(fd: int, commands: RuntimeCommands, cleanup: Callable[[], None]) -> None:
    """The guard process: wait for the agent's end; clean up if it did not."""
    _signal.set_wakeup_fd(-1)
    for signum in _OUTLIVED_SIGNALS:
        # A handler, not SIG_IGN: an ignored signal would stay ignored in the
        # runtime commands the guard may have to run.
        _signal.signal(signum, _ignore)
    linux.keep_only({fd, *log.current.open_fds()})
    log.current.detach_stderr()
    said = b""
    while chunk := os.read(fd, 4096):
        said += chunk
    lines = said.split(b"\n")
    if _DONE in lines:
        return
    pids = _numbers(lines, b"pid ")
    if pids:
        commands.set_pid(pids[-1])
    log.current.error("node agent died: ending and deleting its container")
    try:
        _settle(commands, _numbers(lines, b"runtime "))
        stop_and_delete(commands)
    finally:
        cleanup()


def _numbers(lines: list[bytes], prefix: bytes) -> list[int]:
    return [int(line[len(prefix):]) for line in lines
            if line.startswith(prefix) and line[len(prefix):].isdigit()]


def _settle(commands: RuntimeCommands, runtimes: list[int]) -> None:
    """Wait until the runtime knows the container (done creating it), or none of its
    processes lives."""
    if not commands.conf.RunTimeQuery:
        return
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while any(_alive(pid) for pid in runtimes) and time.monotonic() < deadline:
        document = commands.query()
        if document is not None and document.get("status") != "creating":
            return
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """pid runs (not a zombie: the dead agent's children may wait to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _ignore(signum: int, frame: object) -> None:
    """Outlive the signal: the agent decides what it means for the container."""
