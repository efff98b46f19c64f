"""A user at a terminal: a command run in a tmux of the test's own (a server nobody else
uses), typed into and resized as a person would."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

from tests.integration.harness import require, wait_for


def at_a_terminal(command: str, result: Path, status: int = 5, resize: bool = True,
                  start_timeout: float = 60) -> None:
    """Run the shell command (an interactive `sh` in a container) in a 100x30 terminal:
    its prompt comes, what is typed runs there at that size, a resize to 80x20 reaches
    it (if resize), and `exit STATUS` ends it with that status (written to result)."""
    require("tmux", "tmux")
    server = f"pyscrun-{uuid.uuid4().hex[:8]}"

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-L", server, *args], capture_output=True, text=True,
                              check=True).stdout

    def screen() -> str:
        return tmux("capture-pane", "-p", "-t", "t")

    def shows(text: str, timeout: float) -> None:
        wait_for(lambda: text in screen(), timeout, f"{text!r} on the terminal")

    tmux("new-session", "-d", "-s", "t", "-x", "100", "-y", "30",
         f"{command}; echo $? > {result}")
    try:
        wait_for(lambda: "#" in screen(), start_timeout, "the container's prompt")
        tmux("send-keys", "-t", "t", "echo typed$((40+2)); stty size", "Enter")
        shows("30 100", 20)
        assert "typed42" in screen(), screen()
        if resize:
            tmux("resize-window", "-t", "t", "-x", "80", "-y", "20")
            time.sleep(0.5)  # for the new size to reach the container's terminal
            tmux("send-keys", "-t", "t", "stty size", "Enter")
            shows("20 80", 10)
        tmux("send-keys", "-t", "t", f"exit {status}", "Enter")
        wait_for(result.exists, 30, "the exit status")
        assert result.read_text().strip() == str(status), screen()
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True, check=False)
