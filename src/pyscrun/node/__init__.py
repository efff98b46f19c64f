"""The node agent: one per task on a compute node, between the job step and the runtime."""

import sys

# Isolated (-I): the step carries its caller's environment (the user's own where they
# run srun_cr or scrun themselves), whose PYTHONPATH (an environment module's, say)
# would come before the standard library, and whose PYTHONHOME would keep the
# interpreter from starting at all.
ISOLATED = "-I"


def agent_command() -> list[str]:
    """How a job step starts the agent: this interpreter importing node/__main__.py
    rather than running it with `-m`, whose runpy would cost each agent 2 ms of
    imports before its own."""
    return [sys.executable, ISOLATED, "-c", "import pyscrun.node.__main__"]


def exec_into_command() -> list[str]:
    """How `scrun exec` starts its node side (node/exec_into.py), without runpy too."""
    return [sys.executable, ISOLATED, "-c", "from pyscrun.node.exec_into import main; main()"]
