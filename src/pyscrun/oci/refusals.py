"""What the low-level runtime would refuse in a config.json, found before create returns.

The container runs later, on another machine, where a refusal would come too late for
the caller: `podman run` must exit 127 for a command that does not exist and 126 for
one that cannot be run, as it does with runc, and it tells them apart by runc's words
(podman matches "executable file not found in", "no such file or directory" and
"permission denied" in the runtime's error).
"""

from __future__ import annotations

import os
import stat

from pyscrun.digits import only_digits
from pyscrun.errors import BundleError, CommandRefused

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_RLIMITS = frozenset(f"RLIMIT_{name}" for name in (
    "AS", "CORE", "CPU", "DATA", "FSIZE", "LOCKS", "MEMLOCK", "MSGQUEUE", "NICE",
    "NOFILE", "NPROC", "RSS", "RTPRIO", "RTTIME", "SIGPENDING", "STACK"))
# Namespace type in config.json -> the CLONE_NEW* flag the kernel reports for it.
_NAMESPACES = {"pid": 0x20000000, "network": 0x40000000, "mount": 0x00020000,
               "ipc": 0x08000000, "uts": 0x04000000, "user": 0x10000000,
               "cgroup": 0x02000000, "time": 0x00000080}
_NS_GET_NSTYPE = 0xB703
_MAX_LINKS = 40


def check(config: dict[str, Any], rootfs: str) -> None:
    """Raise BundleError, in the runtime's words where podman reads them."""
    _check_version(config.get("ociVersion", ""))
    process = config["process"]
    _check_rlimits(process.get("rlimits"))
    linux = config.get("linux") or {}
    _check_namespaces(linux.get("namespaces"))
    check_command(process, rootfs, [m.get("destination", "") for m in config.get("mounts") or []
                                     if isinstance(m, dict)])


def check_for_another_machine(config: dict[str, Any]) -> None:
    """Raise BundleError for what only this host has: a namespace to join (another
    container's, by `--pid container:NAME` and the like) is a path of this host's,
    which no compute node can open."""
    for namespace in (config.get("linux") or {}).get("namespaces") or []:
        if namespace.get("path"):
            raise BundleError(
                f"config.json: namespace {namespace['type']} path {namespace['path']} is "
                "this host's, and the container runs on a compute node, which cannot join "
                "it; run it on the local backend (Backend=local in pyscrun.conf)")


def _check_version(version: str) -> None:
    major, _, rest = version.partition(".")
    minor, _, patch = rest.partition(".")
    patch = patch.partition("-")[0].partition("+")[0]
    if not (major == "1" and only_digits(minor) and only_digits(patch)):
        raise BundleError(f"config.json: ociVersion {version!r} is not a 1.x.y version")


def _check_rlimits(rlimits: Any) -> None:
    if rlimits is None:
        return
    if not isinstance(rlimits, list):
        raise BundleError("config.json: process.rlimits must be list")
    for rlimit in rlimits:
        if not isinstance(rlimit, dict):
            raise BundleError("config.json: each of process.rlimits must be dict")
        kind = rlimit.get("type")
        soft: Any = rlimit.get("soft")
        hard: Any = rlimit.get("hard")
        if kind not in _RLIMITS:
            raise BundleError(f"config.json: wrong rlimit value: {kind}")
        if not (_limit(soft) and _limit(hard)):
            raise BundleError(f"config.json: rlimit {kind}: soft and hard must be "
                              "non-negative integers")
        if soft > hard:
            raise BundleError(f"config.json: rlimit {kind}: soft limit {soft} is above the "
                              f"hard limit {hard}")


