"""The SCRUN_* mapping under fuzz: any environment and config.json env give options or a
UsageError; each option becomes exactly one argv entry holding the value verbatim (the
switch wait after its count, in --switches=count@max-time), so no value is ever split or
read by a shell."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyscrun.conf import scrun_env
from pyscrun.errors import UsageError

FUZZ = settings(max_examples=400, deadline=None, database=None)

names = st.one_of(st.sampled_from(sorted(scrun_env.JOB_OPTIONS)),
                  st.just("SLURM_CORE_SPEC"), st.just("SCRUN_CORE_SPEC"),
                  st.sampled_from(["PATH", "HOME", "SLURM_JOB_ID", "SCRUN_NOPE", "scrun_partition"]),
                  st.text(max_size=10))
hostile = st.one_of(st.text(max_size=30), st.sampled_from([
    "", "yes", "no", "TRUE", "0", "$(touch /tmp/x)", "`id`", "a b", "--partition=x", "-x",
    "x;y", "'", '"', "a\nb", "a\0b", "=", "debug,other", "user", "MCS", "topo", "exclusive",
    "2", "-1", " +3", "on", "true", "1x",
]))


@FUZZ
@given(st.dictionaries(names, hostile, max_size=8),
       st.lists(st.one_of(st.tuples(names, hostile).map("=".join), hostile), max_size=8))
def test_any_environment_gives_options_or_a_usage_error(environ: dict[str, str],
                                                        config_env: list[str]) -> None:
    try:
        options = scrun_env.job_options(environ, config_env)
    except UsageError as err:
        assert "\n" not in str(err)
        return
    def canonical(given: dict[str, str]) -> dict[str, str]:
        # SLURM_CORE_SPEC stands for SCRUN_CORE_SPEC, which wins if both are given.
        named = {scrun_env.JOB_OPTIONS[k].variable: v for k, v in given.items()
                 if k in scrun_env.JOB_OPTIONS}
        if "SCRUN_CORE_SPEC" in given:
            named["SCRUN_CORE_SPEC"] = given["SCRUN_CORE_SPEC"]
        return named

    from_config = {}
    for entry in config_env:
        key, _, value = entry.partition("=")
        from_config[key] = value  # the last entry of a key wins
    # config.json wins over the environment.
    expected = {**canonical(environ), **canonical(from_config)}
    assert options == expected
    assert "SLURM_CORE_SPEC" not in options
    for value in options.values():
        assert "\n" not in value and "\0" not in value

    alloc = scrun_env.arguments(options, scrun_env.ALLOC)
    step = scrun_env.arguments(options, scrun_env.STEP)
    wanted = []
    for key, value in options.items():
        option = scrun_env.JOB_OPTIONS[key]
        if key == "SCRUN_WAIT4SWITCH":
            continue  # part of --switches below; alone, no option
        if key == "SCRUN_REQ_SWITCH" and "SCRUN_WAIT4SWITCH" in options:
            assert "@" not in value
            value += "@" + options["SCRUN_WAIT4SWITCH"]
        # What Slurm hands from the job to its steps goes to both.
        times = 2 if option.applies_to == scrun_env.BOTH else 1
        if option.kind == scrun_env.VALUE:
            wanted += [f"{option.option}={value}"] * times
        elif option.kind == scrun_env.FLAG:
            if scrun_env.flag_is_set(value):
                wanted += [option.option] * times
        elif value and option.values:
            assert value.lower() in option.values
            wanted += [f"{option.option}={value.lower()}"] * times
        else:
            wanted += [option.option] * times
    assert sorted(alloc + step) == sorted(wanted)
    for arg in alloc + step:
        assert arg.startswith("--")


@FUZZ
@given(hostile)
def test_a_value_is_one_argument_verbatim(value: str) -> None:
    try:
        options = scrun_env.job_options({"SCRUN_JOB_NAME": value, "SCRUN_CPU_BIND": value}, [])
    except UsageError:
        assert "\n" in value or "\0" in value
        return
    assert scrun_env.arguments(options, scrun_env.ALLOC) == [f"--job-name={value}"]
    assert scrun_env.arguments(options, scrun_env.STEP) == [f"--cpu-bind={value}"]


def arguments(variable: str, value: str) -> list[str]:
    options = scrun_env.job_options({variable: value}, [])
    return (scrun_env.arguments(options, scrun_env.ALLOC)
            + scrun_env.arguments(options, scrun_env.STEP))


def test_flags_are_set_or_unset_as_slurm_reads_them() -> None:
    # slurm_process_option: "", "yes" or a whole number other than 0 (strtol's) sets a
    # flag; anything else unsets it, with no error.
    for value in ("", "yes", "YeS", "1", "2", "-1", " +7", "\t007", "99999999999999999999999"):
        assert arguments("SCRUN_USE_MIN_NODES", value) == ["--use-min-nodes"], value
        assert arguments("SCRUN_LABELIO", value) == ["--label"], value
    for value in ("no", "0", "-0", "000", "true", "y", "t", "on", "1x", "5 ", "0x1", "+", "\u0661"):
        assert arguments("SCRUN_USE_MIN_NODES", value) == [], value
        assert arguments("SCRUN_LABELIO", value) == [], value
    # The caller's setting is unset by config.json's.
    options = scrun_env.job_options({"SCRUN_SPREAD_JOB": "1"}, ["SCRUN_SPREAD_JOB=true"])
    assert scrun_env.arguments(options, scrun_env.ALLOC) == []


def test_overlap_ignores_its_value_as_slurm_does() -> None:
    for value in ("", "no", "0", "force"):
        assert arguments("SCRUN_OVERLAP", value) == ["--overlap"]


def test_exclusive_takes_salloc_s_values_and_nothing_else() -> None:
    assert arguments("SCRUN_EXCLUSIVE", "") == ["--exclusive"]
    assert arguments("SCRUN_EXCLUSIVE", "Exclusive") == ["--exclusive=exclusive"]
    assert arguments("SCRUN_EXCLUSIVE", "User") == ["--exclusive=user"]
    assert arguments("SCRUN_EXCLUSIVE", "mcs") == ["--exclusive=mcs"]
    assert arguments("SCRUN_EXCLUSIVE", "oversubscribe") == ["--exclusive=oversubscribe"]
    assert arguments("SCRUN_EXCLUSIVE", "topo") == ["--exclusive=topo"]
    for value in ("yes", "1", "no", "0", "nodes"):
        with pytest.raises(UsageError) as raised:
            arguments("SCRUN_EXCLUSIVE", value)
        assert str(raised.value) == ("SCRUN_EXCLUSIVE: expected nothing, exclusive, "
                                     f"oversubscribe, user, mcs or topo, found {value!r}")


def test_core_spec_in_either_spelling_is_one_option() -> None:
    both = scrun_env.job_options({"SLURM_CORE_SPEC": "1", "SCRUN_CORE_SPEC": "2"}, [])
    assert scrun_env.arguments(both, scrun_env.ALLOC) == ["--core-spec=2"]
    alias = scrun_env.job_options({"SCRUN_CORE_SPEC": "2"}, ["SLURM_CORE_SPEC=3"])
    assert scrun_env.arguments(alias, scrun_env.ALLOC) == ["--core-spec=3"]


def test_a_misspelt_option_in_the_containers_environment_is_logged_not_refused(
        logged: io.StringIO) -> None:
    options = scrun_env.job_options({}, ["SCRUN_TIME=5", "SCRUN_TIMELIMIT=7", "PATH=/bin"])
    assert options == {"SCRUN_TIMELIMIT": "7"}
    lines = logged.getvalue().splitlines()
    assert lines == [
        "t: info: SCRUN_TIME in the container's environment is not a job option (scrun(1) "
        "lists them): only the container sees it"], lines
