"""JSON for scrun.lua (`require 'json'`, slurm.to_json/from_json), done by Python's json.

The point is a faithful round trip of an OCI config.json through a script that edits
it. Lua tables cannot tell [] from {}, nor remember key order, so decoded tables carry
metatables in dkjson's convention: `__jsontype` ("array" or "object") and, for objects,
`__jsonorder` (the keys in document order) plus `__jsonkinds` (which keys held an array
or an object, so an emptied replacement such as `config.mounts = {}` keeps its kind).
Unmarked tables encode as Slurm's own slurm.to_json does: keys 1..n (or none) make an
array, anything else an object. Integers stay integers; integers beyond Lua's 64 bits
(uint64 rlimits) become opaque "number" tables that encode back to the same digits.
"""

from __future__ import annotations

import json
import math
from typing import Any

# Deeper than any OCI document; stops a table that contains itself.
MAX_DEPTH = 200

# Lua helpers, compiled once per runtime: marking and inspecting metatables is
# simplest (and respects __metatable) on the Lua side.
HELPERS = r"""
local NULL = setmetatable({}, {__jsontype = "null", __tostring = function() return "null" end})
local ARRAY = {__jsontype = "array"}
local helpers = {null = NULL}
function helpers.array(t) return setmetatable(t, ARRAY) end
function helpers.object(t, order, kinds)
  return setmetatable(t, {__jsontype = "object", __jsonorder = order, __jsonkinds = kinds})
end
function helpers.bignum(digits)
  return setmetatable({}, {__jsontype = "number", __jsonvalue = digits,
                           __tostring = function() return digits end})
end
-- kind, order, kinds, value of a table's JSON metatable (nils when it has none)
function helpers.meta(t)
  local mt = getmetatable(t)
  if type(mt) ~= "table" then return nil, nil, nil, nil end
  return mt.__jsontype, mt.__jsonorder, mt.__jsonkinds, mt.__jsonvalue
end
function helpers.kind(v)
  local t = type(v)
  if t == "number" then return math.type(v) end
  return t
end
return helpers
"""


class JsonError(Exception):
    """What the script asked to encode or decode is not JSON; the message says why."""


def _text(value: bytes) -> str:
    # surrogateescape: bytes that are not UTF-8 survive a round trip unchanged.
    return value.decode("utf-8", "surrogateescape")


class LuaJson:
    """encode/decode bound to one Lua runtime (lupa.lua54.LuaRuntime, encoding=None)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.helpers = runtime.execute(HELPERS)
        self.null = self.helpers.null

    # -- decode ------------------------------------------------------------------------
    def decode(self, text: Any) -> Any:
        if isinstance(text, bytes):
            text = _text(text)
        if not isinstance(text, str):
            raise JsonError("expected a string")
        try:
            document = json.loads(text, object_pairs_hook=_Pairs)
        except (ValueError, RecursionError) as err:
            raise JsonError(str(err)) from None
        return self._to_lua(document)

    def _to_lua(self, value: Any) -> Any:
        if value is None:
            return self.null
        if isinstance(value, str):
            return value.encode("utf-8", "surrogateescape")
        if isinstance(value, bool | float):
            return value
        if isinstance(value, int):
            if -(2**63) <= value < 2**63:
                return value
            return self.helpers.bignum(str(value).encode())
        table = self.runtime.table()
        if not isinstance(value, _Pairs):
            for index, item in enumerate(value, 1):
                table[index] = self._to_lua(item)
            return self.helpers.array(table)
        order, kinds = self.runtime.table(), self.runtime.table()
        for index, (key, item) in enumerate(value, 1):
            name = key.encode("utf-8", "surrogateescape")
            table[name] = self._to_lua(item)
            order[index] = name
            if isinstance(item, _Pairs):
                kinds[name] = b"object"
            elif isinstance(item, list):
                kinds[name] = b"array"
        return self.helpers.object(table, order, kinds)

    # -- encode ------------------------------------------------------------------------
    def encode(self, value: Any) -> bytes:
        document = self._to_python(value, 0, None)
        try:
            text = json.dumps(document, ensure_ascii=False, allow_nan=False,
                              separators=(",", ":"))
        except ValueError as err:
            raise JsonError(str(err)) from None
        return text.encode("utf-8", "surrogateescape")

    def _to_python(self, value: Any, depth: int, hint: bytes | None) -> Any:
        kind = self.helpers.kind(value)
        if kind == b"nil":
            return None
        if kind in (b"boolean", b"integer"):
            return value
        if kind == b"float":
            if not math.isfinite(value):
                raise JsonError(f"cannot encode {value} (JSON has no NaN or infinity)")
            # 1000.0 from Lua arithmetic is the integer 1000 to a JSON reader such as
            # runc's, which rejects "1000.0" for an integer field (lua-cjson agrees).
            return int(value) if value.is_integer() and abs(value) < 2**63 else value
        if kind == b"string":
            return _text(value)
        if kind != b"table":
            raise JsonError(f"cannot encode a {kind.decode()}")
        if depth > MAX_DEPTH:
            raise JsonError("tables nested too deeply (a table containing itself?)")
        jsontype, order, kinds, number = self.helpers.meta(value)
        if jsontype == b"null":
            return None
        if jsontype == b"number":
            return int(number)
        items = list(value.items())
        if jsontype == b"object":
            return self._object(items, order, kinds, depth)
        keys = [key for key, _ in items]
        integer_keys = all(self.helpers.kind(key) == b"integer" for key in keys)
        if jsontype == b"array":
            if not integer_keys or (keys and min(keys) < 1):
                raise JsonError("an array (decoded from JSON) has non-index keys")
            length = max(keys, default=0)
            if length > 2 * len(keys) + 16:
                raise JsonError("an array is too sparse to encode")
            by_index = dict(items)
            return [self._to_python(by_index.get(i), depth + 1, None) for i in range(1, length + 1)]
        if not items and hint is not None:
            # An empty table replacing a decoded value keeps that value's kind.
            return [] if hint == b"array" else {}
        if integer_keys and sorted(keys) == list(range(1, len(keys) + 1)):
            by_index = dict(items)
            return [self._to_python(by_index[i], depth + 1, None) for i in range(1, len(keys) + 1)]
        return self._object(items, None, None, depth)

    def _object(self, items: list[tuple[Any, Any]], order: Any, kinds: Any,
                depth: int) -> dict[str, Any]:
        values = {self._key(key): (key, item) for key, item in items}
        names = list(values)
        if order is not None:
            # Keys in document order first; keys the script added after them, sorted.
            original = [_text(name) for _, name in order.items() if isinstance(name, bytes)]
            known = [name for name in original if name in values]
            names = known + sorted(set(names) - set(known))
        result: dict[str, Any] = {}
        for name in names:
            key, item = values[name]
            hint = kinds[key] if kinds is not None and isinstance(key, bytes) else None
            result[name] = self._to_python(item, depth + 1, hint)
        return result

    def _key(self, key: Any) -> str:
        kind = self.helpers.kind(key)
        if kind == b"string":
            return _text(key)
        if kind == b"integer":
            return str(key)
        if kind == b"float":
            return str(int(key)) if key.is_integer() else repr(key)
        raise JsonError(f"cannot use a {kind.decode()} as an object key")


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as decoded: its pairs in document order (duplicates: last wins)."""

