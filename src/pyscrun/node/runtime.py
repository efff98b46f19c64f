"""Running the oci.conf RunTime* commands: `/bin/sh -c` with shell-quoted substitutions."""

from __future__ import annotations

import os

from pyscrun import child, jsonc, log
from pyscrun.conf import patterns
from pyscrun.conf.ociconf import OciConf
from pyscrun.errors import RuntimeCommandError
from pyscrun.node import sealed_program

# typing costs milliseconds at every start of the CLI: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# Runtimes that, run in the foreground, put pipes of their own between the container's
# stdio and their own and copy the output through them (runc's `run` and `restore`
# without --detach): their run is better run detached (the container writes the
# agent's pipes), their restore given the sockets themselves (the container still sees
# pipes). The verbs of each that run in the foreground.
_COPYING_RUNTIMES = {"runc": ("run", "restore")}
_DETACHING = ("-d", "--detach")


class RuntimeCommands:
    def __init__(self, conf: OciConf, values: patterns.PatternValues, cwd: str,
                 environ: dict[str, str],
                 derive: Callable[[], dict[str, str]] | None = None) -> None:
        self.conf = conf
        # Patterns from pyscrun.conf (RunTimeCheckpoint, RunTimeRestore) beside oci.conf's,
        # worked out when first asked for (shlex and its `re` are no part of a start).
        self.derive = derive
        self._more: dict[str, str] | None = None
        self.values = values
        self.cwd = cwd
        exclude = conf.RunTimeEnvExclude
        self.env = {k: v for k, v in environ.items()
                    if not (exclude and exclude.search(f"{k}={v}"))}
        # Program words of the patterns run from a sealed copy: the copy's fd.
        self.sealed: dict[str, int] = {}

    def with_more(self, more: dict[str, str]) -> RuntimeCommands:
        """These commands with other pyscrun.conf patterns (checkpoint, restore)."""
        import copy

        other = copy.copy(self)
        other._more = more
        return other

    def pattern(self, directive: str) -> str:
        given = getattr(self.conf, directive, None)
        if given is not None:
            return str(given)
        if self._more is None:
            self._more = self.derive() if self.derive is not None else {}
        return self._more.get(directive, "")

    def seal_programs(self, directives: tuple[str, ...],
                      made: sealed_program.Sealing | None = None) -> None:
        """Run the programs of directives that copy themselves at each start (runc)
        from a sealed copy in memory (node/sealed_program.py): one made already if it
        is of the same file, else made now."""
        for directive in directives:
            pattern = self.pattern(directive)
            program, _ = _program_and_rest(pattern)
            if program in self.sealed:
                continue
            path = sealed_program.program_file(pattern, self.env.get("PATH"))
            if path is None:
                continue
            fd = made.take(path) if made is not None else None
            if fd is None:
                fd = sealed_program.sealed_copy(path)
            if fd is not None:
                self.sealed[program] = fd

    def command(self, directive: str, args: list[str] | None = None) -> str:
        values = self.values if args is None else self.values.replace(args=args)
        pattern = self.pattern(directive)
        program, rest = _program_and_rest(pattern)
        if program in self.sealed:
            pattern = f"/proc/self/fd/{self.sealed[program]} {rest}"
        return patterns.expand(pattern, values)

    def set_pid(self, pid: int) -> None:
        self.values = self.values.replace(pid=str(pid))

    def copies_output(self, directive: str) -> bool:
        """Whether the runtime that directive runs copies the container's output
        through pipes of its own (its program is one of _COPYING_RUNTIMES, running one of
        its foreground verbs)."""
        words = self.pattern(directive).split()
        verbs = _COPYING_RUNTIMES.get(os.path.basename(words[0])) if words else None
        return (verbs is not None and any(verb in words for verb in verbs)
                and not any(flag in words for flag in _DETACHING))

    def spawn(self, directive: str, args: list[str] | None = None,
              stdio: tuple[int, int, int] | None = None, preserve_fds: int = 0,
              detach: bool = False, own_group: bool = False) -> child.Child:
        """Start the container's own run or create, with stdio (stdin, stdout, stderr)
        or this process's own, and this process's fds 3.. (preserve_fds of them) given
        on to the container as runc takes them (`--preserve-fds N` after the command);
        detach: a foreground verb run detached (`--detach` after the command);
        own_group: in a process group of its own."""
        command = self.command(directive, args)
        if preserve_fds:
            command += f" --preserve-fds {preserve_fds}"
        if detach:
            command += f" {_DETACHING[-1]}"
        log.current.debug(f"{directive}: {command}")
        return child.spawn(self._shell(command), self.env, stdio or (None, None, None),
                           (*range(3, 3 + preserve_fds), *self.sealed.values()),
                           group=0 if own_group else None)

    def require(self, directive: str) -> None:
        """The command for directive (pyscrun.conf's), or the line that says what to set."""
        if not self.pattern(directive):
            raise RuntimeCommandError(
                f"{directive} is not set in pyscrun.conf and cannot be derived from oci.conf's "
                "RunTimeDelete (not of the form 'RUNTIME [OPTIONS] delete ... NAME'): set it "
                "in pyscrun.conf")

    def run_checked(self, directive: str, args: list[str] | None = None,
                    timeout: float = 60.0) -> str:
        """Run a command to completion: its stdout; RuntimeCommandError with its last
        line if it fails."""
        code, output = self.run(directive, timeout=timeout, args=args)
        if code != 0:
            last = output.strip().splitlines()[-1] if output.strip() else f"exit status {code}"
            raise RuntimeCommandError(f"{directive} failed: {last}")
        return output

    def run(self, directive: str, timeout: float = 60.0, args: list[str] | None = None,
            ) -> tuple[int, str]:
        """Run a command to completion; its status and stdout (stderr goes to the log,
        and stands in for stdout when the command fails)."""
        if not self.pattern(directive):
            return 0, ""
        command = self.command(directive, args)
        log.current.debug(f"{directive}: {command}")
        try:
            code, stdout, stderr = child.run(self._shell(command), self.env, timeout,
                                             self.sealed.values())
        except TimeoutError:
            raise RuntimeCommandError(f"{directive} did not finish within {timeout} s") from None
        output = stdout.decode(errors="replace")
        if code != 0:
            errors = stderr.decode(errors="replace").strip()
            log.current.debug(f"{directive} exited {code}: {errors}")
            output = errors or output
        return code, output

    def _shell(self, command: str) -> list[str]:
        """The shell that runs command in the task dir."""
        return ["/bin/sh", "-c", f"cd -- {patterns.shell_quote(self.cwd)} || exit 126\n{command}"]

    def query(self) -> dict[str, Any] | None:
        """The runtime's state document, or None if it knows no such container."""
        if not self.conf.RunTimeQuery:
            return None
        code, output = self.run("RunTimeQuery")
        if code != 0:
            return None
        try:
            document = jsonc.loads(output)
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


def _program_and_rest(pattern: str) -> tuple[str, str]:
    """A command pattern's program word and what follows it."""
    words = pattern.split(None, 1)
    return (words[0], words[1] if len(words) > 1 else "") if words else ("", "")


def delete_ended(commands: RuntimeCommands) -> None:
    """Delete a container whose init has ended: the runtime removes what is left of it
    (the rest of its processes included). One it still finds running is killed first."""
    code, _ = commands.run("RunTimeDelete")
    if code != 0:
        stop_and_delete(commands)


def stop_and_delete(commands: RuntimeCommands) -> None:
    """Kill the container if the runtime still has it running, then delete it.

    Deleted even when the runtime does not know it: a runtime killed while it created
    the container may have left part of it (runc: a state dir without its state.json,
    which blocks that id until `runc delete` removes it).
    """
    document = commands.query()
    if document is not None:
        may_run = document.get("status") in ("creating", "created", "running", "paused")
    else:
        may_run = not commands.conf.RunTimeQuery  # without a query, assume it may
    if may_run:
        commands.run("RunTimeKill")
    commands.run("RunTimeDelete")

