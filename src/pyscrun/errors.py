"""Every error a user can act on (leave.py maps each to its exit code)."""

from __future__ import annotations


class ScrunError(Exception):
    """An error whose message is one line a user can act on."""


class UsageError(ScrunError):
    """The command line is wrong."""


class NotSupported(ScrunError):
    """The verb or option exists in runc but pyscrun does not do it (yet)."""


class ContainerNotFound(ScrunError):
    """No container with that id exists under --root."""


class ContainerExists(ScrunError):
    """create was asked for an id that is already in use."""


class InvalidState(ScrunError):
    """The operation is not allowed in the container's current state."""


class JobSuspended(InvalidState):
    """The scheduler has suspended the container's job: what runs of it is stopped."""


class BundleError(ScrunError):
    """The bundle or its config.json is missing or malformed."""


class CommandRefused(BundleError):
    """The process's command (or working directory) is missing or cannot be used:
    status is what podman makes of the runtime's words for it (127, 126, or 255 for
    what is neither), as a shell would say."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ConfigError(ScrunError):
    """oci.conf or pyscrun.conf is malformed."""


class AnchorError(ScrunError):
    """The anchor of a container failed or could not be reached."""


class RuntimeCommandError(ScrunError):
    """A RunTime* command from oci.conf failed."""


class ExecFailed(ScrunError):
    """exec could not start its process in the container (runc exits 255 for it)."""


class BackendError(ScrunError):
    """The scheduler (or the local backend) refused or failed an operation."""


class CheckpointError(ScrunError):
    """A checkpoint or restart with CRIU could not be done (srun_cr)."""


class ChannelError(ScrunError):
    """The channel between an anchor and its node agents failed or was refused."""


class Interrupted(ScrunError):
    """A signal to this process ended what it waited for (a command, a script)."""

    def __init__(self, signum: int) -> None:
        import signal  # its names, on this path alone

        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        super().__init__(f"interrupted by {name}")
        self.signum = signum
