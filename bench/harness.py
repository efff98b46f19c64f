"""What the benchmarks share: real runtimes, timing, results and their report."""

from __future__ import annotations

import json
import os
import platform
import pwd
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.integration.accounts import pause_process, stop_new_pause_process

REPO = Path(__file__).resolve().parents[1]
SCRUN = Path(sys.executable).parent / "scrun"
TEST_HOME = Path(os.environ.get("PYSCRUN_TEST_HOME", "/srv/pyscrun-test"))
IMAGE = "localhost/pyscrun-test:latest"
QUICK = os.environ.get("BENCH_QUICK") == "1"
# The ordinary user whose rootless podman the users' benchmarks drive (`make setup`,
# scripts/users-setup.sh, makes it and its store with the image).
BENCH_USER = "pyscrun-user"
SHARED_TMP = Path("/srv/pyscrun-tmp")
# runc in create/start mode (Slurm's other way to run a container).
CREATE_START_OCI_CONF = "".join(
    f'{directive}="runc {verb} %n.%u.%j.%s.%t"\n' for directive, verb in (
        ("RunTimeQuery", "state"), ("RunTimeCreate", "create --bundle %b"),
        ("RunTimeStart", "start"), ("RunTimeKill", "kill -a"), ("RunTimeDelete", "delete --force")))


@dataclass
class Result:
    name: str
    median: float
    ref: float
    unit: str
    n: int
    ratio: float
    reference: str  # what ref measures
    target: str = ""
    met: bool | None = None

    def line(self) -> str:
        return (f"BENCH {self.name} ratio={self.ratio:.2f} median={self.median:.4g}{self.unit} "
                f"ref={self.ref:.4g}{self.unit} n={self.n}")


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def named(cls, name: str) -> User:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            sys.exit(f"bench: user {name} is missing: run `make setup` (scripts/users-setup.sh)")
        return cls(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)

    def env(self) -> dict[str, str]:
        """What a login gives the user (as the integration tests' users get)."""
        return {"PATH": "/usr/bin:/bin", "HOME": self.home, "USER": self.name,
                "XDG_RUNTIME_DIR": f"/run/user/{self.uid}",
                "PODMAN_IGNORE_CGROUPSV1_WARNING": "1"}


def timed(argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 120,
          stdin: int | None = subprocess.DEVNULL, user: User | None = None,
          ) -> tuple[float, int]:
    """Wall time and exit status of one command (as user, if given: no wrapper such as
    runuser is timed with it); output discarded.

    Its end is heard through a pidfd: subprocess's own wait with a timeout polls, at
    intervals that double up to 50 ms, and would round every time up to its next poll
    (a 16 ms command would read 31.5 ms, a 0.37 s one 0.415 s)."""
    started = time.perf_counter()
    as_user: dict[str, object] = {} if user is None else {
        "user": user.uid, "group": user.gid, "extra_groups": [], "cwd": "/"}
    process = subprocess.Popen(list(argv), env=env, stdin=stdin, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, **as_user)  # type: ignore[call-overload]
    pidfd = os.pidfd_open(process.pid)
    try:
        ended = select.select([pidfd], [], [], timeout)[0] and time.perf_counter()
    finally:
        os.close(pidfd)
    if not ended:
        process.kill()
        process.wait()
        raise subprocess.TimeoutExpired(list(argv), timeout)
    return ended - started, process.wait()


def interleave(n: int, first: Callable[[], float], second: Callable[[], float],
               ) -> tuple[list[float], list[float]]:
    """n measurements of each, alternating, so machine noise hits both alike."""
    a, b = [], []
    for _ in range(n):
        a.append(first())
        b.append(second())
    return a, b


def podman_env() -> dict[str, str]:
    env = dict(os.environ)
    for line in (TEST_HOME / "env.sh").read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            env[key] = value.strip('"')
    return env


