"""scrun.lua host: the site's stage-in and stage-out functions, run in an embedded Lua 5.4.

The script lives beside slurm.conf and is the one Slurm's scrun runs, so it sees the
same `slurm` table (see prelude.py) and the same calling conventions. It is loaded
once per container, in the anchor; lupa is imported only then, so the CLI's hot path
never pays for it.

Errors leave as one-line HookErrors naming the script and line: the chunk is loaded
under its bare file name (Lua would truncate a long path in its messages) and the
full path is put back here.
"""

from __future__ import annotations

import importlib
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyscrun import log, selfpipe
from pyscrun.errors import Interrupted, ScrunError
from pyscrun.hooks import constants, prelude
from pyscrun.hooks.luajson import LuaJson
from pyscrun.hooks.timestr import time_str2mins

# (script) -> (exit status, combined output)
CommandRunner = Callable[[str], tuple[int, str]]

STAGE_IN = "slurm_scrun_stage_in"
STAGE_OUT = "slurm_scrun_stage_out"
SUCCESS = constants.SLURM["SUCCESS"]
# slurm.log's levels 0..4 and above, as Slurm's _log_lua_msg maps them.
_LOG_LEVELS = (log.INFO, log.VERBOSE, log.DEBUG, log.DEBUG2, log.DEBUG3)
# Longest error message passed on: a script may raise whole command outputs.
_MAX_MESSAGE = 1000
# How many Lua instructions run between two looks for a signal (a few milliseconds'
# worth): a script that loops without a command is interrupted too.
_CHECK_EVERY = 1_000_000
# liblua's default package.path as Debian builds it, for Lua {v}: Slurm runs scrun.lua
# in the distribution's liblua, which finds the modules apt installs (/usr/share/lua);
# lupa's own Lua looks under /usr/local alone. package.cpath stays lupa's: a
# distribution's C module needs liblua's symbols, which lupa's Lua does not export.
_DEFAULT_PATH = (
    "/usr/local/share/lua/{v}/?.lua", "/usr/local/share/lua/{v}/?/init.lua",
    "/usr/local/lib/lua/{v}/?.lua", "/usr/local/lib/lua/{v}/?/init.lua",
    "/usr/share/lua/{v}/?.lua", "/usr/share/lua/{v}/?/init.lua",
    "./?.lua", "./?/init.lua",
)


class HookError(ScrunError):
    """scrun.lua failed to load, lacks a function, raised an error or returned failure,
    or was interrupted."""


@dataclass
class StageResult:
    bundle: str  # the bundle path the container now runs from (set_bundle_path)
    root_path: str  # its root filesystem (set_root_path)


def _bytes(text: str) -> bytes:
    return os.fsencode(text)


def _exit_status(status: int) -> int:
    """subprocess's -N for a signal as a shell reports it, 128+N."""
    return 128 - status if status < 0 else status


