"""A shell command run here to completion: scrun.lua's allocator_command, and the local
backend's remote_command (its one node is this machine)."""

from __future__ import annotations

import os

from pyscrun import child


def run_shell(script: str, env: dict[str, str] | None = None,
              interrupt_fd: int = -1) -> tuple[int, str]:
    """`/bin/sh -c script` here, with env over this process's environment: its status
    (negative: killed by that signal) and its stdout and stderr together. It dies with
    this process; Interrupted if a signal arrives on interrupt_fd first (child.run)."""
    status, output, _ = child.run(["/bin/sh", "-c", script], {**os.environ, **(env or {})},
                                  None, merge_output=True, interrupt_fd=interrupt_fd,
                                  bound=True)
    return status, output.decode(errors="replace")
