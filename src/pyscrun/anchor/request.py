"""What create (or restore) tells the anchor it forks, and the signals that end it."""

from __future__ import annotations

from pyscrun import log
from pyscrun.errors import ScrunError

# typing costs milliseconds at every start of the CLI: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pyscrun.anchor.stand_in import StandIn
    from pyscrun.anchor.store import Store
    from pyscrun.conf.site import Site
    from pyscrun.hooks.lua import ScrunLua
    from pyscrun.oci.bundle import Bundle

# The signals that end a container's anchor: SIGTERM, SIGINT and SIGHUP (numbers, not
# the signal module, which costs create milliseconds before the anchor is forked).
TERMINATING_SIGNALS = (15, 2, 1)


class CreateRequest:
    """Everything the anchor is told by create (or restore)."""

    def __init__(self, container_id: str, bundle: Bundle, store: Store, site: Site,
                 console_socket: str | None, pid_file: str | None, environ: dict[str, str],
                 job_options: dict[str, str], log_file: str | None = None,
                 log_format: str = "text", restore: dict[str, Any] | None = None,
                 preserve_fds: int = 0, hooks: ScrunLua | None = None) -> None:
        self.container_id = container_id
        self.bundle = bundle
        self.store = store
        self.site = site
        self.console_socket = console_socket
        self.pid_file = pid_file
        self.environ = environ
        self.job_options = job_options
        self.log_file = log_file
        self.log_format = log_format
        self.restore = restore  # the CRIU order when this is a restore
        self.preserve_fds = preserve_fds  # the caller's fds 3.. that go to the container
        self.hooks = hooks  # the site's scrun.lua, loaded by create
        self.stand_in: StandIn | None = None  # forked with the anchor
        # Made by the anchor before its own modules load (start_anchor).
        self.signals: int | None = None
        self.started_allocation: object = None  # the backend's, to wait on

    def job_environ(self) -> dict[str, str]:
        """The environment the job is asked for with: the caller's, and a
        `podman run -e SLURM_JOB_ID=N` runs the container in that existing job (the
        caller's other job variables, of another job, are then not its)."""
        environ = dict(self.environ)
        for entry in self.bundle.env:
            if entry.startswith("SLURM_JOB_ID="):
                given = entry.partition("=")[2]
                if given != environ.get("SLURM_JOB_ID"):
                    from pyscrun.backends.salloc import job_variables_in

                    theirs = job_variables_in(environ).keys() - {"SLURM_CONF"}
                    environ = {name: value for name, value in environ.items()
                               if name not in theirs}
                environ["SLURM_JOB_ID"] = given
        return environ

    def move_before_end(self) -> int:
        """How many seconds before its job's end the container moves to a new job
        (pyscrun.conf's MoveBeforeEnd), 0 where it does not: CRIU checkpoints root's
        containers only, and a terminal's in run mode only; a job staged by scrun.lua
        would need staging again; a job the caller gave (SLURM_JOB_ID) is not the
        container's to leave; and one with a signal of the caller's (SCRUN_SIGNAL)
        cannot have another."""
        from pyscrun import identity

        seconds = self.site.pyscrun.MoveBeforeEnd
        if (not seconds or self.site.backend != "slurm" or self.hooks is not None
                or self.bundle.terminal or "SCRUN_SIGNAL" in self.job_options
                or self.job_environ().get("SLURM_JOB_ID") or not identity.is_root()):
            return 0
        return int(seconds)

    def abandon_started_allocation(self) -> None:
        """Give up the job asked for early if nothing waited on it (the anchor failed
        before): no salloc, and no job, is left behind."""
        started, self.started_allocation = self.started_allocation, None
        if started is not None:
            from pyscrun import backends

            try:
                backends.get(self.site.backend).abandon_allocation(self.site, started)
            except ScrunError as err:  # as a release's: said, and the anchor goes on ending
                log.current.error(f"giving up the job asked for: {err}")
