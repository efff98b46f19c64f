"""The srun_cr process: srun with a launcher before each task, signals relayed, the
launchers served on the channel, checkpoint requests on a Unix socket, srun's exit
status mimicked.

    srun_cr --(fork+exec, same process group)--> srun [options] -- python -m
        pyscrun.srun_cr.launcher --port P --criu C [--restart DIR --checkpoint-id ID]
        -- COMMAND...
    each launcher --(dials P on the host srun runs on, proves it holds the step's
        secret, says hello with job, step, rank, node, pid)--> srun_cr
    `srun_cr checkpoint J.S` / the checkpoint signal --> srun_cr --> launchers dump
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from typing import Any, NoReturn

from pyscrun import identity, linux, log, messages, poller, sockets
from pyscrun.anchor.control import Connection, ControlSocket
from pyscrun.channel import frames, peer, tcp
from pyscrun.conf import site
from pyscrun.digits import only_digits
from pyscrun.errors import BackendError, CheckpointError, UsageError
from pyscrun.node import python_command
from pyscrun.srun_cr import criu, images, registry, signals
from pyscrun.srun_cr.coordinator import Coordinator, Request
from pyscrun.srun_cr.srunopts import REFUSED, SrunLine

LAUNCHER_MODULE = "pyscrun.srun_cr.launcher"
RESTART_ENV = "SLURM_RESTART_DIR"
# How long a connection to the launchers' port may take to prove itself.
HELLO_TIMEOUT = 30.0
SEND_TIMEOUT = 30.0


def _srun(environ: dict[str, str]) -> str:
    path = shutil.which("srun", path=environ.get("PATH") or os.defpath)
    if path is None:
        raise BackendError("srun not found: install slurm-client")
    return path


def exec_srun(argv: list[str], environ: dict[str, str]) -> NoReturn:
    """Become srun with this line: it prints its help, or fails as srun fails."""
    os.execve(_srun(environ), ["srun", *argv], environ)


def launcher_command() -> list[str]:
    """How the step starts the launcher on each node: as the node agent
    (node.python_command), since the user's PYTHONPATH is for the program the launcher
    runs, which gets the environment unchanged; imported rather than run with `-m`,
    whose runpy would cost every task 2 ms of imports before its own."""
    return python_command(f"from {LAUNCHER_MODULE} import main; main()")


class Plan:
    """What srun_cr runs: srun's options, the command, a restart directory."""

    def __init__(self, line: SrunLine, environ: dict[str, str]) -> None:
        self.options = list(line.options)
        self.command = list(line.command)
        restart = line.restart or environ.get(RESTART_ENV) or self._requeued(environ)
        self.checkpoint: images.Checkpoint | None = None
        if restart is not None:
            self.checkpoint = images.Checkpoint.load(restart)
            if line.ntasks is not None and only_digits(line.ntasks.strip()):
                self.checkpoint.check_tasks(int(line.ntasks))
            if line.ntasks is None:
                self.options.append(f"--ntasks={self.checkpoint.tasks}")
            if not self.command:
                self.command = list(self.checkpoint.command)
            elif self.command != self.checkpoint.command:
                log.current.info(f"restarting {' '.join(self.checkpoint.command)!r} from "
                                 f"{self.checkpoint.path}; the command given is not run")
                self.command = list(self.checkpoint.command)
        if line.job_name is None and not environ.get("SLURM_JOB_NAME") and self.command:
            # srun names a job after its command, which would be the launcher's python.
            self.options.append(f"--job-name={os.path.basename(self.command[0])}")
        if line.refused is not None:
            raise UsageError(f"srun_cr does not support --{line.refused}: "
                             f"{REFUSED[line.refused]}")
        if ":" in self.command:
            raise UsageError("srun_cr does not support heterogeneous steps (':' in the command line)")

    def _requeued(self, environ: dict[str, str]) -> str | None:
        found = images.left_before_requeue(environ, os.getcwd(), self.command)
        if found is not None:
            log.current.info(f"job {environ['SLURM_JOB_ID']} was requeued: "
                             f"{' '.join(self.command)!r} goes on from {found}")
        return found

    def argv(self, port: int, criu_path: str) -> list[str]:
        launcher = [*launcher_command(), "--port", str(port),
                    "--criu", criu_path]
        if self.checkpoint is not None:
            launcher += ["--restart", self.checkpoint.path, "--checkpoint-id", self.checkpoint.id]
        return ["srun", *self.options, "--", *launcher, "--", *self.command]

    def env(self, environ: dict[str, str], socket_path: str, secret: bytes) -> dict[str, str]:
        env = dict(environ)
        env[registry.SOCKET_ENV] = socket_path
        env[registry.SECRET_ENV] = secret.hex()
        env.pop(RESTART_ENV, None)
        if self.checkpoint is not None:
            env[RESTART_ENV] = self.checkpoint.path
        return env


