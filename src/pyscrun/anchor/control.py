"""A control socket: scrun's verbs ask their anchor things (and `srun_cr checkpoint` its
srun_cr), only their owner's.

Each request is checked against the message table before it is handled, and a client
that sends nothing for a while, or one too many, is closed: nothing a client does can
take the anchor's descriptors or its loop.
"""

from __future__ import annotations

import os
import time

from pyscrun import log, messages, poller, sockets
from pyscrun.anchor import protocol
from pyscrun.errors import ScrunError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket
    from collections.abc import Callable
    from typing import Any

# Connections held at once, and how long one may sit idle: a client of scrun's sends
# one request and waits for its answer.
MAX_CLIENTS = 64
CLIENT_IDLE = 30.0


class Connection:
    """One accepted connection on the control socket: a CLI request."""

    def __init__(self, conn: _socket.socket, now: float) -> None:
        self.conn = conn
        self.reader = protocol.LineReader()
        self.active = now  # when it last sent a request
        self.waiting = False  # for an answer that comes later (a checkpoint)
        self.closed = False

    def send(self, message: dict[str, Any]) -> bool:
        self.waiting = False
        try:
            self.conn.sendall(protocol.encode(message))
        except OSError:
            return False
        return True


class ControlSocket:
    """The listener and its clients; handle gives a request's reply, or None when the
    reply comes later (a checkpoint's)."""

    def __init__(self, selector: poller.Poller, path: str,
                 handle: Callable[[Connection, dict[str, Any]], dict[str, Any] | None],
                 channel: str = "control") -> None:
        self.selector = selector
        self.path = path
        self.handle = handle
        self.channel = channel  # whose requests, in the message table
        self.clients: list[Connection] = []
        self.crowded_logged = -CLIENT_IDLE
        try:
            listener = protocol.listen(path)
        except OSError as err:
            # The socket's directory is new and private: what fails is its file system
            # (exFAT, some FUSE and network file systems hold no sockets).
            raise ScrunError(
                f"cannot make a socket in {os.path.dirname(path)} ({err.strerror}): its file "
                "system cannot hold Unix sockets; use a directory on a local file system "
                "(XDG_RUNTIME_DIR=/run/user/UID, or --root)") from None
        # Which file is ours: once it is closed, the path may be another's (a container
        # of the same id, created while this anchor was still giving its job back).
        made = os.stat(path)
        self.made = (made.st_dev, made.st_ino)
        listener.setblocking(False)
        self.listener = sockets.Listener(selector, listener, self, "the control socket")

    def ready(self, data: object) -> None:
        """A selector event of this socket: the listener's (data is self) or a client's."""
        if data is self:
            self._accept()
        elif isinstance(data, Connection):
            self._read(data)

    def deadlines(self) -> list[float]:
        return [*(c.active + CLIENT_IDLE for c in self.clients if not c.waiting),
                *self.listener.deadlines()]

    def expire(self, now: float) -> None:
        for client in [c for c in self.clients if not c.waiting and now >= c.active + CLIENT_IDLE]:
            self._drop(client)
        self.listener.resume(now)

    def close(self) -> None:
        for client in list(self.clients):
            self._drop(client)
        self.listener.close()
        try:
            now = os.stat(self.path)
            if (now.st_dev, now.st_ino) == self.made:
                os.unlink(self.path)
        except FileNotFoundError:
            pass

    def detach(self, client: Connection) -> Connection:
        """Let go of client without closing it: its answer outlives the socket."""
        if client in self.clients:
            self.clients.remove(client)
            self.selector.unregister(client.conn)
        return client

    def _accept(self) -> None:
        try:
            # Out of descriptors: room is made by closing the idlest client, if any.
            conn = protocol.accept(self.listener, self._drop_idlest)
        except OSError:
            return  # nothing waiting after all, or the peer gone
        if conn is None:
            return
        if len(self.clients) >= MAX_CLIENTS:
            self._drop_idlest()
        conn.setblocking(False)
        client = Connection(conn, time.monotonic())
        self.clients.append(client)
        self.selector.register(conn, poller.READ, client)

    def _drop_idlest(self) -> bool:
        idle = [c for c in self.clients if not c.waiting]
        if not idle:
            return False
        now = time.monotonic()
        if now >= self.crowded_logged + CLIENT_IDLE:
            # Once per burst: a flood of connections must not flood the log too.
            log.current.error("too many connections to the control socket: closing the idlest")
            self.crowded_logged = now
        self._drop(min(idle, key=lambda c: c.active))
        return True

    def _drop(self, client: Connection) -> None:
        self.detach(client).conn.close()
        client.closed = True

    def _read(self, client: Connection) -> None:
        received = client.reader.receive(client.conn)
        if received is None:
            self._drop(client)
            return
        client.active = time.monotonic()
        for message in received:
            try:
                reply = self.handle(client, messages.check(message, self.channel))
            except messages.MessageError as err:
                log.current.error(f"refused a request: {err}")
                reply = {"ok": False, "error": f"refused a request: {err}"}
            except ScrunError as err:
                reply = {"ok": False, "error": str(err)}
            client.waiting = reply is None
            if reply is not None and not client.send(reply):
                self._drop(client)
                return
