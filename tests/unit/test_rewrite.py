from __future__ import annotations

import io
import re

import pytest

from pyscrun.conf.scrun_env import ALLOC, STEP, arguments, job_options
from pyscrun.errors import UsageError
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


def test_newline_env_file_drops_multiline_values(logged: io.StringIO) -> None:
    # oci.conf(5): with CreateEnvFile=newline, variables holding a newline are dropped.
    entries = ["A=1", "CERT=line1\nEVIL=injected", "B=2"]
    assert env_file_content(entries, "newline") == b"A=1\nB=2\n"
    assert "debug: " in logged.getvalue() and "'CERT'" in logged.getvalue()
    assert "injected" not in logged.getvalue()  # the value stays out of the log
    assert env_file_content(entries, "null") == b"A=1\0CERT=line1\nEVIL=injected\0B=2\0"


def test_scrun_options_from_environment_and_config() -> None:
    options = job_options({"SCRUN_PARTITION": "a", "SCRUN_TIMELIMIT": "1", "HOME": "/root"},
                          ["SCRUN_PARTITION=b", "SCRUN_LABELIO=1", "PATH=/bin"])
    assert options == {"SCRUN_PARTITION": "b", "SCRUN_TIMELIMIT": "1", "SCRUN_LABELIO": "1"}
    assert arguments(options, ALLOC) == ["--partition=b", "--time=1"]
    assert arguments(options, STEP) == ["--label"]


def test_switch_count_and_wait_make_one_switches_option() -> None:
    # salloc's --switches=count@max-time; it has no --wait4switch.
    options = job_options({"SCRUN_WAIT4SWITCH": "10:00", "SCRUN_PARTITION": "p"},
                          ["SCRUN_REQ_SWITCH=2"])
    assert arguments(options, ALLOC) == ["--partition=p", "--switches=2@10:00"]
    assert arguments(options, STEP) == []
    assert arguments(job_options({"SCRUN_REQ_SWITCH": "2"}, []), ALLOC) == ["--switches=2"]
    assert arguments(job_options({"SCRUN_REQ_SWITCH": "2@5"}, []), ALLOC) == ["--switches=2@5"]


def test_switch_wait_without_a_count_gives_salloc_nothing(logged: io.StringIO) -> None:
    # salloc refuses --switches=@time, and Slurm waits for switches only given a count.
    options = job_options({"SCRUN_WAIT4SWITCH": "5"}, ["SCRUN_PARTITION=p"])
    assert arguments(options, ALLOC) == ["--partition=p"]
    assert "debug: " in logged.getvalue() and "SCRUN_WAIT4SWITCH" in logged.getvalue()


def test_switch_wait_twice_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as raised:
        job_options({"SCRUN_REQ_SWITCH": "2@5", "SCRUN_WAIT4SWITCH": "10"}, [])
    assert "SCRUN_WAIT4SWITCH" in str(raised.value) and "\n" not in str(raised.value)
