"""The per-task launcher: what srun really starts for each task under srun_cr.

    python -m pyscrun.srun_cr.launcher --port P [--restart DIR --checkpoint-id ID]
        [--criu PATH] -- COMMAND...

It starts COMMAND in a new pid namespace under a small init (nsinit.py), or restores
task SLURM_PROCID from DIR there, reports job, step, rank, node and the init's pid to
srun_cr (dialing port P on the host srun runs on), dumps the task with CRIU when
srun_cr says so (it runs on the task's node), and exits as the task did, so that
slurmstepd and srun see the task's own status.

Every catchable signal but SIGCHLD is ignored here: slurmstepd signals every process
of the step, so the task gets each signal directly, exactly once, as without srun_cr.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from dataclasses import dataclass
from typing import Any, NoReturn

from pyscrun import linux, log, messages, poller
from pyscrun.channel import peer, tcp
from pyscrun.errors import ChannelError, CheckpointError, ScrunError, UsageError
from pyscrun.srun_cr import criu, images, registry, signals

NSINIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nsinit.py")
_STATUS_FD = 3

DIAL_TIMEOUT = 30.0
SEND_TIMEOUT = 30.0


@dataclass
class Identity:
    job: str
    step: str
    rank: int
    ntasks: int
    node: str

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Identity:
        return cls(job=env.get("SLURM_JOB_ID", "0"), step=env.get("SLURM_STEP_ID", "0"),
                   rank=int(env.get("SLURM_PROCID", "0")),
                   ntasks=int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or "1"),
                   node=env.get("SLURMD_NODENAME") or socket.gethostname())


def _stdio_links() -> dict[str, str]:
    return {str(fd): os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 1, 2)}


class Task:
    """The task's pid namespace: its init's pid and the pipe the init reports on."""

    def __init__(self, pid: int, status_fd: int) -> None:
        self.pid = pid
        self.status_fd = status_fd
        self.status_key = f"pipe:[{os.fstat(status_fd).st_ino}]"
        self.stdio = _stdio_links()

    @classmethod
    def start(cls, command: list[str]) -> Task:
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        pid = linux.fork_in_new_pid_namespace()
        if pid == 0:
            try:
                if write_fd == _STATUS_FD:
                    os.set_inheritable(write_fd, True)
                else:
                    os.dup2(write_fd, _STATUS_FD)
                os.closerange(_STATUS_FD + 1, os.sysconf("SC_OPEN_MAX"))
                os.execv(sys.executable, [sys.executable, "-I", "-S", NSINIT, str(_STATUS_FD),
                                          "--", *command])
            finally:
                os._exit(127)
        os.close(write_fd)
        return cls(pid, read_fd)

    @classmethod
    def restore(cls, criu_path: str, checkpoint: images.Checkpoint, rank: int) -> Task:
        image_dir = images.task_dir(checkpoint.path, rank)
        try:
            meta = images.read_json(os.path.join(image_dir, images.TASK_META))
            stdio, status_key = dict(meta["stdio"]), str(meta["status"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise CheckpointError(f"task {rank}: cannot read {images.TASK_META} in {image_dir}: "
                                  f"{err}") from None
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        inherit: dict[str, int] = {status_key: write_fd}
        try:
            for fd in (0, 1, 2):
                key = criu.resource_key(str(stdio.get(str(fd), "")))
                if key is not None and key not in inherit:
                    inherit[key] = os.dup(fd)
            pid = criu.restore(criu_path, image_dir, inherit)
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            for fd in inherit.values():
                os.close(fd)
        return cls(pid, read_fd)

    def dump(self, criu_path: str, directory: str, identity: Identity, stop: bool) -> float:
        image_dir = images.task_dir(directory, identity.rank)
        try:
            os.mkdir(image_dir)
            images.write_json(os.path.join(image_dir, images.TASK_META), {
                "rank": identity.rank, "node": identity.node, "job": identity.job,
                "step": identity.step, "pid": self.pid, "stdio": self.stdio,
                "status": self.status_key,
            })
        except OSError as err:
            raise CheckpointError(f"cannot write {image_dir}: {err.strerror or err}") from None
        return criu.dump(criu_path, self.pid, image_dir, leave_stopped=stop,
                         keep=(images.TASK_META,))

    def members(self) -> list[int]:
        """Every process in the task's pid namespace."""
        try:
            namespace = os.readlink(f"/proc/{self.pid}/ns/pid")
        except OSError:
            return []
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/ns/pid") == namespace:
                        found.append(int(entry))
                except OSError:
                    continue
        return found

    def reported_status(self) -> int | None:
        try:
            text = os.read(self.status_fd, 64).decode().strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None


