"""The srun_cr command.

    srun_cr [srun options] COMMAND...             run a step whose tasks can be checkpointed
    srun_cr --restart DIR [srun options] [CMD]    restart a checkpointed step (or set
                                                  SLURM_RESTART_DIR=DIR)
    srun_cr checkpoint JOBID[.STEP] [--dir DIR] [--stop]

Anything but `checkpoint` as the first word is srun's command line (to run a program
named `checkpoint`, write `srun_cr -- checkpoint` or `./checkpoint`). Messages of srun_cr
itself start with "srun_cr:"; their level is set by SRUN_CR_DEBUG (quiet ... debug5).
"""

from __future__ import annotations

import os
import sys

from pyscrun import log
from pyscrun.leave import exit_status_of

LOG_ENV = "SRUN_CR_DEBUG"
HELP = """\
srun_cr: srun with checkpoint/restart (CRIU). srun's options and command, plus:
  srun_cr --restart DIR [srun options]     restart the tasks checkpointed in DIR
  srun_cr checkpoint JOBID[.STEP] [--dir DIR] [--stop]
SIGUSR2 to srun_cr checkpoints its step ($SRUN_CR_SIGNAL). srun's own help follows.
"""


def _logger(environ: dict[str, str]) -> log.Logger:
    logger = log.Logger()
    logger.prefix = "srun_cr"
    logger.stderr_level = log.INFO
    if environ.get(LOG_ENV):
        logger.stderr_level = log.parse_level(environ[LOG_ENV], LOG_ENV)
    return logger


def run(argv: list[str], environ: dict[str, str]) -> int:
    if argv[:1] == ["checkpoint"]:
        from pyscrun.srun_cr import client

        return client.checkpoint(argv[1:], environ)
    from pyscrun.srun_cr import srunopts, wrapper

    line = srunopts.parse(argv, srunopts.help_lookup("srun", environ))
    if line.passthrough is not None or (not line.command and not line.restart
                                        and not environ.get(wrapper.RESTART_ENV)):
        log.current.debug(f"srun runs this line itself: {line.passthrough or 'no command'}")
        if line.passthrough in ("--help", "--usage"):
            print(HELP, flush=True)
        wrapper.exec_srun(line.given if line.passthrough is not None else argv, environ)
    plan = wrapper.Plan(line, environ)
    wrapper.Wrapper(plan, environ).run()


def main() -> None:
    environ = dict(os.environ)

    def action() -> int:
        log.current = _logger(environ)
        return run(sys.argv[1:], environ)

    sys.exit(exit_status_of(action))
