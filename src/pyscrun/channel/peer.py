"""One connection of the channel: frames queued to send, frames received, and the
challenge-response that opens it.

Both ends run selector loops, so a Peer never blocks: what cannot be sent yet waits in
its buffer, and the owner watches for writability while anything does (`pending`).
"""

from __future__ import annotations

import _socket
import time

from pyscrun import poller
from pyscrun.channel import auth, frames, tcp
from pyscrun.errors import ChannelError
from pyscrun.watch import drain

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

RECEIVE_SIZE = 1 << 18


class PeerGone(Exception):
    """The connection ended: closed by the peer (no reason) or refused (the reason)."""


class Peer:
    def __init__(self, sock: _socket.socket, secret: bytes, challenge: bytes | None = None) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.secret = secret
        self.reader = frames.FrameReader()
        self.out = bytearray()
        # Listener side: the challenge sent, until the dialer answered it.
        self.challenge = challenge
        # Dialer side: frames that came with the listener's proof.
        self.early: list[tuple[int, bytes]] = []
        try:
            name = sock.getpeername()
        except OSError:
            name = "?"
        # (host, port, ...) for TCP; a path, or nothing, for a Unix socket.
        self.address = str(name[0]) if isinstance(name, tuple) else (str(name) or "a local peer")

    @classmethod
    def accepted(cls, sock: _socket.socket, secret: bytes) -> Peer:
        """A connection that reached a listener: it must prove itself first."""
        challenge = auth.challenge()
        peer = cls(sock, secret, challenge)
        peer.send(frames.frame(frames.CHALLENGE, challenge))
        return peer

    @property
    def proven(self) -> bool:
        return self.challenge is None

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def pending(self) -> int:
        return len(self.out)

    def send(self, data: bytes) -> bool:
        """Queue data and send what the socket takes now; False once the peer is gone."""
        self.out += data
        return self.flush()

    def flush(self) -> bool:
        return drain(self.out, self.sock.send)

    def flush_blocking(self, timeout: float) -> bool:
        """Send everything queued, waiting up to timeout; False if it could not."""
        deadline = time.monotonic() + timeout
        with poller.Poller() as selector:
            selector.register(self.sock, poller.WRITE)
            while self.out:
                left = deadline - time.monotonic()
                if left <= 0 or not self.flush():
                    return False
                if self.out:
                    selector.select(left)
        return True

    def receive(self) -> list[tuple[int, bytes]]:
        """The frames that arrived (the socket was readable); PeerGone once the peer
        closed, failed, sent something that is not a frame or could not prove itself."""
        if self.early:
            got, self.early = self.early, []
            return got
        try:
            data = self.sock.recv(RECEIVE_SIZE)
        except BlockingIOError:
            return []
        except OSError as err:
            raise PeerGone(f"connection failed: {err.strerror or err}") from None
        if not data:
            raise PeerGone("")
        try:
            got = self.reader.feed(data)
        except frames.FrameError as err:
            raise PeerGone(str(err)) from None
        if self.challenge is not None and got:
            kind, answer = got.pop(0)
            proof = auth.check_answer(self.secret, self.challenge, answer) \
                if kind == frames.RESPONSE else None
            if proof is None:
                raise PeerGone("no proof of the container's secret")
            self.challenge = None
            self.send(frames.frame(frames.RESPONSE, proof))
        return got

    def send_message(self, content: dict[str, Any], timeout: float) -> bool:
        """Send one message, waiting up to timeout until it is on its way."""
        return self.send(frames.message(content)) and self.flush_blocking(timeout)

    def hang_up(self, timeout: float) -> None:
        """Say no more, then read and drop what the other end still sends until it
        closes (up to timeout): a close with unread data would reset the connection,
        and the other end could lose what it had not read yet."""
        try:
            self.sock.shutdown(_socket.SHUT_WR)
        except OSError:
            return  # already gone
        deadline = time.monotonic() + timeout
        with poller.Poller() as selector:
            selector.register(self.sock, poller.READ)
            while (left := deadline - time.monotonic()) > 0 and selector.select(left):
                try:
                    if not self.sock.recv(RECEIVE_SIZE):
                        return
                except BlockingIOError:
                    continue
                except OSError:
                    return

    def close(self) -> None:
        self.sock.close()


def messages(received: list[tuple[int, bytes]]) -> list[dict[str, Any]]:
    """The messages among received frames (FrameError if one is not a JSON object);
    frames of other kinds are not for this caller."""
    return [frames.decode_message(payload) for kind, payload in received
            if kind == frames.MESSAGE]


def _read_frames(sock: _socket.socket, reader: frames.FrameReader) -> list[tuple[int, bytes]]:
    """Blocking: the next frames that arrive (at least one)."""
    while True:
        data = sock.recv(RECEIVE_SIZE)
        if not data:
            raise ChannelError("the listener closed the connection (wrong secret?)")
        got = reader.feed(data)
        if got:
            return got


def dial(host: str, port: int, secret: bytes, timeout: float) -> Peer:
    """Connect to a listener and prove, both ways, that each end holds the secret."""
    return dial_all(host, port, secret, timeout, 1)[0]


def dial_all(host: str, port: int, secret: bytes, timeout: float, count: int) -> list[Peer]:
    """count connections to one listener, each proven both ways as dial's, their
    handshakes in step: the listener answers them together, not one after the other.
    Nothing is said on any until the listener has proven itself on it."""
    socks: list[_socket.socket] = []
    with ClosedOnFailure(socks, f"handshake with {host} port {port} failed"):
        for _ in range(count):
            socks.append(tcp.dial(host, port, timeout))
        readers = [frames.FrameReader() for _ in socks]
        challenges = []
        for sock, reader in zip(socks, readers, strict=True):
            (kind, challenge), *early = _read_frames(sock, reader)
            if early or kind != frames.CHALLENGE or len(challenge) != auth.NONCE:
                raise ChannelError(f"{host} port {port} does not speak pyscrun's channel")
            challenges.append(challenge)
        answers = [auth.answer(secret, challenge) for challenge in challenges]
        for sock, answer in zip(socks, answers, strict=True):
            sock.sendall(frames.frame(frames.RESPONSE, answer))
        peers = []
        for sock, reader, challenge, answer in zip(socks, readers, challenges, answers,
                                                   strict=True):
            (kind, proof), *early = _read_frames(sock, reader)
            if kind != frames.RESPONSE or not auth.check_proof(secret, challenge, answer, proof):
                raise ChannelError(f"{host} port {port} could not prove it holds the secret")
            peer = Peer(sock, secret)
            peer.reader = reader
            peer.early = early
            peers.append(peer)
    return peers


class ClosedOnFailure:
    """A block that opens connections: should it fail, each is closed (those added to
    the list on the way too), and an error of the wire becomes a ChannelError that
    says what failed."""

    def __init__(self, connections: list[_socket.socket] | list[Peer], what: str) -> None:
        self.connections = connections
        self.what = what

    def __enter__(self) -> ClosedOnFailure:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 traceback: object) -> None:
        if err is None:
            return
        for connection in self.connections:
            connection.close()
        if isinstance(err, OSError | frames.FrameError):
            raise ChannelError(f"{self.what}: {err}") from None
