"""ps: the processes of every task, as `runc ps` lists them (docker top calls it)."""

from __future__ import annotations

import json
import subprocess

from pyscrun.cli.main import Context
from pyscrun.errors import ScrunError, UsageError


def ps(ctx: Context) -> int:
    from pyscrun.cli.lifecycle import order_tasks

    output = ctx.option("format") or "table"
    if output not in ("table", "json"):
        raise UsageError(f"ps: invalid --format {output!r}: use table or json")
    pids = [int(p) for p in order_tasks(ctx, "ps").get("pids", []) if isinstance(p, int)]
    if output == "json":
        print(json.dumps(pids))
        return 0
    try:
        listed = subprocess.run(["ps", "-ef"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise ScrunError(f"ps: cannot run ps -ef: {err}") from None
    header, *lines = listed.splitlines()
    print(header)
    for line in lines:
        fields = line.split()
        if len(fields) > 1 and fields[1].isdigit() and int(fields[1]) in pids:
            print(line)
    return 0
