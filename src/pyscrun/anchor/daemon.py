"""The anchor: one daemon per container, holding its stdio, job and control socket.

create forks it; it allocates the job, reports `created` through a pipe, then serves
the control socket until the container has run and its job is released. It exits with
the container's exit status, which is what conmon (a subreaper) reports to podman.
"""

from __future__ import annotations

import os
import secrets
import selectors
import signal
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from pyscrun import backends, log
from pyscrun.anchor import console, jobenv, protocol
from pyscrun.anchor.store import Store, write_atomic
from pyscrun.backends.base import Allocation, LaunchRequest, Step
from pyscrun.conf import scrun_env
from pyscrun.conf.site import Site
from pyscrun.errors import InvalidState, ScrunError
from pyscrun.oci.bundle import Bundle
from pyscrun.oci.state import CREATED, RUNNING, STOPPED, ContainerState, process_start_time

if TYPE_CHECKING:
    from pyscrun.hooks.lua import ScrunLua

_TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# After SIGKILL was ordered, how long the step may take before its launcher is killed.
KILL_GRACE = 10.0


@dataclass
class CreateRequest:
    container_id: str
    bundle: Bundle
    store: Store
    site: Site
    console_socket: str | None
    pid_file: str | None
    environ: dict[str, str]
    job_options: dict[str, str] = field(default_factory=dict)
    log_file: str | None = None
    log_format: str = "text"


class _Client:
    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.reader = protocol.LineReader()
        self.is_agent = False


