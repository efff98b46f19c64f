"""The channel between anchor and agents: frames, and the challenge-response that opens
every connection, over real TCP sockets on loopback."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyscrun import sockets
from pyscrun.channel import auth, files, frames, peer, tcp
from pyscrun.errors import ChannelError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tests.unit.mounts import Mounts

FUZZ = settings(max_examples=200, deadline=None, database=None)
SECRET = b"s" * 32

any_frame = st.one_of(
    st.tuples(st.sampled_from(frames.STREAMS), st.binary(max_size=300)),
    st.tuples(st.just(frames.MESSAGE),
              st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)
              .map(lambda d: frames.message(d)[frames.HEADER.size:])),
)


@FUZZ
@given(st.lists(any_frame, max_size=8), st.lists(st.integers(1, 50), min_size=1, max_size=20))
def test_frames_come_out_as_they_went_in_however_the_bytes_are_cut(
        sent: list[tuple[int, bytes]], cuts: list[int]) -> None:
    wire = b"".join(frames.frame(kind, payload) for kind, payload in sent)
    reader = frames.FrameReader()
    got: list[tuple[int, bytes]] = []
    pos = 0
    for cut in cuts * (len(wire) // max(sum(cuts), 1) + 1):
        got += reader.feed(wire[pos:pos + cut])
        pos += cut
    got += reader.feed(wire[pos:])
    assert got == sent


@FUZZ
@given(st.binary(max_size=200))
def test_anything_else_is_a_frame_error_or_frames_never_another_exception(data: bytes) -> None:
    reader = frames.FrameReader()
    try:
        for kind, payload in reader.feed(data):
            assert kind in frames.KINDS
            if kind == frames.MESSAGE:
                try:
                    frames.decode_message(payload)
                except frames.FrameError:
                    pass
    except frames.FrameError:
        pass


def test_oversized_and_unknown_frames_are_refused_before_they_are_buffered() -> None:
    with pytest.raises(frames.FrameError, match="more than allowed"):
        frames.FrameReader().feed(frames.HEADER.pack(frames.STDOUT, frames.MAX_DATA + 1))
    with pytest.raises(frames.FrameError, match="unknown kind"):
        frames.FrameReader().feed(frames.HEADER.pack(200, 1) + b"x")
    with pytest.raises(frames.FrameError, match="not a JSON object"):
        frames.decode_message(b"[1]")


def test_only_the_secret_answers_a_challenge_and_no_answer_serves_twice() -> None:
    challenge = auth.challenge()
    answer = auth.answer(SECRET, challenge)
    proof = auth.check_answer(SECRET, challenge, answer)
    assert proof is not None and auth.check_proof(SECRET, challenge, answer, proof)
    assert auth.check_answer(b"t" * 32, challenge, answer) is None
    assert auth.check_answer(SECRET, auth.challenge(), answer) is None  # replayed
    assert not auth.check_proof(b"t" * 32, challenge, answer, proof)
    assert auth.check_answer(SECRET, challenge, answer[:-1]) is None


class Listener:
    """A real listener on loopback whose accepted peers answer with the given secret."""

    def __init__(self, secret: bytes) -> None:
        self.server = tcp.listen(None, loopback_only=True)
        self.port = tcp.port_of(self.server)
        self.secret = secret
        self.received: list[tuple[int, bytes]] = []
        self.refusal = ""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        sock = sockets.accept(self.server)
        link = peer.Peer.accepted(sock, self.secret)
        sock.setblocking(True)
        sock.settimeout(5)
        try:
            while True:
                self.received += link.receive()
                link.flush()
        except (peer.PeerGone, TimeoutError) as gone:
            self.refusal = str(gone)
        link.close()


def test_an_agent_with_the_secret_gets_in_and_its_frames_arrive() -> None:
    listener = Listener(SECRET)
    link = peer.dial("127.0.0.1", listener.port, SECRET, timeout=5)
    link.send(frames.message({"op": "agent-hello"}) + frames.frame(frames.STDOUT, b"out"))
    assert link.flush_blocking(5)
    link.close()
    listener.thread.join(5)
    assert listener.received == [(frames.MESSAGE, b'{"op":"agent-hello"}'), (frames.STDOUT, b"out")]
    assert listener.refusal == ""


def test_an_agent_with_a_wrong_secret_is_refused_and_delivers_nothing() -> None:
    listener = Listener(SECRET)
    with pytest.raises(ChannelError, match="closed the connection"):
        peer.dial("127.0.0.1", listener.port, b"wrong" * 8, timeout=5)
    listener.thread.join(5)
    assert listener.received == []
    assert listener.refusal == "no proof of the container's secret"


def test_a_listener_without_the_secret_cannot_pass_for_the_anchor() -> None:
    server = tcp.listen(None, loopback_only=True)

    def impostor() -> None:
        sock = sockets.accept(server)
        sock.sendall(frames.frame(frames.CHALLENGE, auth.challenge()))
        sock.recv(1024)
        sock.sendall(frames.frame(frames.RESPONSE, b"\0" * 32))
        sock.close()

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    with pytest.raises(ChannelError, match="could not prove"):
        peer.dial("127.0.0.1", tcp.port_of(server), SECRET, timeout=5)
    thread.join(5)


class TogetherListener:
    """A real listener on loopback that accepts count connections and serves them in
    rounds, as a selector loop would: first every proof, then every message."""

    def __init__(self, count: int) -> None:
        self.server = tcp.listen(None, loopback_only=True)
        self.port = tcp.port_of(self.server)
        self.received: list[list[tuple[int, bytes]]] = []
        self.thread = threading.Thread(target=self._serve, args=(count,), daemon=True)
        self.thread.start()

    def _serve(self, count: int) -> None:
        links = [peer.Peer.accepted(sockets.accept(self.server), SECRET) for _ in range(count)]
        for link in links:
            link.sock.setblocking(True)
            link.sock.settimeout(5)
        try:
            for link in links:
                self.received.append(link.receive())
            for link, got in zip(links, self.received, strict=True):
                while not got:
                    got += link.receive()
        except (peer.PeerGone, TimeoutError):
            pass
        for link in links:
            link.close()


def test_connections_dialed_together_are_each_proven_and_carry_their_own_frames() -> None:
    listener = TogetherListener(3)
    links = peer.dial_all("127.0.0.1", listener.port, SECRET, 5, 3)
    for number, link in enumerate(links):
        assert link.send_message({"op": "hello", "n": number}, 5)
    listener.thread.join(5)
    assert listener.received == [[(frames.MESSAGE, frames.message({"op": "hello", "n": n})[
        frames.HEADER.size:])] for n in range(3)]


def test_connections_dialed_together_with_a_wrong_secret_are_all_refused() -> None:
    listener = TogetherListener(2)
    with pytest.raises(ChannelError, match="closed the connection"):
        peer.dial_all("127.0.0.1", listener.port, b"wrong" * 8, 5, 2)
    listener.thread.join(5)
    assert listener.received == []


def test_a_recorded_exchange_replayed_on_a_new_connection_is_refused() -> None:
    first = Listener(SECRET)
    recorded = socket.create_connection(("127.0.0.1", first.port), timeout=5)
    challenge = recorded.recv(1024)[frames.HEADER.size:]
    answer = frames.frame(frames.RESPONSE, auth.answer(SECRET, challenge))
    recorded.sendall(answer)
    recorded.close()
    first.thread.join(5)
    second = Listener(SECRET)
    replay = socket.create_connection(("127.0.0.1", second.port), timeout=5)
    replay.recv(1024)
    replay.sendall(answer + frames.message({"op": "agent-hello"}))
    assert replay.recv(1024) == b""
    second.thread.join(5)
    assert second.received == []
    assert second.refusal == "no proof of the container's secret"


def test_port_ranges_are_checked_and_honoured() -> None:
    with pytest.raises(ChannelError, match="LOW-HIGH"):
        tcp.parse_port_range("60001-60000", "slurm.conf")
    with pytest.raises(ChannelError, match="LOW-HIGH"):
        tcp.parse_port_range("many", "slurm.conf")
    assert tcp.parse_port_range("60000-60010", "x") == (60000, 60010)
    taken = tcp.listen(None, loopback_only=True)
    port = tcp.port_of(taken)
    with pytest.raises(ChannelError, match=f"no free port in {port}-{port}"):
        tcp.listen((port, port), loopback_only=True)
    other = tcp.listen(None, loopback_only=True)
    low, high = sorted((port, tcp.port_of(other)))
    other.close()
    free = tcp.port_of(tcp.listen((low, high), loopback_only=True))
    assert low <= free <= high and free != port


def test_a_tree_arrives_whole_and_no_file_lands_outside_its_place(tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "task-1").mkdir(parents=True)
    (source / "inventory.img").write_bytes(b"i" * 200_000)
    (source / "task-1" / "core.img").write_bytes(b"c")
    (source / "link").symlink_to("/etc/passwd")
    sender_sock, receiver_sock = socket.socketpair()
    sender = peer.Peer(sender_sock, SECRET)
    receiving = peer.Peer(receiver_sock, SECRET)
    target = tmp_path / "target"
    target.mkdir()
    receiver = files.TreeReceiver({"image": str(target)})
    done = threading.Event()

    def receive() -> None:
        receiver_sock.setblocking(True)
        try:
            while True:
                for kind, payload in receiving.receive():
                    if kind == frames.FILE:
                        receiver.data(payload)
                    else:
                        receiver.begin(frames.decode_message(payload))
        except peer.PeerGone:
            done.set()

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    files.send_all(sender, files.tree_frames(str(source), "image", lambda name: name == "task-1"))
    sender.close()
    assert done.wait(10)
    assert sorted(p.name for p in target.iterdir()) == ["inventory.img"]
    assert (target / "inventory.img").read_bytes() == b"i" * 200_000
    for bad in ({"area": "image", "path": "../outside"}, {"area": "image", "path": "/etc/x"},
                {"area": "work", "path": "x"}, {"area": "image", "path": "."}):
        with pytest.raises(ValueError):
            receiver.begin({"op": "file", **bad})
    assert not (tmp_path / "outside").exists()
    with pytest.raises(ValueError, match="without a file"):
        receiver.data(b"x")


def test_a_link_on_a_files_way_is_never_followed(tmp_path: Path) -> None:
    """A directory on a file's way that is a link (planted, or swapped in on a share the
    nodes write too) fails the file: nothing is written where the link leads, inside
    its place (task 1's images over task 0's) or outside it."""
    target, outside = tmp_path / "target", tmp_path / "outside"
    target.mkdir()
    outside.mkdir()
    (target / "task-1").symlink_to(".")
    (target / "away").symlink_to(outside)
    for path in ("task-1/core.img", "away/core.img", "away/deeper/core.img"):
        receiver = files.TreeReceiver({"image": str(target)})
        receiver.begin({"op": "file", "area": "image", "path": path})
        receiver.data(b"dumped")
        receiver.data(b"")
        assert receiver.failed is not None and "cannot write in" in receiver.failed, path
    assert sorted(p.name for p in target.iterdir()) == ["away", "task-1"]
    assert list(outside.iterdir()) == []


def _rootfs_sent_as_tar(tmp_path: Path, cut: int | None = None) -> Path:
    """A rootfs sent as tar_frames makes it into a receiver that unpacks it as it arrives
    (after cut bytes of it the sender is gone, if given); where it was unpacked."""
    source = tmp_path / "source"
    (source / "etc").mkdir(parents=True)
    (source / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (source / "big").write_bytes(os.urandom(3 << 20))
    os.link(source / "big", source / "big-too")
    (source / "mtab").symlink_to("/proc/mounts")
    os.chown(source / "etc/passwd", 5, 6)
    (source / "etc/passwd").chmod(0o640)
    sender_sock, receiver_sock = socket.socketpair()
    sender, receiving = peer.Peer(sender_sock, SECRET), peer.Peer(receiver_sock, SECRET)
    rootfs = tmp_path / "unpacked"
    receiver = files.TreeReceiver({"bundle": str(tmp_path / "bundle")},
                                  archives={("bundle", "rootfs.tar"): str(rootfs)})
    failure: list[BaseException] = []

    def receive() -> None:
        receiver_sock.setblocking(True)
        taken = 0
        try:
            while True:
                for kind, payload in receiving.receive():
                    if kind != frames.FILE:
                        receiver.begin(frames.decode_message(payload))
                        continue
                    if cut is not None and taken + len(payload) > cut:
                        receiver.data(payload[:cut - taken])
                        receiver.data(b"")  # the end, as if the archive ended there
                    receiver.data(payload)
                    taken += len(payload)
        except (peer.PeerGone, ValueError) as err:
            failure.append(err)
        finally:
            receiver.close()
            receiving.close()  # as an agent that failed to fetch its bundle

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    try:
        files.send_all(sender, files.tar_frames(str(source), "bundle", "rootfs.tar"))
    except ChannelError:
        assert cut is not None  # the receiver stopped taking it
    sender.close()
    thread.join(10)
    if cut is not None:
        assert failure and isinstance(failure[0], ValueError), failure
        assert "unpacking into" in str(failure[0])
    return rootfs


def test_a_rootfs_sent_as_tar_arrives_unpacked_with_owners_modes_and_links(
        tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("run as root: the rootfs holds files of another owner")
    rootfs = _rootfs_sent_as_tar(tmp_path)
    source = tmp_path / "source"
    assert (rootfs / "big").read_bytes() == (source / "big").read_bytes()
    assert (rootfs / "big").stat().st_ino == (rootfs / "big-too").stat().st_ino
    assert os.readlink(rootfs / "mtab") == "/proc/mounts"
    info = (rootfs / "etc/passwd").stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o7777) == (5, 6, 0o640)
    assert not (tmp_path / "bundle").exists()  # the archive itself was never written out


def test_a_rootfs_archive_cut_short_is_an_error_and_no_tar_is_left(tmp_path: Path) -> None:
    before = _children()
    _rootfs_sent_as_tar(tmp_path, cut=1 << 20)
    assert _children() == before


def _children() -> list[str]:
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as listing:
        return listing.read().split()


def test_what_arrives_with_the_end_of_a_fetched_tree_is_not_lost(tmp_path: Path) -> None:
    """stdin (and orders) sent right after a tree, in the same read, go on to their
    handler: a container's stdin ending there must still end."""
    agent_sock, anchor_sock = socket.socketpair()
    agent, anchor = peer.Peer(agent_sock, SECRET), peer.Peer(anchor_sock, SECRET)
    # The anchor's whole answer, in one write: the tree, its end, then stdin and its end.
    anchor_sock.sendall(
        frames.message({"op": "file", "area": "bundle", "path": "config.json"})
        + frames.frame(frames.FILE, b"{}") + frames.frame(frames.FILE)
        + frames.message({"op": "bundle-sent", "error": None})
        + frames.frame(frames.STDIN, b"typed\n") + frames.frame(frames.STDIN))
    others: list[tuple[int, bytes]] = []
    files.fetch_tree(agent, "send-bundle", "bundle-sent",
                     files.TreeReceiver({"bundle": str(tmp_path)}), others.extend)
    assert (tmp_path / "config.json").read_bytes() == b"{}"
    assert others == [(frames.STDIN, b"typed\n"), (frames.STDIN, b"")]
    asked = anchor_sock.recv(4096)
    assert frames.decode_message(asked[frames.HEADER.size:]) == {"op": "send-bundle"}
    agent.close()
    anchor.close()


