"""What a container changed in a rootfs unpacked for it: found by comparing every entry
with a baseline taken before the container started.

An entry counts as unchanged while its path names the same inode with the same change
time. Every write, truncate, chmod, chown, link, rename or replacement sets the change
time (which nothing can set back), and the comparison is for equality, not order, so a
step of the wall clock cannot hide a change. The baseline is ready only once the clock
file times come from has passed the latest change time in it: a change right after
cannot get the time it had.
"""

from __future__ import annotations

import os
import stat
import time

# The clock the kernel stamps file times from (Linux's number where Python has no name).
_FILE_CLOCK = getattr(time, "CLOCK_REALTIME_COARSE", 5)
# The root of the tree itself.
ROOT = "."
# What task 0 sends back (node/shipped.py) and the anchor applies (anchor/shipping.py).
CHANGES_ARCHIVE = "changes.tar"  # the new and changed entries, each without what it holds
REMOVED_LIST = "removed"  # the removed ones, NUL-separated


class Baseline:
    """Each entry of the tree at root as it is now: its inode and change time."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.entries = _walk(root)
        latest = max(key[1] for key in self.entries.values())
        while time.clock_gettime_ns(_FILE_CLOCK) <= latest:
            time.sleep(0.001)

    def changes(self) -> tuple[list[str], list[str]]:
        """(changed, removed), relative to root. changed: each new or changed entry with
        every directory above it (so that their owners and modes travel with it), parents
        first. removed: each entry gone whose parent is a directory now; what was below
        a directory now gone, or now a file or link, goes with it."""
        now = _walk(self.root)
        changed = {path for path, key in now.items() if self.entries.get(path) != key}
        for path in list(changed):
            while path != ROOT:
                path = os.path.dirname(path) or ROOT
                changed.add(path)
        removed = [path for path in self.entries if path not in now
                   and stat.S_ISDIR(now.get(os.path.dirname(path) or ROOT, (0, 0, 0))[2])]
        return sorted(changed), sorted(removed)


def _walk(root: str) -> dict[str, tuple[int, int, int]]:
    """Every entry below root and root itself: path -> (inode, change time, type)."""
    entries: dict[str, tuple[int, int, int]] = {}
    pending = [ROOT]
    while pending:
        relative = pending.pop()
        info = os.lstat(os.path.join(root, relative))
        entries[relative] = (info.st_ino, info.st_ctime_ns, stat.S_IFMT(info.st_mode))
        if stat.S_ISDIR(info.st_mode):
            with os.scandir(os.path.join(root, relative)) as listing:
                pending.extend(entry.name if relative == ROOT else f"{relative}/{entry.name}"
                               for entry in listing)
    return entries
