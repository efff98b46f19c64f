"""Loading and checking a bundle's config.json: what create needs before it forks."""

from __future__ import annotations

import os
import stat

from pyscrun import jsonc
from pyscrun.errors import BundleError
from pyscrun.oci import shape

# typing costs milliseconds at every start of the CLI: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# A real config.json is a few KiB; anything this large is a mistake or an attack.
MAX_CONFIG_BYTES = 16 * 1024 * 1024


class Bundle:
    """A checked bundle: its directory and its config.json. Paths are strings: pathlib
    (and `json`) cost create, on podman's critical path, milliseconds."""

    __slots__ = ("config", "path")

    def __init__(self, path: str, config: dict[str, Any]) -> None:
        self.path = path
        self.config = config

    @property
    def config_path(self) -> str:
        return os.path.join(self.path, "config.json")

    @property
    def rootfs(self) -> str:
        root = self.config.get("root", {}).get("path", "rootfs")
        return os.path.realpath(os.path.join(self.path, root)) if not os.path.isabs(root) else root

    @property
    def terminal(self) -> bool:
        return bool(self.config.get("process", {}).get("terminal", False))

    @property
    def env(self) -> list[str]:
        return list(self.config.get("process", {}).get("env") or [])

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.config.get("annotations") or {})


def _check(config: Any) -> None:
    shape.check(config)
    process = config.get("process")
    if process is None:
        raise BundleError("config.json: process is missing")
    if not process.get("args"):
        raise BundleError("config.json: process.args is missing or empty")
    # Where a null passes runc's decoder as absent, the rootfs would still be read from it.
    root = config.get("root", {})
    if root is None or ("path" in root and root["path"] is None):
        raise BundleError("config.json: root and root.path cannot be null")


def is_bind(mount: object) -> bool:
    """Whether an entry of config.json's mounts is a bind mount, as runc reads one:
    type bind, or bind or rbind among its options."""
    if not isinstance(mount, dict):
        return False
    options = mount.get("options") or []
    return mount.get("type") == "bind" or (isinstance(options, list)
                                           and ("bind" in options or "rbind" in options))


def load(bundle_dir: str) -> Bundle:
    path = os.path.abspath(bundle_dir)
    if not os.path.isdir(path):
        raise BundleError(f"bundle {path} is not a directory")
    config_path = os.path.join(path, "config.json")
    try:
        # Non-blocking: a FIFO planted as config.json must not hang create.
        fd = os.open(config_path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise BundleError(f"bundle {path} has no config.json") from None
    except OSError as err:
        raise BundleError(f"cannot read {config_path}: {err.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BundleError(f"{config_path} is not a regular file")
    with open(fd, "rb") as config_file:
        raw = config_file.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise BundleError(f"{config_path} is larger than {MAX_CONFIG_BYTES // 2**20} MiB")
    try:
        config = jsonc.loads(raw)
    except (RecursionError, UnicodeDecodeError):
        raise BundleError(f"{config_path} is not valid JSON: too deeply nested or not UTF-8") from None
    except ValueError as err:
        raise BundleError(f"{config_path} is not valid JSON: {err}") from None
    _check(config)
    try:
        _no_nul(config, "")
    except RecursionError:
        raise BundleError(f"{config_path} is too deeply nested") from None
    return Bundle(path, config)


def _no_nul(value: Any, where: str) -> None:
    """No string anywhere in the document may hold a NUL: none can reach a system call."""
    if isinstance(value, str):
        if "\0" in value:
            raise BundleError(f"config.json: {where or 'a value'} contains a NUL character")
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_nul(key, f"a key of {where or 'the document'}")
            _no_nul(item, f"{where}.{key}" if where else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _no_nul(item, f"{where}[{index}]")