def test_an_error_instead_of_a_tree_is_a_channel_error(tmp_path: Path) -> None:
    agent_sock, anchor_sock = socket.socketpair()
    agent = peer.Peer(agent_sock, SECRET)
    anchor_sock.sendall(frames.message({"op": "bundle-sent", "error": "no rootfs here"}))
    with pytest.raises(ChannelError, match="no rootfs here"):
        files.fetch_tree(agent, "send-bundle", "bundle-sent",
                         files.TreeReceiver({"bundle": str(tmp_path)}), lambda frames_: None)
    agent.close()
    anchor_sock.close()


def test_a_tree_that_cannot_be_written_here_is_read_to_its_end_and_said_in_one_line(
        tmp_path: Path, mounts: Mounts) -> None:
    """This side's disk failed, not the sender: every frame of the tree is still taken,
    and once all of it has arrived the error names the place and why."""
    agent_sock, anchor_sock = socket.socketpair()
    agent = peer.Peer(agent_sock, SECRET)
    target = tmp_path / "images"
    mounts.read_only(target)
    anchor_sock.sendall(
        frames.message({"op": "file", "area": "image", "path": "pages-1.img"})
        + frames.frame(frames.FILE, b"p" * 1000) + frames.frame(frames.FILE)
        + frames.message({"op": "file", "area": "image", "path": "task-1/core.img"})
        + frames.frame(frames.FILE, b"c") + frames.frame(frames.FILE)
        + frames.message({"op": "images-sent", "error": None}))
    with pytest.raises(ChannelError) as failed:
        files.fetch_tree(agent, "send-images", "images-sent",
                         files.TreeReceiver({"image": str(target)}), lambda frames_: None)
    assert str(failed.value) == f"cannot write in {target}: Read-only file system"
    agent.close()
    anchor_sock.close()


