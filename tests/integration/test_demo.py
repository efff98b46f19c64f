"""`make demo` shows what it says it shows: the ordinary user's job, three nodes, a
checkpoint moved between nodes, and nothing left running."""

from __future__ import annotations

import re
import subprocess

from tests.integration.accounts import USER, account
from tests.integration.harness import REPO, Cluster


def test_the_demo_runs_as_an_ordinary_user_and_moves_a_container(cluster: Cluster) -> None:
    uid = account(USER).uid
    done = subprocess.run(["bash", str(REPO / "scripts" / "demo.sh")], capture_output=True,
                          text=True, timeout=300, check=False)
    # The demo stopped the cluster on its way out: the next test starts it again.
    cluster.nodes = 0
    said = done.stdout
    assert done.returncode == 0, (said, done.stderr[-2000:])
    assert re.search(r"hello from job \d+ on node n\d, uid 0 inside", said), said
    assert f"UserId={USER}({uid})" in said, said
    assert [f"task {i} on n{i + 1}" for i in range(3)] == re.findall(r"task \d on n\d", said)
    counted = re.search(r"counted to (\d+) on (n\d)", said)
    going_on = re.search(r"counting on: (\d+) on (n\d)", said)
    assert counted and going_on, said
    assert int(going_on.group(1)) > int(counted.group(1))
    assert going_on.group(2) != counted.group(2)
    assert said.rstrip().endswith("NODELIST(REASON)"), "squeue is not empty"
