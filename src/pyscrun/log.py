"""Logging with Slurm's level names to stderr, a --log file (text or JSON lines) and syslog.

Hand-rolled rather than the logging module: the CLI runs several times per container
and every import counts. The JSON form is what conmon reads back on failure.
"""

from __future__ import annotations

import os
import sys
import time

from pyscrun.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

# Slurm's log levels, quietest first; the index is the level number.
LEVEL_NAMES = (
    "quiet", "fatal", "error", "info", "verbose",
    "debug", "debug2", "debug3", "debug4", "debug5",
)
QUIET, FATAL, ERROR, INFO, VERBOSE, DEBUG, DEBUG2, DEBUG3, DEBUG4, DEBUG5 = range(10)
# Level names as runc/logrus spell them in JSON logs, which conmon understands.
_JSON_LEVEL = {FATAL: "fatal", ERROR: "error", INFO: "info", VERBOSE: "info"}


def parse_level(text: str, source: str) -> int:
    """A level by name, or as Slurm also reads one, by number: the digits it starts
    with (5 and 5x are debug; above debug5, debug5)."""
    text = text.strip()
    digits = text[:len(text) - len(text.lstrip("0123456789"))]
    if digits:
        return min(int(digits), DEBUG5)
    try:
        return LEVEL_NAMES.index(text.lower())
    except ValueError:
        raise UsageError(
            f"{source}: invalid log level {text!r} (one of {', '.join(LEVEL_NAMES)})"
        ) from None


class Logger:
    """Where messages of each level go: stderr, the --log file, syslog."""

    def __init__(self, file_path: str | None = None, file_format: str = "text") -> None:
        self.stderr_level = ERROR
        self.file_level = INFO
        self.syslog_level = QUIET
        self.file_path = file_path
        self.file_format = file_format
        self.prefix = "scrun"
        self.stderr: IO[str] | None = sys.stderr
        self._file: IO[str] | None = None
        # The levels the command line or the environment set: oci.conf's give way.
        self.chosen: set[str] = set()

    def take_defaults(self, stderr: int | None, file: int | None, syslog: int | None,
                      debug_flags: str = "") -> None:
        """oci.conf's StdIODebug, FileDebug and SyslogDebug, where nothing stronger
        chose; DebugFlags (any) asks for debug messages in the --log file."""
        if debug_flags and file is None:
            file = DEBUG
        for target, level in (("stderr_level", stderr), ("file_level", file),
                              ("syslog_level", syslog)):
            if level is not None and target not in self.chosen:
                setattr(self, target, level)

    def log(self, level: int, msg: str) -> None:
        if level <= self.stderr_level and self.stderr is not None:
            try:
                self.stderr.write(f"{self.prefix}: {LEVEL_NAMES[level]}: {msg}\n")
                self.stderr.flush()
            except OSError:
                pass
        if level <= self.file_level and self.file_path:
            self._write_file(level, msg)
        if level <= self.syslog_level:
            import syslog

            syslog.syslog(syslog.LOG_ERR if level <= ERROR else syslog.LOG_INFO, msg)

    def _write_file(self, level: int, msg: str) -> None:
        assert self.file_path is not None
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
        if self.file_format == "json":
            from pyscrun import jsonc

            line = jsonc.dumps(
                {"level": _JSON_LEVEL.get(level, "debug"), "msg": msg, "time": stamp}
            )
        else:
            line = f"{stamp} {self.prefix}[{os.getpid()}] {LEVEL_NAMES[level]}: {msg}"
        try:
            if self._file is None:
                self._file = open(self.file_path, "a", encoding="utf-8")  # noqa: SIM115
            file = self._file
            file.write(line + "\n")
            file.flush()
        except OSError:
            self.file_path = None

    def error(self, msg: str) -> None:
        self.log(ERROR, msg)

    def info(self, msg: str) -> None:
        self.log(INFO, msg)

    def verbose(self, msg: str) -> None:
        self.log(VERBOSE, msg)

    def debug(self, msg: str) -> None:
        self.log(DEBUG, msg)

    def open_fds(self) -> tuple[int, ...]:
        return (self._file.fileno(),) if self._file is not None else ()

    def close_file(self) -> None:
        """Drop the open log file (it reopens on the next message), e.g. before fds close."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def detach_stderr(self) -> None:
        """The anchor's stderr belongs to the container: never write there again."""
        self.stderr = None


# Environment variables of the man page and the destination each one sets.
_LEVEL_VARIABLES = (
    ("SCRUN_DEBUG", ("stderr_level", "file_level", "syslog_level")),
    ("SCRUN_STDERR_DEBUG", ("stderr_level",)),
    ("SCRUN_FILE_DEBUG", ("file_level",)),
    ("SCRUN_SYSLOG_DEBUG", ("syslog_level",)),
)


def configure(
    verbosity: int, debug: bool, log_path: str | None, log_format: str,
    environ: dict[str, str] | os._Environ[str],
) -> Logger:
    logger = Logger(file_path=log_path or None, file_format=log_format)
    if debug:
        logger.stderr_level = logger.file_level = DEBUG
        logger.chosen.update(("stderr_level", "file_level"))
    if verbosity:
        logger.stderr_level = min(DEBUG5, max(logger.stderr_level, ERROR + verbosity))
        logger.file_level = max(logger.file_level, logger.stderr_level)
        logger.chosen.update(("stderr_level", "file_level"))
    for name, targets in _LEVEL_VARIABLES:
        value = environ.get(name)
        if value:
            level = parse_level(value, name)
            for target in targets:
                setattr(logger, target, level)
                logger.chosen.add(target)
    return logger


def tell_caller(line: str) -> None:
    """A line on the caller's own stderr (podman shows it as the container's), whatever
    the log levels: what salloc itself would say there."""
    try:
        os.write(2, f"{line}\n".encode())
    except OSError:
        pass


# The process-wide logger; the CLI replaces it once options are parsed.
current = Logger()
