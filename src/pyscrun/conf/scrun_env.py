"""SCRUN_* job input variables: each one's Slurm option, in one table.

The man page maps every SCRUN_X to what SLURM_X (or SALLOC_X) sets. Most shape the
allocation (salloc); a few only make sense for the step (srun); and those that Slurm
hands from the allocation on to its steps (the SLURM_* variables of the job's
environment that srun reads: SLURM_NTASKS, SLURM_CPUS_PER_TASK, ...) go to both, or
the step would lay out its tasks as if none were asked for (one per node). Values go
to Slurm as separate argv entries, never through a shell.
"""

from __future__ import annotations

from pyscrun import log
from pyscrun.digits import only_digits
from pyscrun.errors import UsageError

# collections (2 ms) would load at every create: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

ALLOC, STEP, BOTH = "alloc", "step", "both"
# What the option takes, as Slurm's option table (src/common/slurm_opt.c) says: a value
# (required_argument), nothing (no_argument: a flag), or a value or nothing
# (optional_argument).
VALUE, FLAG, OPTIONAL = "value", "flag", "optional"


class JobOption:
    """One SCRUN_* variable: the Slurm option it sets, for salloc, srun or both, and what it takes.

    A variable that joins another has no option of its own: its value goes at the end
    of the other's, after option (the separator). An OPTIONAL one takes nothing for ""
    and one of its values (in any case) as option=value; with no values listed, Slurm
    ignores whatever it is given.
    """

    __slots__ = ("applies_to", "joins", "kind", "option", "values", "variable")

    def __init__(self, variable: str, option: str, applies_to: str = ALLOC, kind: str = VALUE,
                 joins: str = "", values: tuple[str, ...] = ()) -> None:
        self.variable = variable
        self.option = option
        self.applies_to = applies_to
        self.kind = kind
        self.joins = joins
        self.values = values


