"""The anchor's port for its node agents: who connects, who proves to be one of the
container's agents, and what they send.

A connection has HELLO_TIMEOUT to prove it holds the container's secret and say hello,
and at most sockets.MAX_STRANGERS may be doing so at once; one that cannot, or sends
anything malformed, is dropped with one log line and changes nothing.
"""

from __future__ import annotations

from pyscrun import log, messages, poller, sockets
from pyscrun.anchor.agents import AgentLink, Agents
from pyscrun.channel import frames, streams, tcp
from pyscrun.channel.peer import Peer, PeerGone
from pyscrun.digits import only_digits
from pyscrun.errors import ScrunError
from pyscrun.node.criu import other_task, task_image_dir
from pyscrun.watch import watch

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket
    from collections.abc import Callable, Generator
    from typing import Any

HELLO_TIMEOUT = 10.0


class AgentPort:
    def __init__(self, selector: poller.Poller, agents: Agents, secret: bytes,
                 port_range: tuple[int, int] | None, loopback_only: bool,
                 on_event: Callable[[AgentLink, dict[str, Any]], None],
                 on_stream: Callable[[_socket.socket, int, int], bool],
                 on_gone: Callable[[AgentLink], None]) -> None:
        self.selector = selector
        self.agents = agents
        self.secret = secret
        self.on_event, self.on_stream, self.on_gone = on_event, on_stream, on_gone
        listener = tcp.listen(port_range, loopback_only=loopback_only)
        listener.setblocking(False)
        self.port = tcp.port_of(listener)
        self.listener = sockets.Listener(selector, listener, self, "the agents' port")
        self.strangers: sockets.Strangers[AgentLink] = sockets.Strangers(HELLO_TIMEOUT,
                                                                          self.refuse)

    def deadlines(self) -> list[float]:
        return [*self.strangers.deadlines(), *self.listener.deadlines()]

    def expire(self, now: float) -> None:
        self.strangers.expire(now)
        self.listener.resume(now)

    def rearm(self) -> None:
        """Connections are read, and written to while frames wait; the files on their
        way to an agent are taken on as its connection takes them."""
        for link in (*self.strangers, *self.agents.connected):
            link.pump()
            events = poller.READ
            if link.peer.pending:
                events |= poller.WRITE
            watch(self.selector, link.peer.sock, events, link)

    def ready(self, data: object, events: int) -> None:
        """A selector event of this port: the listener's (data is self) or a link's."""
        if data is self:
            self._accept()
        elif isinstance(data, AgentLink):
            if events & poller.WRITE and not data.peer.flush():
                self._drop(data)
            elif events & poller.READ:
                self._read(data)

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        sock = self.listener.accept()
        if sock is None:
            return
        link = self.strangers.add(lambda: AgentLink(Peer.accepted(sock, self.secret)))
        self.selector.register(sock, poller.READ, link)

    def refuse(self, link: AgentLink, why: str) -> None:
        log.current.error(f"refused a connection to the agents' port from {link.peer.address}: {why}")
        self._drop(link)

    def _drop(self, link: AgentLink) -> None:
        self.strangers.discard(link)
        watch(self.selector, link.peer.sock, 0, link)
        link.stop_files()
        link.peer.close()
        if link.task is not None:
            self.agents.gone(link)
            self.on_gone(link)

    def _read(self, link: AgentLink) -> None:
        try:
            received = link.peer.receive()
        except PeerGone as gone:
            if str(gone) and link.task is None:
                self.refuse(link, str(gone))
                return
            if str(gone):
                log.current.error(f"node agent of task {link.task}: {gone}")
            self._drop(link)
            return
        for kind, payload in received:
            try:
                self._take(link, kind, payload)
            except (ValueError, TypeError, OSError) as err:
                self.refuse(link, str(err))
                return
            if link.peer.sock.fileno() < 0 or link.stream:
                return

    def _take(self, link: AgentLink, kind: int, payload: bytes) -> None:
        if kind == frames.FILE and link.receiver is not None:
            link.receiver.data(payload)
        elif kind != frames.MESSAGE:
            raise ValueError(f"a frame of kind {kind} from an agent")
        elif link.task is None:
            self._hello(link, messages.check(frames.decode_message(payload), "agent"))
        else:
            message = messages.check(frames.decode_message(payload), "agent")
            if message.get("op") == "file" and link.receiver is not None:
                link.receiver.begin(message)
            else:
                self.on_event(link, message)
                if link.reported_exit:
                    # Its last word: the agent waits for this end to close.
                    self._drop(link)

    def _hello(self, link: AgentLink, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "agent-error":
            self.agents.failed(str(message.get("task") or "0"), str(message.get("message", "")))
            log.current.error(f"node agent: {self.agents.last_error}")
            self.strangers.discard(link)
            return
        if op == streams.HELLO:
            self._stream(link, message)
            return
        if op != "agent-hello":
            raise ValueError(f"expected a hello, got {op!r}")
        task, node, step = message["task"], message["node"], message.get("step", "")
        if not only_digits(task):
            raise ValueError(f"a hello from task {task[:20]!r}")
        if step and not only_digits(step):
            raise ValueError(f"a hello from step {step[:20]!r}")
        self.strangers.discard(link)
        self.agents.hello(link, task, node, step, int(message.get("tasks") or 1))

    def _stream(self, link: AgentLink, message: dict[str, Any]) -> None:
        """A task's stdout or stderr on this connection from now on: raw bytes, which
        the anchor's caller stdio takes (channel/streams.py)."""
        task = message["task"]
        if not only_digits(task):
            raise ValueError(f"a stream of task {task[:20]!r}")
        if not link.send({"op": streams.TAKEN}) or link.peer.pending:
            raise ValueError("the stream could not be told it was taken")
        self.strangers.discard(link)
        watch(self.selector, link.peer.sock, 0, link)
        link.stream = True
        tasks = message.get("tasks")
        if not self.on_stream(link.peer.sock, message["stream"],
                              tasks if isinstance(tasks, int) and tasks > 0 else 1):
            link.peer.close()


def image_frames(link: AgentLink, restore: dict[str, Any] | None
                 ) -> Generator[bytes, None, None]:
    """A restoring task's node does not see the image path: its images, over the
    channel (task 0's are the top of the image path, without the other tasks'), ending
    with `images-sent`."""
    error = None
    try:
        if restore is None:
            raise ScrunError("this container is not being restored")
        task = link.task or "0"
        from pyscrun.channel import files  # a restore's images only

        yield from files.tree_frames(task_image_dir(str(restore["image_path"]), task), "image",
                                     other_task if task == "0" else None)
    except (ScrunError, OSError) as err:
        error = str(err)
    yield frames.message({"op": "images-sent", "error": error})