class Anchor:
    def __init__(self, request: CreateRequest) -> None:
        self.request = request
        self.store = request.store
        self.site = request.site
        self.backend = backends.get(request.site.backend)
        self.selector = selectors.DefaultSelector()
        self.token = secrets.token_hex(16)
        self.allocation: Allocation | None = None
        self.step: Step | None = None
        self.listener: socket.socket | None = None
        self.terminal_fd: int | None = None
        self.agents: list[_Client] = []
        self.pending_kills: list[int] = []
        self.reported: list[int] = []
        self.kill_deadline: float | None = None
        self.exit_status: int | None = None
        self.hooks: ScrunLua | None = None
        bundle = request.bundle
        self.state = ContainerState(
            id=request.container_id, bundle=str(bundle.path), pid=os.getpid(),
            pid_start=process_start_time(os.getpid()),
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            annotations=bundle.annotations, rootfs=str(bundle.rootfs),
            owner=_user_name(), backend=self.backend.name,
        )
        # Where the container runs from: the submitted bundle unless scrun.lua moves it.
        self.run_bundle, self.run_rootfs = self.state.bundle, self.state.rootfs

    # -- create ----------------------------------------------------------------------
    def _setup(self) -> None:
        self.store.save(self.state)
        socket_path = self.store.socket_path(self.state.id)
        self.listener = protocol.listen(socket_path)
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, "listen")
        if self.request.bundle.terminal:
            assert self.request.console_socket
            self.terminal_fd = console.open_console(
                self.request.console_socket,
                self.request.bundle.config["process"].get("consoleSize"),
            )
        environ = dict(self.request.environ)
        # podman run -e SLURM_JOB_ID=N runs the container in that existing job.
        for entry in self.request.bundle.env:
            if entry.startswith("SLURM_JOB_ID="):
                environ["SLURM_JOB_ID"] = entry.partition("=")[2]
        self.allocation = self.backend.allocate(
            self.site, self.state, self.request.job_options, environ)
        self.state.job_id = self.allocation.job_id
        self.state.job_owned = self.allocation.owned
        self.store.save(self.state)
        self._stage_in()
        self.state.status = CREATED
        self.store.save(self.state)
        if self.request.pid_file:
            write_atomic(os.path.abspath(self.request.pid_file), str(os.getpid()).encode(), 0o644)

    def run(self, ready_fd: int) -> NoReturn:
        _install_signal_relay(self.selector)
        try:
            self._setup()
        except BaseException as err:
            message = str(err) if isinstance(err, ScrunError | OSError) else repr(err)
            log.current.error(f"create failed: {message}")
            self._release()
            _write_all(ready_fd, f"error {message}\n".encode())
            os._exit(1)
        _write_all(ready_fd, b"ok\n")
        os.close(ready_fd)
        status = self._serve()
        os._exit(status & 0xFF)

    # -- serving ---------------------------------------------------------------------
    def _serve(self) -> int:
        while self.exit_status is None:
            timeout = None
            if self.kill_deadline is not None:
                timeout = max(0.0, self.kill_deadline - time.monotonic())
            events = self.selector.select(timeout)
            for key, _ in events:
                self._dispatch(key)
                if self.exit_status is not None:
                    break
            if (self.kill_deadline is not None and self.exit_status is None
                    and time.monotonic() >= self.kill_deadline):
                self._force_stop()
        return self._finish(self.exit_status)

    def _dispatch(self, key: selectors.SelectorKey) -> None:
        data = key.data
        if data == "listen":
            self._accept()
        elif data == "signal":
            signums = key.fileobj.recv(256)  # type: ignore[union-attr]
            if any(s in _TERMINATING_SIGNALS for s in signums):
                log.current.info("terminating on signal: cancelling the container")
                self._kill(signal.SIGKILL)
        elif data == "step":
            assert self.step is not None
            # Agents report their container's status and exit 0; a task that could
            # not report (killed) leaves its status in the launcher's own.
            self.exit_status = max([self.backend_wait(self.step), *self.reported])
        elif isinstance(data, _Client):
            self._read(data)

    def backend_wait(self, step: Step) -> int:
        try:
            _, status = os.waitpid(step.pid, 0)
        except ChildProcessError:
            return 255
        if os.WIFSIGNALED(status):
            return 128 + os.WTERMSIG(status)
        return os.waitstatus_to_exitcode(status)

    def _accept(self) -> None:
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        if protocol.peer_uid(conn) not in (os.getuid(), 0):
            conn.close()
            return
        conn.setblocking(False)
        self.selector.register(conn, selectors.EVENT_READ, _Client(conn))

    def _drop(self, client: _Client) -> None:
        self.selector.unregister(client.conn)
        client.conn.close()
        if client in self.agents:
            self.agents.remove(client)

    def _read(self, client: _Client) -> None:
        try:
            data = client.conn.recv(65536)
            messages = client.reader.feed(data) if data else None
        except (OSError, ValueError):
            messages = None
        if messages is None:
            self._drop(client)
            return
        for message in messages:
            try:
                reply = self._handle(client, message)
            except ScrunError as err:
                reply = {"ok": False, "error": str(err)}
            if reply is not None:
                try:
                    client.conn.sendall(protocol.encode(reply))
                except OSError:
                    self._drop(client)
                    return

    def _handle(self, client: _Client, message: dict[str, Any]) -> dict[str, Any] | None:
        op = message.get("op")
        if message.get("event") == "exit" and client.is_agent:
            self.reported.append(int(message.get("status", 255)))
            return None
        if op in ("agent-hello", "agent-error"):
            if not secrets.compare_digest(str(message.get("token", "")), self.token):
                raise ScrunError("bad agent token")
            if op == "agent-error":
                log.current.error(f"node agent: {message.get('message', '')}")
                return {"ok": True}
            client.is_agent = True
            self.agents.append(client)
            for signum in self.pending_kills:
                self._send_kill(client, signum)
            return None
        if op == "start":
            self._start()
        elif op == "kill":
            self._kill(int(message.get("signal", signal.SIGTERM)))
        elif op == "delete":
            self._kill(signal.SIGKILL)
        elif op != "state":
            raise ScrunError(f"unknown operation {op!r}")
        return {"ok": True, "state": self.state.oci_document()}

    # -- operations --------------------------------------------------------------------
    def _start(self) -> None:
        if self.state.status != CREATED:
            raise InvalidState(f"cannot start a container that is {self.state.status}")
        assert self.allocation is not None
        self.state.status = RUNNING
        self.store.save(self.state)
        request = LaunchRequest(
            agent_env={
                "PYSCRUN_AGENT_CONTAINER_ID": self.state.id,
                "PYSCRUN_AGENT_BUNDLE": self.run_bundle,
                "PYSCRUN_AGENT_SLURM_CONF": str(self.site.slurm_conf),
                "PYSCRUN_AGENT_SOCKET": str(self.store.socket_path(self.state.id)),
                "PYSCRUN_AGENT_TOKEN": self.token,
                "PYSCRUN_AGENT_JOB_ID": self.allocation.job_id,
                "PYSCRUN_AGENT_OWN_JOB": "1" if self.allocation.owned else "",
            },
            job_env={**self._output_env(), **self.allocation.env},
            terminal_fd=self.terminal_fd,
            step_args=scrun_env.arguments(self.request.job_options, scrun_env.STEP),
        )
        try:
            self.step = self.backend.launch(self.site, self.allocation, request)
        except ScrunError:
            self.exit_status = 255
            raise
        pidfd = os.pidfd_open(self.step.pid)
        self.selector.register(pidfd, selectors.EVENT_READ, "step")
        # The container's stdio now belongs to the step alone.
        _detach_stdio()
        if self.terminal_fd is not None:
            os.close(self.terminal_fd)
            self.terminal_fd = None

    # -- staging (scrun.lua) -------------------------------------------------------------
    def _stage_in(self) -> None:
        from pyscrun.hooks import lua

        allocation, state = self.allocation, self.state
        assert allocation is not None
        self.hooks = lua.load(
            self.site.scrun_lua,
            lambda script: self.backend.remote_command(self.site, allocation, script),
            state.bundle, state.rootfs,
        )
        if self.hooks is None:
            return
        job_env = [f"{k}={v}" for k, v in {**self._output_env(), **allocation.env}.items()]
        staged = self.hooks.stage_in(
            state.id, state.bundle, str(self.store.spool_dir(state.id)),
            str(self.request.bundle.config_path), _job_number(allocation.job_id),
            os.getuid(), os.getgid(), job_env,
        )
        self.run_bundle, self.run_rootfs = staged.bundle, staged.root_path

    def _stage_out(self) -> None:
        if self.hooks is None or self.allocation is None:
            return
        state = self.state
        try:
            self.hooks.stage_out(
                state.id, self.run_bundle, state.bundle, self.run_rootfs, state.rootfs,
                str(self.store.spool_dir(state.id)), str(self.request.bundle.config_path),
                _job_number(self.allocation.job_id), os.getuid(), os.getgid(),
            )
        except ScrunError as err:
            log.current.error(f"stage_out: {err}")

    def _output_env(self) -> dict[str, str]:
        request, state = self.request, self.state
        return jobenv.output_env(
            container_id=state.id, anchor_pid=state.pid, bundle=self.run_bundle,
            submission_bundle=str(request.bundle.path), annotations=state.annotations,
            pid_file=request.pid_file, socket=str(self.store.socket_path(state.id)),
            spool_dir=str(self.store.spool_dir(state.id)),
            config_file=str(request.bundle.config_path), root=str(self.store.root),
            rootfs=self.run_rootfs, submission_rootfs=str(request.bundle.rootfs),
            log_file=request.log_file, log_format=request.log_format,
        )

    def _kill(self, signum: int) -> None:
        status = self.state.status
        if status == CREATED:
            # Nothing runs yet: the container is over before it started.
            self.exit_status = 128 + signum
            return
        if status != RUNNING:
            raise InvalidState(f"cannot kill a container that is {status}")
        if signum == signal.SIGKILL and self.kill_deadline is None:
            self.kill_deadline = time.monotonic() + KILL_GRACE
        if not self.agents:
            self.pending_kills.append(signum)
        for agent in list(self.agents):
            self._send_kill(agent, signum)

    def _send_kill(self, agent: _Client, signum: int) -> None:
        try:
            agent.conn.sendall(protocol.encode({"op": "kill", "signal": signum}))
        except OSError:
            self._drop(agent)

    def _force_stop(self) -> None:
        """The step ignored SIGKILL for KILL_GRACE seconds: kill its launcher."""
        self.kill_deadline = None
        if self.step is not None:
            log.current.error("container did not stop after SIGKILL: killing its step")
            try:
                os.kill(self.step.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            self.exit_status = 128 + signal.SIGKILL

    # -- the end -----------------------------------------------------------------------
    def _release(self) -> None:
        if self.allocation is not None:
            try:
                self.backend.release(self.site, self.allocation)
            except ScrunError as err:
                log.current.error(f"releasing job {self.allocation.job_id}: {err}")
            self.allocation = None
        if self.listener is not None:
            self.listener.close()
            try:
                os.unlink(self.store.socket_path(self.state.id))
            except FileNotFoundError:
                pass
            self.listener = None

    def _finish(self, status: int) -> int:
        self._stage_out()
        self.state.status = STOPPED
        self.state.exit_status = status
        try:
            self.store.save(self.state)
        except ScrunError as err:
            log.current.error(str(err))
        self._release()
        return status


def _job_number(job_id: str) -> int:
    """Lua sees the job id as a number; the local backend's ids carry a prefix."""
    digits = "".join(c for c in job_id if c.isdigit())
    return int(digits) if digits else 0


def _user_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _write_all(fd: int, data: bytes) -> None:
    try:
        os.write(fd, data)
    except OSError:
        pass


def _detach_stdio() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    os.close(null)


def _install_signal_relay(selector: selectors.BaseSelector) -> None:
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    for signum in _TERMINATING_SIGNALS:
        signal.signal(signum, lambda *_: None)
    selector.register(reader, selectors.EVENT_READ, "signal")
    # Keep the writer alive as long as the process.
    _keep.append(writer)


_keep: list[socket.socket] = []


def start_anchor(request: CreateRequest, keep_fds: tuple[int, ...]) -> int:
    """Fork the anchor; returns its pid once it reported created. Raises on failure."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            os.setsid()
            # Hold nothing of the caller's but stdio (and fds it asked to preserve).
            keep = {0, 1, 2, write_fd, *keep_fds, *log.current.open_fds()}
            for fd in _open_fds():
                if fd not in keep:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            log.current.detach_stderr()
            log.current.prefix = f"scrun-anchor[{request.container_id}]"
            Anchor(request).run(write_fd)
        finally:
            os._exit(1)
    os.close(write_fd)
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = os.read(read_fd, 4096)
        if not chunk:
            break
        reply += chunk
    os.close(read_fd)
    if reply == b"ok\n":
        return pid
    os.waitpid(pid, 0)
    message = reply.decode(errors="replace").strip().removeprefix("error ")
    raise ScrunError(message or "the anchor died while creating the container")


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))
