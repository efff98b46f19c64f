"""oci.conf %-patterns: checked when the file is read, expanded with shell quoting.

Every substituted value is quoted for `/bin/sh -c`, so a bundle path holding `$(...)`,
backticks or quotes reaches the runtime as text and never runs.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from pyscrun.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Pattern letter -> what it stands for (the field of PatternValues that fills it).
PATTERNS = {
    "b": "bundle",
    "e": "env_file",
    "j": "job_id",
    "m": "step_dir",
    "n": "node_name",
    "p": "pid",
    "r": "rootfs",
    "s": "step_id",
    "t": "task_id",
    "u": "user_name",
    "U": "uid",
}


class PatternValues:
    """What each pattern stands for in one task (immutable: `replace` gives a copy)."""

    __slots__ = ("args", *PATTERNS.values())

    def __init__(self, bundle: str = "", env_file: str = "", job_id: str = "",
                 step_dir: str = "", node_name: str = "", pid: str = "", rootfs: str = "",
                 step_id: str = "", task_id: str = "", user_name: str = "", uid: str = "",
                 args: Sequence[str] = ()) -> None:
        self.bundle, self.env_file, self.job_id, self.step_dir = bundle, env_file, job_id, step_dir
        self.node_name, self.pid, self.rootfs, self.step_id = node_name, pid, rootfs, step_id
        self.task_id, self.user_name, self.uid, self.args = task_id, user_name, uid, args

    def replace(self, **changes: Any) -> PatternValues:
        values = {name: getattr(self, name) for name in self.__slots__}
        values.update(changes)
        return PatternValues(**values)


def check(pattern: str, where: str) -> None:
    """Raise ConfigError for an unknown or truncated %-pattern."""
    pos = pattern.find("%")
    while pos != -1:
        letter = pattern[pos + 1:pos + 2]
        if letter not in PATTERNS and letter not in ("%", "@"):
            shown = f"%{letter}" if letter else "a trailing %"
            raise ConfigError(f"{where}: unknown pattern {shown}")
        pos = pattern.find("%", pos + 2)


def expand(pattern: str, values: PatternValues) -> str:
    fields: Mapping[str, str] = {
        letter: getattr(values, name) for letter, name in PATTERNS.items()
    }
    out = []
    pos = 0
    while True:
        found = pattern.find("%", pos)
        if found == -1:
            out.append(pattern[pos:])
            return "".join(out)
        out.append(pattern[pos:found])
        letter = pattern[found + 1:found + 2]
        if letter == "%":
            out.append("%")
        elif letter == "@":
            out.append(" ".join(shlex.quote(arg) for arg in values.args))
        elif letter in fields:
            out.append(shlex.quote(str(fields[letter])))
        else:
            raise ConfigError(f"unknown pattern %{letter} in {pattern!r}")
        pos = found + 2
