"""Fixtures shared by the unit tests."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pyscrun import log
from tests.unit.anchor_harness import Harness
from tests.unit.mounts import Mounts


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            ) -> Iterator[Callable[..., Harness]]:
    # The CLI configures the process's logger: the next test gets its own back.
    monkeypatch.setattr(log, "current", log.current)
    made: list[Harness] = []

    def make(status: str, running: bool = True) -> Harness:
        made.append(Harness(tmp_path, status, running))
        return made[-1]

    yield make
    for one in made:
        one.close()


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """Everything logged, at every level, as 'level: message' lines."""
    out = io.StringIO()
    logger = log.Logger()
    logger.stderr_level, logger.stderr, logger.prefix = log.DEBUG5, out, "t"
    monkeypatch.setattr(log, "current", logger)
    yield out


@pytest.fixture
def mounts() -> Iterator[Mounts]:
    """File system faults for one test (mounts.py), undone after it."""
    made = Mounts()
    yield made
    made.undo()
