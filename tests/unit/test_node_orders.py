"""A node agent's orders that fail for a reason of the node's (a file it cannot write,
a command it cannot spawn) are answered with the error: the agent, and the container
it keeps, go on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyscrun.channel import frames
from pyscrun.conf import ociconf
from pyscrun.node.agent import Agent


class _Runtime:
    """Stands in for the task's runtime commands: every verb is there (the fault comes
    before any is run)."""

    def require(self, directive: str) -> None:
        pass

    def run_checked(self, directive: str, args: list[str] | None = None,
                    timeout: float = 60.0) -> str:
        return "{}"


def test_an_update_whose_resources_file_cannot_be_written_fails_only_itself(
        tmp_path: Path) -> None:
    agent = Agent({"PYSCRUN_AGENT_CONTAINER_ID": "c1", "PYSCRUN_AGENT_BUNDLE": str(tmp_path),
                   "PYSCRUN_AGENT_JOB_ID": "1"}, ociconf.BUILTIN_DEFAULT, lambda _: {})
    sent: list[dict[str, Any]] = []
    agent._send = sent.append  # type: ignore[method-assign]
    agent.commands = _Runtime()  # type: ignore[assignment]
    agent.task_dir = str(tmp_path / "gone")  # its task dir removed under it: ENOENT
    order = frames.message({"op": "update", "resources": {"memory": {"limit": 1}}})
    agent._handle([(frames.MESSAGE, order[frames.HEADER.size:])])
    assert len(sent) == 1
    assert sent[0]["event"] == "ordered" and sent[0]["order"] == "update"
    assert "No such file or directory" in sent[0]["error"]