class ScrunLua:
    """One loaded scrun.lua with its own Lua state; use load() to make one."""

    def __init__(self, path: Path, remote_command: CommandRunner, bundle: str,
                 root_path: str, allocator_command: CommandRunner,
                 cluster_name: str | None) -> None:
        self.path = path
        self.remote_command = remote_command
        self.allocator_command = allocator_command
        self.interrupt_fd = -1  # the anchor's self-pipe, once bound
        # What a signal interrupted in the current call: it fails, whatever the script
        # does with the error.
        self.interrupted: Interrupted | None = None
        self.orig_bundle, self.orig_root_path = bundle, root_path
        self.bundle, self.root_path = bundle, root_path
        lupa = importlib.import_module("lupa.lua54")
        self._lua_error: type[Exception] = lupa.LuaError
        # encoding=None: Lua strings are bytes both ways, as paths and file contents are.
        self.runtime = lupa.LuaRuntime(encoding=None, unpack_returned_tuples=True,
                                       register_eval=False, register_builtins=False)
        self.json = LuaJson(self.runtime)
        version = self.runtime.eval("_VERSION").decode().removeprefix("Lua ")
        self.runtime.globals()[b"package"][b"path"] = package_path(version, os.environb)
        callbacks = self.runtime.table_from({
            b"log": self._log,
            b"set_bundle": self._set_bundle,
            b"set_root": self._set_root,
            b"remote_command": self._remote_command,
            b"allocator_command": self._allocator_command,
            b"check_interrupt": self._check_interrupt,
            b"time_str2mins": self._time_str2mins,
            b"encode": self.json.encode,
            b"decode": self.json.decode,
        })
        numbers = self.runtime.table_from({_bytes(key): float(value)
                                           for key, value in constants.SLURM.items()})
        # The count hook looks for signals from the start: a self-pipe may come later
        # (bind), for a script loaded before its anchor had one.
        self._call = self.runtime.execute(prelude.SOURCE, _bytes(path.name), callbacks,
                                          self.json.null, numbers,
                                          None if cluster_name is None else _bytes(cluster_name),
                                          _CHECK_EVERY)

    def bind(self, remote_command: CommandRunner, allocator_command: CommandRunner,
             interrupt_fd: int) -> None:
        """The commands and self-pipe of the anchor, for a script loaded before them."""
        self.remote_command, self.allocator_command = remote_command, allocator_command
        self.interrupt_fd = interrupt_fd

    # -- the script ----------------------------------------------------------------------
    def _load(self) -> None:
        try:
            source = self.path.read_bytes()
        except OSError as err:
            raise HookError(f"cannot read {self.path}: {err.strerror}") from None
        # As luaL_loadfile: skip a UTF-8 byte order mark and a first line starting with
        # '#' (a shebang), keeping its newline so that line numbers stay right.
        source = source.removeprefix(b"\xef\xbb\xbf")
        if source.startswith(b"#"):
            newline = source.find(b"\n")
            source = b"" if newline < 0 else source[newline:]
        # Both results always come back, a tuple for lupa, even when the load worked.
        loader = self.runtime.eval("function(s, n) local f, e = load(s, n, 'bt'); return f, e end")
        chunk, message = loader(source, b"@" + _bytes(self.path.name))
        if chunk is None:
            raise HookError(self._where(message))
        line, number = self._run("", chunk)
        # Slurm takes the chunk's result as a number, nothing (or not a number) as 0.
        rc = _as_int(number)
        if rc != SUCCESS:
            raise HookError(f"{self._at(line)} returned {rc} on load instead of slurm.SUCCESS")
        lua_globals = self.runtime.globals()
        missing = [name for name in (STAGE_IN, STAGE_OUT)
                   if self.runtime.eval("type")(lua_globals[_bytes(name)]) != b"function"]
        if missing:
            raise HookError(f"{self.path}: required function {' and '.join(missing)} "
                            f"{'is' if len(missing) == 1 else 'are'} not defined")

    def _run(self, prefix: str, function: Any, *args: Any) -> tuple[int, Any]:
        """function(*args): the line of its return and its result as a number (None if
        it is not one); HookError, its message prefixed, if it failed or was
        interrupted."""
        self.interrupted = None
        try:
            line, ok, value, number = self._call(function, *args)
        except self._lua_error as err:  # lupa itself failing: xpcall catches the rest
            raise HookError(prefix + self._where(str(err))) from None
        if not ok:
            raise HookError(prefix + self._where(value))
        if self.interrupted is not None:
            # The script caught the interruption's error and went on: it fails all the same.
            raise HookError(f"{prefix}{self.path}: {self.interrupted}")
        return line, number

    def _stage(self, name: str, *args: Any) -> None:
        function = self.runtime.globals()[_bytes(name)]
        if self.runtime.eval("type")(function) != b"function":
            # As Slurm: checked at load; a script that removed it since is let be.
            log.current.debug(f"{self.path}: {name}() missing")
            return
        line, number = self._run(f"{name}: ", function, *args)
        if number is None:
            # Slurm too takes a result that is not a number as success, saying so.
            log.current.info(f"{self.path}: {name}: non-numeric return code")
            return
        rc = _as_int(number)
        if rc != SUCCESS:
            raise HookError(f"{name}: {self._at(line)} returned {rc} instead of slurm.SUCCESS")

    def stage_in(self, container_id: str, bundle: str, spool_dir: str, config_file: str,
                 job_id: int, user_id: int, group_id: int, job_env: list[str]) -> StageResult:
        # A sequence 1..n that ipairs walks completely (Slurm's own starts at 0).
        env = self.runtime.table_from([_bytes(entry) for entry in job_env])
        self._stage(STAGE_IN, _bytes(container_id), _bytes(bundle), _bytes(spool_dir),
                    _bytes(config_file), job_id, user_id, group_id, env)
        return StageResult(self.bundle, self.root_path)

    def stage_out(self, container_id: str, bundle: str, orig_bundle: str, root_path: str,
                  orig_root_path: str, spool_dir: str, config_file: str, job_id: int,
                  user_id: int, group_id: int) -> None:
        self._stage(STAGE_OUT, _bytes(container_id), _bytes(bundle), _bytes(orig_bundle),
                    _bytes(root_path), _bytes(orig_root_path), _bytes(spool_dir),
                    _bytes(config_file), job_id, user_id, group_id)

    # -- messages ------------------------------------------------------------------------
    def _where(self, message: Any) -> str:
        """A Lua message as one line, the script's bare name replaced by its path."""
        text = message.decode(errors="replace") if isinstance(message, bytes) else str(message)
        text = re.sub(r"\s*\n\s*", " ", text.strip())
        if len(text) > _MAX_MESSAGE:
            text = text[:_MAX_MESSAGE] + "..."
        name = self.path.name
        if re.match(re.escape(name) + r":\d+:", text):
            return str(self.path) + text[len(name):]
        return f"{self.path}: {text}"

    def _at(self, line: int) -> str:
        return f"{self.path}:{line}:" if line > 0 else f"{self.path}:"

    # -- the slurm table's Python side (prelude.py checks argument types) ------------------
    def _log(self, level: Any, message: bytes) -> None:
        text = message.decode(errors="replace")
        if level is None:  # slurm.error
            log.current.error(f"scrun.lua: {text}")
            return
        number = _as_int(level)
        if number >= 0:
            log.current.log(_LOG_LEVELS[number] if number < len(_LOG_LEVELS) else log.DEBUG4,
                            f"scrun.lua: {text}")

    def _set_bundle(self, path: bytes) -> bytes:
        log.current.debug(f"scrun.lua: bundle path {self.bundle} -> {os.fsdecode(path)}")
        self.bundle = os.fsdecode(path)
        return _bytes(self.orig_bundle)

    def _set_root(self, path: bytes) -> bytes:
        log.current.debug(f"scrun.lua: root path {self.root_path} -> {os.fsdecode(path)}")
        self.root_path = os.fsdecode(path)
        return _bytes(self.orig_root_path)

    def _remote_command(self, script: bytes) -> tuple[int, bytes]:
        return self._command("remote", self.remote_command, script)

    def _allocator_command(self, script: bytes) -> tuple[int, bytes]:
        return self._command("allocator", self.allocator_command, script)

    def _command(self, kind: str, runner: CommandRunner, script: bytes) -> tuple[int, bytes]:
        self._check_interrupt()
        log.current.debug(f"scrun.lua: {kind} command: {os.fsdecode(script)}")
        try:
            status, output = runner(os.fsdecode(script))
        except Interrupted as err:
            self.interrupted = err
            raise
        return _exit_status(status), _bytes(output)

    def _check_interrupt(self) -> None:
        """Interrupted once a signal came (the count hook's look, and each command's)."""
        if self.interrupted is None and self.interrupt_fd >= 0:
            try:
                selfpipe.check(self.interrupt_fd)
            except Interrupted as err:
                self.interrupted = err
        if self.interrupted is not None:
            raise self.interrupted

    def _time_str2mins(self, text: bytes | None) -> int:
        return time_str2mins(None if text is None else text.decode(errors="replace"))


