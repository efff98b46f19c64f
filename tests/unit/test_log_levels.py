"""The man page's logging variables: SCRUN_DEBUG sets every destination's level (stderr,
the log file, syslog); the destination's own variable overrides it."""

from __future__ import annotations

from pyscrun import log


def test_scrun_debug_sets_every_destination() -> None:
    logger = log.configure(0, False, None, "text", {"SCRUN_DEBUG": "debug2"})
    assert (logger.stderr_level, logger.file_level, logger.syslog_level) == (log.DEBUG2,) * 3


def test_a_destinations_own_variable_overrides_scrun_debug() -> None:
    logger = log.configure(0, False, None, "text",
                           {"SCRUN_DEBUG": "debug", "SCRUN_SYSLOG_DEBUG": "error"})
    assert (logger.stderr_level, logger.syslog_level) == (log.DEBUG, log.ERROR)
