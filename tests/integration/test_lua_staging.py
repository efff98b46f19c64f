"""scrun.lua under an ordinary user's rootless podman on the loopback Slurm cluster: the
man page's rsync staging, remote commands on every node, and each way a script can
fail."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.accounts import USER, account
from tests.integration.conftest import runtime_on
from tests.integration.harness import IMAGE, Cluster, Runtime, podman, slurm, wait_for
from tests.unit.test_lua_example import with_scratch_path

NODES = 3


@pytest.fixture
def staged(cluster: Cluster, tmp_path: Path) -> Iterator[tuple[Runtime, Path]]:
    """The user's runtime (run mode, three nodes) whose conf dir (slurm.conf linked
    beside oci.conf) gets the test's scrun.lua, and a directory of the user's; nothing
    of the test may be left afterwards, job included."""
    with runtime_on("slurm", "run", cluster, tmp_path, account(USER), NODES) as runtime:
        yield runtime, runtime.base


def _podman_ok(runtime: Runtime, *args: str) -> str:
    done = podman(runtime, *args)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


def test_man_page_rsync_example(staged: tuple[Runtime, Path]) -> None:
    runtime, base = staged
    scratch = base / "scratch"
    (runtime.conf_dir / "scrun.lua").write_text(with_scratch_path(scratch))
    # The container records the source of its root mount, writes a file, and waits
    # until the test has looked at the staged bundle.
    command = ("awk '$5 == \"/\" {print $4}' /proc/self/mountinfo > /root-source; "
               "touch /staged-out; while [ ! -e /proceed ]; do sleep 0.1; done")
    cid = _podman_ok(runtime, "run", "-d", IMAGE, "sh", "-c", command)
    try:
        stage_dir = scratch / str(runtime.account.uid) / "slurm" / "scrun" / cid
        staged_rootfs = stage_dir / "rootfs"
        wait_for(lambda: (staged_rootfs / "staged-out").exists(), 60, "the container's file")
        config = json.loads((stage_dir / "config.json").read_text())
        assert os.path.normpath(config["root"]["path"]) == str(staged_rootfs)
        root_source = (staged_rootfs / "root-source").read_text().strip()
        assert root_source.endswith(f"/slurm/scrun/{cid}/rootfs"), root_source
        (staged_rootfs / "proceed").touch()
        assert _podman_ok(runtime, "wait", cid) == "0"
        # stage_out has run before the container was reported stopped.
        changed = _podman_ok(runtime, "diff", cid).splitlines()
        assert "A /staged-out" in changed, changed
        assert not stage_dir.exists()
    finally:
        podman(runtime, "rm", "-f", cid)


def test_remote_command_runs_on_every_node(staged: tuple[Runtime, Path]) -> None:
    runtime, base = staged
    out = base / "hostnames"
    (runtime.conf_dir / "scrun.lua").write_text(f"""\
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
  local status, output = slurm.remote_command("hostname")
  local file = io.open("{out}", "w")
  file:write(string.format("%d\\n%s", status, output))
  file:close()
  return slurm.SUCCESS
end
function slurm_scrun_stage_out() return slurm.SUCCESS end
return slurm.SUCCESS
""")
    _podman_ok(runtime, "run", "--rm", "-e", f"SCRUN_JOB_NUM_NODES={NODES}", IMAGE, "true")
    status, *names = out.read_text().split()
    assert status == "0"
    assert sorted(names) == [f"n{i}" for i in range(1, NODES + 1)]


class Seen:
    """What _see_variables's stage_in saw: its arguments, what `script` printed through
    allocator_command here and remote_command on the nodes, and job_env's entries."""

    def __init__(self, text: str) -> None:
        head, job_env = text.split("--\n")
        self.given, self.here, *self.there = head.splitlines()
        self.job_env = dict(line.partition("=")[::2] for line in job_env.splitlines())


def _see_variables(runtime: Runtime, script: str, *run_options: str) -> Seen:
    """podman run with a stage_in that runs script both ways and keeps job_env."""
    out = runtime.base / "seen"
    (runtime.conf_dir / "scrun.lua").write_text(f"""\
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
  local script = '{script}'
  local _, here = slurm.allocator_command(script)
  local _, there = slurm.remote_command(script)
  local file = io.open("{out}", "w")
  file:write(string.format("%s %d %s\\n%s%s--\\n", id, job_id, spool_dir, here, there))
  for _, entry in ipairs(job_env) do file:write(entry .. "\\n") end
  file:close()
  return slurm.SUCCESS
end
function slurm_scrun_stage_out() return slurm.SUCCESS end
return slurm.SUCCESS
""")
    _podman_ok(runtime, "run", "--rm", *run_options, IMAGE, "true")
    return Seen(out.read_text())


def test_job_env_holds_the_variables_slurm_makes_for_the_job(
        staged: tuple[Runtime, Path]) -> None:
    """As Slurm's scrun hands them (env_array_for_job): the job's node list, node count,
    partition and name, in job_env and in the environment of scrun.lua's commands; the
    caller's own Slurm settings (SLURM_CONF) are not the job's."""
    runtime, _ = staged
    seen = _see_variables(runtime, 'echo "$SLURM_JOB_NODELIST $SLURM_JOB_NUM_NODES '
                          '$SLURM_JOB_PARTITION"', "-e", "SCRUN_JOB_NUM_NODES=2",
                          "-e", "SCRUN_PARTITION=other")
    job_id = seen.given.split()[1]
    listed = slurm(runtime.slurm_conf.resolve(), "squeue", "-h", "-t", "all", "-j", job_id,
                   "-o", "%N")
    nodes = listed.stdout.strip()
    assert nodes.startswith("n["), listed
    assert seen.here == f"{nodes} 2 other"
    assert seen.there == [seen.here, seen.here]  # one line from each of the two nodes
    assert {"SLURM_JOB_ID": job_id, "SLURM_JOB_NODELIST": nodes, "SLURM_JOB_NUM_NODES": "2",
            "SLURM_JOB_PARTITION": "other", "SLURM_JOB_NAME": "scrun"}.items() \
        <= seen.job_env.items(), seen.job_env
    assert "SLURM_CONF" not in seen.job_env


