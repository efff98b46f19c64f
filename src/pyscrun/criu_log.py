"""What a failed CRIU run said in its log: the cause, in one line.

runc and srun_cr's launchers say only that CRIU failed (runc: where its log is); the
log may be on a node, gone with the task's files before anyone reads it."""

from __future__ import annotations

# Logged by every run without CAP_SYS_RESOURCE, and harmless: CRIU goes on.
_NOISE = ("RLIMIT_NOFILE",)
# CRIU's error lines: `(00.120) Error (criu/sk-inet.c:191): inet: Connected TCP ...`.
_MARK = "Error ("


def log_reason(path: str, lines: int = 2) -> str:
    """The first error lines of a CRIU log (the cause comes first, what followed from it
    after), as one line; '' if it holds none or cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as log:
            text = log.read().splitlines()
    except OSError:
        return ""
    errors = []
    for line in text:
        start = line.find(_MARK)
        end = line.find("):", start) if start >= 0 else -1
        if end >= 0 and not any(noise in line for noise in _NOISE):
            errors.append(line[end + 2:].strip())
    return " | ".join(errors[:lines])
