"""The node agent: one per task on a compute node, between the job step and the runtime."""

import os
import sys

import pyscrun

# Where the pyscrun package is found: the same path on every node, whose installed
# software is the login host's.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pyscrun.__file__)))


def python_command(statement: str) -> list[str]:
    """This interpreter running statement on a node, isolated (-I): the step carries its
    caller's environment (the user's own where they run srun_cr or scrun themselves),
    whose PYTHONPATH (an environment module's, say) would come before the standard
    library, and whose PYTHONHOME would keep the interpreter from starting at all.
    Without site (-S): the node side needs the standard library and pyscrun only, and
    site would run the system's sitecustomize (Debian's loads apport's hook) at every
    task's start, on the way to its container."""
    return [sys.executable, "-I", "-S", "-c",
            f"import sys; sys.path.append({PACKAGE_ROOT!r}); {statement}"]


def agent_command() -> list[str]:
    """How a job step starts the agent: importing node/__main__.py rather than running
    it with `-m`, whose runpy would cost each agent 2 ms of imports before its own."""
    return python_command("import pyscrun.node.__main__")


# What node/exec_into.py says on its stderr (when that is no terminal) right before it
# runs the process: `scrun exec` returns only then, as runc's does once its process has
# started, and what came before it is why the process did not.
EXEC_RUNNING_MARK = b"\0pyscrun-exec: running\n"


def exec_into_command() -> list[str]:
    """How `scrun exec` starts its node side (node/exec_into.py), without runpy too."""
    return python_command("from pyscrun.node.exec_into import main; main()")
