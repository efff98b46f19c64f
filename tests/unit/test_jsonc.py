"""The CLI's JSON codec: what `json` would read and write, minus its import cost."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pyscrun import jsonc


@pytest.mark.parametrize("text", [
    '{"a": [1, 2.5, -3e2, true, false, null], "b": {"c": "\\u00e9\\n"}}',
    "  []  ", '"x"', "0", '{"": {}}',
])
def test_reads_what_json_reads(text: str) -> None:
    assert jsonc.loads(text) == json.loads(text)
    assert jsonc.loads(text.encode()) == json.loads(text)


@pytest.mark.parametrize(("text", "message"), [
    ("", "Expecting value: line 1 column 1 (char 0)"),
    ("{not json", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ('{"a":\n [1,', "Expecting value: line 2 column 5 (char 10)"),
    ('{"a": 1} x', "extra data after JSON at character 9"),
    ('{"a": NaN}', "NaN is not valid JSON"),
    ("[Infinity]", "Infinity is not valid JSON"),
])
def test_refuses_what_is_not_strict_json_saying_where(text: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        jsonc.loads(text)
    assert str(raised.value) == message


def _fresh_interpreter(code: str) -> str:
    """What code prints in an interpreter that has imported nothing of ours yet."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout


def test_errors_are_right_before_json_was_ever_imported() -> None:
    # The C scanner cannot build its error without json.decoder loaded.
    assert _fresh_interpreter(
        "from pyscrun import jsonc\n"
        "try:\n    jsonc.loads('[1, }')\nexcept ValueError as err:\n    print(err)",
    ) == "Expecting value: line 1 column 5 (char 4)\n"


def test_writes_compact_utf8_json_that_reads_back() -> None:
    value = {"args": ["é", "a\"b", "\0"], "n": [1, 2.5, None, True]}
    text = jsonc.dumps(value)
    assert text == '{"args":["é","a\\"b","\\u0000"],"n":[1,2.5,null,true]}'
    assert json.loads(text) == value


def test_reading_needs_no_json_module() -> None:
    assert _fresh_interpreter(
        "import sys\nfrom pyscrun import jsonc\njsonc.loads('{\"a\": [1]}')\n"
        "print(sorted(m for m in sys.modules if m == 'json' or m.startswith(('json.', 're'))))",
    ) == "[]\n"
