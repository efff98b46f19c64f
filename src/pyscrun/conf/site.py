"""Where the configuration lives and what it says: slurm.conf, oci.conf, pyscrun.conf.

oci.conf stays in Slurm's own format; settings only pyscrun has live in pyscrun.conf
beside it.
"""

from __future__ import annotations

import os

from pyscrun.conf import keyvalue, ociconf, patterns
from pyscrun.digits import only_digits
from pyscrun.errors import ConfigError

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
# Where slurmd or sackd keeps the files a "configless" cluster's slurmctld hands out
# (slurm.conf, oci.conf, scrun.lua): Slurm's commands look there when the default is
# missing.
CONFIGLESS_SLURM_CONF = "/run/slurm/conf/slurm.conf"
BACKENDS = ("auto", "local", "slurm")


# pyscrun.conf's directives and their defaults. The checkpoint patterns use oci.conf's
# %-patterns; `%@` stands for the checkpoint or restore options pyscrun builds. Unset,
# they are derived from oci.conf's RunTimeDelete (Site.derived_commands).
PYSCRUN_DEFAULTS = {
    # Ports an anchor listens on for its node agents (LOW-HIGH) where slurm.conf sets
    # no SrunPortRange; any free port when neither does.
    "AgentPortRange": "",
    "Backend": "auto",
    "RunTimeCheckpoint": "",
    "RunTimeRestore": "",
    "RunTimePause": "",
    "RunTimeResume": "",
    "RunTimeUpdate": "",
    "RunTimeExec": "",
    "RunTimeStats": "",
    # Seconds before its job's end (time limit, or a preemption's signal) at which a
    # container moves to a new job: checkpointed, then restored there. Empty: never.
    "MoveBeforeEnd": "",
    # Where a move's images go: a directory the login host and every node see (the
    # cluster file system), %u and %U the user's name and uid. Empty: the container's
    # spool dir, on the login host only, the images sent there over the channel.
    "MoveImagePath": "",
}
# The verb each is derived with, and what follows it before the container's name.
_DERIVED = {"RunTimeCheckpoint": "checkpoint %@", "RunTimeRestore": "restore %@ --bundle %b",
            "RunTimePause": "pause", "RunTimeResume": "resume",
            "RunTimeUpdate": "update --resources %@", "RunTimeExec": "exec --process %@",
            "RunTimeStats": "events --stats"}
_PYSCRUN_KEYS = {name.lower(): name for name in PYSCRUN_DEFAULTS}
# The most seconds Slurm's --signal takes before a job's end.
MAX_WARNING = 65535


class PyscrunConf:
    """Settings only pyscrun has (pyscrun.conf beside oci.conf)."""

    __slots__ = tuple(PYSCRUN_DEFAULTS)
    AgentPortRange: str
    Backend: str
    RunTimeCheckpoint: str
    RunTimeRestore: str
    RunTimePause: str
    RunTimeResume: str
    RunTimeUpdate: str
    RunTimeExec: str
    RunTimeStats: str
    MoveBeforeEnd: str
    MoveImagePath: str

    def __init__(self, **values: str) -> None:
        for name, default in PYSCRUN_DEFAULTS.items():
            setattr(self, name, values.get(name, default))


def _parse_pyscrun_conf(path: str) -> PyscrunConf:
    try:
        text = keyvalue.read_text(path)
    except FileNotFoundError:
        return PyscrunConf()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read {path}: {err}") from None
    values: dict[str, str] = {}
    for key, value, where in keyvalue.parse(text, path):
        name = _PYSCRUN_KEYS.get(key.lower())
        if name is None:
            raise ConfigError(f"{where}: unknown directive {key!r}")
        if name.startswith("RunTime"):
            patterns.check(value, where)
        if name == "MoveBeforeEnd" and value and not (only_digits(value) and 0 < int(value) <= MAX_WARNING):
            raise ConfigError(f"{where}: MoveBeforeEnd must be a number of seconds "
                              f"from 1 to {MAX_WARNING}, not {value!r}")
        if name == "MoveImagePath" and value:
            patterns.check_path(value, where, name)
            if not value.startswith("/"):
                raise ConfigError(f"{where}: MoveImagePath must be an absolute path, "
                                  f"not {value!r}")
        if name == "AgentPortRange" and value:
            from pyscrun.channel.tcp import parse_port_range

            parse_port_range(value, where)
        values[name] = value
    backend = values.get("Backend", "auto").lower()
    if backend not in BACKENDS:
        raise ConfigError(f"{path}: Backend must be one of {', '.join(BACKENDS)}")
    values["Backend"] = backend
    return PyscrunConf(**values)


