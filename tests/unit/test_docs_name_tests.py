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


def _defines(file: str, name: str) -> bool:
    where = [REPO / file] if "/" in file else list((REPO / "tests").rglob(file))
    return any(re.search(rf"^\s*def {name}\(", path.read_text(), re.MULTILINE)
               for path in where if path.exists())


def test_every_test_a_document_names_exists() -> None:
    documents = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    missing = [f"{doc.relative_to(REPO)}: {file or '?'}::{name}"
               for doc in documents for line in doc.read_text().splitlines()
               for file, name in _named(line) if not file or not _defines(file, name)]
    assert not missing, missing
