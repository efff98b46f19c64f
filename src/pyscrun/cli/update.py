"""update: runc's resources (a file, `-` for stdin, or flags) applied to every task."""

from __future__ import annotations

import json
import sys

from pyscrun.cli.flags import RESOURCE_FLAGS
from pyscrun.cli.main import Context
from pyscrun.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def update(ctx: Context) -> int:
    from pyscrun.cli.lifecycle import order_tasks

    path = ctx.option("resources")
    resources = _resources_file(path) if path else {}
    for flag, (group, field, kind) in RESOURCE_FLAGS.items():
        value = ctx.option(flag)
        if value is not None:
            section = resources.setdefault(group, {})
            if not isinstance(section, dict):
                raise UsageError(f"update: the resources' {group} must be a JSON object")
            section[field] = _value(flag, value, kind)
    if not resources:
        raise UsageError("update: give --resources FILE (or -) or a resource flag")
    order_tasks(ctx, "update", resources=resources)
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
    digits, unit = text.lower(), ""
    if kind == "bytes" and digits and digits[-1] in _UNITS:
        digits, unit = digits[:-1], digits[-1]
    try:
        return int(digits) * _UNITS[unit]
    except ValueError:
        raise UsageError(f"update: --{flag.replace('_', '-')} needs a number, not {text!r}") from None
