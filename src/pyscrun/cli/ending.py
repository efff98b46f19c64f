"""The verbs that end a container: kill, and delete, which releases everything it held."""

from __future__ import annotations

import os
import select
import time

from pyscrun import log
from pyscrun.anchor.store import Store
from pyscrun.cli.lifecycle import ask_anchor
from pyscrun.cli.main import Context
from pyscrun.errors import AnchorError, ContainerNotFound, InvalidState, ScrunError
from pyscrun.oci.state import (
    CREATED,
    CREATING,
    PAUSED,
    RUNNING,
    STOPPED,
    ContainerState,
    process_alive,
    wait_reaped,
)

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
        ask_anchor(store, state, {"op": "kill", "signal": signum, "all": ctx.flag("all")})
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
            ask_anchor(store, state, {"op": "delete"})
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
