"""The SCRUN_* mapping under fuzz: any environment and config.json env give options or a
UsageError; each option becomes exactly one argv entry holding the value verbatim (the
switch wait after its count, in --switches=count@max-time), so no value is ever split or
read by a shell."""

from __future__ import annotations

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
    "x;y", "'", '"', "a\nb", "a\0b", "=", "debug,other", "user", "MCS", "topo",
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
        if not option.is_flag:
            wanted += [f"{option.option}={value}"] * times
        elif value.lower() in ("", "1", "yes", "true", "y", "t"):
            wanted += [option.option] * times
        elif value.lower() in option.values:
            wanted += [f"{option.option}={value.lower()}"] * times
        else:
            assert value.lower() in ("0", "no", "false", "n", "f")
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


def test_exclusive_takes_salloc_s_named_values_as_well_as_yes_and_no() -> None:
    def alloc(value: str) -> list[str]:
        options = scrun_env.job_options({"SCRUN_EXCLUSIVE": value}, [])
        return scrun_env.arguments(options, scrun_env.ALLOC)

    assert alloc("yes") == ["--exclusive"]
    assert alloc("no") == []
    assert alloc("User") == ["--exclusive=user"]
    assert alloc("mcs") == ["--exclusive=mcs"]
    assert alloc("oversubscribe") == ["--exclusive=oversubscribe"]
    with pytest.raises(UsageError, match="SCRUN_EXCLUSIVE: expected yes, user, mcs, "
                                         "oversubscribe, topo or no, found 'nodes'"):
        alloc("nodes")


def test_core_spec_in_either_spelling_is_one_option() -> None:
    both = scrun_env.job_options({"SLURM_CORE_SPEC": "1", "SCRUN_CORE_SPEC": "2"}, [])
    assert scrun_env.arguments(both, scrun_env.ALLOC) == ["--core-spec=2"]
    alias = scrun_env.job_options({"SCRUN_CORE_SPEC": "2"}, ["SLURM_CORE_SPEC=3"])
    assert scrun_env.arguments(alias, scrun_env.ALLOC) == ["--core-spec=3"]
