"""What is mounted where, as this process's mount namespace sees it (/proc/self/mountinfo).

os.path.ismount compares device numbers: it misses a bind mount of a directory of the
same file system (podman 5 binds a rootless container's rootfs at an "intermediate
mountpoint" under /var/tmp for the runtime's call), which the table does not.
"""

from __future__ import annotations

import os

TABLE = "/proc/self/mountinfo"


class Mount:
    """One mount: the directory of its file system it shows (`/` for the whole of
    it), the file system's type and its own options (size=..., for a tmpfs)."""

    __slots__ = ("fs_options", "fs_type", "root")

    def __init__(self, root: str, fs_type: str, fs_options: list[str]) -> None:
        self.root = root
        self.fs_type = fs_type
        self.fs_options = fs_options


def _unescaped(field: str) -> str:
    """A path of the table: space, tab, newline and backslash are written as octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


class MountTable:
    """The table as read once: every mount point, and the mount seen there (of several
    made at one place, the last). Empty where the table cannot be read."""

    __slots__ = ("mounts",)

    def __init__(self, table: str = TABLE) -> None:
        self.mounts: dict[str, Mount] = {}
        try:
            with open(table, encoding="utf-8", errors="replace") as lines:
                for line in lines:
                    fields = line.split()
                    if len(fields) < 5 or "-" not in fields:
                        continue
                    after = fields[fields.index("-") + 1:]
                    self.mounts[_unescaped(fields[4])] = Mount(
                        _unescaped(fields[3]), after[0] if after else "",
                        after[2].split(",") if len(after) > 2 else [])
        except OSError:
            pass

    def at(self, path: str) -> Mount | None:
        """The mount seen at path (symlinks resolved), None if path is no mount point."""
        return self.mounts.get(os.path.realpath(path))
