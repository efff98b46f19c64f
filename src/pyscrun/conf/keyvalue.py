"""The slurm.conf-style `Key=Value` format shared by oci.conf and pyscrun.conf.

Read as Slurm's parser (parse_config.c) reads its files: keys are case-insensitive,
several pairs may share a line, spaces may stand around `=`, values may be
double-quoted, and a backslash escapes the character after it (`\\#` is `#`, `\\\\` a
backslash, `\\.` a dot). A `#` no backslash escapes starts a comment (within quotes
too, in Slurm; here a quoted `#` is the value's); an odd number of backslashes ending
what is left of a line continues it on the next. A line `Include PATH` reads the file
PATH names in its place, as Slurm's does: a relative PATH is found beside slurm.conf
(the directory of the file first read). Its `%c` (the cluster's name) is slurm.conf's
alone: Slurm finds no ClusterName in oci.conf to put there, and refuses it.
"""

from __future__ import annotations

import os

from pyscrun.errors import ConfigError

# Includes nested deeper than this are a loop.
MAX_INCLUDE_DEPTH = 16


def _scan_value(line: str, pos: int, where: str) -> tuple[str, int]:
    """The value at pos (comments already cut) and where it ends."""
    quoted = pos < len(line) and line[pos] == '"'
    out = []
    pos += quoted
    while pos < len(line):
        char = line[pos]
        if char == "\\" and pos + 1 < len(line):
            out.append(line[pos + 1])
            pos += 2
            continue
        if (char == '"') if quoted else char.isspace():
            return "".join(out), pos + quoted
        out.append(char)
        pos += 1
    if quoted:
        raise ConfigError(f"{where}: unterminated quote")
    return "".join(out), pos


def parse(text: str, source: str, base: str | None = None, depth: int = 0,
          ) -> list[tuple[str, str, str]]:
    """(key as written, value, where: file and line) of every pair in text, those of
    the files its Include lines name in their place; base: the directory relative
    Include paths are in (source's by default)."""
    base = os.path.dirname(source) if base is None else base
    pairs = []
    for number, line in _joined_lines(text):
        where = f"{source}:{number}"
        included = _include_path(line)
        if included is not None:
            pairs += _included(included, base, where, depth)
            continue
        pos = 0
        while True:
            while pos < len(line) and line[pos].isspace():
                pos += 1
            if pos >= len(line):
                break
            key_start = pos
            while pos < len(line) and not line[pos].isspace() and line[pos] != "=":
                pos += 1
            key_end, pos = pos, _after_spaces(line, pos)
            if key_end == key_start or pos >= len(line) or line[pos] != "=":
                raise ConfigError(
                    f"{where}: expected Key=Value, found {line[key_start:].strip()!r}"
                )
            key = line[key_start:key_end]
            value, pos = _scan_value(line, _after_spaces(line, pos + 1), where)
            if pos < len(line) and not line[pos].isspace():
                raise ConfigError(f"{where}: unexpected text after the value of {key}")
            pairs.append((key, value, where))
    return pairs


def _include_path(line: str) -> str | None:
    """The path of an `Include PATH` line (the word, then a space), else None."""
    stripped = line.lstrip()
    word = stripped[:7]
    if word.lower() != "include" or not stripped[7:8].isspace():
        return None
    return stripped[7:].strip()


def _included(path: str, base: str, where: str, depth: int) -> list[tuple[str, str, str]]:
    if not path:
        raise ConfigError(f"{where}: Include needs a file name")
    if depth >= MAX_INCLUDE_DEPTH:
        raise ConfigError(f"{where}: Include nested deeper than {MAX_INCLUDE_DEPTH} (a loop?)")
    if "%c" in path:
        raise ConfigError(f"{where}: Include's %c (the cluster's name) is slurm.conf's alone")
    path = os.path.join(base, path)
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ConfigError(f"{where}: cannot include {path}: {why}") from None
    return parse(text, path, base, depth + 1)


def _after_spaces(line: str, pos: int) -> int:
    while pos < len(line) and line[pos].isspace():
        pos += 1
    return pos


def _joined_lines(text: str) -> list[tuple[int, str]]:
    """(number of its first line, text without comments) of each logical line, as
    Slurm joins them: a line whose text ends (spaces aside) in an odd number of
    backslashes goes on with the next, the last of them and what follows it dropped."""
    joined: list[tuple[int, str]] = []
    continued = False
    for number, line in enumerate(text.splitlines(), 1):
        line = _without_comment(line)
        ending = line.rstrip()
        backslashes = len(ending) - len(ending.rstrip("\\"))
        going_on = backslashes % 2 == 1
        if going_on:
            line = ending[:-1]
        if continued:
            first, before = joined[-1]
            joined[-1] = (first, before + line)
        else:
            joined.append((number, line))
        continued = going_on
    return joined


def _without_comment(line: str) -> str:
    """line up to its first `#` neither escaped nor quoted."""
    quoted = False
    pos = 0
    while pos < len(line):
        char = line[pos]
        if char == "\\":
            pos += 2
            continue
        if char == '"' and (quoted or line[:pos].rstrip().endswith("=")):
            quoted = not quoted  # a value's quotes: a quote within a word opens none
        elif char == "#" and not quoted:
            return line[:pos]
        pos += 1
    return line


def read_text(path: str) -> str:
    """A configuration file's text (UTF-8)."""
    with open(path, encoding="utf-8") as file:
        return file.read()
