"""The node agent's entry: the task run in its user namespace, and any error that
stops it before its container runs reported to the anchor (as the agent's error line
podman shows)."""

from __future__ import annotations

import os

from pyscrun import log
from pyscrun.channel import frames, peer
from pyscrun.conf import site
from pyscrun.errors import ScrunError
from pyscrun.node import userns
from pyscrun.node.agent import DIAL_TIMEOUT, REPORT_TIMEOUT, Agent, anchor_address
from pyscrun.node.early import EarlyStart, slurm_conf
from pyscrun.node.task import settle_runtime_dir


def main(env: dict[str, str], entering: userns.Entering, early: EarlyStart | None = None,
         ) -> int:
    """Run one task, in the user namespace being entered; returns its exit status.
    Errors become a message and status 255."""
    try:
        entering.finish()
        settle_runtime_dir(env)
        the_site = early.site if early is not None and early.site is not None else \
            site.load(slurm_conf(env))
        oci = the_site.oci
        # Not StdIODebug: the agent's stderr is the container's.
        log.current.take_defaults(None, oci.FileDebug, oci.SyslogDebug, oci.DebugFlags)
        return Agent(env, oci, the_site.derived_commands,
                     early.sealing if early is not None else None).main()
    except (ScrunError, OSError, KeyError, ValueError) as err:
        log.current.error(f"node agent: {err}")
        _report_error(env, str(err))
        return 255


def _report_error(env: dict[str, str], message: str) -> None:
    if not env.get("PYSCRUN_AGENT_PORT"):
        return  # started by hand: no anchor waits
    try:
        link = peer.dial(*anchor_address(env), DIAL_TIMEOUT)
    except (ScrunError, ValueError):
        return
    link.send(frames.message({"op": "agent-error", "message": message,
                              "task": env.get("SLURM_PROCID", "0")}))
    link.flush_blocking(REPORT_TIMEOUT)
    link.close()


def cli(entering: userns.Entering, early: EarlyStart) -> None:
    """Entry point when srun starts the agent: `python -m pyscrun.node`."""
    from pyscrun.leave import leave

    leave(main(dict(os.environ), entering, early))
