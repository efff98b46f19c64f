"""How a short-lived process ends: its error as one line with the exit code one table
gives it, and without the interpreter's finalization.

Tearing down every module costs milliseconds at the end of each scrun command and node
agent, several of which stand between `podman run` and its container's end. Nothing
they leave needs it: their files are closed by the kernel, their log lines are written
as they go. What is buffered on stdout and stderr is written first.
"""

from __future__ import annotations

import os
import sys

from pyscrun import log
from pyscrun.errors import ExecFailed, ScrunError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn


def leave(status: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: the descriptor was closed when we started
                stream.flush()
        except (OSError, ValueError):
            pass  # its reader is gone, or it was closed: nothing more can reach it
    os._exit(status & 0xFF)


# The one place where errors become exit codes. runc uses 1 for every failure;
# usage errors get 2, as argument parsers conventionally do; exec's failure to start its
# process 255, as runc's.
EXIT_CODES: dict[type[BaseException], int] = {
    UsageError: 2,
    ExecFailed: 255,
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
    try:
        return action()
    except ScrunError as err:
        # One line, whatever the input it quotes holds (a signal name, a path...).
        log.current.error(str(err).replace("\n", "\\n"))
        return exit_code_for(err)
    except KeyboardInterrupt as err:
        return exit_code_for(err)
    except Exception as err:
        # A defect, not the user's doing: one line that says where, never a traceback.
        import traceback

        where = traceback.extract_tb(err.__traceback__)[-1]
        log.current.error(f"internal error: {err!r} at {where.filename}:{where.lineno}")
        return exit_code_for(err)
