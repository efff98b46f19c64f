"""A task's stdout and stderr on connections of their own: spliced from the container's
pipes into sockets by the agent's code, and from the sockets into the caller's pipes by
the anchor's, over real TCP on loopback."""

from __future__ import annotations

import os
import selectors
import socket
import threading
import time

from pyscrun import sockets
from pyscrun.anchor.stdio import Sink, stream_into
from pyscrun.channel import frames, peer, streams, tcp
from pyscrun.node.stdio import TAKEN_STEP, ContainerStdio

SECRET = b"s" * 32


class AnchorSide:
    """The anchor's end of two streams: each accepted, proven, taken, and spliced into
    a pipe of its own whose reader is `out[kind]`."""

    def __init__(self, slow_for: float = 0.0) -> None:
        self.server = tcp.listen(None, loopback_only=True)
        self.port = tcp.port_of(self.server)
        self.pipes = {kind: os.pipe() for kind in (frames.STDOUT, frames.STDERR)}
        self.out = {kind: bytearray() for kind in self.pipes}
        self.slow_for = slow_for
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        self.readers = [threading.Thread(target=self._read, args=(kind,), daemon=True)
                        for kind in self.pipes]
        for reader in self.readers:
            reader.start()

    def _read(self, kind: int) -> None:
        # A caller that does not read for a while: the container must wait for it.
        time.sleep(self.slow_for)
        while data := os.read(self.pipes[kind][0], 1 << 16):
            self.out[kind] += data

    def _serve(self) -> None:
        taken = []
        for _ in self.pipes:
            sock = sockets.accept(self.server)
            link = peer.Peer.accepted(sock, SECRET)
            got: list[tuple[int, bytes]] = []
            with selectors.DefaultSelector() as selector:
                selector.register(sock, selectors.EVENT_READ)
                while not got:
                    selector.select(5)
                    got = link.receive()
            [hello] = peer.messages(got)
            assert hello["op"] == streams.HELLO
            link.send(frames.message({"op": streams.TAKEN}))
            sink = Sink(self.pipes[hello["stream"]][1])
            stream = stream_into(sink, sock, lambda: None)
            stream.thread.start()
            taken.append((stream, sink))
        for stream, sink in taken:
            stream.thread.join(60)
            assert stream.ended
            sink.close()


def _round_trip(slow_for: float, runtime_copies: bool = False) -> None:
    """The container (or, runtime_copies, the runtime that copies its output) writes
    both streams; the caller reads them after slow_for s."""
    anchor = AnchorSide(slow_for)
    outputs = {kind: streams.dial("127.0.0.1", anchor.port, SECRET, 5, "0", kind)
               for kind in (frames.STDOUT, frames.STDERR)}
    stdio = ContainerStdio(with_stdin=False, outputs=outputs)
    # The container's ends, as the runtime holds them once the agent let go of its own.
    out_w, err_w = (os.dup(fd) for fd in stdio.child_ends(runtime_copies)[1:])
    stdio.spawned()
    # The container's writes: distinct bytes, so that any loss or reordering shows.
    sent = {frames.STDOUT: bytes(range(256)) * 32768, frames.STDERR: b"err\n" * 100000}
    for fd, kind in ((out_w, frames.STDOUT), (err_w, frames.STDERR)):
        view = memoryview(sent[kind])
        while view:
            view = view[os.write(fd, view[:65536]):]
        os.close(fd)
    stdio.finish(quiet=30)
    anchor.thread.join(30)
    for reader in anchor.readers:
        reader.join(30)
    assert bytes(anchor.out[frames.STDOUT]) == sent[frames.STDOUT]
    assert bytes(anchor.out[frames.STDERR]) == sent[frames.STDERR]


def test_streams_arrive_whole_in_order_and_end() -> None:
    _round_trip(slow_for=0.0)


def test_a_slow_reader_slows_the_container_and_loses_nothing() -> None:
    _round_trip(slow_for=1.0)


def test_a_runtime_that_copies_the_output_writes_the_connections_themselves() -> None:
    _round_trip(slow_for=0.0, runtime_copies=True)
    _round_trip(slow_for=1.0, runtime_copies=True)


def _stream_moving_for(seconds: float | None) -> streams.Mover:
    """A stream whose every step moves something after 0.1 s, ending by itself after
    seconds of it (None: a step that never returns, as a reader gone for good)."""
    read_end, write_end = os.pipe()
    os.write(write_end, b"x")  # always readable: each step has something to move
    steps = 0

    def step(stop: object) -> bool:
        nonlocal steps
        if seconds is None:
            while not mover.stop.is_set():
                time.sleep(0.01)
            return False
        time.sleep(0.1)
        steps += 1
        return steps * 0.1 < seconds

    ours, _ = socket.socketpair()  # the stream's connection: nothing goes through it
    mover = streams.Mover(read_end, ours, step)
    mover.thread.start()
    return mover


