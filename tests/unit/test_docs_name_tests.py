"""The tests the documents name as evidence exist: a guarantee whose test was renamed
or removed would otherwise point at nothing."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# `file.py::test` starts a list; `::test` after it names another test of that file.
_REFERENCE = re.compile(r"`((?:tests/[\w/]+/)?\w+\.py)?::(\w+)")


def _named(line: str) -> list[tuple[str, str]]:
    named, current = [], ""
    for found in _REFERENCE.finditer(line):
        current = found.group(1) or current
        named.append((current, found.group(2)))
    return named


def _defined() -> dict[str, set[str]]:
    """The functions each test file defines, under its path and under its bare name
    (the documents name a file either way), each file read once."""
    found: dict[str, set[str]] = {}
    for path in (REPO / "tests").rglob("*.py"):
        names = set(re.findall(r"^\s*def (\w+)\(", path.read_text(), re.MULTILINE))
        for key in (str(path.relative_to(REPO)), path.name):
            found.setdefault(key, set()).update(names)
    return found


def test_every_test_a_document_names_exists() -> None:
    defined = _defined()
    documents = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    missing = [f"{doc.relative_to(REPO)}: {file or '?'}::{name}"
               for doc in documents for line in doc.read_text().splitlines()
               for file, name in _named(line) if name not in defined.get(file, set())]
    assert not missing, missing
