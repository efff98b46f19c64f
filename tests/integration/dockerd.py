"""A private dockerd (with its own containerd) for the docker tests, and what it leaves.

Everything lives in a fresh directory under $PYSCRUN_TEST_HOME/docker: socket, data-root,
exec-root, pid file, an empty daemon.json (so /etc/docker/daemon.json is not read), with
no networking (--bridge=none, no iptables). A docker the user runs is never touched.
pyscrun is registered as the runtime `pyscrun`, a symlink that each test points at its
own scrun wrapper (tests run one at a time).

containerd's runc shim calls the runtime with its own `--root <exec-root>/runtime-runc/moby`
(the same for every runc-like runtime of a dockerd) after the wrapper's `--root`; the last
one wins, so pyscrun keeps docker's containers there, and every call of the shim (create,
start, state, kill, delete) names the same root.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Protocol

import pytest

from tests.integration.accounts import TEST_HOME
from tests.integration.harness import LeakCheck, Runtime, processes_mentioning, require

IMAGE = "pyscrun-test:latest"
RUNTIME = "pyscrun"
ROOTFS_TAR = TEST_HOME / "docker" / "rootfs.tar"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


class Daemon(Protocol):
    def docker(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]: ...

    def stop(self) -> None: ...


def import_test_image(daemon: Daemon) -> None:
    """The test image (busybox), imported from the tarball `make setup` made."""
    done = daemon.docker("import", "--change", 'CMD ["/bin/sh"]', str(ROOTFS_TAR), IMAGE)
    if done.returncode != 0:
        daemon.stop()
        pytest.fail(f"docker import failed: {done.stderr.decode(errors='replace')}")


def log_tail(log: Path) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    except OSError:
        return ""


class Dockerd:
    """One dockerd started by the tests; stop() ends it (by pid) and removes its files."""

    def __init__(self) -> None:
        require("dockerd", "docker.io")
        require("containerd", "containerd")
        require("containerd-shim-runc-v2", "containerd")
        require("docker", "docker.io")
        if not ROOTFS_TAR.is_file():
            pytest.fail(f"{ROOTFS_TAR} is missing: run `make setup` (scripts/docker-setup.sh)")
        base = TEST_HOME / "docker"
        base.mkdir(parents=True, exist_ok=True)
        self.home = Path(tempfile.mkdtemp(prefix="d-", dir=base))
        self.socket = self.home / "docker.sock"
        self.exec_root = self.home / "exec"
        self.data_root = self.home / "data"
        self.pidfile = self.home / "dockerd.pid"
        self.log = self.home / "dockerd.log"
        self.runtime_link = self.home / RUNTIME
        # Where containerd's shim tells the runtime to keep its state (its --root).
        self.runtime_root = self.exec_root / "runtime-runc" / "moby"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": f"unix://{self.socket}"}

    def start(self) -> None:
        placeholder = self.home / "unused-runtime"
        placeholder.write_text("#!/bin/sh\necho 'no test runtime selected' >&2\nexit 1\n")
        placeholder.chmod(0o755)
        self.runtime_link.symlink_to(placeholder)
        (self.home / "daemon.json").write_text("{}\n")
        argv = [
            "dockerd", "--config-file", str(self.home / "daemon.json"),
            "-H", f"unix://{self.socket}", "--data-root", str(self.data_root),
            "--exec-root", str(self.exec_root), "--pidfile", str(self.pidfile),
            "--bridge=none", "--iptables=false", "--ip6tables=false",
            # The shell lacks CAP_SYS_RESOURCE: docker's default rlimits would fail.
            "--default-ulimit", "nofile=20000:20000", "--default-ulimit", "nproc=32768:32768",
            "--add-runtime", f"{RUNTIME}={self.runtime_link}",
        ]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"dockerd exited with {self.process.returncode}:\n{self._log_tail()}")
            if self.socket.exists() and self.docker("version", timeout=10).returncode == 0:
                break
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"dockerd did not answer within {START_TIMEOUT:.0f} s:\n"
                            f"{self._log_tail()}")
            time.sleep(0.2)
        import_test_image(self)

    def _log_tail(self) -> str:
        return log_tail(self.log)

    def docker(self, *args: str, input: bytes | None = None, timeout: float = 120,
               ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["docker", *args], input=input, capture_output=True,
                              stdin=None if input is not None else subprocess.DEVNULL,
                              timeout=timeout, env=self.env, check=False)

    def use(self, runtime: Runtime) -> Runtime:
        """Make the registered runtime `pyscrun` runtime's wrapper; returns the runtime
        as docker drives it (its state under containerd's --root)."""
        new = self.home / f".{RUNTIME}.new"
        new.unlink(missing_ok=True)
        new.symlink_to(runtime.wrapper)
        new.replace(self.runtime_link)
        return Runtime(self.runtime_root, runtime.conf_dir, runtime.wrapper)

    def shims(self) -> set[str]:
        """containerd shims of this dockerd's containerd still alive."""
        address = str(self.exec_root / "containerd" / "containerd.sock")
        return {p for p in processes_mentioning(address) if "containerd-shim" in p}

    def containers(self) -> set[str]:
        return set(self.docker("ps", "-aq", "--no-trunc").stdout.decode().split())

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
        # dockerd ends the containerd it started; should it not have, end that one only.
        containerd_pid = self.exec_root / "containerd" / "containerd.pid"
        try:
            pid = int(containerd_pid.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            pid = 0
        if pid and str(self.exec_root).encode() in cmdline:
            os.kill(pid, signal.SIGKILL)
        # What dockerd may leave mounted in its own directory (e.g. exec/netns/default).
        for mount in reversed(self._mounts()):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        if not self._mounts():
            shutil.rmtree(self.home, ignore_errors=True)

    def _mounts(self) -> list[str]:
        inside = str(self.home) + "/"
        points = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        return [p for p in points if p.startswith(inside)]


class DockerLeakCheck(LeakCheck):
    """LeakCheck plus containerd shims and docker containers left behind."""

    def __init__(self, runtime: Runtime, marker: str, dockerd: Dockerd,
                 slurm_conf: Path | None = None) -> None:
        self.dockerd = dockerd
        super().__init__(runtime, marker, slurm_conf)

    def _snapshot(self) -> dict[str, set[str]]:
        found = super()._snapshot()
        found["containerd shims"] = self.dockerd.shims()
        found["docker containers"] = self.dockerd.containers()
        return found
