"""srun's command line as data: which options take a value, and where the command starts.

srun_cr takes exactly srun's options. To put its task launcher in front of the command it
must find where srun's options end, as srun's own getopt_long does ("+" mode: options
stop at the first non-option; long options may be abbreviated to a unique prefix). The
table is the union of srun 22.05's and 24.11's options (Slurm's src/common/slurm_opt.c).
Anything this parser cannot follow (an unknown or ambiguous option, a missing value) is
not guessed at: the line goes to srun unchanged, which then fails as srun does.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from pyscrun.errors import UsageError

NO, REQUIRED, OPTIONAL = 0, 1, 2

_NO = """contiguous debugger-test disable-status exact help hold interactive label multi-prog
no-allocate overcommit oversubscribe preserve-env quiet quit-on-interrupt reboot spread-job
stepmgr test-only unbuffered usage use-min-nodes verbose version whole"""
_REQUIRED = """accel-bind account acctg-freq autocomplete bb bbf bcast-exclude begin chdir cluster
cluster-constraint clusters comment constraint container container-id context core-spec
cores-per-socket cpu-bind cpu-freq cpu_bind cpus-per-gpu cpus-per-task deadline delay-boot
dependency distribution epilog error exclude export extra extra-node-info gid gpu-bind
gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres gres-flags het-group hint input
job-name jobid licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu
mincpus mpi msg-timeout network nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu
ntasks-per-node ntasks-per-socket ntasks-per-tres open-mode output pack-group partition power
prefer priority profile prolog qos relative reservation segment signal slurmd-debug
sockets-per-node switches task-epilog task-prolog tasks-per-node thread-spec threads
threads-per-core time time-min tmp treewidth tres-bind tres-per-task uid wait wckey"""
_OPTIONAL = """bcast compress exclusive external-launcher immediate kill-on-bad-exit nice no-kill
oom-kill-step overlap propagate pty resv-ports send-libs x11"""

# srun's long options -> whether they take a value.
LONG: dict[str, int] = {
    **dict.fromkeys(_NO.split(), NO),
    **dict.fromkeys(_REQUIRED.split(), REQUIRED),
    **dict.fromkeys(_OPTIONAL.split(), OPTIONAL),
}
# Spellings of one option (getopt does not call a prefix of both ambiguous).
ALIASES = {"cpu_bind": "cpu-bind", "pack-group": "het-group", "tasks-per-node": "ntasks-per-node"}
# srun's short options -> the long option each one is.
SHORT = {
    "A": "account", "B": "extra-node-info", "C": "constraint", "D": "chdir", "E": "preserve-env",
    "F": "nodefile", "G": "gpus", "H": "hold", "I": "immediate", "J": "job-name",
    "K": "kill-on-bad-exit", "L": "licenses", "M": "clusters", "N": "nodes", "O": "overcommit",
    "Q": "quiet", "S": "core-spec", "T": "threads", "V": "version", "W": "wait",
    "X": "disable-status", "Z": "no-allocate", "b": "begin", "c": "cpus-per-task",
    "d": "dependency", "e": "error", "h": "help", "i": "input", "k": "no-kill", "l": "label",
    "m": "distribution", "n": "ntasks", "o": "output", "p": "partition", "q": "qos",
    "r": "relative", "s": "oversubscribe", "t": "time", "u": "unbuffered", "v": "verbose",
    "w": "nodelist", "x": "exclude",
}
# srun_cr's own option, taken out of the line before srun sees it.
RESTART = "restart"
# Options after which srun prints something and exits without running anything.
_INFORMATIONAL = {"help", "usage", "version"}
# Options srun_cr cannot honour: srun runs the launcher, which runs the program.
REFUSED = {
    "multi-prog": "each task runs the same program under its launcher",
    "bcast": "srun would copy the launcher's interpreter to the nodes, not the program",
}


@dataclass
class SrunLine:
    """An srun_cr command line split into srun's options, srun_cr's own and the command."""

    options: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    restart: str | None = None
    ntasks: str | None = None
    job_name: str | None = None
    refused: str | None = None  # the first option of REFUSED on the line
    # Why the line must go to srun as given (srun prints help or fails), if so; then
    # `given` is that line (srun_cr's own options taken out).
    passthrough: str | None = None
    given: list[str] = field(default_factory=list)
    index: int = 0
    mark: int = 0


class _Stop(Exception):
    """The line cannot be followed; the reason becomes SrunLine.passthrough."""


Lookup = Callable[[str], tuple[str, int] | None]


def resolve_long(name: str, lookup: Lookup | None = None) -> tuple[str, int]:
    """A long option's canonical name and argument kind, as getopt_long resolves it."""
    table = {**LONG, RESTART: REQUIRED}
    if name in table:
        return ALIASES.get(name, name), table[name]
    found = {ALIASES.get(n, n) for n in table if n.startswith(name)}
    if len(found) == 1:
        canonical = found.pop()
        return canonical, table[canonical]
    # Not in the table, or a prefix of options of different versions (--ext is only
    # --extra-node-info to 22.05's srun): as the srun installed here knows it.
    known = lookup(name) if lookup is not None else None
    if known is None:
        raise _Stop(f"option '--{name}' is ambiguous" if found else f"unrecognized option '--{name}'")
    canonical = ALIASES.get(known[0], known[0])
    if found and canonical not in found:
        raise _Stop(f"option '--{name}' is ambiguous")
    return canonical, table.get(canonical, known[1])


