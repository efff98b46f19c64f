"""A process's port under stress, from outside: connections that never prove
themselves, and the process run out of descriptors by a real limit (prlimit)."""

from __future__ import annotations

import os
import resource
import socket
import time
from collections.abc import Callable
from pathlib import Path

from pyscrun.channel import frames
from tests.integration.harness import wait_for


def challenge(port: int) -> tuple[socket.socket, bytes]:
    """A connection to port on loopback, and the challenge it was sent first."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    header = conn.recv(frames.HEADER.size, socket.MSG_WAITALL)
    kind, length = frames.HEADER.unpack(header)
    assert kind == frames.CHALLENGE
    return conn, conn.recv(length, socket.MSG_WAITALL)


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def out_of_descriptors(pid: int, port: int, said: Callable[[], str], words: str) -> None:
    """Run pid out of descriptors (its limit a few above its highest open one, every
    one below taken by a connection to port) while more connect: it says `words` once
    (in said(), what it logged), does not spin, and once it has descriptors again
    accepts and challenges the connections that waited."""
    limit = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    highest = max(int(fd) for fd in os.listdir(f"/proc/{pid}/fd"))
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (highest + 4, limit[1]))
    try:
        free = highest + 4 - descriptors(pid)
        assert free < 64, "too many holes below the highest descriptor for this test"
        held = [challenge(port)[0] for _ in range(free)]
        queued = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(5)]
        wait_for(lambda: words in said(), 10, f"{pid} to run out of descriptors")
        cpu = cpu_seconds(pid)
        time.sleep(3)
        assert cpu_seconds(pid) - cpu < 0.5, f"{pid} spins while out of descriptors"
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, limit)
    for conn in queued:
        kind, _ = frames.HEADER.unpack(conn.recv(frames.HEADER.size, socket.MSG_WAITALL))
        assert kind == frames.CHALLENGE
    for conn in held + queued:
        conn.close()
    assert said().count(words) == 1, said()
