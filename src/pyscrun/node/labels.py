"""srun's --label for the container's output (SCRUN_LABELIO, or --label in SrunArgs).

The container's output goes to the anchor over the channel, not through srun, which
would otherwise prefix it: the agent does it as slurmstepd and srun do (Slurm's io.c
and write_labelled_message). Lines go whole, as slurmstepd sends them (the anchor
merges the tasks' streams: a part of a line would meet another task's), every one
starting with the task's number right-aligned to the width of the step's highest,
then ": "; a line longer than slurmstepd's message goes in parts of that size, and a
part, or a last line, without its newline is ended with one.
"""

from __future__ import annotations

import os

from pyscrun.channel import streams

# slurmstepd's SLURM_IO_MAX_MSG_LEN: the longest line it sends whole.
MAX_LINE = 1024

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket
    from collections.abc import Mapping


def label_of(env: Mapping[str, str]) -> bytes | None:
    """The task's label, if srun was asked for labels: it tells each task so
    (SLURM_LABELIO=1)."""
    if env.get("SLURM_LABELIO") != "1":
        return None
    tasks = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or "1")
    width = len(str(max(tasks - 1, 0)))
    return f"{int(env.get('SLURM_PROCID') or 0):>{width}}: ".encode()


class Labelling:
    """One output stream's lines, each given the label, as they pass."""

    def __init__(self, label: bytes) -> None:
        self.label = label
        self.pending = bytearray()  # a line not ended yet

    def lines(self, data: bytes) -> bytes:
        """The whole lines data ends, labelled; the rest waits for its end."""
        self.pending += data
        out = bytearray()
        while True:
            end = self.pending.find(b"\n", 0, MAX_LINE)
            if end >= 0:
                out += self.label + self.pending[:end + 1]
                del self.pending[:end + 1]
            elif len(self.pending) >= MAX_LINE:
                out += self.label + self.pending[:MAX_LINE] + b"\n"
                del self.pending[:MAX_LINE]
            else:
                return bytes(out)

    def end(self) -> bytes:
        """What ends the stream: a last line that had no newline, labelled and ended."""
        if not self.pending:
            return b""
        out = self.label + self.pending + b"\n"
        self.pending.clear()
        return bytes(out)


def labelled_pump(pipe: int, sock: _socket.socket, label: bytes) -> streams.Mover:
    """One output pipe into its connection, each line labelled, in a thread."""
    sock.setblocking(True)  # a full socket holds the pump, and so the container
    labelling = Labelling(label)

    def step(_: object) -> bool:
        data = os.read(pipe, streams.CHUNK)
        sock.sendall(labelling.lines(data) if data else labelling.end())
        return bool(data)

    return streams.Mover(pipe, sock, step)
