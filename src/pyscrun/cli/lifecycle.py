"""The verbs that change a container: create, start, run, kill, delete."""

from __future__ import annotations

import os
import select
import time

from pyscrun import log
from pyscrun.anchor.store import Store
from pyscrun.cli.main import Context
from pyscrun.digits import only_digits
from pyscrun.errors import (
    AnchorError,
    ContainerNotFound,
    InvalidState,
    JobSuspended,
    ScrunError,
    UsageError,
)
from pyscrun.oci.state import (
    CREATED,
    CREATING,
    PAUSED,
    RUNNING,
    STOPPED,
    ContainerState,
    process_alive,
    shell_status,
    wait_reaped,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pyscrun.conf.site import Site

# How long delete waits for the anchor to wind down after ordering the kill.
DELETE_TIMEOUT = 30.0
# How long delete waits for an anchor that recorded the container's end to give its job
# back; one that takes longer (slurmctld away) is left to finish it.
RELEASE_WAIT = 5.0
# How long an ended stand-in may stay a zombie before its parent (conmon) reaps it.
REAP_TIMEOUT = 2.0
# How long after a container's end a kill counts as racing it (and succeeds) rather
# than coming after it (runc's error): podman learns of the end that much later.
KILL_RACE = 5.0


def create_container(ctx: Context, restore: dict[str, Any] | None = None,
                     replacing: ContainerState | None = None,
                     ) -> tuple[Store, str, tuple[int, int]]:
    """Everything create (and restore) does: check, reserve the id, fork the anchor and
    the container's stand-in (their pids). replacing: a stopped container of the same
    id (restore's), removed once the checks passed."""
    from pyscrun.anchor.request import CreateRequest
    from pyscrun.anchor.spawn import start_anchor
    from pyscrun.conf import scrun_env, site
    from pyscrun.oci import bundle as oci_bundle
    from pyscrun.oci import refusals

    container_id = ctx.container_id
    bundle = oci_bundle.load(ctx.option("bundle") or os.getcwd())
    refusals.check(bundle.config, bundle.rootfs)
    console_socket = ctx.option("console_socket")
    if bundle.terminal and not console_socket:
        raise UsageError("process.terminal is true but no --console-socket was given")
    if console_socket and not bundle.terminal:
        raise UsageError("cannot use console socket if runc will not detach or allocate tty")
    preserve = ctx.option("preserve_fds") or "0"
    if not only_digits(preserve):
        raise UsageError(f"--preserve-fds needs a number, not {preserve!r}")
    if int(preserve) > os.sysconf("SC_OPEN_MAX"):
        raise UsageError(f"--preserve-fds {preserve}: more descriptors than a process may "
                         f"have open here ({os.sysconf('SC_OPEN_MAX')})")
    the_site = site.load(ctx.slurm_conf)
    if int(preserve) and the_site.backend != "local":
        raise UsageError(f"--preserve-fds {preserve}: descriptors cannot reach a container on "
                         "another machine; run it on the local backend (Backend=local in "
                         "pyscrun.conf)")
    if the_site.backend != "local":
        refusals.check_for_another_machine(bundle.config)
    oci = the_site.oci
    log.current.take_defaults(oci.StdIODebug, oci.FileDebug, oci.SyslogDebug, oci.DebugFlags)
    job_options = scrun_env.job_options(ctx.environ, bundle.env)
    if restore is not None:
        tasks_to_restore(job_options, int(restore.get("tasks", 1)))
    hooks = None
    if os.path.lexists(the_site.scrun_lua):
        # Before any job is asked for, as Slurm's scrun (the anchor, a fork, keeps it).
        from pyscrun.anchor.staging import preload_hooks

        hooks = preload_hooks(the_site, bundle)
    store = ctx.store
    if replacing is not None:
        store.remove(replacing.id)
    store.make_spool_dir(container_id)
    try:
        pids = start_anchor(
            CreateRequest(container_id, bundle, store, the_site, console_socket,
                          ctx.option("pid_file"), ctx.environ, job_options,
                          ctx.option("log"), ctx.option("log_format") or "text", restore,
                          int(preserve), hooks),
            keep_fds=tuple(range(3, 3 + int(preserve))),
        )
    except BaseException:
        store.remove(container_id)
        raise
    return store, container_id, pids


def create(ctx: Context) -> int:
    create_container(ctx)
    return 0


def _ask(store: Store, state: ContainerState, message: dict[str, object],
         timeout: float = 30.0) -> dict[str, Any]:
    """The anchor's reply to message; InvalidState with its words if it refused."""
    # Loaded when an anchor is asked: deleting a container that ended (podman's way
    # after every run) asks none.
    from pyscrun.anchor import protocol

    reply = protocol.request(store.socket_path(state.id), message, timeout)
    if not reply.get("ok"):
        raise InvalidState(str(reply.get("error", "the anchor refused")))
    return reply


def load_for(ctx: Context, action: str, *statuses: str) -> tuple[Store, ContainerState]:
    """The container named on the command line, if it is in one of statuses."""
    store = ctx.store
    state = store.load(ctx.container_id)
    status = state.effective_status()
    if status not in statuses:
        raise InvalidState(f"cannot {action} a container that is {status}")
    return store, state


def refuse_while_suspended(the_site: Site, state: ContainerState, action: str) -> None:
    """JobSuspended if Slurm has suspended the container's job: its step's processes,
    the node agents among them, are stopped until the job is resumed. An order would
    wait for that, silently, and be carried out whenever it came; runc refuses such
    orders to a paused container."""
    from pyscrun import backends

    if backends.get(state.backend).suspended(the_site, state.job_id):
        raise JobSuspended(f"cannot {action} a container whose job {state.job_id} is suspended")


def start(ctx: Context) -> int:
    store, state = load_for(ctx, "start", CREATED)
    _ask(store, state, {"op": "start"})
    return 0


def run(ctx: Context) -> int:
    store, container_id, (anchor, stand_in) = create_container(ctx)
    try:
        state = store.load(container_id)
        # From here on a signal reaches the container (or withdraws its queued job),
        # start or no start.
        forwarded = [] if ctx.flag("detach") else _forward_signals(store, state)
        try:
            _ask(store, state, {"op": "start"})
        except ScrunError:
            if not forwarded:
                # As with runc, a run that could not start leaves no container behind.
                _give_up(store, container_id, anchor, stand_in)
                raise
            # A signal forwarded before the start ended the container: run ends as it did.
    except KeyboardInterrupt:
        # Ctrl-C before the signals were forwarded: the container is given up, as on
        # SIGTERM to its anchor (a queued job is withdrawn).
        _give_up(store, container_id, anchor, stand_in)
        raise
    if ctx.flag("detach"):
        return 0
    # The stand-in exits with the container's status once the anchor is done.
    _, status = os.waitpid(stand_in, 0)
    os.waitpid(anchor, 0)
    if not ctx.flag("keep"):
        store.remove(container_id)
    return shell_status(status)


def _give_up(store: Store, container_id: str, anchor: int, stand_in: int) -> None:
    """End run's container before it ran (its anchor gives its job back) and remove it."""
    import signal

    try:
        os.kill(anchor, signal.SIGTERM)
    except ProcessLookupError:
        pass  # ended already
    os.waitpid(stand_in, 0)
    os.waitpid(anchor, 0)
    store.remove(container_id)


def pause(ctx: Context) -> int:
    order_tasks(ctx, "pause")
    return 0


def resume(ctx: Context) -> int:
    order_tasks(ctx, "resume")
    return 0


def order_tasks(ctx: Context, op: str, **fields: object) -> dict[str, Any]:
    """pause, resume, update or ps: every task, or none (anchor/task_orders.py); the
    anchor's reply."""
    from pyscrun.anchor.task_orders import CLIENT_WAIT

    return _ask(ctx.store, state_for(ctx, op), {"op": op, **fields}, CLIENT_WAIT)


def state_for(ctx: Context, op: str) -> ContainerState:
    """The container's state, if op may be ordered in it (runc's refusals otherwise)."""
    from pyscrun.anchor.task_orders import RULES
    from pyscrun.conf import site

    state = ctx.store.load(ctx.container_id)
    if state.effective_status() not in RULES[op].before:
        raise InvalidState(RULES[op].refusal)  # runc's words
    refuse_while_suspended(site.load(ctx.slurm_conf), state, RULES[op].action)
    return state


def _forward_signals(store: Store, state: ContainerState) -> list[int]:
    """As `runc run` does: the signals this process gets go to the container (Ctrl-C
    included), which decides how it ends. The list fills with those forwarded."""
    import signal

    from pyscrun.child import PASSED_ON

    # Loaded before any handler is set: a signal that came in the middle of its import
    # would find it half made (no `request` yet) and leave the container behind.
    __import__("pyscrun.anchor.protocol")
    forwarded: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        forwarded.append(signum)
        try:
            _ask(store, state, {"op": "kill", "signal": signum})
        except ScrunError as err:
            log.current.info(f"signal {signum} not forwarded: {err}")

    for signum in PASSED_ON:
        signal.signal(signum, forward)
    return forwarded


def tasks_to_restore(job_options: dict[str, str], tasks: int) -> None:
    """The restored container needs as many tasks as were checkpointed: an SCRUN_NTASKS
    of another count would leave it waiting for tasks that never come."""
    given = job_options.get("SCRUN_NTASKS")
    if given is not None and only_digits(given.strip()) and int(given) != tasks:
        raise UsageError(f"the checkpoint holds {tasks} task(s): restore it without "
                         f"SCRUN_NTASKS={given}, or with SCRUN_NTASKS={tasks}")
    if tasks > 1:
        job_options["SCRUN_NTASKS"] = str(tasks)


def kill(ctx: Context) -> int:
    from pyscrun.cli.signals import parse_signal

    store = ctx.store
    # As runc: the container first, then the signal, each failure exit status 1.
    state = store.load(ctx.container_id)
    signum = parse_signal(ctx.args.get("signal"))
    if signum == 0:
        # runc's liveness check: nothing is sent, and a container that has just ended
        # is not alive (the race with its end that other signals win does not apply).
        if state.effective_status() not in (CREATED, RUNNING, PAUSED):
            raise InvalidState("container not running")  # runc's words
        return 0
    if state.effective_status() not in (CREATED, RUNNING, PAUSED):
        if ctx.flag("all"):
            return 0  # as runc: every process of a stopped container is gone already
        ending = process_alive(state.stand_in, state.stand_in_start)
        if not ending and time.time() - state.ended > KILL_RACE:
            raise InvalidState("container not running")  # runc's words
        return _raced_an_end(state)
    try:
        _ask(store, state, {"op": "kill", "signal": signum, "all": ctx.flag("all")})
    except AnchorError:
        # The container ended between the read of its state and the order: its anchor
        # closed the control socket (or is gone) as it recorded the end.
        try:
            ended = store.load(state.id).effective_status() not in (CREATED, RUNNING, PAUSED)
        except ContainerNotFound:
            ended = True
        if not ended:
            raise
        return _raced_an_end(state)
    return 0


def _raced_an_end(state: ContainerState) -> int:
    """The container has just ended (the pid its caller knows it by may live on while
    the job is given back): a signal that races an end succeeds. podman stops and
    removes a container it still thinks runs, and takes a refusal for a failure
    (`podman rm -af` as `run --rm` containers end)."""
    _wait_gone(state.stand_in, state.stand_in_start, DELETE_TIMEOUT)
    wait_reaped(state.stand_in, state.stand_in_start, REAP_TIMEOUT)
    return 0


def _wait_stopped(store: Store, state: ContainerState, timeout: float) -> bool:
    """Wait until the anchor has recorded the container's end, or is gone. An anchor
    that is still giving its job back (slurmctld away, say) is left to finish it; one
    running scrun.lua's stage_out is waited for however long that takes."""
    deadline = time.monotonic() + timeout
    while process_alive(state.pid, state.pid_start):
        try:
            now = store.load(state.id)
            if now.status == STOPPED:
                return True
            if now.staging_out:
                deadline = time.monotonic() + timeout
        except ScrunError:
            pass
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        _wait_gone(state.pid, state.pid_start, min(remaining, 0.2))
    return True


def _wait_gone(pid: int, start_time: int, timeout: float) -> bool:
    """Wait until the process pid (that started at start_time) has ended."""
    try:
        pidfd = os.pidfd_open(pid)
    except (ProcessLookupError, ValueError):
        return True
    try:
        deadline = time.monotonic() + timeout
        while process_alive(pid, start_time):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            select.select([pidfd], [], [], min(remaining, 0.5))
        return True
    finally:
        os.close(pidfd)


def _signal_anchor(pid: int, signum: int) -> None:
    """A signal to an anchor that may have exited since it was seen alive (a concurrent
    delete, a create failing at that moment): it is then gone, as wanted."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def delete(ctx: Context) -> int:
    store = ctx.store
    try:
        state = store.load(ctx.container_id)
    except ContainerNotFound:
        if ctx.flag("force"):
            # As runc: a container already gone is what --force asked for, and what a
            # create that died early left of it goes too.
            store.remove_abandoned(ctx.container_id)
            return 0
        raise
    status = state.effective_status()
    if status in (RUNNING, PAUSED) and not ctx.flag("force"):
        raise InvalidState(f"cannot delete container {state.id} that is {status}: use --force")
    if status == CREATING:
        # The anchor is still making the container (its job may wait in the queue) and
        # serves no request yet: SIGTERM makes it give up (unless it just ended).
        _signal_anchor(state.pid, 15)
    elif status != STOPPED:
        try:
            _ask(store, state, {"op": "delete"})
        except AnchorError as err:
            log.current.info(f"anchor unreachable, ending it: {err}")
    if status != STOPPED and not _wait_stopped(store, state, DELETE_TIMEOUT):
        log.current.error(f"anchor {state.pid} did not exit: killing it")
        _signal_anchor(state.pid, 9)  # SIGKILL; the signal module costs an import here
        _wait_gone(state.pid, state.pid_start, 5)
    try:
        state = store.load(state.id)
    except ContainerNotFound:
        return 0  # a create that gave up has removed it itself
    if state.status != STOPPED:
        # The anchor died without finishing: end what it held.
        from pyscrun import backends
        from pyscrun.conf import site

        backends.get(state.backend).cleanup_orphan(site.load(ctx.slurm_conf), state)
    else:
        # Its step may still be ending and its job being given back (podman learns of
        # the end before that): what create made is gone when delete returns.
        _wait_gone(state.pid, state.pid_start, RELEASE_WAIT)
    store.remove(state.id)
    return 0
