"""The node agent: one per task on a compute node, between the job step and the runtime."""

import sys


def agent_command() -> list[str]:
    """How a job step starts the agent: this interpreter importing node/__main__.py
    rather than running it with `-m`, whose runpy would cost each agent 2 ms of
    imports before its own."""
    return [sys.executable, "-c", "import pyscrun.node.__main__"]


def exec_into_command() -> list[str]:
    """How `scrun exec` starts its node side (node/exec_into.py), without runpy too."""
    return [sys.executable, "-c", "from pyscrun.node.exec_into import main; main()"]
