"""oci.conf: Slurm's container settings, every directive in one table, with its checks."""

from __future__ import annotations

from pyscrun.conf import keyvalue, patterns
from pyscrun.errors import ConfigError, UsageError
from pyscrun.log import parse_level

# typing costs milliseconds at every start of the CLI: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from collections.abc import Callable
    from typing import Any

RUNTIME_DIRECTIVES = ("RunTimeCreate", "RunTimeDelete", "RunTimeKill", "RunTimeQuery",
                      "RunTimeRun", "RunTimeStart")
# Slurm's spellings, in any case: its booleans (parse_config.c), and CreateEnvFile's
# words, which 24.11 takes beside Y and N and 22.05 as a boolean.
_BOOLEANS = {"yes": True, "up": True, "true": True, "1": True,
             "no": False, "down": False, "false": False, "0": False}
_ENV_FILE_MODES = {
    **{word: "null" for word in ("null", "true", "y", "yes", "1", "up")},
    "newline": "newline",
    **{word: "disabled" for word in ("disabled", "false", "n", "no", "0", "down")},
}


def _boolean(value: str, where: str) -> bool:
    try:
        return _BOOLEANS[value.lower()]
    except KeyError:
        raise ConfigError(f"{where}: expected true or false, found {value!r}") from None


def _regex(value: str, where: str) -> re.Pattern[str]:
    """A POSIX extended regular expression, as Slurm reads it."""
    # Imported only for a site that sets a regex: `re` costs every create milliseconds.
    import re

    from pyscrun.conf.ere import compile_ere

    try:
        return compile_ere(value)
    except (re.error, OverflowError, RecursionError) as err:
        raise ConfigError(f"{where}: invalid regular expression {value!r}: {err}") from None


def _env_file(value: str, where: str) -> str:
    try:
        return _ENV_FILE_MODES[value.lower()]
    except KeyError:
        raise ConfigError(f"{where}: CreateEnvFile must be null, newline or disabled") from None


def _pattern(value: str, where: str) -> str:
    patterns.check(value, where)
    return value


def _container_path(value: str, where: str) -> str:
    patterns.check_path(value, where, "ContainerPath")
    return value


def _mount_spool_dir(value: str, where: str) -> str:
    patterns.check_path(value, where, "MountSpoolDir")
    return value


def _hook_list(value: str, where: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _text(value: str, where: str) -> str:
    return value


def _level(value: str, where: str) -> int:
    try:
        return parse_level(value, where)
    except UsageError as err:
        raise ConfigError(str(err)) from None


class Directive:
    """One oci.conf directive: its spelling, how its value is read, its default."""

    __slots__ = ("convert", "default", "name", "repeat")

    def __init__(self, name: str, convert: Callable[[str, str], Any], default: Any = "",
                 repeat: bool = False) -> None:
        self.name = name
        self.convert = convert
        self.default = default
        self.repeat = repeat


DIRECTIVES = {
    d.name.lower(): d
    for d in (
        Directive("ContainerPath", _container_path),
        Directive("CreateEnvFile", _env_file, "disabled"),
        Directive("DebugFlags", _text),
        Directive("DisableCleanup", _boolean, False),
        Directive("DisableHooks", _hook_list, ()),
        Directive("EnvExclude", _regex, None),
        Directive("FileDebug", _level, None),
        Directive("IgnoreFileConfigJson", _boolean, False),
        Directive("MountSpoolDir", _mount_spool_dir),
        *(Directive(name, _pattern) for name in RUNTIME_DIRECTIVES),
        Directive("RunTimeEnvExclude", _regex, None),
        Directive("SrunArgs", _text, (), repeat=True),
        Directive("SrunPath", _text),
        Directive("StdIODebug", _level, None),
        Directive("SyslogDebug", _level, None),
    )
}


class OciConf:
    """A parsed oci.conf: one attribute per directive, named as Slurm spells it.

    A plain class rather than a dataclass: `dataclasses` costs create milliseconds.
    """

    __slots__ = ("source", *(d.name for d in DIRECTIVES.values()))
    source: str
    ContainerPath: str
    CreateEnvFile: str
    DebugFlags: str
    DisableCleanup: bool
    DisableHooks: tuple[str, ...]
    EnvExclude: re.Pattern[str] | None
    FileDebug: int | None
    IgnoreFileConfigJson: bool
    MountSpoolDir: str
    RunTimeCreate: str
    RunTimeDelete: str
    RunTimeKill: str
    RunTimeQuery: str
    RunTimeRun: str
    RunTimeStart: str
    RunTimeEnvExclude: re.Pattern[str] | None
    SrunArgs: tuple[str, ...]
    SrunPath: str
    StdIODebug: int | None
    SyslogDebug: int | None

    def __init__(self, source: str = "built-in default", **values: Any) -> None:
        self.source = source
        for directive in DIRECTIVES.values():
            setattr(self, directive.name, values.pop(directive.name, directive.default))
        if values:
            raise TypeError(f"not oci.conf directives: {sorted(values)}")

    @property
    def run_mode(self) -> bool:
        return bool(self.RunTimeRun)


# With no oci.conf at all: runc in run mode, as Slurm's own example configures it.
_RUNC_ID = "%n.%u.%j.%s.%t"
BUILTIN_DEFAULT = OciConf(
    RunTimeQuery=f"runc state {_RUNC_ID}",
    RunTimeKill=f"runc kill -a {_RUNC_ID}",
    RunTimeDelete=f"runc delete --force {_RUNC_ID}",
    RunTimeRun=f"runc run {_RUNC_ID} -b %b",
)


def _validate(conf: OciConf) -> None:
    where = conf.source
    if conf.RunTimeRun:
        if conf.RunTimeCreate or conf.RunTimeStart:
            raise ConfigError(
                f"{where}: RunTimeRun cannot be combined with RunTimeCreate or RunTimeStart"
            )
        missing = [n for n in ("RunTimeKill", "RunTimeDelete") if not getattr(conf, n)]
    elif conf.RunTimeCreate or conf.RunTimeStart:
        missing = [n for n in ("RunTimeCreate", "RunTimeStart", "RunTimeQuery",
                               "RunTimeKill", "RunTimeDelete") if not getattr(conf, n)]
    else:
        raise ConfigError(f"{where}: set RunTimeRun, or RunTimeCreate and RunTimeStart")
    if missing:
        mode = "run mode" if conf.RunTimeRun else "create/start mode"
        raise ConfigError(f"{where}: {mode} needs {', '.join(missing)}")
    if conf.IgnoreFileConfigJson and conf.RunTimeStart:
        raise ConfigError(f"{where}: IgnoreFileConfigJson=true cannot be used with RunTimeStart")


def parse(text: str, source: str) -> OciConf:
    values: dict[str, Any] = {}
    for key, raw, where in keyvalue.parse(text, source):
        directive = DIRECTIVES.get(key.lower())
        if directive is None:
            raise ConfigError(f"{where}: unknown directive {key!r}")
        value = directive.convert(raw, where)
        if directive.repeat:
            values[directive.name] = (*values.get(directive.name, ()), value)
        else:
            values[directive.name] = value
    conf = OciConf(source=source, **values)
    _validate(conf)
    return conf


def load(path: str) -> OciConf:
    """oci.conf at path, or the built-in default when there is none."""
    try:
        text = keyvalue.read_text(path)
    except FileNotFoundError:
        return BUILTIN_DEFAULT
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read {path}: {err}") from None
    return parse(text, path)
