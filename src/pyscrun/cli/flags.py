"""runc's command line as data: global flags, verbs and their flags, and the parser.

Flags follow Go's conventions, as runc's do: `-name`, `--name`, `--name=value` and
`--name value` are all the same flag. Accepted-but-ignored flags are listed so that
podman, docker's shim and conmon never trip over them.
"""

from __future__ import annotations

from pyscrun.errors import UsageError


class Flag:
    """One flag: its names (first is canonical), whether it takes a value, its help."""

    __slots__ = ("help", "ignored", "names", "repeat", "takes_value")

    def __init__(self, names: tuple[str, ...], takes_value: bool = False, help: str = "",
                 ignored: bool = False, repeat: bool = False) -> None:
        self.names = names
        self.takes_value = takes_value
        self.help = help
        self.ignored = ignored
        self.repeat = repeat

    @property
    def dest(self) -> str:
        return self.names[0].replace("-", "_")


class Verb:
    """A runc verb: its handler ("module:function"), positional args and flags."""

    __slots__ = ("args", "command", "flags", "handler", "help", "name", "optional_args")

    def __init__(self, name: str, handler: str, args: tuple[str, ...] = (),
                 optional_args: tuple[str, ...] = (), flags: tuple[Flag, ...] = (),
                 help: str = "", command: bool = False) -> None:
        # command: after its args come a command's own words (flags included), as
        # with `runc exec ID sh -c ...` and `runc ps ID -ef`; the verb's flags go
        # before them.
        self.command = command
        self.name = name
        self.handler = handler
        self.args = args
        self.optional_args = optional_args
        self.flags = flags
        self.help = help


GLOBAL_FLAGS = (
    Flag(("root",), True, "directory for container state (default: /run/pyscrun for root)"),
    Flag(("log",), True, "append log messages to this file"),
    Flag(("log-format",), True, "log file format: text or json"),
    Flag(("debug",), help="log at debug level"),
    Flag(("f",), True, "slurm.conf to use; oci.conf and pyscrun.conf are read beside it"),
    Flag(("v",), help="more verbose logging; repeat for more", repeat=True),
    Flag(("version", "V"), help="print the version and exit"),
    Flag(("usage",), help="print a short usage message and exit"),
    Flag(("help", "h"), help="print help and exit"),
    Flag(("systemd-cgroup",), ignored=True),
    Flag(("rootless",), True, ignored=True),
    Flag(("criu",), True, "path to the criu binary"),
    Flag(("cgroup-manager",), True, ignored=True),
)

_CREATE_FLAGS = (
    Flag(("bundle", "b"), True, "bundle directory (default: the working directory)"),
    Flag(("console-socket",), True, "AF_UNIX socket that receives the pty master"),
    Flag(("pid-file",), True, "file to write the container's pid (its stand-in's) to"),
    Flag(("no-pivot",), ignored=True),
    Flag(("no-new-keyring",), ignored=True),
    Flag(("preserve-fds",), True, "pass N extra file descriptors (from fd 3) to the container"),
)

# Flags checkpoint and restore share (runc's), passed on to the runtime.
_CRIU_FLAGS = (
    Flag(("image-path",), True, "checkpoint image directory (default ./checkpoint)"),
    Flag(("work-path",), True, "directory for CRIU's logs and work files"),
    Flag(("tcp-established",), help="allow open TCP connections"),
    Flag(("ext-unix-sk",), help="allow external unix sockets"),
    Flag(("shell-job",), help="allow shell jobs"),
    Flag(("file-locks",), help="handle file locks"),
    Flag(("manage-cgroups-mode",), True, "cgroups mode: soft, full or strict"),
    Flag(("empty-ns",), True, "namespace to leave empty"),
    Flag(("auto-dedup",), help="deduplicate memory pages"),
    Flag(("lazy-pages",), ignored=True),
)

# runc's flag (then other spellings) -> where its value goes in the resources document,
# and how it is read: a size (bytes), a number (int, uint: no sign) or text (str).
RESOURCE_FLAGS: dict[tuple[str, ...], tuple[str, str, str]] = {
    ("memory",): ("memory", "limit", "bytes"),
    ("memory-reservation",): ("memory", "reservation", "bytes"),
    ("memory-swap",): ("memory", "swap", "bytes"),
    ("kernel-memory",): ("memory", "kernel", "bytes"),
    ("kernel-memory-tcp",): ("memory", "kernelTCP", "bytes"),
    ("cpu-share", "cpu-shares"): ("cpu", "shares", "uint"),
    ("cpu-quota",): ("cpu", "quota", "int"),
    ("cpu-period",): ("cpu", "period", "uint"),
    ("cpu-rt-runtime",): ("cpu", "realtimeRuntime", "int"),
    ("cpu-rt-period",): ("cpu", "realtimePeriod", "uint"),
    ("cpuset-cpus",): ("cpu", "cpus", "str"),
    ("cpuset-mems",): ("cpu", "mems", "str"),
    ("pids-limit",): ("pids", "limit", "int"),
    ("blkio-weight",): ("blockIO", "weight", "uint"),
}

