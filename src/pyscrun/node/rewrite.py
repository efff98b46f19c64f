"""The per-task config.json: what the compute node's runtime actually runs."""

from __future__ import annotations

import os

from pyscrun import log

# typing (and copy, re) cost each node agent milliseconds: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from collections.abc import Mapping
    from typing import Any


def merge_env(base: list[str], extra: Mapping[str, str]) -> list[str]:
    """base with every key of extra set to its value (replacing, else appended)."""
    merged: dict[str, str] = {}
    for entry in base:
        key, _, value = entry.partition("=")
        merged[key] = value
    merged.update(extra)
    return [f"{key}={value}" for key, value in merged.items()]


def exclude_env(entries: list[str], pattern: re.Pattern[str] | None) -> list[str]:
    if pattern is None:
        return entries
    return [entry for entry in entries if not pattern.search(entry)]


def rewrite(
    config: Mapping[str, Any],
    *,
    bundle: str,
    job_env: Mapping[str, str],
    env_exclude: re.Pattern[str] | None,
    terminal: bool,
    mount_spool_dir: str,
    step_dir: str,
    disable_hooks: tuple[str, ...],
    task_id: str = "0",
    container: tuple[str, str] | None = None,
    shm: str | None = None,
) -> dict[str, Any]:
    """config.json as the task's runtime runs it; container is the (id, bundle) the
    caller knows the container by, which its hooks are given; shm the options of the
    tmpfs the login host bound at /dev/shm (oci/shm.py), if it did."""
    new: dict[str, Any] = _copied(dict(config))
    root = new.setdefault("root", {})
    root["path"] = os.path.normpath(os.path.join(bundle, root.get("path", "rootfs")))
    process = new.setdefault("process", {})
    process["env"] = exclude_env(merge_env(process.get("env") or [], job_env), env_exclude)
    process["terminal"] = terminal
    if not terminal:
        process.pop("consoleSize", None)
    if mount_spool_dir:
        new.setdefault("mounts", []).append({
            "destination": mount_spool_dir,
            "type": "bind",
            "source": step_dir,
            "options": ["rbind", "rw"],
        })
    if shm is not None:
        from pyscrun.oci.shm import make_private

        make_private(new, shm)
    linux = new.get("linux")
    if isinstance(linux, dict) and linux.get("cgroupsPath") and task_id != "0":
        # Tasks of one container that share a machine must not share a cgroup.
        linux["cgroupsPath"] = f"{linux['cgroupsPath']}-task{task_id}"
    hooks = new.get("hooks")
    if hooks and disable_hooks:
        for hook_type in disable_hooks:
            hooks.pop(hook_type, None)
    if hooks and container is not None:
        from pyscrun.node import hook_state

        hook_state.wrap(hooks, *container)
    return new


def env_file_content(entries: list[str], mode: str) -> bytes:
    if mode == "null":
        return "".join(entry + "\0" for entry in entries).encode()
    kept = []
    for entry in entries:
        if "\n" in entry:
            # A second line would read as another variable: oci.conf(5) drops these.
            log.current.debug(f"environment file: {entry.partition('=')[0]!r} left out, "
                              "it holds a newline (CreateEnvFile=newline)")
        else:
            kept.append(entry)
    return "".join(entry + "\n" for entry in kept).encode()


def _copied(value: Any) -> Any:
    """A copy of JSON data that shares nothing with it."""
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copied(item) for item in value]
    return value
