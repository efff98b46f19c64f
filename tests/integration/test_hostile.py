"""Hostile input: paths and values that would run commands if they ever reached a shell
unquoted, malformed config.json of every kind, and symlinks planted where scrun writes.
Nothing runs, errors are one clear line, and nothing is left behind (the basic cases
of bad ids, config.json and oci.conf are in test_bad_input.py).

As root: scrun's own command line, with bundles of root's, as runc's is used; what an
ordinary user's podman does is in the tests that run as one."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyscrun.fs import write_atomic
from tests.integration.harness import (
    IMAGE,
    LOCAL_BACKEND,
    SCRUN,
    Cluster,
    Runtime,
    make_bundle,
    make_slurm_runtime,
    podman,
    write_node_conf,
)
from tests.integration.reliability import ScopedLeakCheck, private_runtime


def _one_line_error(done: subprocess.CompletedProcess[str], expect: str) -> None:
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert expect in lines[0], lines[0]


class Markers:
    """Files a command injection would create: never there, removed if they are."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:12]
        self.made: list[Path] = []

    def touch(self, name: str) -> str:
        """Shell text that creates a marker file if it ever runs."""
        path = Path(f"/tmp/PWNED-{self.tag}-{name}")
        self.made.append(path)
        return f"touch {path}"

    def found(self) -> list[str]:
        return [str(p) for p in self.made if p.exists()]

    def remove(self) -> None:
        for path in self.made:
            path.unlink(missing_ok=True)


@pytest.fixture
def markers() -> Iterator[Markers]:
    made = Markers()
    yield made
    made.remove()


def _conf_value(text: str) -> str:
    """text as a double-quoted oci.conf value."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _hostile_runtime(base: Path, oci_conf: str, root: Path, slurm_conf: Path | None) -> Runtime:
    """A scrun wrapper that quotes its own arguments (the harness's does not need to)."""
    conf_dir = base / "etc"
    conf_dir.mkdir(parents=True)
    (conf_dir / "oci.conf").write_text(oci_conf)
    if slurm_conf is not None:
        (conf_dir / "slurm.conf").symlink_to(slurm_conf)
        write_node_conf(slurm_conf, "oci.conf", oci_conf)
    else:
        (conf_dir / "pyscrun.conf").write_text(LOCAL_BACKEND)
    wrapper = base / "scrun"
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(str(SCRUN))} --root {shlex.quote(str(root))} "
                       f"-f {shlex.quote(str(conf_dir / 'slurm.conf'))} \"$@\"\n")
    wrapper.chmod(0o755)
    return Runtime(root, conf_dir, wrapper)


# -- paths with shell metacharacters ------------------------------------------------

