"""oci.conf directives beyond the RunTime* commands, seen where they take effect:
in the container, in the files the node agent writes, in what the runtime is given.

As root: scrun's own command line, with bundles of root's, as runc's is used; what an
ordinary user's podman does is in the tests that run as one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.harness import (
    LOCAL_BACKEND,
    RUN_OCI_CONF,
    SCRUN,
    TASKS_DIR,
    Runtime,
    make_bundle,
)


def _with(runtime: Runtime, extra: str, run: str | None = None) -> None:
    conf = RUN_OCI_CONF + extra
    if run is not None:
        conf = conf.replace('RunTimeRun="runc run %n.%u.%j.%s.%t -b %b"', f'RunTimeRun="{run}"')
    (runtime.conf_dir / "oci.conf").write_text(conf)


def _environment_seen(runtime: Runtime, tmp_path: Path, name: str, command: str) -> str:
    """The output of command run by a container whose process has SECRET=hidden and
    VISIBLE=yes: VISIBLE must come through, SECRET (which the test excludes) not."""
    bundle = make_bundle(tmp_path, ["sh", "-c", command])
    config = json.loads((bundle / "config.json").read_text())
    config["process"]["env"] += ["SECRET=hidden", "VISIBLE=yes"]
    (bundle / "config.json").write_text(json.dumps(config))
    done = runtime.scrun("run", "-b", str(bundle), name)
    assert done.returncode == 0, done.stderr
    assert "VISIBLE=yes" in done.stdout
    assert "SECRET" not in done.stdout
    return done.stdout


def test_env_exclude_and_mount_spool_dir(run_mode_runtime: Runtime, tmp_path: Path) -> None:
    _with(run_mode_runtime, 'EnvExclude="^SECRET="\nMountSpoolDir=/spool\n')
    seen = _environment_seen(run_mode_runtime, tmp_path, "e1", "env; ls -d /spool && echo MOUNTED")
    assert "MOUNTED" in seen


def test_an_included_file_takes_effect(run_mode_runtime: Runtime, tmp_path: Path) -> None:
    """`Include PATH` in oci.conf, relative to slurm.conf's directory, read as Slurm's
    parser reads it: the included EnvExclude keeps its variable out of the container."""
    (run_mode_runtime.conf_dir / "env.conf").write_text('EnvExclude="^SECRET="\n')
    _with(run_mode_runtime, "Include env.conf\n")
    _environment_seen(run_mode_runtime, tmp_path, "inc1", "env")


@pytest.mark.parametrize(("mode", "separator"), [("newline", "\n"), ("null", "\0")])
def test_create_env_file(run_mode_runtime: Runtime, tmp_path: Path, mode: str, separator: str) -> None:
    copy = tmp_path / "env-copy"
    _with(run_mode_runtime, f"CreateEnvFile={mode}\n",
          run=f"cp %e {copy}; runc run %n.%u.%j.%s.%t -b %b")
    bundle = make_bundle(tmp_path, ["true"])
    assert run_mode_runtime.scrun("run", "-b", str(bundle), "f1").returncode == 0
    entries = copy.read_text().split(separator)
    assert entries[-1] == ""  # every entry ends with the separator
    assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in entries


def test_disable_hooks_removes_them_from_config(run_mode_runtime: Runtime, tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    _with(run_mode_runtime, "DisableHooks=prestart\n")
    bundle = make_bundle(tmp_path, ["true"])
    config = json.loads((bundle / "config.json").read_text())
    hook = {"path": "/bin/sh", "args": ["sh", "-c", f"touch {marker}"]}
    config["hooks"] = {"prestart": [hook], "poststop": [hook]}
    (bundle / "config.json").write_text(json.dumps(config))
    assert run_mode_runtime.scrun("run", "-b", str(bundle), "h1").returncode == 0
    # poststop stays and runs; prestart was removed and so never ran before it.
    assert marker.exists()
    marker.unlink()
    _with(run_mode_runtime, "DisableHooks=prestart,poststop\n")
    assert run_mode_runtime.scrun("run", "-b", str(bundle), "h2").returncode == 0
    assert not marker.exists()


def test_disable_cleanup_keeps_the_task_dir(run_mode_runtime: Runtime, tmp_path: Path) -> None:
    task_root = tmp_path / "tasks"
    _with(run_mode_runtime, f"DisableCleanup=true\nContainerPath={task_root}\n")
    bundle = make_bundle(tmp_path, ["true"])
    assert run_mode_runtime.scrun("run", "-b", str(bundle), "k1").returncode == 0
    kept = list(task_root.glob("oci-job*/task-0/config.json"))
    assert len(kept) == 1
    rewritten = json.loads(kept[0].read_text())
    assert rewritten["root"]["path"] == str(bundle / "rootfs")
    assert not list(TASKS_DIR.glob(f"oci-job*{kept[0].parent.parent.name}*"))


def test_ignore_file_config_json_runs_from_the_bundle(run_mode_runtime: Runtime, tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    # Like Slurm's Singularity example: the runtime gets the rootfs and the arguments.
    (run_mode_runtime.conf_dir / "oci.conf").write_text(
        "IgnoreFileConfigJson=true\n"
        f'RunTimeRun="echo %r > {seen}; echo %@ >> {seen}"\n'
        'RunTimeKill="kill -s KILL %p"\nRunTimeDelete="true"\n')
    bundle = make_bundle(tmp_path, ["echo", "a b"])
    assert run_mode_runtime.scrun("run", "-b", str(bundle), "i1").returncode == 0
    assert seen.read_text().splitlines() == [str(bundle), "echo a b"]


def test_default_root_works_for_root_without_a_flag(tmp_path: Path) -> None:
    assert os.getuid() == 0, "the integration tests run as root"
    bundle = make_bundle(tmp_path, ["sh", "-c", "exit 2"])
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "pyscrun.conf").write_text(LOCAL_BACKEND)
    conf = ["-f", str(tmp_path / "etc" / "slurm.conf")]
    done = subprocess.run([str(SCRUN), *conf, "run", "-b", str(bundle), "noroot"], env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr
    assert not Path("/run/pyscrun/noroot").exists()


@pytest.mark.parametrize(("directives", "env", "stderr_debug", "file_debug"), [
    ("", {}, False, False),
    ("StdIODebug=debug\n", {}, True, False),
    ("FileDebug=debug\n", {}, False, True),
    ("DebugFlags=Steps\n", {}, False, True),
    # What the environment (or the command line) says wins over oci.conf.
    ("StdIODebug=debug\nFileDebug=debug\n", {"SCRUN_STDERR_DEBUG": "error",
                                             "SCRUN_FILE_DEBUG": "info"}, False, False),
])
def test_log_levels_of_oci_conf(run_mode_runtime: Runtime, tmp_path: Path, directives: str,
                                env: dict[str, str], stderr_debug: bool, file_debug: bool) -> None:
    _with(run_mode_runtime, directives)
    bundle = make_bundle(tmp_path, ["true"])
    done = run_mode_runtime.scrun("run", "-b", str(bundle), "lv", env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    assert (": debug: " in done.stderr) is stderr_debug, done.stderr
    assert (" debug: " in run_mode_runtime.log.read_text()) is file_debug


def test_container_path_and_mount_spool_dir_are_patterns(run_mode_runtime: Runtime,
                                                         tmp_path: Path) -> None:
    """As Slurm's: %-patterns in ContainerPath and MountSpoolDir are filled in per task."""
    task_root = tmp_path / "tasks"
    _with(run_mode_runtime, f"DisableCleanup=true\nContainerPath={task_root}/%u-%U/j%j\n"
                            "MountSpoolDir=/spool-%t-%s\n")
    bundle = make_bundle(tmp_path, ["sh", "-c", "ls -d /spool-0-0 && echo MOUNTED"])
    done = run_mode_runtime.scrun("run", "-b", str(bundle), "p1")
    assert done.returncode == 0, done.stderr
    assert "MOUNTED" in done.stdout
    kept = list(task_root.glob("*/*/oci-job*/task-0/config.json"))
    assert len(kept) == 1, list(task_root.rglob("*"))
    job_dir = kept[0].parents[1].name.removeprefix("oci-job").rsplit("-", 1)[0]
    assert kept[0].parents[2] == task_root / "root-0" / f"j{job_dir}"


def test_a_pattern_a_path_cannot_hold_is_refused(run_mode_runtime: Runtime,
                                                 tmp_path: Path) -> None:
    _with(run_mode_runtime, f"ContainerPath={tmp_path}/%b\n")
    bundle = make_bundle(tmp_path, ["true"])
    done = run_mode_runtime.scrun("run", "-b", str(bundle), "p2")
    assert done.returncode != 0
    assert "ContainerPath cannot hold %b" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
