"""srun's --label for the container's output (SCRUN_LABELIO, or --label in SrunArgs).

The container's output goes to the anchor over the channel, not through srun, which
would otherwise prefix it: the agent does it as srun does (Slurm's
write_labelled_message), every line starting with the task's number right-aligned to
the width of the step's highest, then ": ", and a last line without its newline
ended with one.
"""

from __future__ import annotations

import os

from pyscrun.channel import streams

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
        self.at_line_start = True

    def lines(self, data: bytes) -> bytes:
        out = bytearray()
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            stop = len(data) if end < 0 else end + 1
            if self.at_line_start:
                out += self.label
            out += data[start:stop]
            self.at_line_start = end >= 0
            start = stop
        return bytes(out)

    def end(self) -> bytes:
        """What ends the stream: a newline after a last line that had none."""
        return b"" if self.at_line_start else b"\n"


def labelled_pump(pipe: int, sock: _socket.socket, label: bytes) -> streams.Mover:
    """One output pipe into its connection, each line labelled, in a thread."""
    sock.setblocking(True)  # a full socket holds the pump, and so the container
    labelling = Labelling(label)

    def step(_: object) -> bool:
        data = os.read(pipe, streams.CHUNK)
        sock.sendall(labelling.lines(data) if data else labelling.end())
        return bool(data)

    return streams.Mover(pipe, sock, step)
