"""A tree's entries as they are now, each by its identity: the inode its path names,
that inode's change time and its type.

An entry counts as unchanged while its path names the same identity. Every write,
truncate, chmod, chown, link, rename or replacement sets the change time (which nothing
can set back), and the comparison is for equality, not order, so a step of the wall
clock cannot hide a change. A snapshot is ready only once the clock file times come
from has passed the latest change time in it (settle): a change right after cannot get
the time it had.
"""

from __future__ import annotations

import os
import stat
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# The clock the kernel stamps file times from (Linux's number where Python has no name).
_FILE_CLOCK = getattr(time, "CLOCK_REALTIME_COARSE", 5)
# The root of the tree itself.
ROOT = "."


def walk(root: str, descend: Callable[[str], bool] | None = None) -> dict[str, tuple[int, int, int]]:
    """Every entry below root and root itself: path (relative to root) -> (inode, change
    time, type). Below root, only the directories descend allows are walked into (every
    one if None). OSError if an entry cannot be read."""
    entries: dict[str, tuple[int, int, int]] = {}
    pending = [ROOT]
    while pending:
        relative = pending.pop()
        info = os.lstat(os.path.join(root, relative))
        entries[relative] = (info.st_ino, info.st_ctime_ns, stat.S_IFMT(info.st_mode))
        if stat.S_ISDIR(info.st_mode) and (relative == ROOT or descend is None
                                           or descend(relative)):
            with os.scandir(os.path.join(root, relative)) as listing:
                pending.extend(entry.name if relative == ROOT else f"{relative}/{entry.name}"
                               for entry in listing)
    return entries


# How long settle waits at most: a few ticks of the coarse clock. A change time further
# ahead was stamped by another machine's clock (a file server's, ahead of this one's),
# which moves on by itself; waiting for this one to catch up would only stall.
SETTLE_AT_MOST = 0.05


def settle(entries: dict[str, tuple[int, int, int]]) -> None:
    """Return once the file clock has passed every change time in entries (or waited
    SETTLE_AT_MOST)."""
    latest = max(key[1] for key in entries.values())
    deadline = time.monotonic() + SETTLE_AT_MOST
    while time.clock_gettime_ns(_FILE_CLOCK) <= latest and time.monotonic() < deadline:
        time.sleep(0.001)
