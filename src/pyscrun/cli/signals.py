"""Signal names and numbers as `kill` accepts them: TERM, SIGTERM, 15, and 0 (runc's
liveness check) as a number only.

Names come from `_signal`, the C module behind `signal`: `signal` builds its enums on
import, which costs every `scrun kill` milliseconds.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # no stub: the C module behind `signal`

from pyscrun.digits import only_digits
from pyscrun.errors import ScrunError


def parse_signal(text: str | None) -> int:
    if not text:
        return int(_signal.SIGTERM)
    if only_digits(text):
        number = int(text)
        if number < int(_signal.NSIG):
            return number
        raise ScrunError(f"invalid signal number {text}")
    name = text.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    # SIG_DFL, SIG_IGN, SIG_BLOCK... are not signals.
    found: object = getattr(_signal, name, None) if not name.startswith("SIG_") else None
    if not isinstance(found, int):
        raise ScrunError(f'unknown signal "{text}"')  # runc's words
    return found
