"""A user at a terminal: commands run in a tmux of the test's own (a server nobody else
uses), typed into and resized as a person would."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.harness import require, wait_for


class Terminal:
    """One 100x30 terminal; each command run in it writes its exit status to a file."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.started = False

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.server, *args], capture_output=True,
                              text=True, check=True).stdout

    def run(self, command: str, result: Path) -> None:
        """Start command in the terminal (a new window after the first one)."""
        line = f"{command}; echo $? > {result}"
        if self.started:
            self.tmux("respawn-pane", "-k", "-t", "t", line)
        else:
            # The pane stays once its command ended, for the next one to run in.
            self.tmux("start-server", ";", "set-option", "-g", "remain-on-exit", "on", ";",
                      "new-session", "-d", "-s", "t", "-x", "100", "-y", "30", line)
            self.started = True

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def shows(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in (seen := self.screen()):
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout} s waiting for {text!r} on the "
                            f"terminal, which shows:\n{seen}")
            time.sleep(0.1)

    def answers(self, line: str, text: str, timeout: float) -> None:
        """line, typed again each second until text shows, which it must within timeout."""
        deadline = time.monotonic() + timeout
        while True:
            self.type(line)
            try:
                self.shows(text, min(1.0, max(deadline - time.monotonic(), 0.0)))
                return
            except pytest.fail.Exception:
                if time.monotonic() > deadline:
                    raise

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-t", "t", line, "Enter")

    def resize(self, columns: int, rows: int) -> None:
        self.tmux("resize-window", "-t", "t", "-x", str(columns), "-y", str(rows))


@contextmanager
def terminal() -> Iterator[Terminal]:
    require("tmux", "tmux")
    handle = Terminal(f"pyscrun-{uuid.uuid4().hex[:8]}")
    try:
        yield handle
    finally:
        subprocess.run(["tmux", "-L", handle.server, "kill-server"], capture_output=True,
                       check=False)


def at_a_terminal(command: str, result: Path, status: int = 5, resize: bool = True,
                  start_timeout: float = 60) -> None:
    """Run the shell command (an interactive `sh` in a container) in a 100x30 terminal:
    its prompt comes, what is typed runs there at that size, a resize to 80x20 reaches
    it (if resize), its SIGWINCH reaching what runs in the foreground, and `exit STATUS`
    ends it with that status (written to result)."""
    with terminal() as term:
        term.run(command, result)
        wait_for(lambda: "#" in term.screen(), start_timeout, "the container's prompt")
        # docker sets the size once start returned, as with runc: after the prompt, maybe.
        term.answers("echo typed$((40+2)); stty size", "30 100", 20)
        assert "typed42" in term.screen(), term.screen()
        if resize:
            # What runs in the foreground is told of the resize (SIGWINCH), as
            # full-screen programs must be (the prompt's own line editing takes it).
            term.type("sh -c 'trap \"echo WINCH\\$((1+1)); exit\" WINCH; "
                      "echo READY$((2+2)); while :; do sleep 0.1; done'")
            term.shows("READY4", 10)
            term.resize(80, 20)
            term.shows("WINCH2", 10)
            term.answers("stty size", "20 80", 10)
        term.type(f"exit {status}")
        wait_for(result.exists, 30, "the exit status")
        assert result.read_text().strip() == str(status), term.screen()
