"""The verbs that make and drive a container: create, start, run, pause, resume (kill
and delete end it: cli/ending.py)."""

from __future__ import annotations

import os

from pyscrun import log
from pyscrun.anchor.store import Store
from pyscrun.cli.main import Context
from pyscrun.digits import only_digits
from pyscrun.errors import InvalidState, JobSuspended, ScrunError, UsageError
from pyscrun.oci.state import CREATED, ContainerState, shell_status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pyscrun.conf.site import Site


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


def ask_anchor(store: Store, state: ContainerState, message: dict[str, object],
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
    ask_anchor(store, state, {"op": "start"})
    return 0


def run(ctx: Context) -> int:
    store, container_id, (anchor, stand_in) = create_container(ctx)
    try:
        state = store.load(container_id)
        # From here on a signal reaches the container (or withdraws its queued job),
        # start or no start.
        forwarded = [] if ctx.flag("detach") else _forward_signals(store, state)
        try:
            ask_anchor(store, state, {"op": "start"})
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

    return ask_anchor(ctx.store, state_for(ctx, op), {"op": op, **fields}, CLIENT_WAIT)


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
            ask_anchor(store, state, {"op": "kill", "signal": signum})
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