def _limit(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64


def _check_namespaces(namespaces: Any) -> None:
    if namespaces is None:
        return
    if not isinstance(namespaces, list):
        raise BundleError("config.json: linux.namespaces must be list")
    seen: set[str] = set()
    for namespace in namespaces:
        kind = namespace.get("type") if isinstance(namespace, dict) else None
        if kind not in _NAMESPACES:
            raise BundleError(f"config.json: namespace type {kind!r} is not valid")
        if kind in seen:
            raise BundleError(f"config.json: namespace {kind!r} is given twice")
        seen.add(kind)
        path = namespace.get("path")
        if path:
            _check_namespace_path(kind, str(path))


def _check_namespace_path(kind: str, path: str) -> None:
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise BundleError(f"config.json: namespace {kind} path {path}: {err.strerror}") from None
    try:
        found = fcntl.ioctl(fd, _NS_GET_NSTYPE)
    except OSError:
        found = -1
    finally:
        os.close(fd)
    if found != _NAMESPACES[kind]:
        raise BundleError(f"config.json: namespace {kind} path {path} is not a {kind} namespace")


# -- the command, as the runtime's init looks for it inside the container ------------

def check_command(process: dict[str, Any], rootfs: str, mounts: list[str]) -> None:
    """The process's working directory and command looked up in rootfs, as the
    runtime's init will: raise CommandRefused in its words if either is missing or
    cannot be used. What a mount brings is not judged, nor a rootfs that cannot be seen
    from here."""
    if not os.path.isdir(rootfs):
        return  # not on this host: the node's runtime judges
    cwd = process.get("cwd") or "/"
    _check_cwd(cwd, rootfs, mounts)
    name = process["args"][0]
    if "/" in name:
        candidates = [os.path.join(cwd, name)]
    else:
        path = ""
        for entry in process.get("env") or []:
            if entry.startswith("PATH="):
                path = entry[5:]
        candidates = [os.path.join(d or ".", name) for d in path.split(":")] if path else []
    problem = ""
    for candidate in candidates:
        if _under_a_mount(candidate, mounts):
            return  # a mount brings it: not to be judged from the rootfs alone
        problem = _executable_problem(rootfs, candidate)
        if not problem:
            return
    if "/" not in name:
        problem = "executable file not found in $PATH"
    # podman reads 126 from "permission denied", 127 from a file not found; a
    # directory is neither, and its generic runtime error is 126 too.
    cannot_run = problem.endswith("permission denied") or problem == "is a directory"
    raise CommandRefused(f'unable to start container process: exec: "{name}": {problem}',
                         126 if cannot_run else 127)


def _check_cwd(cwd: str, rootfs: str, mounts: list[str]) -> None:
    """The runtime's init changes to cwd before it looks for the command. Only what
    fails as the container's user too is refused (runc tries a directory it may not
    enter again once it took the user's identity)."""
    if _under_a_mount(cwd, mounts):
        return
    # podman reads 127 from a file not found; with runc it gives anything else 255.
    problem, status = "not a directory", 255
    try:
        if stat.S_ISDIR(os.stat(_resolve(rootfs, cwd)).st_mode):
            return
    except FileNotFoundError:
        problem, status = "no such file or directory", 127
    except NotADirectoryError:
        pass
    except OSError:
        return
    raise CommandRefused(f'unable to start container process: chdir to cwd ("{cwd}") '
                         f"set in config.json failed: {problem}", status)


def _under_a_mount(path: str, mounts: list[str]) -> bool:
    path = os.path.normpath("/" + path.lstrip("/"))
    return any(m and m != "/" and (path == m or path.startswith(m.rstrip("/") + "/"))
               for m in (os.path.normpath(d) for d in mounts if d))


def _executable_problem(rootfs: str, path: str) -> str:
    """'' if path names an executable file inside rootfs, else why not (runc's words)."""
    try:
        mode = os.stat(_resolve(rootfs, path)).st_mode
    except OSError as err:
        return f"stat {path}: {err.strerror.lower() if err.strerror else 'error'}"
    if stat.S_ISDIR(mode):
        return "is a directory"
    if not mode & 0o111:
        return "permission denied"
    return ""


def _resolve(rootfs: str, path: str) -> str:
    """path inside rootfs as the container sees it: symlinks (absolute ones included)
    and '..' never leave rootfs."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    done: list[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        here = os.path.join(rootfs, *done, part)
        if os.path.islink(here):
            links += 1
            if links > _MAX_LINKS:
                raise OSError(40, "too many levels of symbolic links")
            target = os.readlink(here)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        done.append(part)
    return os.path.join(rootfs, *done)
