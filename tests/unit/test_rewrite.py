from __future__ import annotations

import re

from pyscrun.conf.scrun_env import ALLOC, STEP, arguments, job_options
from pyscrun.node.rewrite import env_file_content, rewrite

CONFIG = {
    "ociVersion": "1.0.2",
    "process": {"args": ["sh"], "env": ["PATH=/bin", "SLURM_CONF=/etc/x", "KEEP=1"],
                "terminal": True, "consoleSize": {"height": 1, "width": 2}},
    "root": {"path": "rootfs"},
    "hooks": {"prestart": [{"path": "/x"}], "poststop": [{"path": "/y"}]},
    "mounts": [],
}


def test_rewrite_merges_filters_mounts_and_drops_hooks() -> None:
    new = rewrite(CONFIG, bundle="/bundle", job_env={"SLURM_JOB_ID": "5", "KEEP": "2"},
                  env_exclude=re.compile("^SLURM_CONF="), terminal=False,
                  mount_spool_dir="/spool", step_dir="/steps/s1",
                  disable_hooks=("prestart",))
    assert new["root"]["path"] == "/bundle/rootfs"
    assert new["process"]["env"] == ["PATH=/bin", "KEEP=2", "SLURM_JOB_ID=5"]
    assert new["process"]["terminal"] is False
    assert "consoleSize" not in new["process"]
    assert new["mounts"][-1]["destination"] == "/spool"
    assert new["mounts"][-1]["source"] == "/steps/s1"
    assert list(new["hooks"]) == ["poststop"]
    assert CONFIG["process"]["env"][1] == "SLURM_CONF=/etc/x"  # the input is untouched


def test_env_file_separators() -> None:
    assert env_file_content(["A=1", "B=2"], "null") == b"A=1\0B=2\0"
    assert env_file_content(["A=1"], "newline") == b"A=1\n"


def test_scrun_options_from_environment_and_config() -> None:
    options = job_options({"SCRUN_PARTITION": "a", "SCRUN_TIMELIMIT": "1", "HOME": "/root"},
                          ["SCRUN_PARTITION=b", "SCRUN_LABELIO=1", "PATH=/bin"])
    assert options == {"SCRUN_PARTITION": "b", "SCRUN_TIMELIMIT": "1", "SCRUN_LABELIO": "1"}
    assert arguments(options, ALLOC) == ["--partition=b", "--time=1"]
    assert arguments(options, STEP) == ["--label"]
