"""`srun_cr checkpoint JOBID[.STEP] [--dir DIR] [--stop]`: ask a running srun_cr for a
checkpoint of its step and wait for the outcome."""

from __future__ import annotations

import os
from typing import Any

from pyscrun.anchor import protocol
from pyscrun.errors import CheckpointError, UsageError
from pyscrun.srun_cr import registry

USAGE = "usage: srun_cr checkpoint JOBID[.STEPID] [--dir DIR] [--stop]"
# A checkpoint of much memory takes a while; the outcome always comes back.
REPLY_TIMEOUT = 3600.0


def parse(argv: list[str]) -> tuple[str, str | None, bool]:
    spec: str | None = None
    directory: str | None = None
    stop = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--stop":
            stop = True
        elif arg == "--dir" or arg == "-d":
            if i + 1 >= len(argv):
                raise UsageError(f"{arg} needs a directory\n{USAGE}")
            i += 1
            directory = argv[i]
        elif arg.startswith("--dir="):
            directory = arg.split("=", 1)[1]
        elif arg in ("-h", "--help"):
            raise UsageError(USAGE)
        elif arg.startswith("-") or spec is not None:
            raise UsageError(f"unexpected argument {arg!r}\n{USAGE}")
        else:
            spec = arg
        i += 1
    if spec is None:
        raise UsageError(USAGE)
    if directory == "":
        raise UsageError(f"--dir needs a directory\n{USAGE}")
    return spec, os.path.abspath(directory) if directory else None, stop


def request(path: str, message: dict[str, Any], name: str, timeout: float) -> dict[str, Any]:
    try:
        client = protocol.connect(path, timeout)
    except OSError as err:
        raise CheckpointError(f"cannot reach the srun_cr of step {name} at {path}: "
                              f"{err.strerror or err} (has the step ended?)") from None
    with client:
        try:
            reply = protocol.first_reply(client, message)
            if reply is None:
                raise CheckpointError(f"the srun_cr of step {name} closed the connection "
                                      f"without an answer (has the step ended?)")
            return reply
        except TimeoutError:
            raise CheckpointError(f"the srun_cr of step {name} did not answer within "
                                  f"{timeout:.0f} s") from None
        except (OSError, ValueError) as err:
            raise CheckpointError(f"talking to the srun_cr of step {name} failed: {err}") from None


def checkpoint(argv: list[str], environ: dict[str, str]) -> int:
    spec, directory, stop = parse(argv)
    name, path = registry.lookup(registry.run_dir(environ), spec)
    reply = request(path, {"op": "checkpoint", "dir": directory, "stop": stop}, name, REPLY_TIMEOUT)
    if not reply.get("ok"):
        raise CheckpointError(str(reply.get("error") or "checkpoint failed"))
    print(f"step {reply.get('step', name)} checkpointed to {reply.get('dir')}"
          + (" and stopped" if stop else ""))
    return 0
