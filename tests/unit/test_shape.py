"""config.json's shape (oci/shape.py): what runc's create would refuse to decode is
refused in one line naming the field; what it takes (nulls as absent, fields it does
not know) passes."""

from __future__ import annotations

from typing import Any

import pytest

from pyscrun.errors import BundleError
from pyscrun.oci import shape

PROCESS = {"args": ["sh"], "env": ["PATH=/bin"], "cwd": "/",
           "user": {"uid": 1000, "gid": 1000, "additionalGids": [10, 20]},
           "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
           "capabilities": {"bounding": ["CAP_KILL"]}, "oomScoreAdj": -500}


def _config(**fields: Any) -> dict[str, Any]:
    return {"ociVersion": "1.0.2", "process": dict(PROCESS), "root": {"path": "rootfs"},
            **fields}


def test_a_config_as_podman_writes_it_passes() -> None:
    shape.check(_config(
        hostname="c1",
        mounts=[{"destination": "/proc", "type": "proc", "source": "proc",
                 "options": ["nosuid"]}],
        hooks={"prestart": [{"path": "/bin/true", "args": ["true"], "timeout": 5}]},
        annotations={"io.podman.x": "y"},
        linux={"namespaces": [{"type": "pid"}], "uidMappings": [
            {"containerID": 0, "hostID": 100000, "size": 65536}],
            "resources": {"memory": {"limit": 67108864, "swappiness": 0},
                          "cpu": {"shares": 1024, "quota": -1, "cpus": "0-1"},
                          "pids": {"limit": -1},
                          "devices": [{"allow": False, "access": "rwm"}]},
            "sysctl": {"net.ipv4.ping_group_range": "0 0"},
            "maskedPaths": ["/proc/kcore"]},
        unknownField={"anything": [1, "x"]}))


def test_nulls_count_as_absent() -> None:
    shape.check(_config(mounts=None, hooks={"prestart": None}, linux={"resources": None}))


@pytest.mark.parametrize(("fields", "words"), [
    ({"hostname": 5}, "hostname must be a string, not an integer"),
    ({"process": {**PROCESS, "user": {"uid": -1, "gid": 0}}},
     "process.user.uid must be an integer from 0 to 4294967295"),
    ({"process": {**PROCESS, "user": {"uid": True, "gid": 0}}},
     "process.user.uid must be an integer"),
    ({"process": {**PROCESS, "user": {"uid": 0, "gid": 0, "additionalGids": ["a"]}}},
     "process.user.additionalGids[0] must be an integer"),
    ({"mounts": {"destination": "/m"}}, "mounts must be a list, not an object"),
    ({"mounts": [{"destination": "/m", "options": [1]}]},
     "mounts[0].options[0] must be a string, not an integer"),
    ({"hooks": {"poststop": [{"path": 1}]}}, "hooks.poststop[0].path must be a string"),
    ({"annotations": {"k": 1}}, "annotations['k'] must be a string, not an integer"),
    ({"linux": {"resources": {"memory": {"limit": "64m"}}}},
     "linux.resources.memory.limit must be an integer"),
    ({"linux": {"namespaces": [{"type": 1}]}}, "linux.namespaces[0].type must be a string"),
    ({"process": {**PROCESS, "terminal": "yes"}},
     "process.terminal must be a boolean, not a string"),
    ({"process": {**PROCESS, "consoleSize": {"height": 70000, "width": 80}}},
     "process.consoleSize.height must be an integer from 0 to 65535"),
])
def test_a_field_of_the_wrong_type_is_named_in_one_line(fields: dict[str, Any],
                                                        words: str) -> None:
    with pytest.raises(BundleError) as refused:
        shape.check(_config(**fields))
    assert str(refused.value).startswith(f"config.json: {words}")
    assert "\n" not in str(refused.value)
