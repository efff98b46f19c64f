"""config.json's shape, as runc reads it: the type of every field a runtime unmarshals,
in one table, so that a bundle runc would refuse at create is refused at create here
too, in one line, rather than by the node's runtime at start.

Only types are checked here (and the ranges of runc's unsigned fields); what the values
mean is for bundle.py and refusals.py. A null counts as absent, as Go's decoder reads it."""

from __future__ import annotations

from pyscrun.errors import BundleError

# typing costs milliseconds at every start of the CLI: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Whole:
    """An integer, not a boolean, from low to high."""

    __slots__ = ("high", "low")

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high


class MapOf:
    """An object whose every value has one shape."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


U32 = Whole(0, 2**32 - 1)
U64 = Whole(0, 2**64 - 1)
I64 = Whole(-(2**63), 2**63 - 1)
INT = Whole(-(2**31), 2**31 - 1)

_HOOK = {"path": str, "args": [str], "env": [str], "timeout": INT}
_ID_MAPPING = {"containerID": U32, "hostID": U32, "size": U32}
_CAPABILITIES = {kind: [str] for kind in
                 ("bounding", "effective", "inheritable", "permitted", "ambient")}

# The fields of the runtime spec that runc's create reads, by their JSON names. A dict
# is an object with those fields (others are let through, as runc lets them), a list of
# one shape a list of such items.
CONFIG: dict[str, Any] = {
    "ociVersion": str,
    "process": {
        "terminal": bool,
        "consoleSize": {"height": Whole(0, 65535), "width": Whole(0, 65535)},
        "user": {"uid": U32, "gid": U32, "umask": U32, "additionalGids": [U32],
                 "username": str},
        "args": [str],
        "commandLine": str,
        "env": [str],
        "cwd": str,
        "capabilities": _CAPABILITIES,
        "rlimits": [{"type": str, "hard": U64, "soft": U64}],
        "noNewPrivileges": bool,
        "apparmorProfile": str,
        "oomScoreAdj": INT,
        "selinuxLabel": str,
    },
    "root": {"path": str, "readonly": bool},
    "hostname": str,
    "domainname": str,
    "mounts": [{"destination": str, "source": str, "type": str, "options": [str],
                "uidMappings": [_ID_MAPPING], "gidMappings": [_ID_MAPPING]}],
    "hooks": {phase: [_HOOK] for phase in ("prestart", "createRuntime", "createContainer",
                                           "startContainer", "poststart", "poststop")},
    "annotations": MapOf(str),
    "linux": {
        "namespaces": [{"type": str, "path": str}],
        "uidMappings": [_ID_MAPPING],
        "gidMappings": [_ID_MAPPING],
        "sysctl": MapOf(str),
        "resources": {
            "devices": [{"allow": bool, "type": str, "major": I64, "minor": I64,
                         "access": str}],
            "memory": {"limit": I64, "reservation": I64, "swap": I64, "kernel": I64,
                       "kernelTCP": I64, "swappiness": U64, "disableOOMKiller": bool},
            "cpu": {"shares": U64, "quota": I64, "period": U64, "realtimeRuntime": I64,
                    "realtimePeriod": U64, "cpus": str, "mems": str},
            "pids": {"limit": I64},
        },
        "cgroupsPath": str,
        "rootfsPropagation": str,
        "maskedPaths": [str],
        "readonlyPaths": [str],
        "mountLabel": str,
        "devices": [{"path": str, "type": str, "major": I64, "minor": I64,
                     "fileMode": U32, "uid": U32, "gid": U32}],
    },
}

_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
          int: "an integer", float: "a number", type(None): "null"}


def check(config: Any) -> None:
    """BundleError naming the first field whose type runc would refuse."""
    _conforms(config, CONFIG, "the document")


def _conforms(value: Any, shape: Any, where: str) -> None:
    if isinstance(shape, Whole):
        if (not isinstance(value, int) or isinstance(value, bool)
                or not shape.low <= value <= shape.high):
            raise BundleError(f"config.json: {where} must be an integer from {shape.low} "
                              f"to {shape.high}")
    elif isinstance(shape, dict):
        _require(value, dict, where)
        prefix = "" if where == "the document" else f"{where}."
        for field, inner in shape.items():
            if value.get(field) is not None:
                _conforms(value[field], inner, f"{prefix}{field}")
    elif isinstance(shape, MapOf):
        _require(value, dict, where)
        for key, item in value.items():
            if item is not None:
                _conforms(item, shape.value, f"{where}[{key!r}]")
    elif isinstance(shape, list):
        _require(value, list, where)
        for index, item in enumerate(value):
            if item is not None:
                _conforms(item, shape[0], f"{where}[{index}]")
    else:
        _require(value, shape, where)


def _require(value: Any, kind: type, where: str) -> None:
    if not isinstance(value, kind):
        raise BundleError(f"config.json: {where} must be {_KINDS[kind]}, not "
                          f"{_KINDS.get(type(value), type(value).__name__)}")
