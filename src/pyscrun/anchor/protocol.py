"""The control socket: one JSON object per line, the peer's uid checked by the kernel.

CLI verbs send one request and read one reply. A node agent keeps its connection
open: it says hello, then the anchor sends it orders (kill) and it reports events.
"""

from __future__ import annotations

import _socket
import os
import struct

from pyscrun import jsonc, sockets
from pyscrun.errors import AnchorError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable
    from typing import Any

MAX_LINE = 1 << 20
_SUN_PATH_MAX = 107


class _ShortPath:
    """A path usable with AF_UNIX even when longer than sun_path allows.

    Long --root paths or ids would overflow the 108-byte limit; going through
    /proc/self/fd of an open directory keeps the address short.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.dir_fd: int | None = None

    def __enter__(self) -> str:
        if len(self.path.encode()) <= _SUN_PATH_MAX:
            return self.path
        directory, name = os.path.split(self.path)
        self.dir_fd = os.open(directory, os.O_PATH | os.O_DIRECTORY)
        return f"/proc/self/fd/{self.dir_fd}/{name}"

    def __exit__(self, *_: object) -> None:
        if self.dir_fd is not None:
            os.close(self.dir_fd)


def listen(path: str) -> _socket.socket:
    server = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    with _ShortPath(path) as address:
        server.bind(address)
    os.chmod(path, 0o600)
    server.listen(64)
    return server


def accept(listener: sockets.Listener, make_room: Callable[[], bool]) -> _socket.socket | None:
    """The next connection, if its peer is this user or root (the kernel's word for it,
    SO_PEERCRED); None if there is none (listener.accept) or it is someone else's."""
    conn = listener.accept(make_room)
    if conn is None:
        return None
    creds = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
    if struct.unpack("3i", creds)[1] not in (os.getuid(), 0):  # struct ucred: pid, uid, gid
        conn.close()
        return None
    return conn


def encode(message: dict[str, Any]) -> bytes:
    return jsonc.dumps(message).encode() + b"\n"


class LineReader:
    """Splits a stream into JSON messages."""

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self.buffer += data
        if len(self.buffer) > MAX_LINE:
            raise ValueError("control message too long")
        lines = self.buffer.split(b"\n")
        self.buffer = lines.pop()
        messages = []
        for line in lines:
            message = jsonc.loads(line)
            if not isinstance(message, dict):
                raise ValueError("control message is not an object")
            messages.append(message)
        return messages

    def receive(self, conn: _socket.socket) -> list[dict[str, Any]] | None:
        """The messages that arrived on conn (it was readable); None once its peer is
        gone, the connection failed or the peer spoke something else than messages."""
        try:
            data = conn.recv(65536)
            return self.feed(data) if data else None
        except (OSError, ValueError, RecursionError):
            return None


def connect(path: str, timeout: float | None = 30.0) -> socket.socket:
    import socket

    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    _connect(client, path, timeout)
    return client


def _connect(client: _socket.socket, path: str, timeout: float | None) -> None:
    client.settimeout(timeout)
    try:
        with _ShortPath(path) as address:
            client.connect(address)
    except OSError:
        client.close()
        raise


def first_reply(client: _socket.socket, message: dict[str, Any]) -> dict[str, Any] | None:
    """Send message; the first message that comes back, None if the peer closed the
    connection first. Socket errors, timeouts and bad JSON are the caller's to word."""
    client.sendall(encode(message))
    reader = LineReader()
    while True:
        data = client.recv(65536)
        if not data:
            return None
        replies = reader.feed(data)
        if replies:
            return replies[0]


def request(path: str, message: dict[str, Any], timeout: float | None = 30.0) -> dict[str, Any]:
    """Send one request and return the anchor's reply; AnchorError if it gives none.

    The CLI's verbs come this way: the bare C socket spares each of them the
    milliseconds the `socket` module (and the enum machinery it pulls in) costs."""
    client = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        _connect(client, path, timeout)
    except OSError as err:
        raise AnchorError(f"cannot reach the anchor at {path}: {err.strerror or err}") from None
    try:
        try:
            reply = first_reply(client, message)
            if reply is None:
                raise AnchorError("the anchor closed the connection without a reply")
            return reply
        except TimeoutError:
            raise AnchorError(f"the anchor did not answer within {timeout} s") from None
        except (OSError, ValueError) as err:
            raise AnchorError(f"talking to the anchor failed: {err}") from None
    finally:
        client.close()
