"""One task's directory, rewritten config.json and runtime commands, on its node."""

from __future__ import annotations

import _socket
import os

from pyscrun import identity, jsonc
from pyscrun.conf import patterns
from pyscrun.conf.ociconf import OciConf
from pyscrun.errors import ScrunError
from pyscrun.fs import remove_tree
from pyscrun.node import rewrite
from pyscrun.node.runtime import RuntimeCommands
from pyscrun.oci import bundle as oci_bundle

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class TaskIdentity:
    """Which task of which container this is, from the agent's environment.

    A plain class rather than a dataclass: `dataclasses` costs each agent milliseconds.
    """

    __slots__ = ("bundle", "container_id", "job_id", "local_id", "node", "step_id", "task_id",
                 "uid", "user")

    def __init__(self, env: dict[str, str]) -> None:
        self.uid = identity.real_uid()
        self.user = identity.user_name(self.uid)
        self.container_id = env["PYSCRUN_AGENT_CONTAINER_ID"]
        self.bundle = env["PYSCRUN_AGENT_BUNDLE"]
        self.job_id = env["PYSCRUN_AGENT_JOB_ID"]
        self.step_id = env.get("SLURM_STEP_ID") or env.get("PYSCRUN_AGENT_STEP_ID", "0")
        self.task_id = env.get("SLURM_PROCID") or "0"
        # The task's number on its node: oci.conf's %t, as slurmstepd fills it in.
        self.local_id = env.get("SLURM_LOCALID") or "0"
        self.node = node_name(env)


EXEC_RECORD = "exec.json"


def container_path(conf: OciConf, job_id: str, node: str) -> str:
    """Where the task dirs of a job go on this node: ContainerPath, its patterns filled
    in, or the default."""
    if not conf.ContainerPath:
        return default_container_path()
    uid = identity.real_uid()
    return patterns.expand_path(conf.ContainerPath, patterns.PatternValues(
        job_id=job_id, node_name=node, user_name=identity.user_name(uid), uid=str(uid)))


def node_name(env: dict[str, str]) -> str:
    return env.get("SLURMD_NODENAME") or _socket.gethostname()


def default_container_path() -> str:
    uid = identity.real_uid()
    if uid == 0:
        # Beside the default --root, not in it: a container named "tasks" is no task dir.
        return "/run/pyscrun-tasks"
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return os.path.join(runtime_dir, "pyscrun-tasks")
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", f"pyscrun-tasks-{uid}")


def settle_runtime_dir(env: dict[str, str]) -> None:
    """An ordinary user's runtime dir on this node: the one the login side named
    where the node has it too (a login manager made it), else a private one under
    /tmp. Rootless runc keeps its state there, and the task dirs are there."""
    if identity.is_root() or identity.private_dir(env.get("XDG_RUNTIME_DIR", "")):
        return
    fallback = os.path.join(env.get("TMPDIR") or "/tmp",
                            f"pyscrun-runtime-{identity.real_uid()}")
    try:
        os.mkdir(fallback, mode=0o700)
    except FileExistsError:
        pass
    if not identity.private_dir(fallback):
        raise ScrunError(f"{fallback} is in the way of the user's runtime dir on "
                         f"{_socket.gethostname()}: it must be a directory of the user's, "
                         "mode 0700")
    env["XDG_RUNTIME_DIR"] = os.environ["XDG_RUNTIME_DIR"] = fallback


def _job_env(env: dict[str, str]) -> dict[str, str]:
    """The step's Slurm variables, which the container sees beside its own."""
    return {k: v for k, v in env.items() if k.startswith("SLURM")}


def bundle_shipped(env: dict[str, str]) -> bool:
    """Whether the bundle comes from the anchor (node/shipped.py): it ships it to every
    node (its rootfs is a mount of the login host's), or left a probe in the bundle dir
    that this node does not see."""
    if env.get("PYSCRUN_AGENT_BUNDLE_SHIP") == "always":
        return True
    probe = env.get("PYSCRUN_AGENT_BUNDLE_PROBE", "")
    return bool(probe) and not os.path.exists(
        os.path.join(env.get("PYSCRUN_AGENT_BUNDLE", ""), probe))


def _check_bind_sources(config: dict[str, Any], bundle: str, node: str, step_dir: str,
                        ) -> None:
    """What runc would fail on with a bare `no such file or directory`, said the way
    a user on a cluster needs it: a bind mount of a path that this node does not have
    (the login host's /tmp, say) cannot reach the container. The step dir
    (MountSpoolDir's source) is made once the task is prepared."""
    for mount in config.get("mounts") or []:
        if not oci_bundle.is_bind(mount):
            continue
        source = os.path.join(bundle, str(mount.get("source", "")))
        if source != step_dir and not os.path.lexists(source):
            raise ScrunError(f"{node}: the source of the bind mount on "
                             f"{mount.get('destination')}, {mount.get('source')}, does not "
                             "exist on this node: a container on a compute node can mount "
                             "only what the nodes see (the cluster file system)")


