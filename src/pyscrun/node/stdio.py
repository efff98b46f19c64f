"""The container's stdio as streams to the anchor, for a container on another machine.

Each of the container's output streams has a connection of its own to the anchor
(channel/streams.py). A runtime that copies the container's output itself in the
foreground (`runc restore` puts pipes of its own between the container and its own
stdio) is given the connections themselves as its stdout and stderr: nothing of this
process stands between. Any other (`runc create`, `runc run --detach`, whose container
inherits the runtime's stdio) is given pipes, as the container must see pipes (a socket
cannot be opened as /dev/stdout): a thread per stream splices each into its connection
and does nothing else, so the agent's own loop is not woken for every write of the
container.
Task 0's stdin comes the other way as frames on the control connection, which the agent
reads whatever the container does (the anchor's orders come the same way): it tells the
anchor what the container took, and the anchor sends no more than frames.STDIN_WINDOW
beyond that. When the anchor cannot keep up with the output, a stream's socket fills,
the runtime or the pump waits and so does the container, as it would for a slow reader
of its own stdout: nothing is dropped and memory stays bounded.
"""

from __future__ import annotations

import _socket
import os

from pyscrun import poller
from pyscrun.channel import frames, streams
from pyscrun.node import labels
from pyscrun.watch import drain, watch, widen_pipe

# Bytes of stdin waiting for the container beyond which the agent stops reading its
# connection: only an anchor that ignored the window gets there.
HIGH_WATER = 2 * frames.STDIN_WINDOW
# How much of the stdin taken (written into the container's pipe, or dropped once it had
# no reader) is told to the anchor at once; all of it once none waits.
TAKEN_STEP = frames.STDIN_WINDOW // 4


class ContainerStdio:
    STDIN_KEY = ("stdin", 0)

    def __init__(self, with_stdin: bool, outputs: dict[int, _socket.socket],
                 label: bytes | None = None) -> None:
        """outputs: the connection of each output stream (frames.STDOUT, STDERR); label:
        what each line of them starts with (node/labels.py), if anything."""
        self.label = label
        self.stdin_r, self.stdin_w = (os.pipe() if with_stdin
                                      else (os.open(os.devnull, os.O_RDONLY), -1))
        self.outputs = [outputs[frames.STDOUT], outputs[frames.STDERR]]
        # What this process still holds of what the runtime was given, closed once it has
        # it: the container's end would never show as end of file.
        self.handed_over: list[int] = []
        self.pumps: list[streams.Mover] = []
        if self.stdin_w >= 0:
            os.set_blocking(self.stdin_w, False)
        self.stdin_data = bytearray()
        self.stdin_ended = False
        self.stdin_taken = 0  # bytes taken since the anchor was last told
        self.selector: poller.Poller | None = None

    def child_ends(self, runtime_copies: bool) -> tuple[int, int, int]:
        """The runtime's stdin, stdout and stderr. runtime_copies: the runtime copies the
        container's output through pipes of its own, so it may write the connections
        itself; otherwise pipes, each spliced into its connection (or, to be labelled,
        copied line by line)."""
        if runtime_copies and self.label is None:
            for sock in self.outputs:
                sock.setblocking(True)
            outs = [sock.detach() for sock in self.outputs]
        else:
            outs = []
            for sock in self.outputs:
                read, write = os.pipe()
                self.pumps.append(_pump(read, sock) if self.label is None
                                  else labels.labelled_pump(read, sock, self.label))
                outs.append(write)
        self.outputs = []
        self.handed_over = [self.stdin_r, *outs]
        return self.stdin_r, outs[0], outs[1]

    def spawned(self) -> None:
        """The runtime has its stdio: this process lets go of it, and the pumps start."""
        if not self.handed_over:
            return
        for fd in self.handed_over:
            os.close(fd)
        self.handed_over = []
        for pump in self.pumps:
            pump.thread.start()

    def attach(self, selector: poller.Poller) -> None:
        self.selector = selector

    # -- stdin -------------------------------------------------------------------------
    def on_stdin(self, data: bytes) -> None:
        """Data (or, empty, the end) of stdin from the anchor."""
        if self.stdin_w < 0 or self.stdin_ended:
            return
        if data:
            self.stdin_data += data
        else:
            self.stdin_ended = True
        self.write_stdin()

    def write_stdin(self) -> None:
        if self.stdin_w < 0:
            return
        stdin_w = self.stdin_w
        waiting = len(self.stdin_data)
        drain(self.stdin_data, lambda data: os.write(stdin_w, data))
        self.stdin_taken += waiting - len(self.stdin_data)
        if self.selector is not None:
            watch(self.selector, self.stdin_w, poller.WRITE if self.stdin_data else 0,
                  self.STDIN_KEY)
        if self.stdin_ended and not self.stdin_data:
            os.close(self.stdin_w)
            self.stdin_w = -1

    def stdin_full(self) -> bool:
        """Whether stdin from the anchor should wait (more came than the window lets)."""
        return len(self.stdin_data) >= HIGH_WATER

    def taken_to_tell(self) -> int:
        """Bytes of stdin taken to tell the anchor of now (0: none yet)."""
        if self.stdin_taken >= TAKEN_STEP or (self.stdin_taken and not self.stdin_data):
            taken, self.stdin_taken = self.stdin_taken, 0
            return taken
        return 0

    # -- the end -----------------------------------------------------------------------
    def finish(self, quiet: float) -> None:
        """The container has ended: send what is left of its output, up to the end of
        each stream (given up once quiet seconds pass with nothing moved, should
        something of it still hold a pipe)."""
        if self.outputs:  # the runtime never started: nothing writes the streams
            for sock in self.outputs:
                sock.close()
            self.outputs = []
            os.close(self.stdin_r)
        self.spawned()
        if self.stdin_w >= 0:
            if self.selector is not None:
                watch(self.selector, self.stdin_w, 0, self.STDIN_KEY)
            os.close(self.stdin_w)
            self.stdin_w = -1
        for pump in self.pumps:
            pump.finish(quiet)
            os.close(pump.source)
        self.pumps.clear()


def _pump(pipe: int, sock: _socket.socket) -> streams.Mover:
    """One output pipe spliced into its connection, in a thread, until the pipe's end."""
    # Blocking: a full socket holds the pump, and so the container.
    sock.setblocking(True)
    widen_pipe(pipe)
    # Readable: the pipe holds data, or has ended (0 moved).
    return streams.Mover(pipe, sock, lambda _: streams.move(
        pipe, sock.fileno(), wait_for_target=True) != 0)