@pytest.mark.parametrize("mode", ["run", "create-start"])
@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_shell_metacharacters_in_paths_run_nothing(
        cluster: Cluster, tmp_path: Path, markers: Markers, backend: str, mode: str) -> None:
    """A bundle, --root and ContainerPath whose names hold spaces, quotes, `$(...)` and
    backticks reach every %-pattern and the SCRUN_* variables of the oci.conf commands:
    the container runs, gets its arguments intact, and no marker file appears."""
    slurm_conf = cluster.up(1) if backend == "slurm" else None
    weird = f"b $({markers.touch('x')}) `{markers.touch('y')}` 'q\";{markers.touch('z')}"
    bundle = make_bundle(tmp_path / weird, ["echo", f"$({markers.touch('a')})",
                                            f"`{markers.touch('b')}`", "it's \"quoted\""])
    root = tmp_path / f"root $({markers.touch('r')}) `{markers.touch('s')}` 'q\""
    tasks = tmp_path / f"tasks $({markers.touch('c')}) 'x\" `{markers.touch('d')}`"
    runc_root = tmp_path / "runc"
    seen = tmp_path / "seen"
    seen.mkdir()
    runc = f"runc --root {runc_root}"
    name = "%n.%u.%j.%s.%t"
    # Every pattern and every path variable goes through the shell before the runtime.
    probe = (f": %b %r %m %e %@ %u %n %j %p; printf %%s %r > {seen}/rootfs; "
             f"printf %%s \"$SCRUN_BUNDLE\" > {seen}/bundle; printf %%s \"$SCRUN_ROOT\" > {seen}/root; "
             f"echo $SCRUN_BUNDLE $SCRUN_SPOOL_DIR $SCRUN_ROOTFS_PATH > /dev/null; ")
    if mode == "run":
        commands = {"RunTimeQuery": f"{runc} state {name}",
                    "RunTimeKill": f": %p %b; {runc} kill -a {name}",
                    "RunTimeDelete": f": %b %r; {runc} delete --force {name}",
                    "RunTimeRun": f"{probe}{runc} run {name} -b %b"}
    else:
        commands = {"RunTimeQuery": f": %b %r %p; {runc} state {name}",
                    "RunTimeCreate": f"{probe}{runc} create --bundle %b {name}",
                    "RunTimeStart": f": %b %r %p %@; {runc} start {name}",
                    "RunTimeKill": f": %p %b; {runc} kill -a {name}",
                    "RunTimeDelete": f": %b %r; {runc} delete --force {name}"}
    oci_conf = f"ContainerPath={_conf_value(str(tasks))}\nCreateEnvFile=newline\n" + "".join(
        f"{key}={_conf_value(value)}\n" for key, value in commands.items())
    runtime = _hostile_runtime(tmp_path / "rt", oci_conf, root, slurm_conf)
    leaks = ScopedLeakCheck(runtime, str(tmp_path), slurm_conf, private=(runc_root, tasks))

    done = runtime.scrun("run", "-b", str(bundle), "hostile")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"$({markers.touch('a')}) `{markers.touch('b')}` "
                           "it's \"quoted\"\n")
    assert markers.found() == []
    assert (seen / "rootfs").read_text() == str(bundle / "rootfs")
    assert (seen / "bundle").read_text() == str(bundle)
    assert (seen / "root").read_text() == str(root)
    leaks.check()


# -- SCRUN_* values -------------------------------------------------------------------

def _scrun_cases(m: Markers) -> list[tuple[str, str, str]]:
    """(variable, value, what Slurm makes of it: 'literal' or a piece of its error)."""
    return [
        ("SCRUN_JOB_NAME", f"n$({m.touch('1')})`{m.touch('2')}`;{m.touch('3')}|x&y'\"", "literal"),
        ("SCRUN_PARTITION", f"debug;{m.touch('4')}", "Invalid partition name"),
        ("SCRUN_PARTITION", f"$({m.touch('5')})", "Invalid partition name"),
        ("SCRUN_TIMELIMIT", f"1`{m.touch('6')}`", "job allocation failed"),
        ("SCRUN_CONSTRAINT", f"x|$({m.touch('7')})", "job allocation failed"),
        ("SCRUN_CPU_BIND", f"none;{m.touch('8')}", "cpu-bind"),
        ("SCRUN_JOB_NAME", f"two\nlines$({m.touch('9')})", "single line"),
    ]


@pytest.mark.parametrize("case", range(7), ids=[
    "job-name-taken-literally", "partition-semicolon", "partition-substitution",
    "timelimit-backticks", "constraint-pipe", "step-cpu-bind", "newline"])
