"""A rootless dockerd of an ordinary user, as Debian's docker.io and rootlesskit run it.

rootlesskit makes the user's namespace (0 is the user, 1.. the subordinate ids) with a
mount namespace of its own and the host's network (no slirp, no bridge); /etc and /run
are copied up so that dockerd can make its own /run/docker and /run/containerd there
(the host's belong to root). Everything else lives in one directory of the user's:
socket, data-root, exec-root, pid file, an empty daemon.json. pyscrun is registered as
the runtime `pyscrun`. Stopped by the pid of the rootlesskit it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.dockerd import (
    ROOTFS_TAR,
    RUNTIME,
    START_TIMEOUT,
    STOP_TIMEOUT,
    import_test_image,
    log_tail,
)
from tests.integration.harness import Runtime, require


class RootlessDockerd:
    def __init__(self, runtime: Runtime) -> None:
        require("rootlesskit", "rootlesskit")
        require("dockerd", "docker.io")
        if not ROOTFS_TAR.is_file():
            pytest.fail(f"{ROOTFS_TAR} is missing: run `make setup` (scripts/docker-setup.sh)")
        self.runtime = runtime
        self.home = runtime.base / "docker"
        self.socket = self.home / "docker.sock"
        self.exec_root = self.home / "exec"
        # Where containerd's shim tells the runtime to keep its state (its --root).
        self.runtime_root = self.exec_root / "runtime-runc" / "moby"
        self.log = self.home / "dockerd.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        user = self.runtime.account
        user.run(["mkdir", "-p", str(self.home)])
        user.run(["sh", "-c", f"echo '{{}}' > {self.home}/daemon.json"])
        dockerd = ["dockerd", "--config-file", f"{self.home}/daemon.json",
                   "-H", f"unix://{self.socket}", "--data-root", f"{self.home}/data",
                   "--exec-root", str(self.exec_root), "--pidfile", f"{self.home}/dockerd.pid",
                   "--bridge=none", "--iptables=false", "--ip6tables=false",
                   # The shell lacks CAP_SYS_RESOURCE: docker's default rlimits would fail.
                   "--default-ulimit", "nofile=20000:20000",
                   "--default-ulimit", "nproc=32768:32768",
                   "--add-runtime", f"{RUNTIME}={self.runtime.wrapper}"]
        argv = ["rootlesskit", "--net=host", "--copy-up=/etc", "--copy-up=/run",
                f"--state-dir={self.home}/rootlesskit", "sh", "-c",
                'rm -f /run/docker /run/containerd /run/xtables.lock; exec "$@"', "sh",
                *dockerd]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                user.command(argv, {"XDG_CONFIG_HOME": f"{self.home}/config",
                                    "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd="/",
                start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        # Ready when it answers; not `docker version`, which docker 26 answers by
        # panicking under rootlesskit's host network (the rootlesskit it asks has none).
        while not (self.socket.exists() and self.docker("ps", "-q").returncode == 0):
            if self.process.poll() is not None or time.monotonic() > deadline:
                said = log_tail(self.log)
                self.stop()
                pytest.fail(f"rootless dockerd did not start:\n{said}")
            time.sleep(0.2)
        import_test_image(self)

    def docker(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            self.runtime.account.command(["docker", "-H", f"unix://{self.socket}", *args]),
            capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout, cwd="/",
            check=False)

    def stop(self) -> None:
        """SIGTERM to rootlesskit (it passes it on to dockerd, which stops containerd),
        then the files, from inside the user's namespace (image layers belong to the
        subordinate ids)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        subprocess.run(["rm", "-rf", str(self.home)], check=False)
        assert not Path(self.home).exists()
