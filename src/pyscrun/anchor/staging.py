"""Where a container runs from, and the scrun.lua calls that may move it there and back.

The submitted bundle unless `slurm_scrun_stage_in` moves it (slurm.set_bundle_path,
slurm.set_root_path); `slurm_scrun_stage_out` then gets both places. The man page's
output variables describe the container as it runs, so they are worked out here too.
"""

from __future__ import annotations

import os

from pyscrun import identity, log
from pyscrun.anchor import jobenv
from pyscrun.anchor.request import CreateRequest
from pyscrun.backends.base import Allocation, Backend
from pyscrun.errors import ScrunError
from pyscrun.oci.state import ContainerState

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from pyscrun.conf.site import Site
    from pyscrun.hooks.lua import ScrunLua
    from pyscrun.oci.bundle import Bundle


class Staging:
    def __init__(self, request: CreateRequest, backend: Backend, state: ContainerState) -> None:
        self.request = request
        self.backend = backend
        self.state = state
        # Loaded by create before any job was asked for (preload_hooks).
        self.hooks: ScrunLua | None = request.hooks
        self.staged_in = False  # stage_out runs only if stage_in did, as Slurm's
        self.bundle, self.rootfs = state.bundle, state.rootfs

    def output_env(self) -> dict[str, str]:
        """The SCRUN_* output variables of the man page."""
        request, state, store = self.request, self.state, self.request.store
        return jobenv.output_env(
            container_id=state.id, anchor_pid=state.pid, bundle=self.bundle,
            submission_bundle=request.bundle.path, annotations=state.annotations,
            pid_file=request.pid_file, socket=store.socket_path(state.id),
            spool_dir=store.spool_dir(state.id),
            config_file=request.bundle.config_path, root=store.root,
            rootfs=self.rootfs, submission_rootfs=request.bundle.rootfs,
            log_file=request.log_file, log_format=request.log_format,
            in_a_job=self.backend.name != "local",
        )

    def job_env(self, allocation: Allocation) -> dict[str, str]:
        """The job's variables: the output variables (as the container runs now) and the
        allocation's (Slurm's for the job), which stage_in gets and scrun.lua's
        commands run with."""
        return {**self.output_env(), **self.backend.job_variables(allocation)}

    def stage_in(self, allocation: Allocation) -> None:
        site, state = self.request.site, self.state
        if self.hooks is None:
            log.current.info(f"no {site.scrun_lua}: containers are not staged")
            return
        # The anchor's signals interrupt scrun.lua, stage_in and stage_out alike: its
        # poll loop, which hears them otherwise, waits meanwhile.
        interrupt_fd = -1 if self.request.signals is None else self.request.signals
        self.hooks.bind(
            lambda script: self.backend.remote_command(site, allocation, script,
                                                       self.job_env(allocation), interrupt_fd),
            lambda script: _run_here(script, self.job_env(allocation), interrupt_fd),
            interrupt_fd)
        self.staged_in = True
        job_env = [f"{k}={v}" for k, v in self.job_env(allocation).items()]
        staged = self.hooks.stage_in(
            state.id, state.bundle, self.request.store.spool_dir(state.id),
            self.request.bundle.config_path, _job_number(allocation.job_id),
            identity.real_uid(), identity.real_gid(), job_env,
        )
        self.bundle, self.rootfs = staged.bundle, staged.root_path

    def maps_its_own_users(self) -> bool:
        """Whether stage_in gave the container user mappings of its own (the man page's
        example maps the real user onto the container's root): the node's runtime then
        makes that namespace itself, as the plain user, as under Slurm's scrun. Mappings
        podman wrote (--uidmap, --userns) are ids of podman's own namespace, which the
        node makes again for the runtime to run in."""
        if not self.staged_in:
            return False
        from pyscrun import jsonc

        try:
            with open(os.path.join(self.bundle, "config.json"), "rb") as source:
                staged = jsonc.loads(source.read())
        except (OSError, ValueError):
            return False
        return own_user_mappings(staged, self.request.bundle.config)

    def stages_out(self) -> bool:
        """Whether stage_out is to run (stage_in has)."""
        return self.hooks is not None and self.staged_in

    def stage_out(self, allocation: Allocation) -> None:
        """Errors are logged: the container has ended, its job must still be released."""
        if self.hooks is None or not self.staged_in:
            return
        state = self.state
        try:
            self.hooks.stage_out(
                state.id, self.bundle, state.bundle, self.rootfs, state.rootfs,
                self.request.store.spool_dir(state.id), self.request.bundle.config_path,
                _job_number(allocation.job_id), identity.real_uid(), identity.real_gid(),
            )
        except ScrunError as err:
            log.current.error(f"stage_out: {err}")


def own_user_mappings(staged: object, submitted: dict[str, Any]) -> bool:
    """A staged config.json with a user namespace and uid mappings that the submitted
    one does not have."""
    def mappings(config: object) -> object:
        linux = config.get("linux") if isinstance(config, dict) else None
        if not isinstance(linux, dict):
            return None
        namespaces = linux.get("namespaces")
        if not isinstance(namespaces, list) or not any(
                isinstance(n, dict) and n.get("type") == "user" for n in namespaces):
            return None
        return linux.get("uidMappings") or None

    own = mappings(staged)
    return own is not None and own != mappings(submitted)


def preload_hooks(site: Site, bundle: Bundle) -> ScrunLua | None:
    """The site's scrun.lua as create loads it, before any job is asked for (as Slurm's
    scrun does): a script that cannot load fails create, and no job is allocated, or
    waited for in the queue. Its commands, as Slurm's run them then: allocator_command
    here without the job's variables, remote_command failing (no job, no nodes); the
    job's own are bound once it runs."""
    return load_hooks(site.scrun_lua, _no_nodes_yet, bundle.path, bundle.rootfs,
                      _here_before_the_job, site.cluster_name())


def _here_before_the_job(script: str) -> tuple[int, str]:
    return _run_here(script, {}, -1)


def _no_nodes_yet(script: str) -> tuple[int, str]:
    return 1, "scrun.lua: remote_command while the script loads: no job, no node to run on\n"


def load_hooks(path: str, remote_command: Callable[[str], tuple[int, str]], bundle: str,
               root_path: str, allocator_command: Callable[[str], tuple[int, str]] | None = None,
               cluster_name: str | None = None) -> ScrunLua | None:
    """The site's scrun.lua, loaded (lua.load); None (said at info level) if there is
    none."""
    if not os.path.lexists(path):
        log.current.info(f"no {path}: containers are not staged")
        return None
    # Imported only now: the Lua machinery would cost every container without one.
    from pathlib import Path

    from pyscrun.hooks import lua

    return lua.load(Path(path), remote_command, bundle, root_path, allocator_command,
                    cluster_name)


def _job_number(job_id: str) -> int:
    """Lua sees the job id as a number: the local backend's (`local<pid>.<start>`) is
    its pid."""
    number = job_id.removeprefix("local").partition(".")[0]
    return int(number) if number.isdigit() else 0


def _run_here(script: str, env: dict[str, str], interrupt_fd: int) -> tuple[int, str]:
    """scrun.lua's allocator_command: loaded only when a script runs one."""
    from pyscrun.shell import run_shell

    return run_shell(script, env, interrupt_fd)
