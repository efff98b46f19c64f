"""slurm.time_str2mins gives what Slurm's time_str2mins (parse_time.c) gives.

Expected values were produced by compiling Slurm's own time_str2secs/time_str2mins;
note that seconds round up (2:03:04 is 124 minutes, not 123).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pyscrun.hooks import lua
from pyscrun.hooks.timestr import INFINITE, NO_VAL, time_str2mins

SLURM_RESULTS = [
    # Every format of the man page.
    ("1-2:03:04", 1564),  # days-hours:minutes:seconds
    ("1-2:03", 1563),  # days-hours:minutes
    ("1-2", 1560),  # days-hours
    ("1-0", 1440),
    ("1-", 1440),
    ("2:03:04", 124),  # hours:minutes:seconds
    ("2:03:00", 123),
    ("90", 90),  # minutes
    ("90:30", 91),  # minutes:seconds
    ("90:00", 90),
    ("0:1", 1),
    ("0", 0),
    ("-1", INFINITE),
    ("INFINITE", INFINITE),
    ("infinite", INFINITE),
    ("UNLIMITED", INFINITE),
    ("Unlimited", INFINITE),
    # Slurm's quirks, kept: a leading '-' is a negative day count, rounding toward zero.
    ("-2", -2879),
    ("-0", 0),
    ("0:-1", NO_VAL),
    # Not times.
    ("", NO_VAL),
    ("1.5", NO_VAL),
    ("1h", NO_VAL),
    (" 1", NO_VAL),
    ("1:2:3:4", NO_VAL),
    ("1-2-3", NO_VAL),
    ("1-2:", NO_VAL),  # too few numbers for its separators
    ("1-2:3", 1563),
    (":", NO_VAL),
]


@pytest.mark.parametrize(("text", "minutes"), SLURM_RESULTS)
def test_python_side_matches_slurm(text: str, minutes: int) -> None:
    assert time_str2mins(text) == minutes


def test_sentinels_are_slurms_seen_as_a_c_int() -> None:
    assert (INFINITE, NO_VAL) == (-1, -2)  # 0xffffffff, 0xfffffffe
    assert time_str2mins(None) == NO_VAL


def test_from_lua(tmp_path: Path) -> None:
    script = tmp_path / "scrun.lua"
    script.write_text("function slurm_scrun_stage_in() end\nfunction slurm_scrun_stage_out() end\n")
    hooks = lua.load(script, lambda s: (0, ""), "/b", "/r")
    assert hooks is not None
    for text, minutes in SLURM_RESULTS:
        code = "local m = slurm.time_str2mins(...) return m, math.type(m)"
        assert hooks.runtime.execute(code, text.encode()) == (minutes, b"integer")
    # As lua_tostring gives Slurm: a number is read as its text, nothing as no time.
    assert hooks.runtime.execute("return slurm.time_str2mins(90)") == 90
    assert hooks.runtime.execute("return slurm.time_str2mins(1.5)") == NO_VAL
    assert hooks.runtime.execute("return slurm.time_str2mins()") == NO_VAL
