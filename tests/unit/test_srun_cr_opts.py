"""srun_cr's reading of srun's command line: where options end and the command starts."""

from __future__ import annotations

import pytest

from pyscrun.errors import UsageError
from pyscrun.srun_cr import srunopts
from pyscrun.srun_cr.srunopts import parse


def test_options_then_command() -> None:
    line = parse(["-N3", "-n", "3", "--label", "--job-name=x", "sh", "-c", "echo -n hi"])
    assert line.options == ["-N3", "-n", "3", "--label", "--job-name=x"]
    assert line.command == ["sh", "-c", "echo -n hi"]
    assert line.ntasks == "3"
    assert line.passthrough is None


def test_options_stop_at_the_first_word_as_getopt_plus_mode() -> None:
    line = parse(["-l", "prog", "-n", "2", "--restart", "x"])
    assert line.command == ["prog", "-n", "2", "--restart", "x"]
    assert line.ntasks is None and line.restart is None


def test_double_dash_ends_options() -> None:
    line = parse(["-n2", "--", "-weird-program", "a"])
    assert line.options == ["-n2"]
    assert line.command == ["-weird-program", "a"]


def test_short_clusters_and_attached_values() -> None:
    line = parse(["-lN2", "-Jname", "-K1", "-K", "true"])
    # -K takes an optional value, which must be attached: the lone -K takes none.
    assert line.options == ["-l", "-N2", "-Jname", "-K1", "-K"]
    assert line.command == ["true"]


def test_restart_is_taken_out_in_every_spelling() -> None:
    for argv in (["--restart", "d", "-n1", "x"], ["--restart=d", "-n1", "x"],
                 ["--rest", "d", "-n1", "x"]):
        line = parse(argv)
        assert line.restart == "d"
        assert line.options == ["-n1"]
        assert line.command == ["x"]


def test_unique_prefix_and_aliases_resolve() -> None:
    line = parse(["--ntasks-per-n=2", "--cpu_b=none", "--nodel", "n1", "--ntasks", "4", "x"])
    assert line.passthrough is None
    assert line.ntasks == "4"
    assert line.command == ["x"]
    assert srunopts.resolve_long("tasks-per-node") == ("ntasks-per-node", srunopts.REQUIRED)


def test_optional_values_only_when_attached() -> None:
    line = parse(["--exclusive", "--overlap=force", "--pty", "bash"])
    assert line.options == ["--exclusive", "--overlap=force", "--pty"]
    assert line.command == ["bash"]


@pytest.mark.parametrize(("argv", "reason"), [
    (["--bogus", "x"], "unrecognized option '--bogus'"),
    (["-Y", "x"], "invalid option -- 'Y'"),
    (["--n", "x"], "ambiguous"),
    (["--nta", "4", "x"], "ambiguous"),
    (["-n"], "requires an argument"),
    (["--label=yes", "x"], "doesn't allow an argument"),
    (["-n1", "--help"], "--help"),
    (["-V"], "--version"),
])
def test_lines_srun_must_judge_go_to_it_as_given(argv: list[str], reason: str) -> None:
    line = parse(argv)
    assert line.passthrough is not None and reason in line.passthrough
    assert line.given == argv


def test_passthrough_line_drops_srun_cr_options_only() -> None:
    line = parse(["--restart", "d", "-lY", "x"])
    assert line.given == ["-lY", "x"]


def test_unknown_option_known_to_srun_help_is_followed() -> None:
    def lookup(name: str) -> tuple[str, int] | None:
        return ("spank-opt", srunopts.REQUIRED) if name == "spank-opt" else None

    line = parse(["--spank-opt", "v", "-n2", "prog"], lookup)
    assert line.passthrough is None
    assert line.options == ["--spank-opt", "v", "-n2"]
    assert line.command == ["prog"]


@pytest.mark.parametrize(("given", "known", "canonical"), [
    ("ext", "extra-node-info", "extra-node-info"),  # 22.05's srun has neither extra option
    ("contain", "container", "container"),  # nor --container-id
    ("ntasks-per-n", "ntasks-per-node", "ntasks-per-node"),
])
def test_a_prefix_of_other_versions_options_is_resolved_as_this_srun_knows_it(
        given: str, known: str, canonical: str) -> None:
    def lookup(name: str) -> tuple[str, int] | None:
        return (known, srunopts.REQUIRED) if known.startswith(name) else None

    line = parse([f"--{given}=1", "prog"], lookup)
    assert line.passthrough is None and line.command == ["prog"]
    assert srunopts.resolve_long(given, lookup) == (canonical, srunopts.REQUIRED)


def test_a_prefix_this_srun_resolves_outside_the_table_is_still_ambiguous() -> None:
    line = parse(["--ext=1", "prog"], lambda name: ("exterior", srunopts.REQUIRED))
    assert line.passthrough == "option '--ext' is ambiguous"


@pytest.mark.parametrize("argv", [["-n1", "--restart"], ["--restart=", "-n1", "prog"],
                                  ["--restart", "", "prog"]])
def test_restart_without_directory_is_our_error(argv: list[str]) -> None:
    with pytest.raises(UsageError, match="requires a checkpoint directory"):
        parse(argv)


@pytest.mark.parametrize(("argv", "refused"), [
    (["--multi-prog", "conf"], "multi-prog"), (["--bcast", "prog"], "bcast"),
    (["--bcast=/tmp/x", "prog"], "bcast"),
    (["-n2", "--multi-prog", "--bcast", "conf"], "multi-prog"),
])
def test_options_srun_cr_cannot_honour_are_noticed(argv: list[str], refused: str) -> None:
    assert parse(argv).refused == refused


def test_table_is_consistent() -> None:
    assert all(long in srunopts.LONG for long in srunopts.SHORT.values())
    assert all(target in srunopts.LONG for target in srunopts.ALIASES.values())
    assert srunopts.RESTART not in srunopts.LONG
