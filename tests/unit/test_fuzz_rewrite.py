"""The config.json a task runs, under fuzz: any document is refused by the bundle check
with a BundleError, or checked and rewritten into a valid config for the runtime (the
node agent's path: load, rewrite, write as JSON), never another exception."""

from __future__ import annotations

import copy
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pyscrun.errors import ScrunError
from pyscrun.node import rewrite
from pyscrun.oci import bundle as oci_bundle

FUZZ = settings(max_examples=300, deadline=None, database=None)

# Strings may hold NUL and numbers may be NaN or Infinity (the bundle check refuses both,
# as runc would).
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8)


def _sometimes(right: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the right type, sometimes any JSON value at all."""
    return st.one_of(right, right, right, json_values)


env_entries = st.one_of(st.tuples(text, text).map("=".join), text)
processes = st.fixed_dictionaries({}, optional={
    "args": _sometimes(st.lists(text, max_size=4)),
    "env": _sometimes(st.lists(env_entries, max_size=5)),
    "terminal": _sometimes(st.booleans()),
    "cwd": _sometimes(text),
    "consoleSize": json_values,
})
configs = st.fixed_dictionaries({}, optional={
    "ociVersion": _sometimes(text),
    "process": _sometimes(processes),
    "root": _sometimes(st.fixed_dictionaries({}, optional={
        "path": _sometimes(text),
        "readonly": st.booleans()})),
    "annotations": _sometimes(st.dictionaries(text, text, max_size=3)),
    "mounts": _sometimes(st.lists(json_values, max_size=3)),
    "hooks": _sometimes(st.dictionaries(st.sampled_from(
        ["prestart", "poststart", "poststop", "createRuntime"]), json_values, max_size=3)),
    "linux": _sometimes(st.fixed_dictionaries({}, optional={
        "cgroupsPath": json_values, "namespaces": json_values})),
    "extra": json_values,
})
job_envs = st.dictionaries(st.from_regex(r"SLURM_[A-Z_]{1,10}", fullmatch=True), text, max_size=4)


@FUZZ
@given(configs, job_envs, st.booleans(), st.sampled_from(["", "/spool"]),
       st.sampled_from([(), ("prestart",), ("prestart", "poststop")]),
       st.sampled_from([None, "^SLURM_CONF=", "X"]), st.sampled_from(["0", "1", "7"]))
def test_any_config_is_refused_or_rewritten_validly(
        config: dict[str, Any], job_env: dict[str, str], terminal: bool, spool: str,
        disabled: tuple[str, ...], exclude: str | None, task: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        try:
            bundle = oci_bundle.load(tmp)
            # What create reads of it before the anchor starts.
            _ = (bundle.terminal, bundle.env, bundle.annotations, bundle.rootfs)
        except ScrunError as err:
            assert "\n" not in str(err)
            return
    original = copy.deepcopy(bundle.config)
    pattern = re.compile(exclude) if exclude else None
    new = rewrite.rewrite(bundle.config, bundle="/b", job_env=job_env, env_exclude=pattern,
                          terminal=terminal, mount_spool_dir=spool, step_dir="/steps/s",
                          disable_hooks=disabled, task_id=task)
    assert bundle.config == original  # the submitted config is left as it was
    json.dumps(new)  # the agent writes it as JSON
    process = new["process"]
    assert process["args"] == original["process"]["args"]
    assert os.path.isabs(new["root"]["path"])
    assert process["terminal"] is terminal
    if not terminal:
        assert "consoleSize" not in process
    env = process["env"]
    assert all(isinstance(entry, str) for entry in env)
    for key, value in job_env.items():
        entry = f"{key}={value}"
        assert (entry in env) != bool(pattern and pattern.search(entry))
    assert len({entry.partition("=")[0] for entry in env}) == len(env)  # one entry per name
    if spool:
        assert new["mounts"][-1] == {"destination": spool, "type": "bind", "source": "/steps/s",
                                     "options": ["rbind", "rw"]}
    for hook in disabled:
        assert hook not in (new.get("hooks") or {})
    if not any("\0" in entry for entry in env):
        assert rewrite.env_file_content(env, "null").count(b"\0") == len(env)