JOB_OPTIONS = {
    o.variable: o
    for o in (
        JobOption("SCRUN_ACCOUNT", "--account"),
        JobOption("SCRUN_ACCTG_FREQ", "--acctg-freq", BOTH),
        JobOption("SCRUN_BURST_BUFFER", "--bb"),
        JobOption("SCRUN_CLUSTER_CONSTRAINT", "--cluster-constraint"),
        JobOption("SCRUN_CLUSTERS", "--clusters"),
        JobOption("SCRUN_CONSTRAINT", "--constraint"),
        JobOption("SCRUN_CORE_SPEC", "--core-spec"),
        JobOption("SCRUN_CPU_BIND", "--cpu-bind", STEP),
        JobOption("SCRUN_CPU_FREQ_REQ", "--cpu-freq"),
        JobOption("SCRUN_CPUS_PER_GPU", "--cpus-per-gpu"),
        JobOption("SCRUN_CPUS_PER_TASK", "--cpus-per-task", BOTH),
        JobOption("SCRUN_DELAY_BOOT", "--delay-boot"),
        JobOption("SCRUN_DEPENDENCY", "--dependency"),
        JobOption("SCRUN_DISTRIBUTION", "--distribution", BOTH),
        JobOption("SCRUN_EPILOG", "--epilog", STEP),
        JobOption("SCRUN_EXACT", "--exact", STEP, kind=FLAG),
        # Whether a Slurm knows topo is its own to say (24.05 is the first).
        JobOption("SCRUN_EXCLUSIVE", "--exclusive", kind=OPTIONAL,
                  values=("exclusive", "oversubscribe", "user", "mcs", "topo")),
        JobOption("SCRUN_GPU_BIND", "--gpu-bind"),
        JobOption("SCRUN_GPU_FREQ", "--gpu-freq"),
        JobOption("SCRUN_GPUS", "--gpus"),
        JobOption("SCRUN_GPUS_PER_NODE", "--gpus-per-node"),
        JobOption("SCRUN_GPUS_PER_SOCKET", "--gpus-per-socket"),
        JobOption("SCRUN_GPUS_PER_TASK", "--gpus-per-task"),
        JobOption("SCRUN_GRES_FLAGS", "--gres-flags"),
        JobOption("SCRUN_GRES", "--gres"),
        JobOption("SCRUN_HINT", "--hint"),
        JobOption("SCRUN_JOB_NAME", "--job-name"),
        JobOption("SCRUN_JOB_NODELIST", "--nodelist"),
        JobOption("SCRUN_JOB_NUM_NODES", "--nodes"),
        JobOption("SCRUN_LABELIO", "--label", STEP, kind=FLAG),
        JobOption("SCRUN_MEM_BIND", "--mem-bind"),
        JobOption("SCRUN_MEM_PER_CPU", "--mem-per-cpu", BOTH),
        JobOption("SCRUN_MEM_PER_GPU", "--mem-per-gpu"),
        JobOption("SCRUN_MEM_PER_NODE", "--mem", BOTH),
        JobOption("SCRUN_MPI_TYPE", "--mpi", STEP),
        JobOption("SCRUN_NCORES_PER_SOCKET", "--cores-per-socket"),
        JobOption("SCRUN_NETWORK", "--network", BOTH),
        JobOption("SCRUN_NSOCKETS_PER_NODE", "--sockets-per-node"),
        JobOption("SCRUN_NTASKS", "--ntasks", BOTH),
        JobOption("SCRUN_NTASKS_PER_CORE", "--ntasks-per-core"),
        JobOption("SCRUN_NTASKS_PER_GPU", "--ntasks-per-gpu"),
        JobOption("SCRUN_NTASKS_PER_NODE", "--ntasks-per-node", BOTH),
        JobOption("SCRUN_NTASKS_PER_TRES", "--ntasks-per-tres"),
        JobOption("SCRUN_OPEN_MODE", "--open-mode", STEP),
        JobOption("SCRUN_OVERCOMMIT", "--overcommit", BOTH, kind=FLAG),
        JobOption("SCRUN_OVERLAP", "--overlap", STEP, kind=OPTIONAL),
        JobOption("SCRUN_PARTITION", "--partition"),
        JobOption("SCRUN_POWER", "--power"),
        JobOption("SCRUN_PROFILE", "--profile"),
        JobOption("SCRUN_PROLOG", "--prolog", STEP),
        JobOption("SCRUN_QOS", "--qos"),
        JobOption("SCRUN_REMOTE_CWD", "--chdir", STEP),
        JobOption("SCRUN_REQ_SWITCH", "--switches"),
        JobOption("SCRUN_RESERVATION", "--reservation"),
        JobOption("SCRUN_SIGNAL", "--signal"),
        JobOption("SCRUN_SLURMD_DEBUG", "--slurmd-debug", STEP),
        JobOption("SCRUN_SPREAD_JOB", "--spread-job", kind=FLAG),
        JobOption("SCRUN_TASK_EPILOG", "--task-epilog", STEP),
        JobOption("SCRUN_TASK_PROLOG", "--task-prolog", STEP),
        JobOption("SCRUN_THREAD_SPEC", "--thread-spec"),
        JobOption("SCRUN_THREADS_PER_CORE", "--threads-per-core", BOTH),
        JobOption("SCRUN_THREADS", "--threads", STEP),
        JobOption("SCRUN_TIMELIMIT", "--time"),
        JobOption("SCRUN_TRES_BIND", "--tres-bind", STEP),
        JobOption("SCRUN_TRES_PER_TASK", "--tres-per-task", BOTH),
        JobOption("SCRUN_UNBUFFEREDIO", "--unbuffered", STEP, kind=FLAG),
        JobOption("SCRUN_USE_MIN_NODES", "--use-min-nodes", kind=FLAG),
        # salloc takes the wait only after the count: --switches=count@max-time.
        JobOption("SCRUN_WAIT4SWITCH", "@", joins="SCRUN_REQ_SWITCH"),
        JobOption("SCRUN_WCKEY", "--wckey"),
        JobOption("SCRUN_WORKING_DIR", "--chdir"),
    )
}
# The man page spells this one SLURM_CORE_SPEC; accept both, as one setting (the SCRUN_
# name winning where both are given).
JOB_OPTIONS["SLURM_CORE_SPEC"] = JOB_OPTIONS["SCRUN_CORE_SPEC"]
# strtol's white space, before a number's sign and digits.
_SPACE = " \t\n\v\f\r"