@FUZZ
@given(st.binary(max_size=150), st.binary(max_size=300))
def test_the_channels_hmac_is_hmac_sha256(key: bytes, message: bytes) -> None:
    """Computed over CPython's own SHA-256, it gives what hmac gives."""
    import hmac

    assert auth.hmac_sha256(key, message) == hmac.digest(key, message, "sha256")



def _last_report_after_unread_orders(hang_up: bool) -> list[dict[str, object]] | str:
    """An agent with an order it never read sends output, then its exit report, and
    ends while some of that is still on its way (the anchor reads slowly); the anchor
    closes once it has the report: the messages it got, or its error."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    agent_sock = socket.create_connection(listener.getsockname()[:2])
    anchor_sock = sockets.accept(listener)
    listener.close()
    anchor_sock.sendall(frames.message({"op": "report-running"}))
    got: list[list[dict[str, object]] | str] = []

    def anchor() -> None:
        threading.Event().wait(0.2)  # the agent has closed (or hung up) by now
        reader, said = frames.FrameReader(), []
        try:
            while not any(m.get("event") == "exit" for m in said):
                data = anchor_sock.recv(4096)
                if not data:
                    break
                said += peer.messages(reader.feed(data))
            got.append(said)
        except OSError as err:
            got.append(err.strerror or str(err))
        finally:
            anchor_sock.close()

    reading = threading.Thread(target=anchor)
    reading.start()
    agent = peer.Peer(agent_sock, b"secret")
    for _ in range(8):
        agent.send(frames.frame(frames.STDOUT, b"x" * 32768))
    agent.send(frames.message({"event": "exit", "status": 3}))
    assert agent.flush_blocking(5)
    if hang_up:
        agent.hang_up(5)
    agent.close()
    reading.join()
    return got[0]


def test_an_agent_that_hangs_up_delivers_its_last_report_despite_unread_orders() -> None:
    """A plain close with an order still unread resets the connection, and what was
    still on its way, the report included, is lost; hanging up waits for the anchor
    to close first."""
    assert _last_report_after_unread_orders(hang_up=False) == "Connection reset by peer"
    assert _last_report_after_unread_orders(hang_up=True) == [{"event": "exit", "status": 3}]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_an_anchor_is_dialed_by_address_or_by_name(host: str) -> None:
    server = tcp.listen(None, loopback_only=True)
    try:
        conn = tcp.dial(host, tcp.port_of(server), 5)
        accepted = sockets.accept(server)
        conn.sendall(b"hi")
        assert accepted.recv(2) == b"hi"
        conn.close()
        accepted.close()
    finally:
        server.close()


def test_both_ends_of_a_connection_probe_a_silent_peer() -> None:
    """A crashed login host or node sends no FIN: the kernel's keepalive probes are what
    end such a connection (in about two minutes, tcp.KEEPALIVE), on the dialing side and
    on the side that accepted it."""
    server = tcp.listen(None, loopback_only=True)
    dialed = tcp.dial("127.0.0.1", tcp.port_of(server), 5)
    accepted = socket.socket(fileno=server._accept()[0])
    try:
        for conn in (dialed, accepted):
            assert conn.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            for option, value in tcp.KEEPALIVE:
                assert conn.getsockopt(socket.IPPROTO_TCP, option) == value
    finally:
        for conn in (dialed, accepted, server):
            conn.close()