def test_scrun_variables_with_shell_metacharacters(cluster: Cluster, tmp_path: Path,
                                                   markers: Markers, case: int) -> None:
    """Values go to Slurm as argv entries, never through a shell: Slurm takes them
    literally or refuses them; create fails with one clear line and no job then."""
    conf = cluster.up(1)
    runtime = make_slurm_runtime(tmp_path, conf)
    leaks = ScopedLeakCheck(runtime, str(tmp_path), conf)
    variable, value, expect = _scrun_cases(markers)[case]
    done = podman(runtime, "run", "--rm", "-e", f"{variable}={value}", IMAGE, "sh", "-c",
                  "echo job=$SLURM_JOB_ID")
    assert markers.found() == []
    if expect == "literal":
        assert done.returncode == 0, done.stderr
        job = re.search(rb"job=(\d+)", done.stdout)
        assert job, done.stdout
        record = subprocess.run(["scontrol", "show", "job", job.group(1).decode()],
                                capture_output=True, text=True, check=False,
                                env={**os.environ, "SLURM_CONF": str(conf)})
        assert f"JobName={value}\n" in record.stdout or f"JobName={value} " in record.stdout
    else:
        assert done.returncode != 0
        assert expect.encode() in done.stderr, done.stderr
    leaks.check()


# -- config.json ------------------------------------------------------------------------

@pytest.fixture
def local(tmp_path: Path) -> Iterator[Runtime]:
    runtime, leaks = private_runtime(tmp_path)
    yield runtime
    leaks.check()


_GOOD = {"ociVersion": "1.0.2", "process": {"args": ["true"], "cwd": "/"},
         "root": {"path": "rootfs"}}


def _with(path: str, value: object) -> str:
    config: dict[str, object] = json.loads(json.dumps(_GOOD))
    *parents, last = path.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})  # type: ignore[assignment]
    node[last] = value
    return json.dumps(config)


@pytest.mark.parametrize(("content", "expect"), [
    ("null", "the document must be an object, not null"),
    ('"a string"', "the document must be an object, not a string"),
    ("3", "the document must be an object, not an integer"),
    (_with("process", None), "process is missing"),
    (_with("process", ["true"]), "process must be an object, not a list"),
    (_with("process.args", []), "process.args is missing or empty"),
    (_with("process.args", [1, 2]), "process.args[0] must be a string, not an integer"),
    (_with("process.args", [["sh"]]), "process.args[0] must be a string, not a list"),
    (_with("process.env", "A=1"), "process.env must be a list, not a string"),
    (_with("process.env", [{"A": "1"}]), "process.env[0] must be a string, not an object"),
    (_with("process.terminal", "yes"), "process.terminal must be a boolean, not a string"),
    (_with("process.cwd", 5), "process.cwd must be a string, not an integer"),
    (_with("ociVersion", 1.0), "ociVersion must be a string, not a number"),
    (_with("root", "rootfs"), "root must be an object, not a string"),
    (_with("root.path", 5), "root.path must be a string, not an integer"),
    (_with("annotations", ["a=b"]), "annotations must be an object, not a list"),
    (_with("annotations", {"a": 1}), "annotations['a'] must be a string, not an integer"),
    (_with("mounts", {"destination": "/x"}), "mounts must be a list, not an object"),
    (_with("hooks", [{"path": "/x"}]), "hooks must be an object, not a list"),
    (_with("linux", "yes"), "linux must be an object, not a string"),
    (_with("process.consoleSize", [80, 24]), "process.consoleSize must be an object, not a list"),
    (_with("process.consoleSize", {"height": "x"}), "consoleSize.height must be an integer"),
    (_with("ociVersion", "invalid"), "ociVersion 'invalid' is not a 1.x.y version"),
    (_with("process.rlimits", [{"type": "RLIMIT_NOFILE", "soft": 9, "hard": 1}]),
     "soft limit 9 is above the hard limit 1"),
    (_with("linux.namespaces", [{"type": "network", "path": "/proc/self/ns/uts"}]),
     "is not a network namespace"),
    ('{"process": ' * 50000 + "{}" + "}" * 50000, "not valid JSON"),
    (b'{"process": {"args": ["\xff"]}}', "not valid JSON"),
])
def test_malformed_config_json(local: Runtime, tmp_path: Path, content: str | bytes,
                               expect: str) -> None:
    bundle = make_bundle(tmp_path, ["true"])
    (bundle / "config.json").write_bytes(content if isinstance(content, bytes) else content.encode())
    _one_line_error(local.scrun("create", "-b", str(bundle), "x"), expect)


