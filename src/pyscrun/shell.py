"""A shell command run here to completion: scrun.lua's allocator_command, and the local
backend's remote_command (its one node is this machine)."""

from __future__ import annotations

import os


def run_shell(script: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """`/bin/sh -c script` here, with env over this process's environment: its status
    and its stdout and stderr together."""
    import subprocess  # only when a script asks for a command

    done = subprocess.run(["/bin/sh", "-c", script], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False,
                          env={**os.environ, **(env or {})})
    return done.returncode, done.stdout.decode(errors="replace")
