"""The job's variables scrun.lua gets as job_env, where the job is the caller's own
(SLURM_JOB_ID given): Slurm's scrun scrapes them from the caller's environment. The
variables of a job pyscrun asks for are salloc's, tested on the cluster
(test_lua_staging.py)."""

from __future__ import annotations

from pyscrun.anchor.request import CreateRequest
from pyscrun.backends.slurm import SlurmBackend, given_job
from pyscrun.oci.bundle import Bundle

CALLER = {"HOME": "/home/u", "SLURM_CONF": "/etc/slurm/slurm.conf", "SLURM_JOB_ID": "7",
          "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2",
          "_SLURM_SPANK_OPTION_site_opt": "x"}


def _request(bundle_env: list[str]) -> CreateRequest:
    bundle = Bundle("/b", {"process": {"args": ["true"], "env": bundle_env}})
    return CreateRequest("c", bundle, None, None, None, None, dict(CALLER), {})  # type: ignore[arg-type]


def _job_variables(bundle_env: list[str]) -> dict[str, str]:
    environ = _request(bundle_env).job_environ()
    return SlurmBackend().job_variables(given_job(environ["SLURM_JOB_ID"], environ))


def test_the_callers_job_gives_its_slurm_and_spank_variables() -> None:
    assert _job_variables([]) == {k: v for k, v in CALLER.items() if k != "HOME"}


def test_a_job_named_in_the_container_s_env_takes_none_of_the_callers_other_job() -> None:
    assert _job_variables(["SLURM_JOB_ID=9"]) == {"SLURM_JOB_ID": "9",
                                                  "SLURM_CONF": "/etc/slurm/slurm.conf"}


def test_the_callers_own_job_named_again_keeps_its_variables() -> None:
    assert _job_variables(["SLURM_JOB_ID=7"]) == _job_variables([])
