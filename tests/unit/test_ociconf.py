from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from pyscrun.conf import keyvalue, ociconf, patterns
from pyscrun.errors import ConfigError
from pyscrun.node.runtime import RuntimeCommands

EXAMPLE = r'''
# Slurm's documented run-mode example
EnvExclude="^(SLURM_CONF|SLURM_CONF_SERVER)="
RunTimeEnvExclude="^(SLURM_CONF|SLURM_CONF_SERVER)="
RunTimeQuery="runc --rootless=true --root=/run/user/%U/ state %n.%u.%j.%s.%t"
RunTimeKill="runc --rootless=true --root=/run/user/%U/ kill -a %n.%u.%j.%s.%t"
RunTimeDelete="runc --rootless=true --root=/run/user/%U/ delete --force %n.%u.%j.%s.%t"
RunTimeRun="runc --rootless=true --root=/run/user/%U/ run %n.%u.%j.%s.%t -b %b"
srunargs=--mpi=none
SrunArgs="--overlap"  # keys are case-insensitive, SrunArgs repeats
CreateEnvFile=true
DisableHooks=prestart,poststop
'''


def test_documented_example_parses() -> None:
    conf = ociconf.parse(EXAMPLE, "oci.conf")
    assert conf.run_mode
    assert conf.EnvExclude is not None and conf.EnvExclude.search("SLURM_CONF=/x")
    assert conf.SrunArgs == ("--mpi=none", "--overlap")
    assert conf.CreateEnvFile == "null"
    assert conf.DisableHooks == ("prestart", "poststop")


def test_keyvalue_quotes_and_comments() -> None:
    pairs = keyvalue.parse('A="x # y" B=z # comment\nC="q\\"uote"', "f")
    assert pairs == [("A", "x # y", "f:1"), ("B", "z", "f:1"), ("C", 'q"uote', "f:2")]


@pytest.mark.parametrize("text", ['A="open', "=x", "A", 'A="x"y'])
def test_keyvalue_errors(text: str) -> None:
    with pytest.raises(ConfigError):
        keyvalue.parse(text, "f")


def test_builtin_default_is_valid_run_mode() -> None:
    assert ociconf.BUILTIN_DEFAULT.run_mode
    for name in ociconf.RUNTIME_DIRECTIVES:
        patterns.check(getattr(ociconf.BUILTIN_DEFAULT, name), name)


def test_expand_quotes_every_value() -> None:
    values = patterns.PatternValues(bundle="/b with space/$(rm -rf x)`id`'q'", job_id="7",
                                    args=("echo", "a b", "$HOME"))
    command = patterns.expand("run %b %j %% %@", values)
    assert shlex.split(command) == ["run", "/b with space/$(rm -rf x)`id`'q'", "7", "%",
                                    "echo", "a b", "$HOME"]


def test_every_documented_pattern_is_known() -> None:
    for letter in "bejmnprstuU@%":
        patterns.check(f"x %{letter} y", "t")


def test_create_env_file_values() -> None:
    base = 'RunTimeRun=r\nRunTimeKill=k\nRunTimeDelete=d\n'
    # Slurm's words: 24.11's, and 22.05's booleans.
    for value, mode in (("null", "null"), ("NULL", "null"), ("Yes", "null"), ("Y", "null"),
                        ("1", "null"), ("true", "null"), ("up", "null"),
                        ("newline", "newline"), ("Newline", "newline"),
                        ("disabled", "disabled"), ("false", "disabled"), ("N", "disabled"),
                        ("no", "disabled"), ("0", "disabled"), ("down", "disabled")):
        assert ociconf.parse(base + f"CreateEnvFile={value}\n", "f").CreateEnvFile == mode
    for bad in ("maybe", "2", "nul"):
        with pytest.raises(ConfigError, match="CreateEnvFile"):
            ociconf.parse(base + f"CreateEnvFile={bad}\n", "f")


def test_booleans_are_slurms() -> None:
    base = 'RunTimeRun=r\nRunTimeKill=k\nRunTimeDelete=d\n'
    for value, flag in (("yes", True), ("UP", True), ("True", True), ("1", True),
                        ("no", False), ("Down", False), ("FALSE", False), ("0", False)):
        assert ociconf.parse(base + f"DisableCleanup={value}\n", "f").DisableCleanup is flag
    for bad in ("y", "n", "on", "off", "2"):
        with pytest.raises(ConfigError, match="expected true or false"):
            ociconf.parse(base + f"DisableCleanup={bad}\n", "f")


