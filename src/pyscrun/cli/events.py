"""events: the container's figures (cpu, memory, pids, ...), summed over its tasks, as
`runc events` prints them: once with --stats, else every --interval while it runs."""

from __future__ import annotations

import json
import re
import time

from pyscrun.cli.main import Context
from pyscrun.errors import ContainerNotFound, InvalidState, JobSuspended, UsageError

# Go's time.ParseDuration, which runc's --interval goes through: "5s", "1m30s", "250ms".
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_interval(text: str) -> float:
    """Seconds in a Go duration; UsageError unless it is one and above 0."""
    parts = _PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise UsageError(f"events: invalid --interval {text!r}: use a duration such as 5s or 250ms")
    seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if seconds <= 0:
        raise UsageError("events: duration interval must be greater than 0")
    return seconds


def events(ctx: Context) -> int:
    from pyscrun.cli.lifecycle import order_tasks

    interval = parse_interval(ctx.option("interval") or "5s")
    printed = False
    while True:
        try:
            reply = order_tasks(ctx, "stats")
        except JobSuspended:
            if ctx.flag("stats"):
                raise
            time.sleep(interval)  # nothing to read until the job is resumed
            continue
        except (InvalidState, ContainerNotFound):
            if not printed:
                raise
            return 0  # the container has ended: so do its events
        print(json.dumps({"type": "stats", "id": ctx.container_id,
                          "data": reply.get("stats") or {}}), flush=True)
        if ctx.flag("stats"):
            return 0
        printed = True
        time.sleep(interval)
