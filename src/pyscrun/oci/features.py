"""The features document (runtime-spec features.md) of pyscrun."""

from __future__ import annotations

from pyscrun import OCI_VERSION

# typing costs milliseconds at every start of the CLI: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Hook types a config.json may carry; the low-level runtime on the node runs them.
HOOKS = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart",
         "poststop")


def document() -> dict[str, Any]:
    return {
        "ociVersionMin": "1.0.0",
        "ociVersionMax": OCI_VERSION,
        "hooks": list(HOOKS),
        "mountOptions": ["bind", "rbind", "ro", "rw", "nosuid", "nodev", "noexec"],
        "annotations": {
            "org.opencontainers.runc.checkpoint.enabled": "true",
            "io.github.pyscrun.backends": "local,slurm",
        },
    }
