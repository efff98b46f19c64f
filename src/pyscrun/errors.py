"""Every error a user can act on, and the one table that maps it to an exit code."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


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


class BundleError(ScrunError):
    """The bundle or its config.json is missing or malformed."""


class ConfigError(ScrunError):
    """oci.conf or pyscrun.conf is malformed."""


class AnchorError(ScrunError):
    """The anchor of a container failed or could not be reached."""


class RuntimeCommandError(ScrunError):
    """A RunTime* command from oci.conf failed."""


class BackendError(ScrunError):
    """The scheduler (or the local backend) refused or failed an operation."""


class CheckpointError(ScrunError):
    """A checkpoint or restart with CRIU could not be done (srun_cr)."""


class ChannelError(ScrunError):
    """The channel between an anchor and its node agents failed or was refused."""


# The one place where errors become exit codes. runc uses 1 for every failure;
# usage errors get 2, as argument parsers conventionally do.
EXIT_CODES: dict[type[BaseException], int] = {
    UsageError: 2,
    ScrunError: 1,
    KeyboardInterrupt: 130,
}


def exit_code_for(exc: BaseException) -> int:
    for cls in type(exc).__mro__:
        if cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return 1


def exit_status_of(action: Callable[[], int]) -> int:
    """Run a command's action: an error a user can act on is logged, as one line, and
    becomes the exit status the table above gives it."""
    from pyscrun import log

    try:
        return action()
    except ScrunError as err:
        log.current.error(str(err))
        return exit_code_for(err)
    except KeyboardInterrupt as err:
        return exit_code_for(err)
    except Exception as err:
        # A defect, not the user's doing: one line that says where, never a traceback.
        import traceback

        where = traceback.extract_tb(err.__traceback__)[-1]
        log.current.error(f"internal error: {err!r} at {where.filename}:{where.lineno}")
        return exit_code_for(err)
