"""The container state the anchor persists, and the OCI state document made from it."""

from __future__ import annotations

import os

from pyscrun import OCI_VERSION

# typing itself costs milliseconds on the CLI's hot path: import it for checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar

CREATING, CREATED, RUNNING, PAUSED, STOPPED = "creating", "created", "running", "paused", "stopped"


def timestamp(ns: int) -> str:
    """A time in UTC as runc writes `created` (Go's RFC3339Nano): nanoseconds, their
    trailing zeros dropped, the dot too if nothing is left."""
    import time

    seconds, fraction = divmod(ns, 1_000_000_000)
    digits = f"{fraction:09d}".rstrip("0")
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + \
        (f".{digits}" if digits else "") + "Z"


class ContainerState:
    """What the anchor persists about its container (plain class: cheap to import)."""

    # name -> default; the JSON form holds exactly these keys.
    FIELDS: ClassVar[dict[str, Any]] = {
        "id": "", "bundle": "", "status": CREATING,
        "pid": 0,  # the anchor's pid: it holds the container
        "pid_start": 0,  # start time of that pid (clock ticks), to tell a reused pid apart
        # The pid callers are given: the container's stand-in (anchor/stand_in.py), and
        # its start time.
        "stand_in": 0, "stand_in_start": 0,
        "created": "", "annotations": None, "rootfs": "", "owner": "",
        "exit_status": None, "ended": 0.0, "backend": "local", "job_id": "", "job_owned": False,
        # scrun.lua's stage_out runs (the container ended): delete waits for it however
        # long it takes rather than kill the anchor in the middle of saving the results.
        "staging_out": False,
        "extra": None,
    }
    __slots__ = tuple(FIELDS)
    id: str
    bundle: str
    status: str
    pid: int
    pid_start: int
    stand_in: int
    stand_in_start: int
    created: str
    annotations: dict[str, str]
    rootfs: str
    owner: str
    exit_status: int | None
    ended: float  # when the container ended (seconds since the epoch), 0 until then
    backend: str
    job_id: str
    job_owned: bool
    staging_out: bool
    extra: dict[str, Any]

    def __init__(self, **values: Any) -> None:
        for name, default in self.FIELDS.items():
            value = values.pop(name, default)
            if value is None and name in ("annotations", "extra"):
                value = {}
            setattr(self, name, value)
        if values:
            raise TypeError(f"unknown state fields: {sorted(values)}")

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_json(cls, data: Any) -> ContainerState:
        """The state in a state file; ValueError if any field has the wrong type."""
        if not isinstance(data, dict):
            raise ValueError("a state must be an object")
        for name, default in cls.FIELDS.items():
            if name not in data:
                continue
            value, kinds = data[name], _KINDS.get(name) or (type(default),)
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise ValueError(f"{name} has the wrong type")
        if not data.get("id"):
            raise ValueError("a state without an id")
        return cls(**{name: data[name] for name in cls.FIELDS if name in data})

    def effective_status(self) -> str:
        """The status as the world sees it: an anchor that died means stopped."""
        if self.status != STOPPED and not process_alive(self.pid, self.pid_start):
            return STOPPED
        return self.status

    def oci_document(self) -> dict[str, Any]:
        status = self.effective_status()
        document: dict[str, Any] = {
            "ociVersion": OCI_VERSION,
            "id": self.id,
            "status": status,
            "pid": self.stand_in if status in (CREATED, RUNNING, PAUSED) else 0,
            "bundle": self.bundle,
            "rootfs": self.rootfs,
            "created": self.created,
            "owner": self.owner,
            "annotations": self.annotations,
        }
        if self.job_id:
            document["jobId"] = self.job_id
        if status == STOPPED and self.exit_status is not None:
            document["exitStatus"] = self.exit_status
        return document


# Fields whose type is not that of their default.
_KINDS: dict[str, tuple[type, ...]] = {
    "annotations": (dict, type(None)), "extra": (dict, type(None)),
    "exit_status": (int, type(None)), "ended": (int, float),
}


def _proc_stat(pid: int) -> tuple[bytes, int] | None:
    """(state letter, start time in clock ticks) of a process, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(b")") + 2:].split()
    return fields[0], int(fields[19])


def process_start_time(pid: int) -> int:
    stat = _proc_stat(pid)
    return stat[1] if stat else 0


def wait_reaped(pid: int, start_time: int, timeout: float) -> None:
    """Wait until pid (that started at start_time) is no longer even a zombie: its
    parent has seen its status."""
    import time

    deadline = time.monotonic() + timeout
    while start_time and process_start_time(pid) == start_time and time.monotonic() < deadline:
        time.sleep(0.01)


def process_alive(pid: int, start_time: int) -> bool:
    """True if pid runs and is the process that started at start_time (0: any)."""
    if pid <= 0:
        return False
    stat = _proc_stat(pid)
    # A zombie has exited; its parent (conmon) just has not reaped it yet.
    if stat is None or stat[0] in (b"Z", b"X"):
        return False
    return start_time in (0, stat[1])


def shell_status(wait_status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128+N for signal N."""
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.waitstatus_to_exitcode(wait_status)
