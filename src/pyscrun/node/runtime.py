"""Running the oci.conf RunTime* commands: `/bin/sh -c` with shell-quoted substitutions."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyscrun import log
from pyscrun.conf import patterns
from pyscrun.conf.ociconf import OciConf
from pyscrun.errors import RuntimeCommandError


class RuntimeCommands:
    def __init__(self, conf: OciConf, values: patterns.PatternValues, cwd: Path,
                 environ: dict[str, str]) -> None:
        self.conf = conf
        self.values = values
        self.cwd = cwd
        exclude = conf.RunTimeEnvExclude
        self.env = {k: v for k, v in environ.items()
                    if not (exclude and exclude.search(f"{k}={v}"))}

    def command(self, directive: str) -> str:
        pattern: str = getattr(self.conf, directive)
        return patterns.expand(pattern, self.values)

    def set_pid(self, pid: int) -> None:
        self.values = replace(self.values, pid=str(pid))

    def spawn(self, directive: str) -> subprocess.Popen[bytes]:
        """Start a command that inherits stdio: the container's own run or create."""
        command = self.command(directive)
        log.current.debug(f"{directive}: {command}")
        return subprocess.Popen(["/bin/sh", "-c", command], cwd=self.cwd, env=self.env)

    def run(self, directive: str, timeout: float = 60.0) -> tuple[int, str]:
        """Run a command to completion with its output captured."""
        if not getattr(self.conf, directive):
            return 0, ""
        command = self.command(directive)
        log.current.debug(f"{directive}: {command}")
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", command], cwd=self.cwd, env=self.env, timeout=timeout,
                stdin=subprocess.DEVNULL, capture_output=True, check=False,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeCommandError(f"{directive} did not finish within {timeout} s") from None
        output = done.stdout.decode(errors="replace")
        if done.returncode != 0:
            log.current.debug(
                f"{directive} exited {done.returncode}: "
                f"{done.stderr.decode(errors='replace').strip()}"
            )
        return done.returncode, output

    def query(self) -> dict[str, Any] | None:
        """The runtime's state document, or None if it knows no such container."""
        if not self.conf.RunTimeQuery:
            return None
        code, output = self.run("RunTimeQuery")
        if code != 0:
            return None
        try:
            document = json.loads(output)
        except ValueError:
            return None
        return document if isinstance(document, dict) else None

    def running_pid(self) -> int:
        """The container's init once it runs the container's process, else 0.

        A signal to a `created` init would kill the runtime's own setup code instead
        of reaching the process it is meant for.
        """
        document = self.query()
        if document and document.get("status") == "running":
            pid = document.get("pid")
            if isinstance(pid, int) and pid > 0:
                return pid
        return 0


def stop_and_delete(commands: RuntimeCommands) -> None:
    """Kill the container if the runtime still has it running, then delete it."""
    document = commands.query()
    if commands.conf.RunTimeQuery and document is None:
        return
    if document is None or document.get("status") in ("creating", "created", "running", "paused"):
        commands.run("RunTimeKill")
    commands.run("RunTimeDelete")

