from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import OCI_CONFS, Runtime, assert_no_leaks, make_runtime


@pytest.fixture(params=sorted(OCI_CONFS))
def local_runtime(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Runtime]:
    """scrun on the local backend, in each oci.conf mode, checked for leaks afterwards."""
    runtime = make_runtime(tmp_path, OCI_CONFS[request.param])
    yield runtime
    assert_no_leaks(runtime, str(tmp_path))


@pytest.fixture
def default_runtime(tmp_path: Path) -> Iterator[Runtime]:
    """scrun with no oci.conf at all: the built-in runc run-mode default."""
    runtime = make_runtime(tmp_path, None)
    yield runtime
    assert_no_leaks(runtime, str(tmp_path))
