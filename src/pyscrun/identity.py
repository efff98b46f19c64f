"""Who the caller really is, and acting as that user towards Slurm.

Rootless podman and docker run their runtime as uid 0 of a user namespace that maps
0 to the user who ran them (`/proc/self/uid_map`: `0 1001 1`, `1 100000 65536`).
Everything pyscrun decides by user (default paths, `%u`/`%U`, SCRUN_USER, scrun.lua's
uid) is that real user's. Slurm 22.05 refuses a request whose uid (0 inside the
namespace) is not the one munge vouches for (the real one): Slurm's commands run in a
nested user namespace that maps the real ids onto themselves, so that they say who
they are. On the compute node the container gets the same mapping again
(`node/userns.py`), as podman gave it on the login host.
"""

from __future__ import annotations

import os

UID_MAP = "/proc/self/uid_map"
GID_MAP = "/proc/self/gid_map"


def _outside(map_path: str, inside: int) -> int:
    """The id `inside` stands for in the parent user namespace (itself outside any)."""
    try:
        with open(map_path) as lines:
            for line in lines:
                first, outside, count = (int(field) for field in line.split())
                if first <= inside < first + count:
                    return outside + inside - first
    except (OSError, ValueError):
        return inside
    return inside


def real_uid() -> int:
    return _outside(UID_MAP, os.getuid())


def real_gid() -> int:
    return _outside(GID_MAP, os.getgid())


def is_root() -> bool:
    """Root of the machine, not of a user namespace an ordinary user made."""
    return real_uid() == 0


def user_name(uid: int | None = None) -> str:
    import pwd

    number = real_uid() if uid is None else uid
    try:
        return pwd.getpwuid(number).pw_name
    except KeyError:
        return str(number)


def group_name(gid: int | None = None) -> str:
    import grp

    number = real_gid() if gid is None else gid
    try:
        return grp.getgrgid(number).gr_name
    except KeyError:
        return str(number)


def private_dir(path: str) -> bool:
    """path is a directory of this user's that nobody else may list or write (as a
    runtime dir must be); uids compare within this namespace. Others may pass through
    it: podman itself makes its user's runtime dir 0711 once a container has a uid map
    (--uidmap), and what pyscrun keeps there is in directories of mode 0700."""
    import stat

    try:
        info = os.lstat(path) if path else None
    except OSError:
        return False
    return (info is not None and stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
            and not info.st_mode & 0o066)


def namespace_maps() -> str:
    """This user namespace's uid and gid maps, `UIDMAP;GIDMAP`, each a comma list of
    `inside outside count`; empty outside any user namespace of an ordinary user."""
    if os.getuid() == real_uid():
        return ""
    found = []
    for path in (UID_MAP, GID_MAP):
        with open(path) as lines:
            found.append(",".join(" ".join(line.split()) for line in lines if line.strip()))
    return ";".join(found)


def as_real_user(argv: list[str]) -> list[str]:
    """argv of a Slurm command, run in a nested user namespace where the real uid and
    gid are its own (util-linux's unshare writes the maps and denies setgroups, as an
    unprivileged map needs), so that its request says who munge's credential says it
    is; argv itself outside a user namespace. A program rather than code in a forked
    child: the command then starts through posix_spawn, without a copy of this
    process."""
    uid, gid = real_uid(), real_gid()
    if uid == os.getuid():
        return argv
    return ["unshare", "--user", f"--map-user={uid}", f"--map-group={gid}", "--", *argv]
