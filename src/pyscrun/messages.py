"""Every message of every channel, each field with its type and range: one table, one check.

A message is a JSON object named by its `op` (an order or request) or its `event` (a
report). Whoever receives one checks it here before acting on it, so that nothing a
peer sends (the caller, a node agent, the anchor, srun_cr's launchers) can reach the
code with a field of the wrong type or out of range. Fields a message does not name in
the table are ignored.
"""

from __future__ import annotations

from pyscrun.errors import ScrunError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class MessageError(ScrunError, ValueError):
    """A message that is not one of its channel's, or has a field that is wrong."""


class Field:
    __slots__ = ("choices", "high", "kinds", "low", "required")

    def __init__(self, *kinds: type, required: bool = False, low: int | None = None,
                 high: int | None = None, choices: tuple[str, ...] = ()) -> None:
        self.kinds = kinds
        self.required = required
        self.low, self.high = low, high
        self.choices = choices

    def problem(self, value: Any) -> str:
        """'' if value fits, else what it should be."""
        if (isinstance(value, bool) and bool not in self.kinds) or not isinstance(value, self.kinds):
            return self._wanted()
        if isinstance(value, int) and not isinstance(value, bool) and self._out_of_range(value):
            return f"an integer from {self.low} to {self.high}"
        if self.choices and value not in self.choices:
            return "one of " + ", ".join(self.choices)
        return ""

    def _out_of_range(self, number: int) -> bool:
        return ((self.low is not None and number < self.low)
                or (self.high is not None and number > self.high))

    def _wanted(self) -> str:
        names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
                 dict: "an object", list: "a list", type(None): "null"}
        return " or ".join(names.get(kind, kind.__name__) for kind in self.kinds)


NONE = type(None)
SIGNAL = Field(int, required=True, low=0, high=64)
ERROR = Field(str, NONE)  # a failure's message, null when it went well
_CRIU_FLAGS = {name: Field(bool, str, NONE) for name in (
    "tcp_established", "ext_unix_sk", "shell_job", "file_locks", "empty_ns", "auto_dedup",
    "manage_cgroups_mode")}
CHECKPOINT_ORDER = {"image_path": Field(str, required=True), "work_path": Field(str, NONE),
                    "leave_running": Field(bool, NONE), "probe": Field(str, NONE),
                    "freeze": Field(bool, NONE),
                    "tasks": Field(int, low=1, high=1 << 16), "criu": Field(str, NONE),
                    **_CRIU_FLAGS}
FILE = {"area": Field(str, required=True), "path": Field(str, required=True)}

# channel -> message name ("op NAME" or "event NAME") -> its fields
CHANNELS: dict[str, dict[str, dict[str, Field]]] = {
    # scrun's verbs to their anchor, over the control socket
    "control": {
        "op start": {},
        "op state": {},
        "op delete": {},
        "op kill": {"signal": SIGNAL, "all": Field(bool, NONE)},
        "op checkpoint": CHECKPOINT_ORDER,
        "op pause": {},
        "op resume": {},
        "op update": {"resources": Field(dict, required=True)},
        "op ps": {},
        "op stats": {},
    },
    # a node agent to its anchor, over the channel
    "agent": {
        "op agent-hello": {"task": Field(str, required=True), "node": Field(str, required=True),
                           "step": Field(str), "tasks": Field(int, low=1, high=1 << 16)},
        "op agent-error": {"message": Field(str, required=True), "task": Field(str)},
        # a connection of one task's stdout (1) or stderr (2) alone
        "op agent-stream": {"task": Field(str, required=True),
                            "stream": Field(int, required=True, low=1, high=2)},
        "op send-images": {},
        "op send-bundle": {},
        "op file": FILE,
        "event exit": {"status": Field(int, required=True, low=0, high=255)},
        "event running": {"pid": Field(int, NONE, low=1, high=(1 << 22))},
        "event checkpointed": {"error": ERROR, "frozen": Field(bool, NONE)},
        # the job's warning of its end reached the agent's task
        "event job-ending": {},
        "event stdin-taken": {"bytes": Field(int, required=True, low=1, high=1 << 40)},
        "event ordered": {"order": Field(str, required=True,
                                         choices=("pause", "resume", "update", "ps", "stats")),
                          "error": ERROR, "pids": Field(list, NONE),
                          "stats": Field(dict, NONE)},
    },
    # the anchor to a node agent
    "orders": {
        "op kill": {"signal": Field(int, required=True, low=1, high=64), "all": Field(bool, NONE)},
        "op checkpoint": CHECKPOINT_ORDER,
        "op file": FILE,
        "op images-sent": {"error": ERROR},
        "op bundle-sent": {"error": ERROR},
        "op report-running": {},
        # the container's start, to the agents of a step launched at create
        "op go": {},
        "op stream-ok": {},
        "op pause": {},
        "op resume": {},
        "op update": {"resources": Field(dict, required=True)},
        "op ps": {},
        "op stats": {},
    },
    # `srun_cr checkpoint` to srun_cr, over its Unix socket
    "srun_cr control": {
        "op checkpoint": {"dir": Field(str, NONE), "stop": Field(bool, NONE)},
        "op status": {},
    },
    # a task's launcher to srun_cr
    "srun_cr launcher": {
        "op hello": {"job": Field(str, required=True), "step": Field(str, required=True),
                     "rank": Field(int, required=True, low=0, high=1 << 20),
                     "ntasks": Field(int, required=True, low=1, high=1 << 20),
                     "node": Field(str), "pid": Field(int, required=True, low=1, high=1 << 22)},
        "op dumped": {"ok": Field(bool, required=True), "error": ERROR,
                      "seconds": Field(int, float)},
    },
    # srun_cr to a task's launcher
    "srun_cr orders": {
        "op dump": {"dir": Field(str, required=True), "stop": Field(bool, NONE)},
        "op finish": {"action": Field(str, required=True, choices=("kill", "resume"))},
    },
}


def name_of(message: dict[str, Any]) -> str:
    if "op" in message:
        return f"op {message['op']}"
    return f"event {message.get('event')}"


def check(message: Any, channel: str) -> dict[str, Any]:
    """message if it is one of channel's, with every field it names right; else
    MessageError with one line saying what is wrong."""
    if not isinstance(message, dict):
        raise MessageError(f"a message must be an object, not {type(message).__name__}")
    name = name_of(message)
    fields = CHANNELS[channel].get(name)
    if fields is None:
        raise MessageError(f"unknown message {name[:80]!r}")
    for key, field in fields.items():
        if key not in message:
            if field.required:
                raise MessageError(f"{name}: {key} is missing")
            continue
        wrong = field.problem(message[key])
        if wrong:
            raise MessageError(f"{name}: {key} must be {wrong}, not {str(message[key])[:40]!r}")
    return message
