"""Frames: one byte of kind, four of length (big-endian), then the payload.

A message is a JSON object; stream data carries bytes of the container's stdin, stdout
or stderr, and an empty data frame ends its stream.
"""

from __future__ import annotations

import struct

from pyscrun import jsonc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

HEADER = struct.Struct(">BI")
STDIN, STDOUT, STDERR = 0, 1, 2
STREAMS = (STDIN, STDOUT, STDERR)
MESSAGE = ord("m")
CHALLENGE = ord("c")
RESPONSE = ord("r")
# Data of the file a `file` message announced; empty: that file is complete.
FILE = ord("f")
KINDS = frozenset((*STREAMS, MESSAGE, CHALLENGE, RESPONSE, FILE))
# Stream data is sent in pieces of at most this much; a bigger frame is refused.
MAX_DATA = 1 << 18
# Bytes of stdin the anchor sends beyond what task 0's agent said it took (its
# `stdin-taken` events): stdin shares the control connection with the anchor's orders,
# so the agent must read it whatever the container does; this bounds what it holds.
STDIN_WINDOW = 1 << 20
MAX_MESSAGE = 1 << 20


class FrameError(ValueError):
    """The peer sent something that is not a frame of this channel."""


def frame(kind: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def message(content: dict[str, Any]) -> bytes:
    return frame(MESSAGE, jsonc.dumps(content).encode())


def decode_message(payload: bytes) -> dict[str, Any]:
    try:
        content = jsonc.loads(payload.decode())
    except (UnicodeDecodeError, ValueError) as err:
        raise FrameError(f"a message that is not JSON ({err})") from None
    if not isinstance(content, dict):
        raise FrameError("a message that is not a JSON object")
    return content


class FrameReader:
    """Splits what arrives into (kind, payload) frames."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self.buffer += data
        frames = []
        start = 0
        while len(self.buffer) - start >= HEADER.size:
            kind, length = HEADER.unpack_from(self.buffer, start)
            if kind not in KINDS:
                raise FrameError(f"a frame of unknown kind {kind}")
            if length > (MAX_MESSAGE if kind == MESSAGE else MAX_DATA):
                raise FrameError(f"a frame of {length} bytes, more than allowed")
            end = start + HEADER.size + length
            if len(self.buffer) < end:
                break
            frames.append((kind, bytes(self.buffer[start + HEADER.size:end])))
            start = end
        del self.buffer[:start]
        return frames