def test_a_stream_that_keeps_moving_is_waited_for_past_the_quiet_time() -> None:
    """The container has ended and its output still moves, slowly (a slow reader): the
    stream is let end by itself, however long that takes, as long as it moves. The wait
    used to bound the whole, and cut the end off."""
    mover = _stream_moving_for(2.0)
    started = time.monotonic()
    mover.finish(0.5)
    assert mover.ended and not mover.stop.is_set()
    assert time.monotonic() - started >= 1.5


def test_a_stream_that_moves_nothing_is_given_up_after_the_quiet_time() -> None:
    mover = _stream_moving_for(None)
    started = time.monotonic()
    mover.finish(0.5)
    assert mover.ended and mover.stop.is_set()
    assert time.monotonic() - started < 5


def _shared_pipe(parts: list[tuple[int, bytes]], slow_for: float = 0.0) -> list[bytes]:
    """Two tasks' streams into one pipe (as two tasks' stdout into podman's): each part
    (task, bytes) sent in turn, 0.1 s apart; the lines the caller reads."""
    read_end, write_end = os.pipe()
    sink = Sink(write_end)
    pairs = [socket.socketpair() for _ in range(2)]
    movers = [stream_into(sink, ours, lambda: None) for ours, _ in pairs]
    for mover in movers:
        mover.thread.start()
    got = bytearray()

    def read() -> None:
        time.sleep(slow_for)
        while data := os.read(read_end, 1 << 16):
            got.extend(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    for task, data in parts:
        pairs[task][1].sendall(data)
        time.sleep(0.1)
    for _, theirs in pairs:
        theirs.close()
    for mover in movers:
        mover.thread.join(30)
        assert mover.ended
    sink.close()
    reader.join(30)
    os.close(read_end)
    return bytes(got).splitlines()


def test_tasks_sharing_the_callers_output_never_cut_each_other_s_lines() -> None:
    """As srun's: a line written in parts reaches the caller whole, whatever another
    task wrote meanwhile; a last line without its newline comes at the stream's end."""
    lines = _shared_pipe([(0, b"task 0 says a line in "), (1, b"task 1 says one\n"),
                          (0, b"two parts\ntask 0 ends without a newline")])
    assert sorted(lines) == [b"task 0 ends without a newline", b"task 0 says a line in two parts",
                             b"task 1 says one"]


def test_a_task_that_writes_before_the_others_stream_comes_keeps_its_lines_whole() -> None:
    """Task 0 starts a line before task 1's stream is taken (its node is slower): the
    step's task count, told with each stream, keeps lines whole from the first byte.
    Task 1's line used to land in the middle of task 0's."""
    read_end, write_end = os.pipe()
    sink = Sink(write_end)
    pairs = [socket.socketpair() for _ in range(2)]
    movers = []
    for task, text in ((0, b"task 0 starts a line "), (1, b"task 1 line\n")):
        movers.append(stream_into(sink, pairs[task][0], lambda: None, tasks=2))
        movers[-1].thread.start()
        pairs[task][1].sendall(text)
        time.sleep(0.2)
    pairs[0][1].sendall(b"and ends it\n")
    for _, theirs in pairs:
        theirs.close()
    for mover in movers:
        mover.thread.join(30)
    sink.close()
    with os.fdopen(read_end, "rb") as caller:
        assert sorted(caller.read().splitlines()) == [b"task 0 starts a line and ends it",
                                                      b"task 1 line"]


def test_tasks_sharing_a_full_pipe_wait_for_the_caller_and_lose_nothing() -> None:
    """The caller reads only after the pipe has filled: the tasks' whole lines wait
    for it, every one of them arrives, none cut."""
    line = {task: f"task {task} ".encode() + b"x" * 200 + b"\n" for task in (0, 1)}
    parts = [(task, line[task] * 4000) for _ in range(3) for task in (0, 1)]
    lines = _shared_pipe(parts, slow_for=1.0)
    assert len(lines) == 24000
    assert set(lines) == {line[0][:-1], line[1][:-1]}


def test_the_agent_tells_the_anchor_all_the_stdin_the_container_took_or_could_not() -> None:
    """What the anchor may send next hangs on it (frames.STDIN_WINDOW): every byte taken
    is told, in steps while more waits, at once when none does, dropped ones too (the
    container closed its stdin)."""
    ends = [socket.socketpair() for _ in range(2)]
    stdio = ContainerStdio(with_stdin=True, outputs={frames.STDOUT: ends[0][0],
                                                     frames.STDERR: ends[1][0]})
    stdio.on_stdin(b"typed\n")
    assert stdio.taken_to_tell() == 6 and stdio.taken_to_tell() == 0
    told = 6
    stdio.on_stdin(b"x" * (3 << 20))  # more than the pipe holds: most of it waits
    assert stdio.stdin_data and stdio.taken_to_tell() == 0
    read = 0
    while read < 2 * TAKEN_STEP:  # the container reads: what waited goes on
        read += len(os.read(stdio.stdin_r, 1 << 20))
        stdio.write_stdin()
    told += stdio.taken_to_tell()
    assert told > 6
    os.close(stdio.stdin_r)  # the container closed its stdin: what waits has nowhere to go
    stdio.write_stdin()
    told += stdio.taken_to_tell()
    assert told == 6 + (3 << 20)
    for pair in ends:
        for end in pair:
            end.close()
