"""The scrun command: parse argv, run one verb, map any error to an exit code."""

from __future__ import annotations

import os
import sys

from pyscrun import __version__, log
from pyscrun.cli import flags
from pyscrun.errors import UsageError
from pyscrun.leave import exit_status_of, leave

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from pyscrun.anchor.store import Store


class Context:
    """What every verb needs: options, environment, where state and config live."""

    def __init__(self, options: dict[str, object], args: dict[str, str]) -> None:
        self.options = options
        self.args = args
        self.environ = dict(os.environ)

    def option(self, name: str, default: str | None = None) -> str | None:
        value = self.options.get(name, default)
        return None if value is None else str(value)

    def flag(self, name: str) -> bool:
        return bool(self.options.get(name))

    @property
    def container_id(self) -> str:
        from pyscrun.anchor.store import validate_id

        return validate_id(self.args["container-id"])

    @property
    def store(self) -> Store:
        from pyscrun.anchor.store import Store, checked_root, default_root

        root = self.option("root")
        return Store(checked_root(os.path.abspath(root) if root else default_root(self.environ)))

    @property
    def slurm_conf(self) -> str:
        from pyscrun.conf.site import slurm_conf_path

        return slurm_conf_path(self.option("f"), self.environ)


def _handler(spec: str) -> Callable[[Context], int]:
    module_name, _, function = spec.partition(":")
    # __import__, not importlib (whose import, with warnings, every verb would pay).
    __import__(module_name)
    return getattr(sys.modules[module_name], function)  # type: ignore[no-any-return]


def run(argv: list[str]) -> int:
    parsed = flags.parse(argv)
    options = parsed.options
    log_format = str(options.get("log_format", "text"))
    if log_format not in ("text", "json"):
        raise UsageError(f"invalid --log-format {log_format!r}: use text or json")
    log.current = log.configure(
        int(options.get("v", 0)),  # type: ignore[call-overload]
        bool(options.get("debug")), str(options.get("log") or "") or None, log_format,
        os.environ,
    )
    if options.get("version"):
        print(f"scrun (pyscrun) version {__version__}\nspec: 1.0.2")
        return 0
    if options.get("usage"):
        print(flags.usage())
        return 0
    verb = parsed.verb
    if options.get("help") or verb is None:
        print(flags.help_text(verb))
        return 0 if options.get("help") else 2
    log.current.debug(f"{verb.name} {parsed.args}")
    return _handler(verb.handler)(Context(options, parsed.args))


def main() -> None:
    leave(exit_status_of(lambda: run(sys.argv[1:])))