class _Launcher:
    """A connection on the launchers' port: one task's launcher once it said hello."""

    def __init__(self, link: peer.Peer) -> None:
        self.link = link
        self.sock = link.sock
        self.rank: int | None = None

    def send(self, message: dict[str, Any]) -> None:
        if not self.link.send_message(message, SEND_TIMEOUT):
            raise OSError("the launcher is gone")


class Wrapper:
    def __init__(self, plan: Plan, environ: dict[str, str]) -> None:
        self.plan = plan
        self.environ = environ
        self.checkpoint_signal = signals.checkpoint_signal(environ)
        self.run_dir = registry.run_dir(environ)
        self.socket_path = ""
        self.link: str | None = None
        self.coordinator = Coordinator(plan.command, os.getcwd(), environ, self._registered)
        self.selector = poller.Poller()
        self.srun_pid = 0
        self.criu = ""
        self.secret = os.urandom(32)
        self.strangers: sockets.Strangers[_Launcher] = sockets.Strangers(HELLO_TIMEOUT,
                                                                          self._close_launcher)

    def run(self) -> NoReturn:
        srun = _srun(self.environ)
        if not identity.is_root():
            raise CheckpointError(
                "srun_cr runs every task ready for CRIU, which needs root: as an ordinary "
                "user, run the step with srun (checkpoints of ordinary users' steps are "
                "not supported yet)")
        self.criu = criu.find(self.environ)
        registry.prepare(self.run_dir)
        # The port first: a bad SrunPortRange leaves no control socket behind.
        ports = site.srun_port_range(site.slurm_conf_path(None, self.environ))
        launchers = sockets.Listener(self.selector, tcp.listen(ports), "launchers",
                                     "the launchers' port")
        self.socket_path = registry.socket_path(self.run_dir)
        try:
            control = ControlSocket(self.selector, self.socket_path, self._request,
                                    "srun_cr control")
        except BaseException:
            launchers.close()
            raise
        try:
            relay = signals.Relay(signals.catchable())
            relay.block()
            self.srun_pid = self._spawn(srun, tcp.port_of(launchers.sock))
            relay.start()
            status = self._serve(control, launchers, relay)
        finally:
            control.close()
            launchers.close()
            if self.link is not None:
                registry.unregister(self.link, self.socket_path)
        signals.exit_like(status)

    def _spawn(self, srun: str, port: int) -> int:
        argv = self.plan.argv(port, self.criu)
        env = self.plan.env(self.environ, self.socket_path, self.secret)
        log.current.debug(f"running {' '.join(argv)}")
        parent = os.getpid()
        pid = os.fork()
        if pid:
            return pid
        try:
            for signum in (signal.SIGPIPE, signal.SIGXFSZ):  # set by Python, not by our caller
                signal.signal(signum, signal.SIG_DFL)
            signals.unblock_all()
            linux.set_parent_death_signal(signal.SIGTERM)
            if os.getppid() != parent:
                os._exit(1)
            os.execve(srun, argv, env)
        except BaseException as err:
            try:
                os.write(2, f"srun_cr: error: cannot run {srun}: {err}\n".encode())
            except OSError:
                pass
        finally:
            os._exit(127)

    def _registered(self, job: str, step: str) -> None:
        try:
            self.link = registry.register(self.run_dir, job, step, self.socket_path)
        except CheckpointError as err:
            log.current.error(str(err))

    def _serve(self, control: ControlSocket, launchers: sockets.Listener,
               relay: signals.Relay) -> int:
        pidfd = os.pidfd_open(self.srun_pid)
        self.selector.register(relay.read_fd, poller.READ, "signals")
        self.selector.register(pidfd, poller.READ, "srun")
        try:
            while True:
                deadlines = [d for d in (self.coordinator.next_deadline(), *control.deadlines(),
                                         *self.strangers.deadlines(),
                                         *launchers.deadlines()) if d is not None]
                timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
                for key, _ in self.selector.select(timeout):
                    if isinstance(key.data, ControlSocket | Connection):
                        control.ready(key.data)
                    elif key.data == "launchers":
                        self._accept_launcher(launchers)
                    elif key.data == "signals":
                        self._signals(relay)
                    elif key.data == "srun":
                        _, status = os.waitpid(self.srun_pid, 0)
                        self.coordinator.step_ended()
                        return status
                    elif isinstance(key.data, _Launcher):
                        self._launcher_readable(key.data)
                now = time.monotonic()
                control.expire(now)
                self.strangers.expire(now)
                launchers.resume(now)
                self.coordinator.tick(now)
        finally:
            os.close(pidfd)

    def _accept_launcher(self, launchers: sockets.Listener) -> None:
        sock = launchers.accept()
        if sock is None:
            return
        conn = self.strangers.add(lambda: _Launcher(peer.Peer.accepted(sock, self.secret)))
        conn.link.sock.setblocking(True)
        conn.link.sock.settimeout(SEND_TIMEOUT)
        self.selector.register(sock, poller.READ, conn)

    def _close_launcher(self, conn: _Launcher, why: str) -> None:
        if why:
            log.current.error(f"refused a connection to the launchers' port from "
                              f"{conn.link.address}: {why}")
        self.selector.unregister(conn.sock)
        conn.link.close()
        self.strangers.discard(conn)
        if conn.rank is not None:
            self.coordinator.gone(conn.rank)

    def _launcher_readable(self, conn: _Launcher) -> None:
        try:
            received = peer.messages(conn.link.receive())
            conn.link.flush_blocking(SEND_TIMEOUT)
        except peer.PeerGone as gone:
            self._close_launcher(conn, str(gone) if conn.rank is None else "")
            return
        except frames.FrameError as err:
            self._close_launcher(conn, str(err))
            return
        for message in received:
            if conn.rank is None and message.get("op") != "hello":
                self._close_launcher(conn, f"expected a hello, got {message.get('op')!r}")
                return
            if message.get("op") == "hello":
                self.strangers.discard(conn)
            self._dispatch(conn, message)

    def _request(self, client: Connection, message: dict[str, Any]) -> dict[str, Any] | None:
        """A request of `srun_cr checkpoint` (or status): checkpoints are answered once
        every task has been dumped."""
        if message["op"] == "status":
            return self._status()
        directory = message.get("dir")
        self.coordinator.request(Request(str(directory) if directory else None,
                                         bool(message.get("stop")), client.send))
        return None

    def _dispatch(self, conn: _Launcher, message: dict[str, Any]) -> None:
        op = message.get("op")
        try:
            messages.check(message, "srun_cr launcher")
            if op == "hello":
                conn.rank = self.coordinator.hello(message, conn.send)
            elif conn.rank is not None:
                self.coordinator.message(conn.rank, message)
        except (KeyError, TypeError, ValueError) as err:
            log.current.error(f"refused a message: {err}")
        except OSError:
            pass

    def _status(self) -> dict[str, Any]:
        c = self.coordinator
        return {"ok": True, "step": c.name, "tasks": c.ntasks, "srun": self.srun_pid,
                "nodes": {str(r): t.node for r, t in sorted(c.launchers.items())}}

    def _signals(self, relay: signals.Relay) -> None:
        for signo, code, sender in relay.read():
            action = signals.decide(signo, code, sender, self.checkpoint_signal,
                                    os.getsid(0) == os.getpid())
            log.current.debug(f"signal {signo} (code {code}, from {sender}): {action}")
            if action == "forward":
                try:
                    os.kill(self.srun_pid, signo)
                except OSError:
                    pass
            elif action == "checkpoint":
                self.coordinator.request(Request(None, False, None))
            elif action == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
