"""EnvExclude and RunTimeEnvExclude are POSIX extended regular expressions, as Slurm's
regcomp reads them: character classes and a backslash inside brackets included."""

from __future__ import annotations

import re

import pytest

from pyscrun.conf import ociconf
from pyscrun.conf.ere import CLASSES, compile_ere
from pyscrun.errors import ConfigError
from pyscrun.node import rewrite


@pytest.mark.parametrize(("ere", "matching", "other"), [
    ("^SECRET[[:digit:]]+=", ["SECRET1=x", "SECRET42=y"], ["SECRET=x", "SECRETA1=x"]),
    ("^[[:upper:]_]+_TOKEN=", ["MY_TOKEN=1"], ["my_TOKEN=1"]),
    ("^[^[:alnum:]]", ["_X=1", "-A=2"], ["X=1", "9=2"]),
    ("^A[\\.]B=", ["A.B=1", "A\\B=1"], ["AxB=1"]),
    ("^[]x]=", ["]=1", "x=2"], ["y=3"]),
    ("^K=[[:space:]]", ["K= v", "K=\tv"], ["K=v"]),
    ("^(FOO|BAR)=", ["FOO=1", "BAR=2"], ["BAZ=3"]),
    # A value with newlines (an exported shell function's): `.` matches them, `$` is
    # the end of the whole text only.
    ("^BASH_FUNC_.*}$", ["BASH_FUNC_f%%=() {  echo a\n}"], ["BASH_FUNC_f%%=() { x\n}\n"]),
    ("^X=.*$", ["X=a\nb"], ["Y=a\nb"]),
    ("=bar$", ["FOO=bar"], ["FOO=bar\n"]),
])
def test_posix_classes_and_brackets_match_as_regcomp(ere: str, matching: list[str],
                                                     other: list[str]) -> None:
    pattern = compile_ere(ere)
    assert [entry for entry in matching + other if pattern.search(entry)] == matching


def test_every_class_matches_what_the_c_locale_puts_in_it() -> None:
    ascii_chars = [chr(code) for code in range(128)]
    expected = {"alnum": str.isalnum, "alpha": str.isalpha, "digit": str.isdigit,
                "lower": str.islower, "upper": str.isupper, "space": lambda c: c in " \t\n\r\f\v",
                "print": str.isprintable, "xdigit": lambda c: c in "0123456789abcdefABCDEF",
                "blank": lambda c: c in " \t", "cntrl": lambda c: ord(c) < 32 or ord(c) == 127,
                "graph": lambda c: 32 < ord(c) < 127,
                "punct": lambda c: 32 < ord(c) < 127 and not c.isalnum()}
    for name in CLASSES:
        pattern = compile_ere(f"^[[:{name}:]]$")
        assert [c for c in ascii_chars if pattern.match(c)] == \
            [c for c in ascii_chars if expected[name](c)], name


def test_env_exclude_drops_variables_by_a_posix_class() -> None:
    conf = ociconf.parse("RunTimeRun=r\nRunTimeKill=k\nRunTimeDelete=d\n"
                         'EnvExclude="^SECRET_[[:alnum:]]+="\n', "oci.conf")
    kept = rewrite.exclude_env(["SECRET_A1=x", "SECRET_=y", "HOME=/root"], conf.EnvExclude)
    assert kept == ["SECRET_=y", "HOME=/root"]


@pytest.mark.parametrize("ere", ["[[:nope:]]", "[abc", "(x", "(?i)x"])
def test_an_invalid_expression_is_a_config_error(ere: str) -> None:
    with pytest.raises(ConfigError, match="invalid regular expression"):
        ociconf.parse(f'RunTimeRun=r\nRunTimeKill=k\nRunTimeDelete=d\nEnvExclude="{ere}"\n',
                      "oci.conf")
    with pytest.raises(re.error):
        compile_ere(ere)