VERBS = {
    verb.name: verb
    for verb in (
        Verb("create", "pyscrun.cli.lifecycle:create", ("container-id",), flags=_CREATE_FLAGS,
             help="create a container (runs it as a job once started)"),
        Verb("run", "pyscrun.cli.lifecycle:run", ("container-id",),
             flags=(*_CREATE_FLAGS, Flag(("detach", "d")),
                    Flag(("keep",), help="keep the stopped container (for state; delete removes it)"),
                    Flag(("no-subreaper",), ignored=True)),
             help="create and start a container"),
        Verb("start", "pyscrun.cli.lifecycle:start", ("container-id",),
             help="start a created container"),
        Verb("state", "pyscrun.cli.query:state", ("container-id",),
             help="print the OCI state of a container"),
        Verb("kill", "pyscrun.cli.ending:kill", ("container-id",), ("signal",),
             flags=(Flag(("all", "a"), help="signal every process of the container"),),
             help="send a signal (default SIGTERM) to a container"),
        Verb("delete", "pyscrun.cli.ending:delete", ("container-id",),
             flags=(Flag(("force", "f"), help="kill the container if it still runs"),),
             help="release everything a container holds"),
        Verb("list", "pyscrun.cli.query:list_containers",
             flags=(Flag(("format", "f"), True, "table or json"), Flag(("quiet", "q"))),
             help="list containers"),
        Verb("features", "pyscrun.cli.query:features", help="print the features document"),
        Verb("checkpoint", "pyscrun.cli.checkpoint:checkpoint", ("container-id",),
             flags=(*_CRIU_FLAGS, Flag(("leave-running",), help="keep the container running"),
                    Flag(("parent-path",), True, ignored=True),
                    Flag(("pre-dump",), help="refused: only whole dumps"),
                    Flag(("status-fd",), True, ignored=True),
                    Flag(("page-server",), True, ignored=True)),
             help="checkpoint a running container with CRIU"),
        Verb("restore", "pyscrun.cli.checkpoint:restore", ("container-id",),
             flags=(*_CRIU_FLAGS, Flag(("bundle", "b"), True, "bundle directory"),
                    Flag(("console-socket",), True, "AF_UNIX socket for the pty master"),
                    Flag(("pid-file",), True, "file to write the anchor's pid to"),
                    Flag(("detach", "d"), help="return once restored (always so)"),
                    Flag(("no-subreaper",), ignored=True), Flag(("no-pivot",), ignored=True),
                    Flag(("lsm-profile",), True, ignored=True),
                    Flag(("lsm-mount-context",), True, ignored=True)),
             help="restore a container from a checkpoint, as a new job"),
        Verb("pause", "pyscrun.cli.lifecycle:pause", ("container-id",),
             help="freeze every process of every task"),
        Verb("resume", "pyscrun.cli.lifecycle:resume", ("container-id",),
             help="thaw a paused container"),
        Verb("update", "pyscrun.cli.update:update", ("container-id",),
             flags=(Flag(("resources", "r"), True, "resources as JSON in a file (- for stdin)"),
                    *(Flag(names, True, f"set {group}.{field}")
                      for names, (group, field, _) in RESOURCE_FLAGS.items())),
             help="change the resources of every task"),
        Verb("ps", "pyscrun.cli.ps:ps", ("container-id",),
             flags=(Flag(("format", "f"), True, "table or json"),),
             help="list the processes of every task (ps's options after the id)",
             command=True),
        Verb("exec", "pyscrun.cli.execute:execute", ("container-id",),
             flags=(Flag(("process", "p"), True, "the OCI process to run, as JSON in a file"),
                    Flag(("detach", "d"), help="return once it runs; --pid-file names the process"),
                    Flag(("pid-file",), True, "file to write the exec session's pid to"),
                    Flag(("tty", "t"), help="a terminal (detached: with --console-socket)"),
                    Flag(("console-socket",), True, "AF_UNIX socket for the pty master"),
                    Flag(("env", "e"), True, "set an environment variable (repeatable)",
                         repeat=True),
                    Flag(("cwd",), True, "working directory of the process"),
                    Flag(("user", "u"), True, "UID[:GID] of the process"),
                    Flag(("additional-gids", "g"), True, "an additional group id (repeatable)",
                         repeat=True),
                    Flag(("cap", "c"), True, "a capability to add (repeatable)", repeat=True),
                    Flag(("no-new-privs",), help="set no_new_privileges"),
                    Flag(("apparmor",), True, "the process's AppArmor profile"),
                    Flag(("process-label",), True, "the process's SELinux label"),
                    Flag(("preserve-fds",), True, "only 0: no descriptor reaches an exec")),
             help="run a process in the running container (task 0)", command=True),
        Verb("events", "pyscrun.cli.events:events", ("container-id",),
             flags=(Flag(("stats",), help="print the figures once and exit"),
                    Flag(("interval",), True, "time between figures (default 5s)")),
             help="the figures of every task (cpu, memory, pids), as runc events prints them"),
    )
}


