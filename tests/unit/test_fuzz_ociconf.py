"""The oci.conf parser under fuzz: any text gives a configuration or a ConfigError (one
line a user can act on), never another exception; what is written is read back."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyscrun.conf import keyvalue, ociconf
from pyscrun.errors import ConfigError, ScrunError

FUZZ = settings(max_examples=400, deadline=None, database=None)
# str.splitlines() ends a line at each of these: a value cannot hold them.
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"

keys = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,20}", fullmatch=True)
values = st.text(st.characters(blacklist_characters=_LINE_BREAKS, blacklist_categories=("Cs",)),
                 max_size=40)
directive_names = st.sampled_from(sorted(d.name for d in ociconf.DIRECTIVES.values()))


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@FUZZ
@given(st.text(max_size=300))
def test_any_text_parses_or_is_refused_cleanly(text: str) -> None:
    try:
        pairs = keyvalue.parse(text, "fuzz.conf")
    except ConfigError as err:
        assert str(err).startswith("fuzz.conf:")
        assert "\n" not in str(err)
        return
    for key, _value, where in pairs:
        assert key and "=" not in key and not any(c.isspace() for c in key)
        source, _, line = where.rpartition(":")
        assert source == "fuzz.conf" and 1 <= int(line) <= len(text.splitlines())


@FUZZ
@given(st.lists(st.tuples(keys, values), max_size=8), st.booleans())
def test_written_pairs_are_read_back(pairs: list[tuple[str, str]], one_line: bool) -> None:
    """Key="value" with backslash escapes, on separate lines or sharing one, with
    comments: exactly the pairs come back."""
    separator = " " if one_line else "  # a comment\n"
    text = separator.join(f"{key}={_quoted(value)}" for key, value in pairs)
    assert [(k, v) for k, v, _ in keyvalue.parse(text, "fuzz.conf")] == pairs


@FUZZ
@given(st.lists(st.tuples(directive_names, values, st.sampled_from(["lower", "upper", "same"])),
                max_size=10))
def test_any_directive_values_give_a_conf_or_a_clean_error(
        entries: list[tuple[str, str, str]]) -> None:
    text = "".join(f"{_spelled(name, case)}={_quoted(value)}\n" for name, value, case in entries)
    _parse_cleanly(text)


def _spelled(name: str, case: str) -> str:
    """Keys are case-insensitive."""
    return name.lower() if case == "lower" else name.upper() if case == "upper" else name


@FUZZ
@given(st.lists(st.sampled_from(sorted(ociconf.RUNTIME_DIRECTIVES)), min_size=1, max_size=6),
       values)
def test_runtime_directives_of_any_text(names: list[str], pattern: str) -> None:
    text = "".join(f"{name}={_quoted(pattern)}\n" for name in names)
    conf = _parse_cleanly(text)
    if conf is not None:
        for name in names:
            assert getattr(conf, name) == pattern


def _parse_cleanly(text: str) -> ociconf.OciConf | None:
    try:
        conf = ociconf.parse(text, "oci.conf")
    except ScrunError as err:
        assert "\n" not in str(err)
        assert str(err).startswith("oci.conf")
        return None
    assert conf.run_mode == bool(conf.RunTimeRun)
    return conf


@pytest.mark.parametrize("regex", [r"a{1,3}", r"^SLURM_", r"(x|y)+"])
def test_env_exclude_regexes_compile(regex: str) -> None:
    conf = ociconf.parse(f"EnvExclude={_quoted(regex)}\nRunTimeRun=r\nRunTimeKill=k\n"
                         f"RunTimeDelete=d\n", "oci.conf")
    assert conf.EnvExclude == re.compile(regex, re.DOTALL)


@pytest.mark.parametrize("regex", ["a{99999999999999999999}", "(" * 1000 + ")" * 1000])
def test_regexes_re_cannot_compile_are_config_errors(regex: str) -> None:
    with pytest.raises(ConfigError, match="invalid regular expression"):
        ociconf.parse(f"EnvExclude={_quoted(regex)}\nRunTimeRun=r\nRunTimeKill=k\n"
                      f"RunTimeDelete=d\n", "oci.conf")