def parse(argv: list[str], lookup: Lookup | None = None) -> SrunLine:
    """Split argv as srun would; `lookup` (help_lookup) resolves, as the installed srun
    does, a long option the table does not name or leaves ambiguous."""
    line = SrunLine()
    try:
        _parse(argv, line, lookup)
    except _Stop as stop:
        line.passthrough = str(stop)
        line.given = line.options[:line.mark] + argv[line.index:]
    return line


def _parse(argv: list[str], line: SrunLine, lookup: Lookup | None) -> None:
    i = 0
    while i < len(argv):
        line.index, line.mark = i, len(line.options)
        arg = argv[i]
        if arg == "--":
            line.command = argv[i + 1:]
            return
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            canonical, kind = resolve_long(name, lookup)
            words = [arg]
            if kind == NO and eq:
                raise _Stop(f"option '--{name}' doesn't allow an argument")
            if kind == REQUIRED and not eq:
                if i + 1 >= len(argv):
                    if canonical == RESTART:  # ours: srun would only call it unknown
                        raise UsageError("option '--restart' requires a checkpoint directory")
                    raise _Stop(f"option '--{name}' requires an argument")
                i += 1
                value = argv[i]
                words.append(value)
            _take(line, canonical, value if eq or kind == REQUIRED else None, words)
        elif arg.startswith("-") and arg != "-":
            j = 1
            while j < len(arg):
                letter = arg[j]
                if letter not in SHORT:
                    raise _Stop(f"invalid option -- '{letter}'")
                canonical = SHORT[letter]
                kind = LONG[canonical]
                if kind == NO:
                    _take(line, canonical, None, [f"-{letter}"])
                    j += 1
                    continue
                rest = arg[j + 1:]
                if kind == REQUIRED and not rest:
                    if i + 1 >= len(argv):
                        raise _Stop(f"option requires an argument -- '{letter}'")
                    i += 1
                    _take(line, canonical, argv[i], [f"-{letter}", argv[i]])
                else:
                    _take(line, canonical, rest or None, [f"-{letter}{rest}"])
                break
        else:
            line.command = argv[i:]
            return
        i += 1


def _take(line: SrunLine, name: str, value: str | None, words: list[str]) -> None:
    if name == RESTART:
        if not value:
            raise UsageError("option '--restart' requires a checkpoint directory")
        line.restart = value
        return
    if name in _INFORMATIONAL:
        raise _Stop(f"--{name}")
    if name == "ntasks":
        line.ntasks = value
    elif name == "job-name":
        line.job_name = value
    elif name in REFUSED and line.refused is None:
        line.refused = name
    line.options.extend(words)


_HELP_OPTION = re.compile(r"--([A-Za-z0-9][\w-]*)(\[=|=| |$)")


def help_lookup(srun: str, env: dict[str, str]) -> Lookup:
    """The option srun's --help names with a name or unique prefix, and its argument
    kind: options the table lacks (SPANK plugins add some), and which of the table's
    this srun has."""
    cache: dict[str, int] = {}
    loaded: list[bool] = []

    def lookup(name: str) -> tuple[str, int] | None:
        if not loaded:
            loaded.append(True)
            try:
                done = subprocess.run([srun, "--help"], env=env, capture_output=True, text=True,
                                      timeout=30, stdin=subprocess.DEVNULL, check=False)
            except (OSError, subprocess.TimeoutExpired):
                return None
            for text_line in done.stdout.splitlines():
                for found in _HELP_OPTION.finditer(text_line.strip()):
                    kind = {"[=": OPTIONAL, "=": REQUIRED}.get(found.group(2), NO)
                    cache.setdefault(found.group(1), kind)
        matches = [n for n in cache if n.startswith(name)]
        if name in cache:
            return name, cache[name]
        return (matches[0], cache[matches[0]]) if len(matches) == 1 else None

    return lookup
