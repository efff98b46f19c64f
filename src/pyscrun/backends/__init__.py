"""Where containers run: the Slurm scheduler, or this machine alone."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pyscrun.backends.base import Backend


def get(name: str) -> Backend:
    if name == "slurm":
        from pyscrun.backends.slurm import SlurmBackend

        return SlurmBackend()
    from pyscrun.backends.local import LocalBackend

    return LocalBackend()
