"""ps: the processes of every task, as `runc ps` lists them (docker top calls it): the
host's ps, with the options given after the id (default -ef), its lines kept for the
container's pids (through Slurm: the stand-in's)."""

from __future__ import annotations

import json
import subprocess

from pyscrun.cli.main import Context
from pyscrun.digits import only_digits
from pyscrun.errors import ScrunError, UsageError
from pyscrun.oci.state import STOPPED


def ps(ctx: Context) -> int:
    from pyscrun.cli.lifecycle import order_tasks

    output = ctx.option("format") or "table"
    if output not in ("table", "json"):
        raise UsageError(f"ps: invalid --format {output!r}: use table or json")
    stopped = ctx.store.load(ctx.container_id).effective_status() == STOPPED
    # As runc's: a stopped container has no process, and ps says so with its header.
    pids = [] if stopped else [int(p) for p in order_tasks(ctx, "ps").get("pids", [])
                               if isinstance(p, int)]
    if output == "json":
        print(json.dumps(pids))
        return 0
    words = ctx.options.get("command")
    argv = ["ps", *(words if isinstance(words, list) and words else ["-ef"])]
    try:
        listed = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    except OSError as err:
        raise ScrunError(f"ps: cannot run ps: {err.strerror}") from None
    except subprocess.CalledProcessError as err:
        said = next((line.strip() for line in err.stderr.splitlines() if line.strip()), "")
        raise ScrunError(f"ps: {' '.join(argv[1:])}: {said or f'exit status {err.returncode}'}",
                         ) from None
    header, *lines = listed.splitlines() or [""]
    titles = header.split()
    if "PID" not in titles:
        raise ScrunError("ps: couldn't find PID field in ps output")  # runc's words
    column = titles.index("PID")
    print(header)
    for line in lines:
        fields = line.split()
        if len(fields) > column and only_digits(fields[column]) and int(fields[column]) in pids:
            print(line)
    return 0
