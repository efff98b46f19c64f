"""The node side's interpreters (the agent, `scrun exec`'s node side, srun_cr's launcher)
start isolated: srun carries the user's environment to them, and a PYTHONPATH set
there (an environment module's, say) or a PYTHONHOME must not reach them."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from pyscrun import node
from pyscrun.srun_cr.wrapper import launcher_command


def _hostile_env(tmp_path: Path) -> dict[str, str]:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    # Modules the node side imports, shadowed as a user's path could.
    for name in ("select", "pyscrun"):
        (shadow / f"{name}.py").write_text("raise ImportError('the PYTHONPATH was used')\n")
    return {**os.environ, "PYTHONPATH": str(shadow), "PYTHONHOME": str(tmp_path / "nowhere")}


def _probe(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """The node side's interpreter (node.python_command) importing what the node side
    imports, in the hostile environment: what it printed."""
    env = _hostile_env(tmp_path)
    code = ("import os, select, pyscrun.node.entry, pyscrun.node.exec_into, "
            "pyscrun.srun_cr.launcher; print(select.__name__, os.environ['PYTHONPATH'], "
            "'site' in sys.modules)")
    result = subprocess.run(node.python_command(code), env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip(), env


@pytest.mark.parametrize("command", [node.agent_command, node.exec_into_command,
                                     launcher_command])
def test_the_node_sides_ignore_the_users_python_environment(
        tmp_path: Path, command: Callable[[], list[str]]) -> None:
    argv = command()
    prefix = node.python_command("")
    assert argv[:-1] == prefix[:-1] and argv[-1].startswith(prefix[-1])
    said, env = _probe(tmp_path)
    # The environment itself is left as the user set it: srun_cr's launcher passes it
    # on to the program it runs; site (and the system's sitecustomize) is not loaded.
    assert said == f"select {env['PYTHONPATH']} False"
