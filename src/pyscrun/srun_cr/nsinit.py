"""pid 1 of a task's pid namespace: starts the task, reaps, reports its wait status.

Run as a plain script (`python -I -S nsinit.py STATUS_FD -- CMD...`), so it imports only
the standard library and stays small: it is part of every checkpoint image.

Why not let the task itself be pid 1: the kernel drops every signal sent from outside
to a namespace's init that has no handler for it, so `kill -INT` would no longer end a
plain program. Here the task is pid 2 and gets signals as under slurmstepd. This init
keeps the default dispositions, so signals sent to it are dropped (SIGKILL ends the
whole namespace, as it should).

The task's wait status is written to STATUS_FD (a pipe to the launcher, reconnected by
CRIU on restore): an init cannot die of a signal, so its exit code could not carry one.
"""

from __future__ import annotations

import errno
import os
import signal
import sys

_SKIP = {signal.SIGKILL, signal.SIGSTOP}


def _default_signals() -> None:
    for signum in signal.valid_signals():
        if signum in _SKIP:
            continue
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _exec_task(command: list[str]) -> None:
    try:
        os.setsid()
        _default_signals()
        os.execvp(command[0], command)
    except OSError as err:
        code = err.errno or errno.ENOENT
        try:
            os.write(2, f"srun_cr: error: execve(): {command[0]}: {os.strerror(code)}\n".encode())
        except OSError:
            pass
        os._exit(code)
    finally:
        os._exit(127)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        os.write(2, b"usage: nsinit.py STATUS_FD -- COMMAND [ARGS...]\n")
        return 2
    status_fd = int(argv[0])
    command = argv[2:]
    # Never a handler (a handler would let outside signals in); SIGCHLD stays default
    # so that the task's status can be waited for.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_IGN)
    try:
        os.setsid()
    except OSError:
        pass
    os.set_inheritable(status_fd, False)
    task = os.fork()
    if task == 0:
        _exec_task(command)
    # The task has the step's stdio; this process keeps none of it open.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        if pid == task:
            break
    try:
        os.write(status_fd, f"{status}\n".encode())
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))  # no interpreter teardown: the namespace ends at once
