"""What the node agent sets going before its modules load (node/__main__.py): the
node's configuration read, and sealed copies of the runtime's program made meanwhile
(node/sealed_program.py), so that neither waits on the agent's imports."""

from __future__ import annotations

from pyscrun.conf import site
from pyscrun.errors import ScrunError
from pyscrun.node import sealed_program

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyscrun.node.userns import Entering

# The oci.conf commands that bring a new container up (a restore's is pyscrun.conf's,
# derived later: node/agent.py adds it).
CREATING = ("RunTimeRun", "RunTimeCreate")


def slurm_conf(env: Mapping[str, str]) -> str:
    """The node's own configuration: beside the slurm.conf slurmstepd names in the
    task's SLURM_CONF (the local backend names the caller's)."""
    return env.get("PYSCRUN_AGENT_SLURM_CONF") or env.get("SLURM_CONF") or site.DEFAULT_SLURM_CONF


class EarlyStart:
    """The node's configuration, if it could be read now (else the agent reads it again
    and reports why not), and the sealed copies being made of its runtime's program
    where it would copy itself (none in the namespaces being entered)."""

    def __init__(self, env: Mapping[str, str], entering: Entering) -> None:
        self.site: site.Site | None = None
        self.sealing: sealed_program.Sealing | None = None
        try:
            self.site = site.load(slurm_conf(env))
        except (ScrunError, OSError, KeyError, ValueError):
            return  # as the agent's main() would
        if entering.making or not sealed_program.needed():
            return
        paths = [sealed_program.program_file(str(getattr(self.site.oci, directive, "")),
                                             env.get("PATH")) for directive in CREATING]
        self.sealing = sealed_program.Sealing([path for path in paths if path])