def package_path(version: str, environ: Mapping[bytes, bytes]) -> bytes:
    """package.path as liblua sets it: LUA_PATH_5_4 (else LUA_PATH) where set, its first
    ';;' standing for the default; the default where neither is."""
    default = ";".join(_DEFAULT_PATH).format(v=version).encode()
    given = environ.get(b"LUA_PATH_" + version.replace(".", "_").encode(),
                        environ.get(b"LUA_PATH"))
    if given is None:
        return default
    before, mark, after = given.partition(b";;")
    return b";".join(part for part in (before, default, after) if part) if mark else given


def _as_int(number: Any) -> int:
    """A Lua number as C's (int) cast takes it: truncated; nothing or NaN as 0."""
    if number is None or (isinstance(number, float) and not math.isfinite(number)):
        return 0
    return int(number)


def load(path: Path, remote_command: CommandRunner, bundle: str, root_path: str,
         allocator_command: CommandRunner | None = None,
         cluster_name: str | None = None) -> ScrunLua:
    """The script at path, loaded and checked. Its commands: remote_command on the job's
    nodes, allocator_command here (by default a shell with this process's environment);
    slurm.CLUSTER_NAME is cluster_name (nil for None, as Slurm's without one).

    Once bound to a self-pipe of the anchor's (bind, selfpipe.catch), a signal arriving
    there fails the script's call, as HookError: the commands raise Interrupted (the
    runners end theirs on it), and the script itself does where it runs on without one."""
    if allocator_command is None:
        from pyscrun.shell import run_shell

        allocator_command = run_shell
    hooks = ScrunLua(path, remote_command, bundle, root_path, allocator_command, cluster_name)
    hooks._load()
    return hooks
