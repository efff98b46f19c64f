"""Whatever is in a file pyscrun reads back (a container's state, a checkpoint's
manifest, srun_cr's checkpoint records), the reader gives its value or one clean
error, never another exception."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pyscrun.anchor.store import Store
from pyscrun.cli.checkpoint import checkpointed_tasks
from pyscrun.errors import ScrunError
from pyscrun.srun_cr import images

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20)
STATE_KEYS = ["id", "bundle", "status", "pid", "pid_start", "stand_in", "stand_in_start",
              "annotations", "exit_status", "backend", "job_id", "job_owned", "extra"]
CONTENT = (st.binary(max_size=200)
           | JSON.map(lambda value: json.dumps(value).encode())
           | st.dictionaries(st.sampled_from(STATE_KEYS), JSON, max_size=8).map(
               lambda value: json.dumps(value).encode())
           | st.just(b"[" * 50000))


@settings(max_examples=200, deadline=None)
@given(content=CONTENT)
def test_a_state_file_is_a_state_or_one_clean_error(tmp_path_factory: object, content: bytes) -> None:
    root = Path(tmp_path_factory.mktemp("root"))  # type: ignore[attr-defined]
    (root / "c").mkdir()
    (root / "c" / "state.json").write_bytes(content)
    store = Store(str(root))
    try:
        state = store.load("c")
        document = state.oci_document()
    except ScrunError as err:
        assert "\n" not in str(err)
        listed: list[str] = []
    else:
        assert isinstance(document["pid"], int) and isinstance(document["status"], str)
        listed = [state.id]
    # `list` shows what `state` can read, and skips the rest.
    assert store.ids() == listed


@settings(max_examples=200, deadline=None)
@given(content=CONTENT)
def test_a_checkpoint_manifest_is_a_task_count_or_one_clean_error(tmp_path_factory: object,
                                                                  content: bytes) -> None:
    images_dir = Path(tmp_path_factory.mktemp("images"))  # type: ignore[attr-defined]
    (images_dir / "inventory.img").write_bytes(b"")
    (images_dir / "pyscrun-checkpoint.json").write_bytes(content)
    try:
        tasks = checkpointed_tasks(str(images_dir))
    except ScrunError as err:
        assert "\n" not in str(err)
    else:
        assert isinstance(tasks, int) and 1 <= tasks <= 1 << 16


@settings(max_examples=200, deadline=None)
@given(content=CONTENT)
def test_an_srun_cr_checkpoint_is_loaded_or_one_clean_error(tmp_path_factory: object,
                                                             content: bytes) -> None:
    directory = Path(tmp_path_factory.mktemp("ck"))  # type: ignore[attr-defined]
    (directory / images.MANIFEST).write_bytes(content)
    try:
        checkpoint = images.Checkpoint.load(str(directory))
    except ScrunError as err:
        assert "\n" not in str(err)
    else:
        assert checkpoint.tasks >= 1 and os.path.isdir(directory)
