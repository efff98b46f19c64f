"""Signal names and numbers as `kill` accepts them: TERM, SIGTERM, 15."""

from __future__ import annotations

import signal

from pyscrun.errors import UsageError


def parse_signal(text: str | None) -> int:
    if not text:
        return int(signal.SIGTERM)
    if text.isdigit():
        number = int(text)
        if 0 < number < signal.NSIG:
            return number
        raise UsageError(f"invalid signal number {text}")
    name = text.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise UsageError(f"unknown signal {text!r}") from None