def flag_is_set(value: str) -> bool:
    """A flag's value as Slurm reads it from the environment (slurm_process_option): set
    for "", "yes" in any case or a number other than 0 (as strtol reads it, nothing
    after); unset for anything else (no, true, 0, on, 1x, ...), which Slurm never refuses."""
    if value == "" or (value.isascii() and value.lower() == "yes"):
        return True
    digits = value.lstrip(_SPACE)
    digits = digits[1:] if digits[:1] in ("+", "-") else digits
    return only_digits(digits) and digits.strip("0") != ""


def job_options(environ: Mapping[str, str], config_env: Iterable[str]) -> dict[str, str]:
    """SCRUN_* settings from the caller's environment, overridden by config.json's; each
    under its variable's own name (an alias's value under the name it stands for)."""
    config = [e.partition("=")[::2] for e in config_env]
    found: dict[str, str] = {}
    for source in (environ.items(), config):
        given = dict(source)
        # Aliases first: a variable's own name, given too, wins.
        for key in sorted((k for k in given if k in JOB_OPTIONS),
                          key=lambda k: k == JOB_OPTIONS[k].variable):
            found[JOB_OPTIONS[key].variable] = given[key]
    for key in (k for k, _ in config if k.startswith("SCRUN_") and k not in JOB_OPTIONS):
        # As Slurm's scrun, no refusal; but a misspelt option (SCRUN_TIME) is said somewhere.
        log.current.info(f"{key} in the container's environment is not a job option "
                         "(scrun(1) lists them): only the container sees it")
    for key, value in found.items():
        if "\n" in value or "\0" in value:
            raise UsageError(f"{key}: the value must be a single line")
        option = JOB_OPTIONS[key]
        if option.kind == OPTIONAL and option.values and value.lower() not in ("", *option.values):
            raise UsageError(f"{key}: expected nothing, {', '.join(option.values[:-1])} or "
                             f"{option.values[-1]}, found {value!r}")
        if option.kind == FLAG and not flag_is_set(value):
            log.current.debug(f"{key}={value!r} unsets {option.option}, as Slurm reads it")
        if option.joins and option.option in found.get(option.joins, ""):
            raise UsageError(f"{key}: {option.joins} has its own {option.option} part, "
                             "give one or the other")
    return found


def arguments(options: Mapping[str, str], applies_to: str) -> list[str]:
    """The salloc (ALLOC) or srun (STEP) arguments for these settings."""
    args = []
    for key, value in _joined(options, applies_to).items():
        option = JOB_OPTIONS[key]
        if option.kind == VALUE:
            args.append(f"{option.option}={value}")
        elif option.kind == FLAG:
            if flag_is_set(value):
                args.append(option.option)
        elif value and option.values:
            args.append(f"{option.option}={value.lower()}")
        else:
            args.append(option.option)
    return args


def _joined(options: Mapping[str, str], applies_to: str) -> dict[str, str]:
    """The settings for salloc or srun, each joining value at the end of the one it joins."""
    mine = {k: v for k, v in options.items() if JOB_OPTIONS[k].applies_to in (applies_to, BOTH)}
    joined = dict(mine)
    for key, value in mine.items():
        option = JOB_OPTIONS[key]
        if not option.joins:
            continue
        del joined[key]
        if option.joins in joined:
            joined[option.joins] += option.option + value
        else:
            # Slurm has no option for it alone (salloc refuses --switches=@time), and
            # slurmctld ignores a wait for switches unless a switch count is asked for.
            log.current.debug(f"{key}={value} left out: Slurm takes it only with {option.joins}")
    return joined