class Launcher:
    def __init__(self, identity: Identity, environ: dict[str, str],
                 options: dict[str, str]) -> None:
        self.identity = identity
        self.environ = environ
        self.options = options
        self.conn: peer.Peer | None = None
        self.stopped_by_checkpoint = False
        # Dumped with --stop, the task waits stopped for srun_cr's word: kill or resume.
        self.awaits_finish = False
        self.task: Task | None = None

    def connect(self, port: str) -> None:
        """Dial srun_cr on the host srun runs on, as Slurm tells the task."""
        host = tcp.launch_host(self.environ)
        try:
            secret = bytes.fromhex(self.environ.get(registry.SECRET_ENV, ""))
            if not host:
                raise ChannelError("SLURM_SRUN_COMM_HOST is unset")
            self.conn = peer.dial(host, int(port), secret, DIAL_TIMEOUT)
        except (ChannelError, ValueError) as err:
            log.current.error(f"task {self.identity.rank}: cannot reach srun_cr "
                              f"({err}): this task cannot be checkpointed")

    def send(self, message: dict[str, Any]) -> None:
        if self.conn is not None and not self.conn.send_message(message, SEND_TIMEOUT):
            self._lost()

    def _lost(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.awaits_finish:
            # No word will come: stopped, the task would not even take the SIGTERM srun
            # relays when srun_cr dies. It goes on, as after a failed checkpoint.
            log.current.error(f"task {self.identity.rank}: srun_cr went away while the task "
                              "waited stopped for the end of a checkpoint: it goes on")
            self._resume()

    def hello(self, restored: str | None) -> None:
        assert self.task is not None
        i = self.identity
        self.send({"op": "hello", "job": i.job, "step": i.step, "rank": i.rank,
                   "ntasks": i.ntasks, "node": i.node, "pid": self.task.pid,
                   "restored": restored})

    def wait(self) -> int:
        """Serve srun_cr's orders until the task ends; its wait status."""
        assert self.task is not None
        pidfd = os.pidfd_open(self.task.pid)
        selector = poller.Poller()
        selector.register(pidfd, poller.READ, "init")
        # The init reports the task's status just before it exits: acting on that report
        # at once lets slurmstepd see the task end as soon as without srun_cr (srun's
        # abort after a Ctrl-C races with the tasks' exits).
        selector.register(self.task.status_fd, poller.READ, "status")
        if self.conn is not None:
            selector.register(self.conn.sock, poller.READ, "conn")
        while True:
            for key, _ in selector.select():
                if key.data == "status":
                    reported = self.task.reported_status()
                    if reported is not None:
                        return reported
                    selector.unregister(self.task.status_fd)
                    continue
                if key.data == "init":
                    _, status = os.waitpid(self.task.pid, 0)
                    reported = self.task.reported_status()
                    return status if reported is None else reported
                conn = self.conn
                try:
                    orders = peer.messages(conn.receive()) if conn is not None else None
                except (peer.PeerGone, ValueError):
                    orders = None
                if orders is None:
                    if conn is not None:
                        selector.unregister(conn.sock)
                    self._lost()
                    continue
                for message in orders:
                    self._order(message)

    def _order(self, message: dict[str, Any]) -> None:
        assert self.task is not None
        try:
            messages.check(message, "srun_cr orders")
        except messages.MessageError as err:
            log.current.error(f"refused an order: {err}")
            return
        op = message.get("op")
        if op == "dump":
            try:
                seconds = self.task.dump(_criu(self.options, self.environ), str(message["dir"]),
                                         self.identity, bool(message.get("stop")))
                self.awaits_finish = bool(message.get("stop"))
                self.send({"op": "dumped", "ok": True, "seconds": round(seconds, 3)})
            except ScrunError as err:
                self.send({"op": "dumped", "ok": False, "error": str(err)})
        elif op == "finish":
            self.awaits_finish = False
            if message.get("action") == "kill":
                self.stopped_by_checkpoint = True
                os.kill(self.task.pid, signal.SIGKILL)
            elif message.get("action") == "resume":
                self._resume()

    def _resume(self) -> None:
        assert self.task is not None
        self.awaits_finish = False
        for pid in self.task.members():
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass


_LAUNCHER_OPTIONS = ("--port", "--restart", "--checkpoint-id", "--criu")


def _parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Options (--port P, --restart DIR, --checkpoint-id ID, --criu PATH; each
    optional) and the command."""
    options: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] in _LAUNCHER_OPTIONS and i + 1 < len(argv):
            options[argv[i][2:]] = argv[i + 1]
            i += 2
        else:
            raise UsageError(f"unknown launcher argument {argv[i]!r}")
    command = argv[i + 1:]
    if not command:
        raise UsageError("usage: python -m pyscrun.srun_cr.launcher [--port P] [--restart DIR "
                         "[--checkpoint-id ID]] [--criu PATH] -- COMMAND...")
    return options, command


def _ignore_signals() -> None:
    for signum in signals.catchable():
        try:
            signal.signal(signum, signal.SIG_IGN)
        except (OSError, ValueError):
            pass


def _criu(options: dict[str, str], environ: dict[str, str]) -> str:
    """srun_cr's criu if this node has it at the same path, else this node's own."""
    given = options.get("criu")
    if given and os.access(given, os.X_OK):
        return given
    return criu.find(environ)


def run(argv: list[str], environ: dict[str, str]) -> NoReturn:
    _ignore_signals()
    options, command = _parse(argv)
    identity = Identity.from_env(environ)
    launcher = Launcher(identity, environ, options)
    if "port" in options:
        launcher.connect(options["port"])
    restart = options.get("restart")
    if restart is not None:
        checkpoint = images.Checkpoint.load(restart)
        if checkpoint.tasks != identity.ntasks and identity.rank != 0:
            sys.exit(1)  # task 0 says why, once
        checkpoint.check_tasks(identity.ntasks)
        checkpoint.check_same(options.get("checkpoint-id", ""))
        launcher.task = Task.restore(_criu(options, environ), checkpoint, identity.rank)
    else:
        launcher.task = Task.start(command)
    launcher.hello(restart)
    status = launcher.wait()
    if launcher.stopped_by_checkpoint:
        signals.exit_like(0)
    signals.exit_like(status)


def main() -> None:
    log.current.prefix = "srun_cr"
    environ = dict(os.environ)
    # Not the task's to see, nor to be written into its checkpoints.
    os.environ.pop(registry.SECRET_ENV, None)
    try:
        run(sys.argv[1:], environ)
    except ScrunError as err:
        log.current.error(str(err))
        sys.exit(1)
    except OSError as err:
        # One line from each task (run as a user who may not make its pid namespace,
        # say), not a traceback.
        log.current.error(f"task {environ.get('SLURM_PROCID', '0')}: cannot run the task: "
                          f"{err.strerror or err}")
        sys.exit(1)
    except KeyboardInterrupt:
        signals.exit_like(signal.SIGINT)


if __name__ == "__main__":
    main()