class Site:
    """Where this machine's configuration lives and what it says.

    Paths are strings: pathlib costs create, on podman's critical path, milliseconds."""

    __slots__ = ("backend", "oci", "pyscrun", "slurm_conf")

    def __init__(self, slurm_conf: str, oci: ociconf.OciConf, backend: str,
                 pyscrun: PyscrunConf) -> None:
        self.slurm_conf = slurm_conf
        self.oci = oci
        self.backend = backend
        self.pyscrun = pyscrun

    @property
    def conf_dir(self) -> str:
        return os.path.dirname(self.slurm_conf)

    @property
    def scrun_lua(self) -> str:
        return os.path.join(self.conf_dir, "scrun.lua")

    def derived_commands(self, criu: str = "") -> dict[str, str]:
        """Each runtime command of _DERIVED (checkpoint, restore, pause, resume, update,
        exec): pyscrun.conf's, else oci.conf's runtime as RunTimeDelete calls it (its own global options,
        `--root` included: the container is only found where it was made) with the verb
        instead of delete, on the container name RunTimeDelete ends with. '' where
        neither file says (RunTimeDelete is not `RUNTIME [OPTIONS] delete ... NAME`).
        criu: the runtime's global `--criu PATH` (derived commands only)."""
        import shlex

        try:
            words = shlex.split(self.oci.RunTimeDelete or "")
        except ValueError:
            words = []
        verb = words.index("delete") if "delete" in words[:-1] else -1
        found = {}
        for directive, action in _DERIVED.items():
            given = str(getattr(self.pyscrun, directive))
            if given or verb < 1:
                found[directive] = given
            else:
                runtime = shlex.join(words[:verb])
                if criu:
                    # A literal %: the pattern language's own escape.
                    runtime += " --criu " + shlex.quote(criu).replace("%", "%%")
                found[directive] = f"{runtime} {action} {shlex.join(words[-1:])}"
        return found

    def move_image_path(self, user: str, uid: int) -> str:
        """pyscrun.conf's MoveImagePath for that user, '' where unset."""
        return patterns.expand_path(self.pyscrun.MoveImagePath, patterns.PatternValues(
            user_name=user, uid=str(uid)))

    def cluster_name(self) -> str | None:
        """slurm.conf's ClusterName, None if unset; in lower case as Slurm keeps it."""
        return (_slurm_conf_value(self.slurm_conf, "clustername") or "").lower() or None

    def agent_port_range(self) -> tuple[int, int] | None:
        """Where the anchor listens for its agents: slurm.conf's SrunPortRange (the
        ports a site opens on its login nodes for connections back from the nodes),
        else pyscrun.conf's AgentPortRange, else None (any free port)."""
        from pyscrun.channel.tcp import parse_port_range

        found = srun_port_range(self.slurm_conf)
        if found is not None:
            return found
        if self.pyscrun.AgentPortRange:
            return parse_port_range(self.pyscrun.AgentPortRange, "pyscrun.conf: AgentPortRange")
        return None


def srun_port_range(slurm_conf: str) -> tuple[int, int] | None:
    """slurm.conf's SrunPortRange: the ports a site opens on its login nodes for the
    connections that come back from its compute nodes."""
    from pyscrun.channel.tcp import parse_port_range

    found = _slurm_conf_value(slurm_conf, "srunportrange")
    return None if found is None else parse_port_range(found, f"{slurm_conf}: SrunPortRange")


def _slurm_conf_value(path: str, key: str) -> str | None:
    """One parameter of slurm.conf (key in lower case), None if unset or unreadable.
    Words are read one by one: slurm.conf has syntax (Include, node lists) that only
    Slurm parses in full."""
    try:
        text = keyvalue.read_text(path)
    except (OSError, UnicodeDecodeError):
        return None
    found = None
    for line in text.splitlines():
        for word in line.partition("#")[0].split():
            name, sep, value = word.partition("=")
            if sep and name.lower() == key:
                found = value
    return found


def slurm_conf_path(flag: str | None, environ: dict[str, str] | os._Environ[str]) -> str:
    """slurm.conf as Slurm's commands find it: -f, SLURM_CONF, the default path, else the
    configless cache where the default is missing and the cache is not."""
    given = flag or environ.get("SLURM_CONF")
    if given:
        return os.path.abspath(given)
    if not os.path.exists(DEFAULT_SLURM_CONF) and os.path.exists(CONFIGLESS_SLURM_CONF):
        return CONFIGLESS_SLURM_CONF
    return DEFAULT_SLURM_CONF


def load(slurm_conf: str) -> Site:
    conf_dir = os.path.dirname(slurm_conf)
    oci = ociconf.load(os.path.join(conf_dir, "oci.conf"))
    pyscrun = _parse_pyscrun_conf(os.path.join(conf_dir, "pyscrun.conf"))
    backend = pyscrun.Backend
    found = os.path.isfile(slurm_conf)
    if backend == "auto":
        backend = "slurm" if found or not _without_slurm(slurm_conf) else "local"
    if backend == "slurm" and not found:
        raise ConfigError(f"{slurm_conf} does not exist: name the cluster's slurm.conf with -f "
                          f"or SLURM_CONF (Backend=local in "
                          f"{os.path.join(conf_dir, 'pyscrun.conf')} runs containers on this "
                          "machine)")
    return Site(slurm_conf, oci, backend, pyscrun)


def _without_slurm(slurm_conf: str) -> bool:
    """Whether this is a machine without Slurm, which runs containers itself unasked:
    no slurm.conf at the default path and no salloc. A slurm.conf named (-f,
    SLURM_CONF) but missing (a typo), or a configless login node with no cache of the
    files (salloc fetches them from slurmctld), must not put them there."""
    from pyscrun.fs import which

    return slurm_conf == DEFAULT_SLURM_CONF and which("salloc", None) is None