def test_error_names_file_and_line() -> None:
    with pytest.raises(ConfigError, match=re.escape("oci.conf:3: unknown directive 'Nope'")):
        ociconf.parse("RunTimeRun=r\nRunTimeKill=k\nNope=1\n", "oci.conf")


@pytest.mark.parametrize(("directive", "command", "copies"), [
    ("RunTimeRun", "runc --rootless=true --root=/run/user/%U/ run %n.%u.%j.%s.%t -b %b", True),
    ("RunTimeRun", "/usr/sbin/runc run --bundle %b %n", True),
    ("RunTimeRestore", "runc restore --image-path /x %n", True),
    ("RunTimeRun", "runc run --detach %n", False),
    ("RunTimeCreate", "runc create --bundle %b %n", False),
    ("RunTimeRun", "crun run --bundle %b %n", False),
    ("RunTimeRun", "/usr/local/bin/wrap runc run %n", False),
])
def test_which_runtimes_copy_the_output_themselves(directive: str, command: str,
                                                   copies: bool) -> None:
    """Only a runtime known to put pipes of its own before the container is run
    detached or given the stream's sockets (any other container would see a socket as
    its stdout)."""
    commands = _commands_with(directive, command)
    assert commands.copies_output(directive) is copies


def test_a_foreground_run_is_run_detached_when_asked() -> None:
    """`--detach` goes after the command, as `--preserve-fds N` does."""
    commands = _commands_with("RunTimeRun", "echo runc run %n",
                              patterns.PatternValues(node_name="n1"), {"PATH": "/usr/bin:/bin"})
    read, write = os.pipe()
    nothing = os.open(os.devnull, os.O_RDONLY)
    process = commands.spawn("RunTimeRun", stdio=(nothing, write, write), detach=True)
    os.close(write)
    os.close(nothing)
    assert process.wait() == 0
    assert os.read(read, 4096) == b"runc run n1 --detach\n"
    os.close(read)


def _commands_with(directive: str, command: str,
                   values: patterns.PatternValues | None = None,
                   environ: dict[str, str] | None = None) -> RuntimeCommands:
    """The example's runtime commands with directive's set to command: oci.conf's own,
    or one pyscrun.conf derives."""
    conf = ociconf.parse(EXAMPLE, "oci.conf")
    derived: dict[str, str] = {}
    if hasattr(conf, directive):
        setattr(conf, directive, command)
    else:
        derived[directive] = command
    return RuntimeCommands(conf, values or patterns.PatternValues(), cwd="/",
                           environ=environ or {}, derive=lambda: derived)


@pytest.mark.parametrize(("directive", "value"), [
    ("ContainerPath", "/t/%s"), ("ContainerPath", "/t/%b"), ("ContainerPath", "/t/%t"),
    ("MountSpoolDir", "/s/%r"), ("MountSpoolDir", "/s/%"), ("ContainerPath", "/t/%@")])
def test_path_directives_refuse_patterns_they_cannot_hold(directive: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"{directive} cannot hold"):
        ociconf.parse(f"RunTimeRun=r\nRunTimeKill=k\nRunTimeDelete=d\n{directive}={value}\n",
                      "oci.conf")


def test_path_patterns_expand_as_they_are() -> None:
    values = patterns.PatternValues(job_id="7", node_name="n1", user_name="al ice",
                                    uid="1000", step_id="2", task_id="3")
    assert patterns.expand_path("/x/%u/%U/%j%%/%n", values) == "/x/al ice/1000/7%/n1"
    assert patterns.expand_path("/spool-%s.%t", values) == "/spool-2.3"