class Parsed:
    __slots__ = ("args", "options", "verb")

    def __init__(self, verb: Verb | None, options: dict[str, object],
                 args: dict[str, str] | None = None) -> None:
        self.verb = verb
        self.options = options
        self.args = args or {}


def _bool_value(flag: Flag, text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "t", "true"):
        return True
    if lowered in ("0", "f", "false"):
        return False
    raise UsageError(f"invalid boolean value {text!r} for -{flag.names[0]}")


def _lookup(name: str, flags: tuple[Flag, ...]) -> Flag | None:
    for flag in flags:
        if name in flag.names:
            return flag
    return None


def _take_flags(
    argv: list[str], pos: int, flags: tuple[Flag, ...], options: dict[str, object],
    stop_at_positional: bool,
) -> tuple[int, list[str]]:
    """Consume flags from argv[pos:]; returns the new position and positionals seen."""
    positionals: list[str] = []
    while pos < len(argv):
        token = argv[pos]
        if token == "--":
            positionals.extend(argv[pos + 1:])
            return len(argv), positionals
        if not token.startswith("-") or token == "-":
            if stop_at_positional:
                return pos, positionals
            positionals.append(token)
            pos += 1
            continue
        name, has_value, value = token.lstrip("-").partition("=")
        flag = _lookup(name, flags)
        if flag is None and set(name) == {"v"} and _lookup("v", flags):
            options["v"] = int(options.get("v", 0)) + len(name)  # type: ignore[call-overload]
            pos += 1
            continue
        if flag is None:
            raise UsageError(f"flag provided but not defined: {token.partition('=')[0]}")
        pos += 1
        if flag.takes_value:
            if not has_value:
                if pos >= len(argv):
                    raise UsageError(f"flag needs an argument: -{name}")
                value = argv[pos]
                pos += 1
            if flag.repeat:
                options.setdefault(flag.dest, [])
                options[flag.dest].append(value)  # type: ignore[attr-defined]
            else:
                options[flag.dest] = value
        elif flag.repeat:
            options[flag.dest] = int(options.get(flag.dest, 0)) + 1  # type: ignore[call-overload]
        else:
            options[flag.dest] = _bool_value(flag, value) if has_value else True
    return pos, positionals


def parse(argv: list[str]) -> Parsed:
    options: dict[str, object] = {}
    pos, _ = _take_flags(argv, 0, GLOBAL_FLAGS, options, stop_at_positional=True)
    if pos >= len(argv):
        return Parsed(None, options)
    name = argv[pos]
    verb = VERBS.get(name)
    if verb is None:
        raise UsageError(f"no such command: {name!r} (see --help)")
    # Go's flag parsing stops at the first positional; runc's docker shim relies on
    # flags before the id, but accepting them after it as well costs nothing (except
    # where a command follows the id: its words are its own).
    end, positionals = _take_flags(
        argv, pos + 1, (*verb.flags, Flag(("help", "h"))), options,
        stop_at_positional=verb.command)
    if verb.command and end < len(argv):
        positionals = [argv[end]]
        rest = argv[end + 1:]
        options["command"] = rest[1:] if rest[:1] == ["--"] else rest
    if options.get("help"):
        return Parsed(verb, options)
    wanted = verb.args + verb.optional_args
    if len(positionals) < len(verb.args):
        raise UsageError(f"{verb.name}: missing {', '.join(verb.args[len(positionals):])}")
    if len(positionals) > len(wanted):
        raise UsageError(f"{verb.name}: unexpected argument {positionals[len(wanted)]!r}")
    return Parsed(verb, options, dict(zip(wanted, positionals, strict=False)))


def usage() -> str:
    return "usage: scrun [global options] <create|start|state|kill|delete|run|list|features> ..."


def help_text(verb: Verb | None) -> str:
    flags = GLOBAL_FLAGS if verb is None else verb.flags
    lines = [usage() if verb is None else
             f"usage: scrun {verb.name} [options] "
             + " ".join([f"<{a}>" for a in verb.args] + [f"[{a}]" for a in verb.optional_args]),
             ""]
    if verb is None:
        lines.append("commands:")
        lines += [f"  {v.name:<12}{v.help}" for v in VERBS.values()]
        lines.append("")
    if flags:
        lines.append("options:")
        for flag in flags:
            spelled = ", ".join(("-" if len(n) == 1 else "--") + n for n in flag.names)
            lines.append(f"  {spelled + (' value' if flag.takes_value else ''):<28}"
                         f"{'(ignored)' if flag.ignored else flag.help}")
    return "\n".join(lines)
