"""The features document (runtime-spec features.md) of pyscrun."""

from __future__ import annotations

from typing import Any

from pyscrun import OCI_VERSION

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
            "org.opencontainers.runc.checkpoint.enabled": "false",
            "io.github.pyscrun.backends": "local,slurm",
        },
    }
