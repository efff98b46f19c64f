"""Who drives podman and scrun in a test: an ordinary user with rootless podman, as
`make setup` creates them (scripts/users-setup.sh), or root where a test is about root.

Nothing here fakes a component: the users are real accounts and their commands run as
them (runuser), with only the environment a login would give them.
"""

from __future__ import annotations

import os
import pwd
import shlex
import signal
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

TEST_HOME = Path(os.environ.get("PYSCRUN_TEST_HOME", "/srv/pyscrun-test"))
USER = "pyscrun-user"
OTHER_USER = "pyscrun-user2"
# Where the users' tests keep their files: on the cluster file system (the nodes see
# it), each test in a directory of its user's.
USER_TMP = Path("/srv/pyscrun-tmp/users")


def pause_process(name: str) -> int:
    """The pid of the pause process that holds the user's rootless podman namespaces
    (0: none), as podman's pid file names it, checked to be the user's podman. podman
    starts it at its first run and leaves it running: the suite and `make bench` each
    stop the one they started."""
    try:
        uid = pwd.getpwnam(name).pw_uid
        pid = int(Path(f"/run/user/{uid}/libpod/tmp/pause.pid").read_text())
        alive = Path(f"/proc/{pid}")
        if alive.stat().st_uid == uid and (alive / "comm").read_text().startswith("podman"):
            return pid
    except (KeyError, OSError, ValueError):
        pass
    return 0


def stop_new_pause_process(name: str, before: int) -> None:
    """Stop the user's pause process unless it is the one that ran before (pause_process
    then; 0: none): what the suite or the bench started is not left behind."""
    pid = pause_process(name)
    if pid and pid != before:
        os.kill(pid, signal.SIGTERM)


def podman_env() -> dict[str, str]:
    """root's environment with the test podman store (scripts/podman-setup.sh)."""
    env_file = TEST_HOME / "env.sh"
    if not env_file.exists():
        pytest.fail(f"{env_file} is missing: run `make setup` to configure the test podman")
    env = dict(os.environ)
    for line in env_file.read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            env[key] = value.strip('"')
    return env


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: Path

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    @property
    def runtime_dir(self) -> Path:
        """XDG_RUNTIME_DIR on the login side (/run for root)."""
        return Path("/run") if self.is_root else Path(f"/run/user/{self.uid}")

    def runtime_dir_on(self, machine: int) -> Path:
        """The runtime dir on a machine (0: the login side). A compute node has no
        /run/user/UID (no login manager runs there): the agent makes a private one in
        the node's /tmp."""
        if self.is_root or machine == 0:
            return self.runtime_dir
        return Path(f"/tmp/pyscrun-runtime-{self.uid}")

    def runc_root_on(self, machine: int) -> Path:
        return self.runtime_dir_on(machine) / "runc"

    def tasks_dir_on(self, machine: int) -> Path:
        return self.runtime_dir_on(machine) / "pyscrun-tasks"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """root: its own environment and the test store; a user: what a login gives."""
        if self.is_root:
            return {**podman_env(), **(extra or {})}
        return {"PATH": "/usr/bin:/bin", "HOME": str(self.home), "USER": self.name,
                "XDG_RUNTIME_DIR": str(self.runtime_dir),
                "PODMAN_IGNORE_CGROUPSV1_WARNING": "1", **(extra or {})}

    def command(self, argv: list[str], extra_env: dict[str, str] | None = None) -> list[str]:
        """argv as this account, with its environment (for a process that passes none
        of the test's on, such as a terminal): root's test store, or a user's login."""
        def pairs(env: dict[str, str]) -> list[str]:
            return [f"{k}={v}" for k, v in env.items()]

        if self.is_root:
            store = {k: v for k, v in podman_env().items() if k.startswith(("CONTAINERS_", "PODMAN_"))}
            return ["env", *pairs({**store, **(extra_env or {})}), *argv]
        return ["runuser", "-u", self.name, "--", "env", "-i", *pairs(self.env(extra_env)), *argv]

    def command_line(self, argv: list[str]) -> str:
        return shlex.join(self.command(argv))

    def run(self, argv: list[str], input: bytes | None = None, timeout: float = 120,
            env: dict[str, str] | None = None, **options: object,
            ) -> subprocess.CompletedProcess[bytes]:
        """argv as this account; options as subprocess.run's (capture_output unless
        stdout or stderr are given)."""
        if "stdout" not in options and "stderr" not in options:
            options["capture_output"] = True
        if self.is_root:
            options["env"] = self.env(env)
        else:
            argv = self.command(argv, env)
            options.setdefault("cwd", "/")
        done: subprocess.CompletedProcess[bytes] = subprocess.run(
            argv, input=input, timeout=timeout, check=False, **options)  # type: ignore[call-overload]
        return done


ROOT = Account("root", 0, 0, Path("/root"))


def account(name: str) -> Account:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        pytest.fail(f"test user {name} is missing: run `make setup` (scripts/users-setup.sh)")
    return Account(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


def user_dir(user: Account) -> Path:
    """A fresh directory of the user's for one test."""
    USER_TMP.mkdir(mode=0o755, parents=True, exist_ok=True)
    base = USER_TMP / f"{user.name}-{uuid.uuid4().hex[:10]}"
    base.mkdir(mode=0o755)
    os.chown(base, user.uid, user.gid)
    return base