class Runtimes:
    """scrun wrappers (local backend, and Slurm on the loopback cluster) in a temp dir."""

    def __init__(self) -> None:
        # Under /run (tmpfs) like a real --root: state files are fsynced.
        self.dir = Path(tempfile.mkdtemp(prefix="pyscrun-bench.", dir="/run"))
        # What containers on the cluster's nodes see: the cluster file system.
        SHARED_TMP.mkdir(mode=0o1777, parents=True, exist_ok=True)
        self.shared = Path(tempfile.mkdtemp(prefix="pyscrun-bench.", dir=SHARED_TMP))
        self.local = self._wrapper("local", None)
        self.slurm_conf = self._cluster_up()
        self.slurm = self._wrapper("slurm", self.slurm_conf)
        self.slurm_create_start = self._wrapper("slurm-cs", self.slurm_conf, CREATE_START_OCI_CONF)
        # The ordinary user's: in a directory of the user's on the cluster file system.
        self.user = User.named(BENCH_USER)
        # The user's podman leaves its pause process running: the one it starts for the
        # bench is stopped at the end.
        self.pause_before = pause_process(BENCH_USER)
        self.user_dir = Path(tempfile.mkdtemp(prefix="pyscrun-bench-user.", dir=SHARED_TMP))
        os.chown(self.user_dir, self.user.uid, self.user.gid)
        self.users_slurm = self._wrapper("users-slurm", self.slurm_conf, base=self.user_dir)

    def _cluster_up(self) -> Path:
        done = subprocess.run(["bash", str(REPO / "scripts/cluster.sh"), "up", "1"],
                              capture_output=True, text=True, check=True)
        return Path(done.stdout.strip().splitlines()[-1].removeprefix("export SLURM_CONF="))

    def _wrapper(self, name: str, slurm_conf: Path | None, oci_conf: str | None = None,
                 base: Path | None = None) -> Path:
        """A wrapper setting scrun's root and slurm.conf, in base (this run's dir, or a
        user's, who then owns what scrun writes there)."""
        base = base or self.dir
        conf_dir = base / f"{name}-etc"
        conf_dir.mkdir()
        if oci_conf is not None:
            (conf_dir / "oci.conf").write_text(oci_conf)
        if slurm_conf is not None:
            (conf_dir / "slurm.conf").symlink_to(slurm_conf)
        else:
            # The slurm.conf it is given is missing: the local backend, said so.
            (conf_dir / "pyscrun.conf").write_text("Backend=local\n")
        wrapper = base / f"scrun-{name}"
        wrapper.write_text(f"#!/bin/sh\nexec {SCRUN} --root {base / (name + '-root')} "
                           f"-f {conf_dir / 'slurm.conf'} \"$@\"\n")
        wrapper.chmod(0o755)
        if base != self.dir:
            os.chown(conf_dir, *base_owner(base))
        return wrapper

    def node_oci_conf(self, text: str | None) -> None:
        """The oci.conf every node reads beside its own slurm.conf (None: none, the
        built-in one)."""
        for node_dir in (self.slurm_conf.parent / "nodes").glob("n*"):
            if text is None:
                (node_dir / "oci.conf").unlink(missing_ok=True)
            else:
                (node_dir / "oci.conf").write_text(text)

    def close(self) -> None:
        stop_new_pause_process(BENCH_USER, self.pause_before)
        subprocess.run(["bash", str(REPO / "scripts/cluster.sh"), "down"], capture_output=True,
                       check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.shared, ignore_errors=True)
        shutil.rmtree(self.user_dir, ignore_errors=True)


def base_owner(base: Path) -> tuple[int, int]:
    stat = base.stat()
    return stat.st_uid, stat.st_gid


def make_bundle(base: Path, args: Sequence[str]) -> Path:
    bundle = base / "bundle"
    rootfs = bundle / "rootfs"
    for sub in ("bin", "proc", "sys", "dev", "tmp"):
        (rootfs / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy("/bin/busybox", rootfs / "bin/busybox")
    for applet in ("sh", "sleep", "true", "cat", "head"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    subprocess.run(["runc", "spec"], cwd=bundle, check=True)
    config = json.loads((bundle / "config.json").read_text())
    config["process"].update(args=list(args), terminal=False)
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


def machine() -> str:
    def version(argv: list[str]) -> str:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        except OSError:
            return "missing"
        return out.strip().splitlines()[0] if out.strip() else "unknown"

    debian = Path("/etc/debian_version").read_text().strip()
    return (f"{platform.node()}: Debian {debian}, kernel {platform.release()}, "
            f"{os.cpu_count()} CPUs, Python {platform.python_version()}; "
            f"{version(['podman', '--version'])}; {version(['runc', '--version'])}; "
            f"Slurm {version(['dpkg-query', '-W', '-f=${Version}', 'slurm-client'])}; "
            f"criu {version(['criu', '--version'])[-5:]}")
