"""Ordinary users for the integration tests: rootless podman as `make setup` configures
it for them (scripts/users-setup.sh), driving scrun with its defaults, as a user would.

Nothing here fakes a component: the users are real accounts, podman runs as them in
its own user namespace, and what they leave behind is looked for on every machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.accounts import Account, account, user_dir
from tests.integration.harness import (
    REPO,
    SCRUN,
    Leftovers,
    machine_path,
    machines,
    on_machine,
    require,
    slurm_jobs,
    write_node_conf,
)


class User:
    """One ordinary user with scrun as podman's runtime: a wrapper naming the
    configuration (podman passes the runtime no environment of use) and a log."""

    def __init__(self, name: str, base: Path, slurm_conf: Path | None,
                 oci_conf: str | None = None) -> None:
        self.name = name
        self.account = account(name)
        self.uid, self.gid, self.home = self.account.uid, self.account.gid, self.account.home
        self.runtime_dir = self.account.runtime_dir
        self.base = base
        self.slurm_conf = slurm_conf
        self.conf_dir = base / "etc"
        self.conf_dir.mkdir(parents=True)
        if oci_conf is not None:
            (self.conf_dir / "oci.conf").write_text(oci_conf)
        if slurm_conf is not None:
            (self.conf_dir / "slurm.conf").symlink_to(slurm_conf)
            write_node_conf(slurm_conf, "oci.conf", oci_conf)
            write_node_conf(slurm_conf, "pyscrun.conf", None)
        self.log = base / "scrun.log"
        self.wrapper = base / "scrun"
        self.wrapper.write_text(f"#!/bin/sh\nexec {SCRUN} -f {self.conf_dir / 'slurm.conf'}"
                                f" --log {self.log} \"$@\"\n")
        self.wrapper.chmod(0o755)
        for path in (base, self.conf_dir):
            os.chown(path, self.uid, self.gid)

    def runtime_dir_on(self, machine: int) -> Path:
        return self.account.runtime_dir_on(machine)

    def _slurm_env(self, env: dict[str, str] | None) -> dict[str, str]:
        return {**({"SLURM_CONF": str(self.slurm_conf)} if self.slurm_conf else {}), **(env or {})}

    def command(self, argv: list[str], env: dict[str, str] | None = None) -> list[str]:
        return self.account.command(argv, self._slurm_env(env))

    def run(self, *argv: str, input: bytes | None = None, timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
        return self.account.run(list(argv), input=input, timeout=timeout,
                                env=self._slurm_env(env))

    def podman(self, *args: str, input: bytes | None = None, timeout: float = 120,
               ) -> subprocess.CompletedProcess[bytes]:
        require("podman", "podman")
        return self.run("podman", "--runtime", str(self.wrapper), *args, input=input,
                        timeout=timeout)

    def podman_ok(self, *args: str) -> str:
        done = self.podman(*args)
        assert done.returncode == 0, (done.stderr.decode(errors="replace"), self.log_tail())
        return done.stdout.decode().strip()

    def log_tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])
        except FileNotFoundError:
            return ""


def make_user(name: str, slurm_conf: Path | None, oci_conf: str | None = None) -> User:
    """The user with scrun as podman's runtime: Slurm through slurm_conf (None: the
    local backend), oci_conf beside it and on every node (None: the built-in one)."""
    require("runuser", "util-linux")
    return User(name, user_dir(account(name)), slurm_conf, oci_conf)


class UserLeakCheck(Leftovers):
    """What a user's test leaves behind on the login side and every node: the user's
    processes (rootless podman's own pause process aside), spool dirs, runc
    containers, task dirs, and Slurm jobs."""

    def __init__(self, user: User) -> None:
        self.user = user
        self.label = f"{user.name} left behind"
        self.before = self._snapshot()

    def _processes(self, machine: int) -> set[str]:
        proc = machine_path(machine, "/proc")
        found = set()
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid != self.user.uid:
                    continue
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X") or "catatonit" in cmdline:
                continue
            if cmdline.startswith("podman") and "pause" in cmdline:
                continue
            found.add(f"{machine}:{entry.name}: {cmdline.strip()}")
        return found

    def _snapshot(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {"processes": set(), "spool dirs": set(),
                                      "runc state dirs": set(), "task dirs": set()}
        spool = self.user.runtime_dir / "pyscrun"
        found["spool dirs"] = {p.name for p in spool.iterdir()} if spool.is_dir() else set()
        for machine in machines(self.user.slurm_conf):
            found["processes"] |= self._processes(machine)
            for what, sub in (("runc state dirs", "runc"), ("task dirs", "pyscrun-tasks")):
                path = machine_path(machine, f"{self.user.runtime_dir_on(machine)}/{sub}")
                if path.is_dir():
                    found[what] |= {f"{machine}:{p.name}" for p in path.iterdir()}
        if self.user.slurm_conf is not None:
            found["slurm jobs"] = slurm_jobs(self.user.slurm_conf)
        return found

    def _clean(self, left: dict[str, list[str]]) -> None:
        self.user.run("podman", "rm", "-af", "-t", "0")
        for line in left.get("processes", []):
            machine, pid = line.split(":", 2)[:2]
            subprocess.run(on_machine(int(machine), ["kill", "-9", pid]), check=False,
                           capture_output=True)
        for job in left.get("slurm jobs", []):
            self.user.run("scancel", job.split()[0])
        for what in ("task dirs", "runc state dirs"):
            for entry in left.get(what, []):
                machine, name = entry.split(":", 1)
                sub = "runc" if what == "runc state dirs" else "pyscrun-tasks"
                runtime_dir = self.user.runtime_dir_on(int(machine))
                shutil.rmtree(machine_path(int(machine), f"{runtime_dir}/{sub}/{name}"),
                              ignore_errors=True)


def checkout_reachable(user: Account) -> None:
    """The users run the checkout's scrun: say how to fix it when they cannot."""
    done = user.run(["test", "-x", str(SCRUN)])
    if done.returncode != 0:
        pytest.fail(f"{user.name} cannot run {SCRUN}: run `make setup` (scripts/users-setup.sh "
                    f"lets others traverse the directories above {REPO})")
