"""oci.conf %-patterns: checked when the file is read, expanded with shell quoting.

Every substituted value is quoted for `/bin/sh -c`, so a bundle path holding `$(...)`,
backticks or quotes reaches the runtime as text and never runs. Where the shell would
take a quoted value apart (after a backslash, inside backquotes or `${...}`), a pattern
is refused when the file is read.
"""

from __future__ import annotations

from pyscrun.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from typing import Any

# Where the shell reads quotes by rules of its own (backquotes, ${...}): no value goes
# there.
_UNQUOTABLE = frozenset("`{")

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


def _scan(pattern: str) -> Iterator[tuple[str, str | None, str]]:
    """(text before, letter, quoting around it) for each %-pattern, then (rest, None, "").

    The quoting is how `/bin/sh` will read the spot: "" plain, "'" or '"' inside such
    quotes, "\\" right after a backslash, "`" inside backquotes or `${...}`, where the
    shell reads quotes by rules of their own. A `$(...)` starts its quoting afresh (the
    shell parses it as a command of its own), so a double quote outside one does not
    hold inside it. A value is quoted to suit its spot.
    """
    # The enclosing frames; each is (kind, quote, open parentheses) with kind "" for the
    # command line itself, "(" for $(...), "{" for ${...}, "`" for backquotes.
    outer: list[tuple[str, str, int]] = []
    kind, quote, depth = "", "", 0
    escaped, start, pos = False, 0, 0
    while pos < len(pattern):
        char = pattern[pos]
        if char == "%":
            unquotable = kind in _UNQUOTABLE or any(frame[0] in _UNQUOTABLE for frame in outer)
            yield (pattern[start:pos], pattern[pos + 1:pos + 2],
                   "\\" if escaped else "`" if unquotable else quote)
            escaped = False
            pos = start = pos + 2
            continue
        if escaped:
            escaped = False
        elif quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\":
            escaped = True
        elif char == "$" and pattern[pos + 1:pos + 2] in ("(", "{"):
            outer.append((kind, quote, depth))
            kind, quote, depth = pattern[pos + 1], "", 0
            pos += 1
        elif char == "`" and kind == "`":
            kind, quote, depth = outer.pop()
        elif char == "`":
            outer.append((kind, quote, depth))
            kind, quote, depth = "`", "", 0
        elif char == '"':
            quote = "" if quote else '"'
        elif quote:
            pass  # inside double quotes nothing else opens or closes
        elif char == "'":
            quote = "'"
        elif char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif (char == ")" and kind == "(") or (char == "}" and kind == "{"):
            kind, quote, depth = outer.pop()
        pos += 1
    yield pattern[start:], None, ""


# Spots where a value could not be quoted -> why it is refused there.
_REFUSED = {
    "\\": "a backslash before %{} would leave its value unquoted",
    "`": "%{} inside backquotes or ${{...}} would leave its value unquoted (use $(...))",
}


def check(pattern: str, where: str) -> None:
    """Raise ConfigError for an unknown or truncated %-pattern, or one whose value the
    shell would take apart (right after a backslash, inside backquotes or ${...})."""
    for _, letter, quoting in _scan(pattern):
        if letter is None or letter == "%":
            continue
        if letter not in PATTERNS and letter != "@":
            shown = f"%{letter}" if letter else "a trailing %"
            raise ConfigError(f"{where}: unknown pattern {shown}")
        if quoting in _REFUSED:
            raise ConfigError(f"{where}: {_REFUSED[quoting].format(letter)}")


# Path patterns (ContainerPath, MountSpoolDir, pyscrun.conf's MoveImagePath) -> the
# letters each may hold: what is known where the path is made. ContainerPath is the
# same for every step of a job (`scrun exec` finds the task's dir there): no %s or %t.
PATH_PATTERNS = {"ContainerPath": "jnuU", "MountSpoolDir": "jnstuU", "MoveImagePath": "uU"}


def check_path(pattern: str, where: str, directive: str) -> None:
    """Raise ConfigError for a %-pattern a path of directive cannot hold."""
    allowed = PATH_PATTERNS[directive]
    for _, letter, _ in _scan(pattern):
        if letter is None or letter == "%" or (letter and letter in allowed):
            continue
        shown = f"%{letter}" if letter else "a trailing %"
        raise ConfigError(f"{where}: {directive} cannot hold {shown} (it may hold "
                          f"{' '.join('%' + known for known in allowed)} and %%)")


def expand_path(pattern: str, values: PatternValues) -> str:
    """A path pattern with its values as they are: no shell reads it."""
    out = []
    for text, letter, _ in _scan(pattern):
        out.append(text)
        if letter is not None:
            out.append("%" if letter == "%" else str(getattr(values, PATTERNS[letter])))
    return "".join(out)


# What a shell word may hold unquoted (as shlex.quote has it, whose `re` would cost
# each node agent milliseconds).
_SHELL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-")


def shell_quote(value: str) -> str:
    """value as one shell word."""
    if value and _SHELL_SAFE.issuperset(value):
        return value
    return "'" + value.replace("'", "'\"'\"'") + "'"


def expand(pattern: str, values: PatternValues) -> str:
    out = []
    for text, letter, quoting in _scan(pattern):
        out.append(text)
        if letter is None:
            break
        if letter == "%":
            out.append("%")
            continue
        if letter == "@":
            value = " ".join(shell_quote(arg) for arg in values.args)
        elif letter in PATTERNS:
            value = shell_quote(str(getattr(values, PATTERNS[letter])))
        else:
            raise ConfigError(f"unknown pattern %{letter} in {pattern!r}")
        if quoting in _REFUSED:
            raise ConfigError(f"{_REFUSED[quoting].format(letter)}: {pattern!r}")
        # Inside the administrator's own quotes: close them, add the quoted value, reopen.
        out.append(f"{quoting}{value}{quoting}")
    return "".join(out)
