"""The %-pattern expander under fuzz: what the shell makes of an expanded command is
exactly the values, whatever they hold (spaces, quotes, `$(...)`, backticks, newlines):
never an unquoted substitution. shlex.split stands in for /bin/sh's word splitting."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyscrun.conf import patterns
from pyscrun.errors import ConfigError

FUZZ = settings(max_examples=400, deadline=None, database=None)

# Any text a path, user name or argument may hold (NUL cannot reach an argv).
anything = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
                   max_size=30)
hostile = st.one_of(anything, st.sampled_from([
    "", " ", "'", '"', "\\", "$(touch /tmp/x)", "`touch /tmp/x`", "a b\tc\nd", "';touch x;'",
    '"; touch x; "', "$HOME", "*", "~", "-rf", "%b", "%%", "\\'", "'\\''",
]))
letters = st.sampled_from(sorted(patterns.PATTERNS))
# Literal words of a command as an administrator writes them: no quoting of their own.
plain_words = st.from_regex(r"[A-Za-z0-9_./=:,+-]{1,12}", fullmatch=True)


@st.composite
def values(draw: st.DrawFn) -> patterns.PatternValues:
    fields = {name: draw(hostile) for name in patterns.PATTERNS.values()}
    return patterns.PatternValues(args=draw(st.lists(hostile, max_size=5)), **fields)


Word = tuple[str, str | None, str]  # text before, pattern letter (None: none), text after


@st.composite
def commands(draw: st.DrawFn) -> tuple[str, list[Word]]:
    """A command of words, each a pattern, a plain word or a pattern glued to plain
    text, as an administrator writes them; and the words it is made of."""
    words: list[Word] = draw(st.lists(st.one_of(
        letters.map(lambda letter: ("", letter, "")),
        plain_words.map(lambda word: (word, None, "")),
        st.tuples(plain_words, letters, plain_words),
        st.just(("", "@", "")),
        st.just(("100", "%", "")),
    ), min_size=1, max_size=8))
    pattern = " ".join(f"{pre}%{letter}{post}" if letter else pre for pre, letter, post in words)
    return pattern, words


def _expected(words: list[Word], given: patterns.PatternValues) -> list[str]:
    out: list[str] = []
    for pre, letter, post in words:
        if letter is None:
            out.append(pre)
        elif letter == "@":
            out.extend(given.args)
        elif letter == "%":
            out.append(f"{pre}%{post}")
        else:
            out.append(f"{pre}{getattr(given, patterns.PATTERNS[letter])}{post}")
    return out


@FUZZ
@given(commands(), values())
def test_the_shell_sees_exactly_the_values(command: tuple[str, list[Word]],
                                           given: patterns.PatternValues) -> None:
    pattern, words = command
    patterns.check(pattern, "fuzz")
    assert shlex.split(patterns.expand(pattern, given)) == _expected(words, given)


@FUZZ
@given(st.text(max_size=60), values())
def test_any_pattern_is_checked_or_refused_and_then_expands(
        pattern: str, given: patterns.PatternValues) -> None:
    """check() accepts exactly what expand() can expand: no other exception either way."""
    try:
        patterns.check(pattern, "oci.conf:1")
    except ConfigError as err:
        assert str(err).startswith("oci.conf:1: ")
        with pytest.raises(ConfigError):
            patterns.expand(pattern, given)
        return
    expanded = patterns.expand(pattern, given)
    assert isinstance(expanded, str)


@FUZZ
@given(values())
def test_values_never_leak_unquoted_into_plain_text(given: patterns.PatternValues) -> None:
    """With every pattern in one command, the words between them stay the words."""
    pattern = " ".join(f"w{i} %{letter}" for i, letter in enumerate(sorted(patterns.PATTERNS)))
    words = shlex.split(patterns.expand(f"{pattern} %@ end", given))
    expected = []
    for i, letter in enumerate(sorted(patterns.PATTERNS)):
        expected += [f"w{i}", getattr(given, patterns.PATTERNS[letter])]
    assert words == [*expected, *given.args, "end"]


@pytest.mark.parametrize("pattern", ["runc run -b '%b' x", 'runc run -b "%b" x'])
def test_a_pattern_quoted_by_the_administrator_stays_one_word(pattern: str) -> None:
    given = patterns.PatternValues(bundle="/b $(touch /tmp/x) `id` 'q\"", step_id="0",
                                   args=["a $(id)", "b"])
    words = shlex.split(patterns.expand(pattern, given))
    assert words == ["runc", "run", "-b", given.bundle, "x"]


def test_a_backslash_before_a_pattern_is_refused() -> None:
    with pytest.raises(ConfigError, match="backslash before %b"):
        patterns.check("runc run -b \\%b x", "oci.conf:1")


# Values that run a command if the shell ever parses them.
RUNNING = ["/b $(touch made-by-dollar) x", "`touch made-by-backquote`", "a'b\"c $(touch m1)",
           "'; touch m2; '", '"; touch m3; "', "$(touch m4)'", "\\$(touch m5)"]
IN_SUBSTITUTIONS = [
    '''printf '%%s' "$(printf '%%s' %b)"''',
    '''printf '%%s' "$(printf '%%s' "%b")"''',
    '''printf '%%s' "$(printf '%%s' '%b')"''',
    '''printf '%%s' "<$(printf '%%s' "[$(printf '%%s' %b)]")>"''',
    '''printf '%%s' "$( (printf '%%s' "%b") )"''',
    '''printf '%%s' "$(printf '%%s' "$(printf ')')" >/dev/null; printf '%%s' %b)"''',
]


@pytest.mark.parametrize("pattern", IN_SUBSTITUTIONS)
def test_a_command_substitution_quotes_afresh(pattern: str, tmp_path: Path) -> None:
    """Inside "$(...)" the shell parses a new command with quotes of its own: a value
    there reaches printf as text, and nothing it holds runs."""
    patterns.check(pattern, "oci.conf:1")
    for value in RUNNING:
        command = patterns.expand(pattern, patterns.PatternValues(bundle=value))
        done = subprocess.run(["/bin/sh", "-c", command], cwd=tmp_path, capture_output=True,
                              text=True, check=True)
        text = done.stdout.removeprefix("<[").removesuffix("]>")
        assert text == value, command
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("pattern", ["run `echo %b`", 'run "`echo %b`"', 'run "${X:-%b}"',
                                     "run ${X:+%j}", "run $(echo `echo %b`)"])
def test_a_pattern_where_no_quoting_holds_is_refused(pattern: str) -> None:
    with pytest.raises(ConfigError, match="inside backquotes or"):
        patterns.check(pattern, "oci.conf:1")
    with pytest.raises(ConfigError, match="inside backquotes or"):
        patterns.expand(pattern, patterns.PatternValues(bundle="b"))


@pytest.mark.parametrize("pattern", ["run `date` %b", "run ${X:-x} %b", "run $(echo ')') %b"])
def test_a_pattern_after_a_closed_substitution_is_quoted_plainly(pattern: str) -> None:
    command = patterns.expand(pattern, patterns.PatternValues(bundle="a b"))
    assert command.endswith(" 'a b'")


@FUZZ
@given(hostile)
def test_a_value_is_quoted_as_shlex_quotes_it(value: str) -> None:
    """The expander's own quoting (shlex's would cost each agent its `re`) is shlex's."""
    assert patterns.shell_quote(value) == shlex.quote(value)
