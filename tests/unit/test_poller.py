"""The descriptor loops' poller (poller.py) and the stream threads (threads.py): what the
anchor, the node agent and srun_cr rely on of them, on real pipes, sockets and threads,
and that the node agent's start loads none of the modules they stand in for."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from pyscrun import poller, threads


def test_a_pipe_is_ready_for_what_it_is_watched_for_only() -> None:
    read_end, write_end = os.pipe()
    try:
        with poller.Poller() as loop:
            loop.register(read_end, poller.READ, "in")
            loop.register(write_end, poller.WRITE, "out")
            assert [(key.data, events) for key, events in loop.select(0)] == [("out", poller.WRITE)]
            os.write(write_end, b"x")
            ready = {key.data: events for key, events in loop.select(0)}
            assert ready == {"in": poller.READ, "out": poller.WRITE}
    finally:
        os.close(read_end)
        os.close(write_end)


def test_modify_changes_events_and_data_and_unregister_forgets() -> None:
    left, right = socket.socketpair()
    with left, right, poller.Poller() as loop:
        loop.register(left, poller.READ, "reading")
        assert loop.select(0) == []
        loop.modify(left, poller.WRITE, "writing")
        key = loop.get_key(left)
        assert key is not None and (key.events, key.data, key.fileobj) == (
            poller.WRITE, "writing", left)
        [(ready, events)] = loop.select(0)
        assert (ready.data, events) == ("writing", poller.WRITE)
        loop.unregister(left)
        assert loop.get_key(left) is None and loop.select(0) == []
        with pytest.raises(KeyError):
            loop.unregister(left)


def test_a_hang_up_wakes_a_reader() -> None:
    left, right = socket.socketpair()
    with left, poller.Poller() as loop:
        loop.register(left.fileno(), poller.READ)
        right.close()
        [(_, events)] = loop.select(1)
        assert events == poller.READ


def test_a_descriptor_registered_twice_is_refused() -> None:
    read_end, write_end = os.pipe()
    try:
        with poller.Poller() as loop:
            loop.register(read_end, poller.READ)
            with pytest.raises(KeyError):
                loop.register(read_end, poller.WRITE)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_wait_lasts_its_timeout_rounded_up_not_down() -> None:
    read_end, write_end = os.pipe()
    try:
        with poller.Poller() as loop:
            loop.register(read_end, poller.READ)
            started = time.monotonic()
            assert loop.select(0.0501) == []
            assert time.monotonic() - started >= 0.05
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_thread_runs_and_is_joined_with_or_without_a_timeout() -> None:
    flag = threads.Flag()
    release_read, release_write = os.pipe()
    seen: list[bool] = []

    def work() -> None:
        os.read(release_read, 1)
        seen.append(flag.is_set())

    thread = threads.Thread(work)
    assert not thread.is_alive()
    thread.start()
    assert thread.is_alive()
    thread.join(0.05)
    assert thread.is_alive()  # still waiting for its release
    flag.set()
    os.write(release_write, b"x")
    thread.join()
    assert not thread.is_alive() and seen == [True]
    for fd in (release_read, release_write):
        os.close(fd)


def test_the_node_agent_starts_without_selectors_socket_threading_or_enum() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, pyscrun.node.userns, pyscrun.node.early, "
         "pyscrun.node.entry; print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True).stdout.split()
    assert not {"selectors", "socket", "threading", "enum", "signal", "collections"} & set(loaded)
    # Nor ctypes (linux.py uses _ctypes), nor what a shipped bundle or a checkpoint needs.
    assert not {"ctypes", "pyscrun.node.shipped", "pyscrun.channel.files",
                "pyscrun.node.images", "pyscrun.node.criu"} & set(loaded)


def test_the_anchor_loads_without_the_socket_module() -> None:
    # Its modules load while salloc and slurmctld need the CPUs for the job: the socket
    # module alone (enums, selectors, collections) would cost it 5 ms more, typing 2 ms.
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, pyscrun.cli.main, pyscrun.cli.lifecycle, "
         "pyscrun.anchor.spawn, pyscrun.backends.slurm, pyscrun.anchor.daemon; "
         "print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True).stdout.split()
    assert "pyscrun.anchor.daemon" in loaded
    assert not {"selectors", "socket", "enum", "collections", "subprocess", "typing"} & set(loaded)
