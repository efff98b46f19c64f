"""JSON on the CLI's hot path through CPython's own C codec (`_json`).

`import json` pulls in `re` and `enum`: about 10 ms on every start of scrun, which
podman starts several times per container. The C scanner and encoder that `json` itself
uses need neither. Where `_json` is missing, `json` does the work.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any


def _no_default(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


class _Context:
    """The settings the C scanner reads, as json.JSONDecoder would give them."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_no_constant)
    memo: dict[str, str] = {}  # noqa: RUF012 - the C scanner keeps its own


_scan: Callable[[str, int], tuple[Any, int]] | None = None
_encode: Callable[[Any, int], Iterable[str]] | None = None
try:
    import _json

    # The C scanner reads its settings from any object that has json.JSONDecoder's.
    _scan = _json.make_scanner(_Context())  # type: ignore[arg-type]
    _encode = _json.make_encoder(None, _no_default, _json.encode_basestring, None, ":", ",",
                                 False, False, True)
except (ImportError, AttributeError):
    pass


def loads(data: bytes | str) -> Any:
    """The value in data; ValueError (or RecursionError) if it is not one JSON value."""
    text = (data.decode() if isinstance(data, bytes) else data).strip()
    if _scan is None:
        import json

        return json.loads(text)
    try:
        value, end = _scan(text, 0)
    except (StopIteration, SystemError):
        # The C scanner builds its error with json.decoder, which is not loaded then
        # (SystemError): `json` says what is wrong and where (line and column).
        import json

        return json.loads(text)
    if end != len(text):
        start = len(text) - len(text[end:].lstrip())
        raise ValueError(f"extra data after JSON at character {start}")
    return value


def dumps(value: Any) -> str:
    """Compact JSON, non-ASCII kept as UTF-8."""
    if _encode is None:
        import json

        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return "".join(_encode(value, 0))
