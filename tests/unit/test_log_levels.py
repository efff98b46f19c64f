"""The man page's logging variables: SCRUN_DEBUG sets every destination's level (stderr,
the log file, syslog); the destination's own variable overrides it."""

from __future__ import annotations

import pytest

from pyscrun import log
from pyscrun.conf import ociconf
from pyscrun.errors import ConfigError


def test_scrun_debug_sets_every_destination() -> None:
    logger = log.configure(0, False, None, "text", {"SCRUN_DEBUG": "debug2"})
    assert (logger.stderr_level, logger.file_level, logger.syslog_level) == (log.DEBUG2,) * 3


def test_a_destinations_own_variable_overrides_scrun_debug() -> None:
    logger = log.configure(0, False, None, "text",
                           {"SCRUN_DEBUG": "debug", "SCRUN_SYSLOG_DEBUG": "error"})
    assert (logger.stderr_level, logger.syslog_level) == (log.DEBUG, log.ERROR)


def test_levels_are_also_numbers_as_slurm_reads_them() -> None:
    logger = log.configure(0, False, None, "text", {"SCRUN_DEBUG": "5", "SCRUN_SYSLOG_DEBUG": "2"})
    assert (logger.stderr_level, logger.file_level, logger.syslog_level) == (
        log.DEBUG, log.DEBUG, log.ERROR)
    assert log.parse_level("12", "x") == log.DEBUG5
    assert log.parse_level("0", "x") == log.QUIET


def test_oci_conf_takes_a_numeric_level_and_a_bad_one_is_a_config_error() -> None:
    base = "RunTimeRun=r\nRunTimeKill=k\nRunTimeDelete=d\n"
    assert ociconf.parse(base + "StdIODebug=5\n", "f").StdIODebug == log.DEBUG
    with pytest.raises(ConfigError, match="invalid log level 'loud'"):
        ociconf.parse(base + "StdIODebug=loud\n", "f")
