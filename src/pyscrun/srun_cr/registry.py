"""Where a running srun_cr listens, and how `srun_cr checkpoint JOBID.STEP` finds it.

Each srun_cr listens on <run dir>/srun_cr.<pid>.sock and, once its tasks report their job
and step, links <run dir>/<job>.<step> to that socket. The run dir is $SRUN_CR_RUN_DIR,
else /run/pyscrun-srun-cr for root, else $TMPDIR/pyscrun-srun-cr-<uid>: the same for
every process of a user, whatever its environment (a batch job's differs from a login
shell's). Only `srun_cr checkpoint` and `status` come this way, on srun_cr's own host:
the tasks' launchers, on other machines, dial srun_cr over the network.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import tempfile

from pyscrun.errors import CheckpointError

RUN_DIR_ENV = "SRUN_CR_RUN_DIR"
SOCKET_ENV = "SLURM_SRUN_CR_SOCKET"
# The step's secret, which its launchers prove they hold when they dial srun_cr. SLURM_
# in its name, since srun passes such variables even with --export=NONE.
SECRET_ENV = "SLURM_SRUN_CR_SECRET"
_STEP = re.compile(r"^(\d+)(?:\.(\d+))?$")


def run_dir(environ: dict[str, str]) -> str:
    given = environ.get(RUN_DIR_ENV)
    if given:
        return os.path.abspath(given)
    uid = os.getuid()
    if uid == 0:
        return "/run/pyscrun-srun-cr"
    return os.path.join(tempfile.gettempdir(), f"pyscrun-srun-cr-{uid}")


def prepare(path: str) -> None:
    """Create the run dir (0700) or check that an existing one is this user's alone."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError as err:
        raise CheckpointError(f"cannot create srun_cr's run directory {path}: {err.strerror}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise CheckpointError(f"srun_cr's run directory {path} must be a directory owned by uid "
                              f"{os.getuid()} and writable by it alone")


def socket_path(directory: str) -> str:
    return os.path.join(directory, f"srun_cr.{os.getpid()}.{secrets.token_hex(3)}.sock")


def register(directory: str, job: str, step: str, socket: str) -> str:
    """Link <job>.<step> to our socket (replacing a stale link); returns the link."""
    link = os.path.join(directory, f"{job}.{step}")
    tmp = f"{link}.{os.getpid()}.tmp"
    try:
        os.symlink(os.path.basename(socket), tmp)
        os.replace(tmp, link)
    except OSError as err:
        raise CheckpointError(f"cannot register step {job}.{step} in {directory}: {err.strerror}") from None
    return link


def unregister(link: str, socket: str) -> None:
    """Remove our link, unless a newer srun_cr has taken the name since."""
    try:
        if os.readlink(link) == os.path.basename(socket):
            os.unlink(link)
    except OSError:
        pass


def lookup(directory: str, spec: str) -> tuple[str, str]:
    """The step name and socket of a running srun_cr from JOBID.STEP (or JOBID when the
    job has a single srun_cr step)."""
    found = _STEP.match(spec)
    if not found:
        raise CheckpointError(f"invalid step {spec!r}: give JOBID.STEPID, e.g. 1234.0")
    job, step = found.groups()
    if step is None:
        try:
            names = sorted(n for n in os.listdir(directory) if re.fullmatch(rf"{job}\.\d+", n))
        except OSError:
            names = []
        if len(names) > 1:
            raise CheckpointError(f"job {job} has several srun_cr steps ({', '.join(names)}): "
                                  f"name one as JOBID.STEPID")
        if not names:
            raise CheckpointError(f"no srun_cr runs a step of job {job} (looked in {directory})")
        name = names[0]
    else:
        name = f"{job}.{step}"
    link = os.path.join(directory, name)
    if not os.path.lexists(link):
        raise CheckpointError(f"no srun_cr runs step {name} (looked in {directory})")
    return name, link