def test_commands_run_with_the_jobs_variables(staged: tuple[Runtime, Path]) -> None:
    """As Slurm's scrun runs them: allocator_command here and remote_command on the
    node see the output variables and the job's id."""
    runtime, _ = staged
    seen = _see_variables(runtime, 'echo "$SCRUN_CONTAINER_ID $SLURM_JOB_ID $SCRUN_SPOOL_DIR"',
                          "--annotation", "org.example.tag=v1")
    assert seen.given.split()[0] and seen.given.split()[1] != "0"
    assert seen.here == seen.given
    assert seen.there == [seen.given]
    # Slurm's name (the key as given), and one a shell passes on.
    assert {("SCRUN_ANNOTATION_org.example.tag", "v1"),
            ("SCRUN_ANNOTATION_ORG_EXAMPLE_TAG", "v1")} <= seen.job_env.items()


STAGE_FUNCTIONS = """\
function slurm_scrun_stage_in() return slurm.SUCCESS end
function slurm_scrun_stage_out() return slurm.SUCCESS end
"""

FAILURES = {
    "syntax error": ("function slurm_scrun_stage_in(\n  x = \nend\n",
                     "scrun.lua:2: ')' expected near '='"),
    "missing function": ("function slurm_scrun_stage_in() end\nreturn slurm.SUCCESS\n",
                         "scrun.lua: required function slurm_scrun_stage_out is not defined"),
    "runtime error on load": (STAGE_FUNCTIONS + "local x\nx()\n",
                              "scrun.lua:4: attempt to call a nil value (local 'x')"),
    "failure on load": (STAGE_FUNCTIONS + "return slurm.ERROR\n",
                        "scrun.lua:3: returned -1 on load instead of slurm.SUCCESS"),
    "runtime error in stage_in": (
        "function slurm_scrun_stage_in(id)\n  local config\n  return config.root\nend\n"
        "function slurm_scrun_stage_out() end\n",
        "slurm_scrun_stage_in: {conf}/scrun.lua:3: attempt to index a nil value (local 'config')"),
    "failure in stage_in": (
        "function slurm_scrun_stage_in(id)\n  slurm.log_info('refusing %s', id)\n"
        "  return slurm.ERROR\nend\nfunction slurm_scrun_stage_out() end\n",
        "slurm_scrun_stage_in: {conf}/scrun.lua:3: returned -1 instead of slurm.SUCCESS"),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_failures_are_one_clear_line_and_leave_nothing(staged: tuple[Runtime, Path],
                                                       case: str) -> None:
    runtime, _ = staged
    script, expect = FAILURES[case]
    (runtime.conf_dir / "scrun.lua").write_text(script)
    jobs_before = _jobs(runtime)
    done = podman(runtime, "run", "--rm", IMAGE, "true")
    assert done.returncode != 0
    stderr = done.stderr.decode()
    expect = expect.format(conf=runtime.conf_dir)
    if not expect.startswith("slurm_scrun"):
        expect = f"{runtime.conf_dir}/{expect}"
    lines = [line for line in stderr.splitlines() if "scrun.lua" in line]
    assert len(lines) == 1, stderr
    assert lines[0].endswith(expect), stderr
    if not expect.startswith("slurm_scrun"):
        # A script that cannot load is found before any job is asked for, as Slurm's
        # scrun loads it first (a queued job would have waited its turn to say so).
        assert _jobs(runtime) == jobs_before


def _jobs(runtime: Runtime) -> list[str]:
    """Every job slurmctld still knows of, ended ones too."""
    done = slurm(runtime.slurm_conf.resolve(), "squeue", "-h", "-t", "all", "-o", "%i")
    assert done.returncode == 0, done.stderr
    return sorted(done.stdout.split())


def test_delete_waits_for_a_long_stage_out(staged: tuple[Runtime, Path]) -> None:
    """delete --force of a running container whose stage_out outlasts delete's usual
    wait for the container's end: stage_out runs to its end (the results are saved),
    then delete returns 0 and nothing is left."""
    from pyscrun.cli.ending import DELETE_TIMEOUT

    runtime, base = staged
    marker = base / "staged-out"
    (runtime.conf_dir / "scrun.lua").write_text(f"""\
function slurm_scrun_stage_in() return slurm.SUCCESS end
function slurm_scrun_stage_out()
  slurm.allocator_command("sleep {DELETE_TIMEOUT + 5:.0f}; echo done > {marker}")
  return slurm.SUCCESS
end
return slurm.SUCCESS
""")
    cid = _podman_ok(runtime, "run", "-d", IMAGE, "sleep", "1000")
    try:
        done = runtime.scrun("delete", "--force", cid, timeout=DELETE_TIMEOUT + 60)
        assert done.returncode == 0, done.stderr
        assert marker.read_text() == "done\n"
        assert runtime.scrun("state", cid).returncode != 0
    finally:
        podman(runtime, "rm", "-f", cid)
