from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.accounts import (
    OTHER_USER,
    ROOT,
    USER,
    Account,
    account,
    pause_process,
    stop_new_pause_process,
    user_dir,
)
from tests.integration.harness import (
    OCI_CONFS,
    RUN_OCI_CONF,
    Cluster,
    LeakCheck,
    Runtime,
    checkout_reachable,
    cluster_down,
    make_runtime,
    make_slurm_runtime,
)

# The test cluster's nodes are machines of their own, whose /tmp is not the login
# side's: what a test makes for its containers (bundles, checkpoint dirs) lives on the
# cluster file system, as users' files do on a real cluster.
SHARED_TMP = Path("/srv/pyscrun-tmp")
SHARED_TMP.mkdir(mode=0o1777, parents=True, exist_ok=True)
os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", str(SHARED_TMP))


@pytest.fixture(scope="session", autouse=True)
def _no_pause_process_left() -> Iterator[None]:
    """Rootless podman starts a pause process for its user the first time it runs, and
    leaves it running: one the suite started is stopped at its end, as every process
    a test starts is."""
    users = (USER, OTHER_USER)
    before = {name: pause_process(name) for name in users}
    yield
    for name in users:
        stop_new_pause_process(name, before[name])


@pytest.fixture(params=sorted(OCI_CONFS))
def local_runtime(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Runtime]:
    """scrun on the local backend, in each oci.conf mode, as root (its own command line
    with root's bundles, as runc's is used); checked for leaks afterwards."""
    runtime = make_runtime(tmp_path, OCI_CONFS[request.param])
    leaks = LeakCheck(runtime, str(tmp_path))
    yield runtime
    leaks.check()


@pytest.fixture
def run_mode_runtime(tmp_path: Path) -> Iterator[Runtime]:
    """scrun on the local backend with Slurm's example oci.conf (runc in run mode), as
    root; checked for leaks afterwards."""
    runtime = make_runtime(tmp_path, RUN_OCI_CONF)
    leaks = LeakCheck(runtime, str(tmp_path))
    yield runtime
    leaks.check()


@pytest.fixture
def default_runtime(tmp_path: Path) -> Iterator[Runtime]:
    """scrun with no oci.conf at all (the built-in runc run-mode default), as root."""
    runtime = make_runtime(tmp_path, None)
    leaks = LeakCheck(runtime, str(tmp_path))
    yield runtime
    leaks.check()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    handle = Cluster()
    yield handle
    if handle.nodes:
        cluster_down()


@pytest.fixture
def slurm_runtime(request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path,
                  ) -> Iterator[Runtime]:
    """scrun on the Slurm backend (built-in oci.conf) of a cluster of
    `@pytest.mark.nodes(N)` nodes (1 unless marked), as root; checked for leaks and jobs
    after."""
    marker = request.node.get_closest_marker("nodes")
    conf = cluster.up(marker.args[0] if marker else 1)
    runtime = make_slurm_runtime(tmp_path, conf)
    leaks = LeakCheck(runtime, str(tmp_path), conf)
    yield runtime
    leaks.check()


@contextmanager
def runtime_on(backend: str, mode: str, cluster: Cluster, tmp_path: Path,
               account: Account = ROOT, nodes: int = 1, default_root: bool = False,
               ) -> Iterator[Runtime]:
    """scrun on backend ("local" or "slurm" of that many nodes) in an oci.conf mode ("run",
    "create-start", or "built-in": no oci.conf), driven by account's podman (default_root:
    with scrun's own default --root); checked for leaks (and jobs) after."""
    conf = cluster.up(nodes) if backend == "slurm" else None
    base = tmp_path if account.is_root else user_dir(account)
    oci_conf = OCI_CONFS.get(mode)
    if conf is None:
        made = make_runtime(base, oci_conf, account=account, default_root=default_root)
    else:
        made = make_slurm_runtime(base, conf, oci_conf, account=account,
                                  default_root=default_root)
    if not account.is_root:
        checkout_reachable(account)
    leaks = LeakCheck(made, str(base), conf)
    yield made
    leaks.check()
    if base != tmp_path:
        shutil.rmtree(base, ignore_errors=True)


MODES = ["local/run", "local/create-start", "slurm/run", "slurm/create-start"]


@pytest.fixture(params=MODES)
def runtime(request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path) -> Iterator[Runtime]:
    """scrun driven by an ordinary user's rootless podman, on each backend in each
    oci.conf mode; checked for leaks (and jobs) after."""
    backend, mode = request.param.split("/")
    with runtime_on(backend, mode, cluster, tmp_path, account(USER)) as made:
        yield made


@pytest.fixture(params=MODES)
def root_runtime(request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path,
                 ) -> Iterator[Runtime]:
    """scrun driven by root's podman, on each backend in each oci.conf mode: for what
    needs root (cgroups of its own on this cgroup v1 host, CRIU)."""
    backend, mode = request.param.split("/")
    with runtime_on(backend, mode, cluster, tmp_path) as made:
        yield made


@pytest.fixture
def users_local_runtime(cluster: Cluster, tmp_path: Path) -> Iterator[Runtime]:
    """scrun on the local backend with the built-in oci.conf, driven by an ordinary
    user's rootless podman."""
    with runtime_on("local", "built-in", cluster, tmp_path, account(USER)) as made:
        yield made


@pytest.fixture
def users_slurm_runtime(request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path,
                        ) -> Iterator[Runtime]:
    """scrun on the Slurm backend with the built-in oci.conf, driven by an ordinary
    user's rootless podman, on a cluster of `@pytest.mark.nodes(N)` nodes (1 unless
    marked)."""
    marker = request.node.get_closest_marker("nodes")
    with runtime_on("slurm", "built-in", cluster, tmp_path, account(USER),
                    marker.args[0] if marker else 1) as made:
        yield made
