"""The slurm.conf-style `Key=Value` format shared by oci.conf and pyscrun.conf.

Keys are case-insensitive, `#` starts a comment outside quotes, several pairs may share
a line, spaces may stand around `=`, a backslash at the end of a line continues it on the
next, and values may be double-quoted (with backslash escaping a quote or backslash).
"""

from __future__ import annotations

from pyscrun.errors import ConfigError


def _scan_value(line: str, pos: int, where: str) -> tuple[str, int]:
    if pos < len(line) and line[pos] == '"':
        out = []
        pos += 1
        while pos < len(line):
            char = line[pos]
            if char == "\\" and pos + 1 < len(line) and line[pos + 1] in '"\\':
                out.append(line[pos + 1])
                pos += 2
                continue
            if char == '"':
                return "".join(out), pos + 1
            out.append(char)
            pos += 1
        raise ConfigError(f"{where}: unterminated quote")
    end = pos
    while end < len(line) and not line[end].isspace() and line[end] != "#":
        end += 1
    return line[pos:end], end


def parse(text: str, source: str) -> list[tuple[str, str, int]]:
    """Returns (key as written, value, line number) for every pair in text."""
    pairs = []
    for number, line in _joined_lines(text):
        where = f"{source}:{number}"
        pos = 0
        while True:
            while pos < len(line) and line[pos].isspace():
                pos += 1
            if pos >= len(line) or line[pos] == "#":
                break
            key_start = pos
            while pos < len(line) and not line[pos].isspace() and line[pos] not in "=#":
                pos += 1
            key_end, pos = pos, _after_spaces(line, pos)
            if key_end == key_start or pos >= len(line) or line[pos] != "=":
                raise ConfigError(
                    f"{where}: expected Key=Value, found {line[key_start:].strip()!r}"
                )
            key = line[key_start:key_end]
            value, pos = _scan_value(line, _after_spaces(line, pos + 1), where)
            if pos < len(line) and not line[pos].isspace() and line[pos] != "#":
                raise ConfigError(f"{where}: unexpected text after the value of {key}")
            pairs.append((key, value, number))
    return pairs


def _after_spaces(line: str, pos: int) -> int:
    while pos < len(line) and line[pos].isspace():
        pos += 1
    return pos


def _joined_lines(text: str) -> list[tuple[int, str]]:
    """(number of its first line, text) of each logical line: a line ending in a
    backslash goes on with the next, as in Slurm's files."""
    joined: list[tuple[int, str]] = []
    continued = False
    for number, line in enumerate(text.splitlines(), 1):
        if continued:
            first, before = joined[-1]
            joined[-1] = (first, before + line)
        else:
            joined.append((number, line))
        continued = line.endswith("\\") and not line.lstrip().startswith("#")
        if continued:
            first, before = joined[-1]
            joined[-1] = (first, before[:-1])
    return joined


def read_text(path: str) -> str:
    """A configuration file's text (UTF-8)."""
    with open(path, encoding="utf-8") as file:
        return file.read()
