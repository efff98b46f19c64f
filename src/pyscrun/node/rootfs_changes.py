"""What a container changed in a rootfs unpacked for it: found by comparing every entry
with a baseline taken before the container started, each by its identity (snapshot.py).
"""

from __future__ import annotations

import os
import stat

from pyscrun.snapshot import ROOT, settle, walk

# What task 0 sends back (node/shipped.py) and the anchor applies (anchor/shipping.py).
CHANGES_ARCHIVE = "changes.tar"  # the new and changed entries, each without what it holds
REMOVED_LIST = "removed"  # the removed ones, NUL-separated


class Baseline:
    """Each entry of the tree at root as it is now: its inode and change time."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.entries = walk(root)
        settle(self.entries)

    def changes(self) -> tuple[list[str], list[str]]:
        """(changed, removed), relative to root. changed: each new or changed entry with
        every directory above it (so that their owners and modes travel with it), parents
        first. removed: each entry gone whose parent is a directory now; what was below
        a directory now gone, or now a file or link, goes with it."""
        now = walk(self.root)
        changed = {path for path, key in now.items() if self.entries.get(path) != key}
        for path in list(changed):
            while path != ROOT:
                path = os.path.dirname(path) or ROOT
                changed.add(path)
        removed = [path for path in self.entries if path not in now
                   and stat.S_ISDIR(now.get(os.path.dirname(path) or ROOT, (0, 0, 0))[2])]
        return sorted(changed), sorted(removed)