@pytest.mark.parametrize("kind", ["zeros", "directory", "dev-zero", "dangling"])
def test_config_json_that_is_not_a_small_file(local: Runtime, tmp_path: Path, kind: str) -> None:
    """100 MB of nothing, a directory, an endless device, a dangling symlink (a FIFO
    is below)."""
    bundle = make_bundle(tmp_path, ["true"])
    config = bundle / "config.json"
    config.unlink()
    expect = {"zeros": "larger than", "directory": "not a regular file",
              "dev-zero": "not a regular file", "dangling": "has no config.json"}[kind]
    if kind == "zeros":
        with open(config, "wb") as out:
            out.truncate(100 * 10**6)
    elif kind == "directory":
        config.mkdir()
    elif kind == "dev-zero":
        config.symlink_to("/dev/zero")
    else:
        config.symlink_to(tmp_path / "nowhere")
    _one_line_error(local.scrun("create", "-b", str(bundle), "x"), expect)


@pytest.mark.parametrize("path", ["root.path", "process.args", "process.env", "process.cwd",
                                  "annotations"])
def test_nul_anywhere_in_config_json_is_a_clear_error(local: Runtime, tmp_path: Path,
                                                      path: str) -> None:
    """No NUL can reach a system call (a NUL in root.path used to crash the anchor)."""
    value: object = {"path": "root\u0000fs", "args": ["tr\u0000ue"], "env": ["A=\u0000"],
                     "cwd": "/\u0000", "annotations": {"a": "b\u0000"}}[path.rsplit(".", 1)[-1]]
    bundle = make_bundle(tmp_path, ["true"])
    (bundle / "config.json").write_text(_with(path, value))
    _one_line_error(local.scrun("create", "-b", str(bundle), "x"), "NUL")


def test_config_json_fifo_does_not_block_create(local: Runtime, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["true"])
    (bundle / "config.json").unlink()
    os.mkfifo(bundle / "config.json")
    _one_line_error(local.scrun("create", "-b", str(bundle), "x", timeout=10),
                    "not a regular file")


# -- symlinks planted where scrun writes --------------------------------------------------

def test_symlink_at_the_pid_file_is_replaced_not_followed(local: Runtime, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    pid_file = tmp_path / "pid"
    pid_file.symlink_to(victim)
    bundle = make_bundle(tmp_path, ["true"])
    done = local.scrun("create", "-b", str(bundle), "--pid-file", str(pid_file), "p")
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "precious"
    assert not pid_file.is_symlink()
    state = json.loads(local.scrun("state", "p").stdout)
    assert pid_file.read_text() == str(state["pid"])
    assert local.scrun("delete", "--force", "p").returncode == 0


def test_symlink_at_the_temporary_file_is_not_followed(tmp_path: Path) -> None:
    """The temporary file of an atomic write is opened with O_NOFOLLOW: a link planted
    there makes the write fail instead of writing through it."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "pid"
    (tmp_path / f".pid.{os.getpid()}.tmp").symlink_to(victim)
    with pytest.raises(OSError):
        write_atomic(str(target), b"123")
    assert victim.read_text() == "precious"
    assert not target.exists()


def test_symlink_at_the_spool_dir_is_not_followed(local: Runtime, tmp_path: Path) -> None:
    """A link where a container's spool dir would go: create refuses the id, and delete
    of a fake state behind it removes nothing of the link's target."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    local.root.mkdir(parents=True, exist_ok=True)
    (local.root / "s").symlink_to(victim)
    bundle = make_bundle(tmp_path, ["true"])
    _one_line_error(local.scrun("create", "-b", str(bundle), "s"), "already exists")
    (victim / "state.json").write_text(json.dumps(
        {"id": "s", "status": "stopped", "pid": 0, "backend": "local"}))
    local.scrun("delete", "s")
    assert (victim / "keep").read_text() == "precious"
    (local.root / "s").unlink()
