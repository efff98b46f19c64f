"""Ending a short-lived process without the interpreter's finalization.

Tearing down every module costs milliseconds at the end of each scrun command and node
agent, several of which stand between `podman run` and its container's end. Nothing
they leave needs it: their files are closed by the kernel, their log lines are written
as they go. What is buffered on stdout and stderr is written first.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn


def leave(status: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # its reader is gone, or it was closed: nothing more can reach it
    os._exit(status & 0xFF)