# As Slurm's parser reads its files (parse_config.c).
SLURM_FILES = {
    "spaces around the equals sign, continued lines": (
        'RunTimeRun = "runc run %n.%u.%j.%s.%t \\\n'
        '  -b %b"\n'
        "RunTimeKill =runc\n"
        'RunTimeDelete= "runc delete"\\\n'
        " SrunPath=/usr/bin/srun\n"
        "# a comment ending in a backslash continues nothing \\\n"
        "SrunArgs=--exclusive\n",
        [("RunTimeRun", "runc run %n.%u.%j.%s.%t   -b %b", "oci.conf:1"),
         ("RunTimeKill", "runc", "oci.conf:3"), ("RunTimeDelete", "runc delete", "oci.conf:4"),
         ("SrunPath", "/usr/bin/srun", "oci.conf:4"), ("SrunArgs", "--exclusive", "oci.conf:7")]),
    # A backslash escapes the character after it, quoted or not (a site's `\\.` in a
    # pattern is a dot, `\\\\.` a backslash and a dot); an escaped `#` starts no comment;
    # an odd number of backslashes ending a line's text (spaces and a comment aside)
    # continues it, an even number is the value's.
    "backslashes and comments": (
        'EnvExclude="^X\\.Y=" RunTimeEnvExclude="^A\\\\.B="\n'
        "SrunPath=/opt/s\\#1/srun # the site's srun\n"
        "SrunArgs=--a \\  # continued, the comment aside\n"
        "  StartRegex=x\\\\\n"
        'A=x"y # a quote within a word opens nothing\n',
        [("EnvExclude", "^X.Y=", "oci.conf:1"), ("RunTimeEnvExclude", "^A\\.B=", "oci.conf:1"),
         ("SrunPath", "/opt/s#1/srun", "oci.conf:2"), ("SrunArgs", "--a", "oci.conf:3"),
         ("StartRegex", "x\\", "oci.conf:3"), ("A", 'x"y', "oci.conf:5")]),
}


@pytest.mark.parametrize("case", SLURM_FILES)
def test_files_read_as_slurm_reads_them(case: str) -> None:
    text, pairs = SLURM_FILES[case]
    assert keyvalue.parse(text, "oci.conf") == pairs


def test_include_reads_a_file_in_its_place_as_slurm_does(tmp_path: Path) -> None:
    """`Include PATH`: relative to slurm.conf's directory (also from a file included
    from elsewhere), absolute as it is, the word in any case."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    (tmp_path / "kill.conf").write_text('RunTimeKill="runc kill"\n'
                                        "INCLUDE elsewhere/last.conf\n")
    (other / "last.conf").write_text("include delete.conf\n")
    (tmp_path / "delete.conf").write_text('RunTimeDelete="runc delete"\n')
    oci = tmp_path / "oci.conf"
    oci.write_text(f'RunTimeRun="runc run %n -b %b"\nInclude kill.conf # the kill\n'
                   f"Include {tmp_path}/srun.conf\n")
    (tmp_path / "srun.conf").write_text("SrunPath=/usr/bin/srun\n")
    conf = ociconf.load(str(oci))
    assert (conf.RunTimeKill, conf.RunTimeDelete, conf.SrunPath) == (
        "runc kill", "runc delete", "/usr/bin/srun")
    where = [w for _, _, w in keyvalue.parse(oci.read_text(), str(oci))]
    assert where == [f"{oci}:1", f"{tmp_path}/kill.conf:1", f"{tmp_path}/delete.conf:1",
                     f"{tmp_path}/srun.conf:1"]


@pytest.mark.parametrize(("line", "error"), [
    ("Include missing.conf", "oci.conf:2: cannot include {dir}/missing.conf: No such file"),
    ("Include oci.conf", "Include nested deeper than 16 (a loop?)"),
    ("Include oci-%c.conf", "oci.conf:2: Include's %c (the cluster's name) is slurm.conf's alone"),
    ("Include", "oci.conf:2: expected Key=Value, found 'Include'"),
    ("Include=x.conf", "oci.conf:2: unknown directive 'Include'"),
])
def test_an_include_that_cannot_be_read_is_one_line(tmp_path: Path, line: str,
                                                    error: str) -> None:
    oci = tmp_path / "oci.conf"
    oci.write_text(f'RunTimeRun="runc run %n -b %b"\n{line}\n')
    with pytest.raises(ConfigError) as raised:
        ociconf.load(str(oci))
    assert error.format(dir=tmp_path) in str(raised.value)
    assert "\n" not in str(raised.value)