class Task:
    """One task's directory, rewritten config and runtime commands."""

    def __init__(self, conf: OciConf, ident: TaskIdentity, env: dict[str, str]) -> None:
        self.conf = conf
        self.ident = ident
        base = container_path(conf, ident.job_id, ident.node)
        self.step_dir = os.path.join(base, f"oci-job{ident.job_id}-{ident.step_id}")
        self.dir = os.path.join(self.step_dir, f"task-{ident.task_id}")
        # Where config.json is read: the bundle, or its copy shipped to this node.
        self.source = ident.bundle
        self.shipped_dir = os.path.join(self.step_dir, f"bundle-{ident.task_id}")
        self.env = env
        self.terminal = os.isatty(0)
        # Whether the container's init is pid 1 of a pid namespace of its own: its end
        # then ends every process of the container (unknown without config.json).
        self.own_pid_namespace = False

    def prepare(self, derive_patterns: Callable[[], dict[str, str]],
                planned: Callable[[RuntimeCommands], None] | None = None) -> RuntimeCommands:
        """The task dir with its files, and the runtime commands. Everything is worked
        out before anything is written: `planned` (the guard's start) sees the commands
        before the task dir exists, so that nothing is ever left without a guard."""
        conf, ident = self.conf, self.ident
        files: dict[str, bytes] = {}
        if conf.IgnoreFileConfigJson:
            bundle_dir, rootfs = ident.bundle, ident.bundle
            args: list[str] = jsonc.loads(self.env.get("PYSCRUN_AGENT_ARGS", "[]"))
            env_entries = rewrite.exclude_env(
                rewrite.merge_env([], _job_env(self.env)), conf.EnvExclude)
        else:
            source = oci_bundle.load(self.source)
            config = rewrite.rewrite(
                source.config, bundle=self.source, job_env=_job_env(self.env),
                env_exclude=conf.EnvExclude, terminal=self.terminal and conf.run_mode,
                mount_spool_dir=patterns.expand_path(conf.MountSpoolDir, patterns.PatternValues(
                    job_id=ident.job_id, node_name=ident.node, step_id=ident.step_id,
                    task_id=ident.local_id, user_name=ident.user, uid=str(ident.uid))),
                step_dir=self.step_dir,
                disable_hooks=conf.DisableHooks, task_id=ident.task_id,
                container=(ident.container_id, ident.bundle),
                shm=self.env.get("PYSCRUN_AGENT_SHM"),
            )
            _check_bind_sources(config, self.source, ident.node, self.step_dir)
            files["config.json"] = jsonc.dumps(config).encode()
            self.own_pid_namespace = any(
                ns.get("type") == "pid" and not ns.get("path")
                for ns in (config.get("linux") or {}).get("namespaces") or [])
            bundle_dir, rootfs = self.dir, config["root"]["path"]
            args = config["process"]["args"]
            env_entries = config["process"]["env"]
        env_file = ""
        if conf.CreateEnvFile != "disabled":
            files["environment"] = rewrite.env_file_content(env_entries, conf.CreateEnvFile)
            env_file = os.path.join(self.dir, "environment")
        values = patterns.PatternValues(
            bundle=bundle_dir, env_file=env_file, job_id=ident.job_id,
            step_dir=self.step_dir, node_name=ident.node, rootfs=rootfs,
            step_id=ident.step_id, task_id=ident.local_id, user_name=ident.user,
            uid=str(ident.uid), args=args,
        )
        # What `scrun exec` needs to find this task's container (node/exec_into.py):
        # the runtime's patterns, and a process in the user namespace it runs in.
        files[EXEC_RECORD] = jsonc.dumps({
            "container": ident.container_id,
            "patterns": {name: getattr(values, name) for name in values.__slots__},
            "agent": os.getpid()}).encode()
        runtime_env = {k: v for k, v in self.env.items() if not k.startswith("PYSCRUN_AGENT_")}
        commands = RuntimeCommands(conf, values, self.dir, runtime_env, derive_patterns)
        if planned is not None:
            planned(commands)
        os.makedirs(self.dir, mode=0o700)
        for name, data in files.items():
            with open(os.path.join(self.dir, name), "wb") as out:
                out.write(data)
        return commands

    def cleanup(self) -> None:
        if self.conf.DisableCleanup:
            return
        remove_tree(self.dir)
        remove_tree(self.shipped_dir)
        try:
            os.rmdir(self.step_dir)
        except OSError:
            pass  # another task of the step still uses it
