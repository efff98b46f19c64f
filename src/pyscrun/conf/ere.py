"""POSIX extended regular expressions (what Slurm's regcomp reads in EnvExclude and
RunTimeEnvExclude) as Python patterns.

Python's `re` reads most of an ERE alike. Where it does not:
- inside a bracket expression POSIX has character classes (`[[:alnum:]]`), and a
  backslash there is an ordinary character;
- a value may hold newlines (an exported shell function's does): regcomp's `.` matches
  one and its `$` is the end of the text only, where Python's `.` stops at a newline
  and its `$` also matches before a last newline;
- `(?` opens Python's extensions, which regcomp refuses.
Only whether a variable matches is asked, so POSIX's leftmost-longest rule changes
nothing.
"""

from __future__ import annotations

import re

# POSIX character classes, as the C locale has them, spelled for a Python bracket.
CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "\\x21-\\x7e",
    "lower": "a-z",
    "print": "\\x20-\\x7e",
    "punct": "!-/:-@\\[-`{-~",
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


def compile_ere(text: str) -> re.Pattern[str]:
    """text, a POSIX ERE, compiled; re.error if it is not one Python can read."""
    return re.compile(translate(text), re.DOTALL)


def translate(text: str) -> str:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char == "\\" and pos + 1 < len(text):
            out.append(text[pos:pos + 2])
            pos += 2
        elif char == "[":
            bracket, pos = _bracket(text, pos)
            out.append(bracket)
        elif char == "$":
            out.append("\\Z")
            pos += 1
        elif text.startswith("(?", pos):
            raise re.error("a repetition of nothing", text, pos + 1)
        else:
            out.append(char)
            pos += 1
    return "".join(out)


def _bracket(text: str, start: int) -> tuple[str, int]:
    """The bracket expression at start, for Python, and where it ends."""
    pos = start + 1
    out = ["["]
    if text.startswith("^", pos):
        out.append("^")
        pos += 1
    if text.startswith("]", pos):  # first, a `]` is one of the set
        out.append("\\]")
        pos += 1
    while pos < len(text) and text[pos] != "]":
        if text.startswith("[:", pos):
            end = text.find(":]", pos + 2)
            name = text[pos + 2:end] if end >= 0 else ""
            if name not in CLASSES:
                raise re.error(f"unknown character class [:{name}:]", text, pos)
            out.append(CLASSES[name])
            pos = end + 2
            continue
        char = text[pos]
        # A backslash, `[` and Python's set operators are ordinary characters here.
        out.append("\\" + char if char in "\\[&~|" else char)
        pos += 1
    if pos >= len(text):
        raise re.error("unterminated bracket expression", text, start)
    out.append("]")
    return "".join(out), pos + 1
