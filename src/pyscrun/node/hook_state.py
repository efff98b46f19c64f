"""Runs one OCI hook with the container's own state instead of the task's.

The runtime on the node runs the hooks of the task's config.json and gives each, on
stdin, the state of the container it knows: the task's (its runtime id and task dir).
A hook of the caller's (podman's, docker's, a site's) must see the container it was
given for: its id and bundle. The pid stays the node's: the process it names runs there.

    hook_state ID BUNDLE PATH ARGV0 [ARG...]   (run as wrap() writes it)
"""

from __future__ import annotations

import json
import os
import sys

from pyscrun.node import python_command

# Runtime-namespace hooks only: the others run inside the container, where this
# program (and its interpreter) may not exist.
WRAPPED_HOOKS = ("prestart", "createRuntime", "poststart", "poststop")


def wrap(hooks: dict[str, object], container_id: str, bundle: str) -> None:
    """Each runtime-namespace hook of config.json's hooks, run through this module."""
    for kind in WRAPPED_HOOKS:
        entries = hooks.get(kind)
        if not isinstance(entries, list):
            continue
        for hook in entries:
            if not isinstance(hook, dict) or not isinstance(hook.get("path"), str):
                continue
            args = hook.get("args") or [hook["path"]]
            program = python_command(f"from {__name__} import main; sys.exit(main(sys.argv[1:]))")
            hook["args"] = [*program, container_id, bundle, hook["path"], *args]
            hook["path"] = program[0]


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print("usage: hook_state ID BUNDLE PATH ARGV0 [ARG...]", file=sys.stderr)
        return 2
    container_id, bundle, path, *args = argv
    raw = sys.stdin.buffer.read()
    try:
        state = json.loads(raw) if raw.strip() else {}
    except ValueError:
        state = None
    if isinstance(state, dict):
        state["id"], state["bundle"] = container_id, bundle
        raw = json.dumps(state).encode()
    reader, writer = os.pipe()
    # A state document is a few KiB: it fits in the pipe before anyone reads it.
    os.write(writer, raw)
    os.close(writer)
    os.dup2(reader, 0)
    os.close(reader)
    try:
        os.execv(path, args)
    except OSError as err:
        print(f"hook {path}: {err.strerror}", file=sys.stderr)
        return 127
    return 0
