"""update: runc's resources (a file, `-` for stdin, or flags) applied to every task."""

from __future__ import annotations

import json
import re
import sys

from pyscrun.cli.flags import RESOURCE_FLAGS
from pyscrun.cli.main import Context
from pyscrun.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# runc's sizes (go-units' RAMInBytes): a decimal number, one optional space, an optional
# binary multiple and an optional "i" and "b", in either case: 512MB, 1.5g, 1KiB, 64 m.
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)*) ?([kmgtp])?i?b?", re.IGNORECASE | re.ASCII)
_UNITS = {None: 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
# Numbers as Go's strconv reads them, base 10: int with an optional sign, uint without.
_NUMBERS = {"int": re.compile(r"[+-]?[0-9]+"), "uint": re.compile(r"[0-9]+")}
_INT64_MAX = (1 << 63) - 1


def update(ctx: Context) -> int:
    from pyscrun.cli.lifecycle import order_tasks, state_for

    path = ctx.option("resources")
    resources = _resources_file(path) if path else {}
    for names, (group, field, kind) in RESOURCE_FLAGS.items():
        value = ctx.option(names[0].replace("-", "_"))
        if value is not None:
            section = resources.setdefault(group, {})
            if not isinstance(section, dict):
                raise UsageError(f"update: the resources' {group} must be a JSON object")
            section[field] = _value(names[0], value, kind)
    if resources:
        order_tasks(ctx, "update", resources=resources)
    else:
        state_for(ctx, "update")  # nothing to change is no error for runc either
    return 0


def _resources_file(path: str) -> dict[str, Any]:
    try:
        if path == "-":
            document = json.load(sys.stdin)
        else:
            with open(path, encoding="utf-8") as source:
                document = json.load(source)
    except (OSError, ValueError, RecursionError) as err:
        raise UsageError(f"update: cannot read the resources in {path}: {err}") from None
    if not isinstance(document, dict):
        raise UsageError(f"update: the resources in {path} must be a JSON object")
    return document


def _value(flag: str, text: str, kind: str) -> object:
    if kind == "str":
        return text
    if kind == "bytes":
        size = parse_size(text)
        if size is None:
            raise UsageError(f"update: --{flag} needs a size (512m, 1g, 1.5GiB or -1 for no "
                             f"limit), not {text!r}")
        return size
    if not _NUMBERS[kind].fullmatch(text) or not -_INT64_MAX - 1 <= int(text) <= _INT64_MAX:
        raise UsageError(f"update: --{flag} needs a number, not {text!r}")
    return int(text)


def parse_size(text: str) -> int | None:
    """A size in bytes as runc reads one (-1: no limit); None if it is not one. Like
    runc's, a fraction is taken in floating point and cut to whole bytes."""
    if text == "-1":
        return -1
    matched = _SIZE.fullmatch(text)
    if matched is None:
        return None
    number, unit = matched.groups()
    try:
        size = int(float(number) * _UNITS[unit and unit.lower()])
    except (ValueError, OverflowError):
        return None  # 1.5.2 (the pattern lets it through, as runc's does) or too big
    return size if size <= _INT64_MAX else None
