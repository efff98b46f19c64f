"""The one table of messages: anything a peer sends is a message of its channel with
every field right, or a MessageError with one line, never another exception."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyscrun import messages
from pyscrun.messages import MessageError

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20)
NAMES = [name for table in messages.CHANNELS.values() for name in table]


def _named(name: str, fields: dict[str, Any]) -> dict[str, Any]:
    key, _, value = name.partition(" ")
    return {key: value, **fields}


@settings(max_examples=300, deadline=None)
@given(channel=st.sampled_from(sorted(messages.CHANNELS)), value=JSON)
def test_anything_is_a_message_or_one_clean_error(channel: str, value: Any) -> None:
    try:
        assert messages.check(value, channel) is value
    except MessageError as err:
        assert "\n" not in str(err)


@settings(max_examples=300, deadline=None)
@given(channel=st.sampled_from(sorted(messages.CHANNELS)), name=st.sampled_from(NAMES),
       fields=st.dictionaries(st.sampled_from(["signal", "status", "pid", "task", "node",
                                               "image_path", "error", "all", "rank", "ok",
                                               "dir", "stop", "action", "area", "path"]),
                              JSON, max_size=5))
def test_known_names_with_any_fields_are_checked_field_by_field(channel: str, name: str,
                                                                fields: dict[str, Any]) -> None:
    message = _named(name, fields)
    try:
        messages.check(message, channel)
    except MessageError as err:
        assert "\n" not in str(err)
        return
    spec = messages.CHANNELS[channel][name]
    for key, field in spec.items():
        assert key in message or not field.required
        if key in message:
            assert field.problem(message[key]) == ""


@pytest.mark.parametrize(("channel", "message"), [
    ("control", {"op": "kill", "signal": 15, "all": False}),
    ("control", {"op": "checkpoint", "image_path": "/ck", "work_path": "", "leave_running": True}),
    ("agent", {"op": "agent-hello", "task": "0", "node": "n1", "step": "0", "tasks": 1}),
    ("agent", {"event": "exit", "status": 0}),
    ("agent", {"event": "checkpointed", "error": None}),
    ("orders", {"op": "kill", "signal": 9}),
    ("srun_cr launcher", {"op": "hello", "job": "1", "step": "0", "rank": 0, "ntasks": 3,
                          "node": "n1", "pid": 42}),
    ("srun_cr orders", {"op": "finish", "action": "resume"}),
])
def test_what_pyscrun_sends_passes(channel: str, message: dict[str, Any]) -> None:
    assert messages.check(message, channel) is message


@pytest.mark.parametrize(("channel", "message", "words"), [
    ("control", {"op": "kill", "signal": "x"}, "signal must be an integer"),
    ("control", {"op": "kill"}, "signal is missing"),
    ("control", {"op": "kill", "signal": True}, "signal must be an integer"),
    ("control", {"op": "kill", "signal": 99}, "from 0 to 64"),
    ("control", {"op": "reboot"}, "unknown message"),
    ("control", [1], "must be an object"),
    ("agent", {"event": "exit", "status": 256}, "from 0 to 255"),
    ("agent", {"event": "running", "pid": -1}, "from 1"),
    ("orders", {"op": "kill", "signal": 0}, "from 1 to 64"),
    ("srun_cr orders", {"op": "finish", "action": "explode"}, "one of kill, resume"),
])
def test_wrong_messages_are_refused_in_one_line(channel: str, message: Any, words: str) -> None:
    with pytest.raises(MessageError, match=words):
        messages.check(message, channel)
