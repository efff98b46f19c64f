"""require 'json' and slurm.to_json/from_json: a faithful round trip of OCI config.json."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyscrun.hooks import lua

MINIMAL_SCRIPT = """\
function slurm_scrun_stage_in() return slurm.SUCCESS end
function slurm_scrun_stage_out() return slurm.SUCCESS end
return slurm.SUCCESS
"""


def podman_style_config(tmp_path: Path) -> dict[str, Any]:
    """`runc spec` plus what podman adds: empty objects, mount options, hooks, seccomp."""
    if shutil.which("runc") is None:
        pytest.fail("runc is missing: install it with `make setup` (apt package runc)")
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir()
    subprocess.run(["runc", "spec"], cwd=spec_dir, check=True)
    config: dict[str, Any] = json.loads((spec_dir / "config.json").read_text())
    shutil.rmtree(spec_dir)
    config["annotations"] = {}
    config["hostname"] = "0123456789ab"
    process = config["process"]
    process["env"] += ["GREETING=h\u00e9llo \u2603 \U0001f600", "TERM=xterm"]
    process["user"]["additionalGids"] = [0, 10]
    process["rlimits"] = [
        {"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576},
        {"type": "RLIMIT_NPROC", "hard": 18446744073709551615, "soft": 18446744073709551615},
    ]
    config["mounts"] = [
        {"destination": "/proc", "type": "proc", "source": "proc",
         "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
         "options": ["rprivate", "nosuid", "noexec", "nodev", "relatime", "ro"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": []},
    ]
    config["hooks"] = {"prestart": [{"path": "/usr/bin/true", "args": ["true", "x"]}],
                       "poststop": []}
    linux = config["linux"]
    linux["sysctl"] = {}
    linux["cgroupsPath"] = "machine.slice:libpod:0123456789ab"
    linux["namespaces"].append({"type": "network", "path": "/run/netns/netns-1"})
    linux["resources"]["pids"] = {"limit": 2048}
    linux["resources"]["memory"] = {"limit": -1, "swap": 0}
    linux["seccomp"] = {
        "defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38,
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"],
        "syscalls": [
            {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW", "args": []},
            {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 0, "valueTwo": 0, "op": "SCMP_CMP_EQ"}]},
        ],
    }
    return config


def compact(document: Any) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


@pytest.fixture
def state(tmp_path: Path) -> Iterator[lua.ScrunLua]:
    script = tmp_path / "scrun.lua"
    script.write_text(MINIMAL_SCRIPT)
    hooks = lua.load(script, lambda s: (0, ""), "/b", "/b/rootfs")
    assert hooks is not None
    yield hooks


def run(state: lua.ScrunLua, code: str, *args: Any) -> Any:
    """Run Lua code (with `json` required) in the script's state; strings come back as text."""
    result = state.runtime.execute("local json = require 'json'\n" + code, *args)
    return result.decode() if isinstance(result, bytes) else result


def round_trip(state: lua.ScrunLua, text: str) -> str:
    result: str = run(state, "return json.encode(json.decode(...))", text.encode())
    return result


def test_podman_config_round_trips_byte_for_byte(state: lua.ScrunLua, tmp_path: Path) -> None:
    text = compact(podman_style_config(tmp_path))
    assert round_trip(state, text) == text


def test_runc_spec_round_trips_through_slurm_to_json(state: lua.ScrunLua, tmp_path: Path) -> None:
    text = compact(podman_style_config(tmp_path))
    assert run(state, "return slurm.to_json(slurm.from_json(...))", text.encode()) == text


@pytest.mark.parametrize("text", [
    "[]", "{}", '{"a":[],"b":{},"c":[[],{}]}', '[{"a":[{"b":{}}]},[]]',
    '{"z":1,"a":2,"m":3}', '{"n":null,"t":true,"f":false}', '[1,-2,0,9223372036854775807]',
    '{"f":1.5,"g":-0.25,"h":1e+300}', '{"u":"\u00e9\u2603\U0001f600","e":"a\\"b\\\\c\\n"}',
    '{"big":18446744073709551615,"neg":-9223372036854775809}', '"text"', "3", "null",
])
def test_values_round_trip(state: lua.ScrunLua, text: str) -> None:
    assert round_trip(state, text) == compact(json.loads(text))


def test_integers_stay_integers(state: lua.ScrunLua) -> None:
    assert run(state, "local t = json.decode('[1, 2.5]') return math.type(t[1])") == "integer"
    # Arithmetic on floats that lands on a whole number writes an integer, as runc needs.
    assert run(state, "return json.encode({uid = 1000.0, half = 0.5})") in (
        '{"uid":1000,"half":0.5}', '{"half":0.5,"uid":1000}')


def test_decoded_tables_are_usable_as_plain_lua(state: lua.ScrunLua) -> None:
    code = """
    local c = json.decode('{"mounts":[{"options":["a","b"]}],"process":{"env":["A=1"]}}')
    local n = 0
    for _, m in ipairs(c.mounts) do for _, o in ipairs(m.options) do n = n + 1 end end
    return n + #c.process.env
    """
    assert run(state, code) == 3


def test_script_edits_keep_kinds_and_order(state: lua.ScrunLua) -> None:
    code = """
    local c = json.decode('{"b":1,"mounts":[{"x":1}],"annotations":{"k":"v"},"a":[]}')
    c.mounts = {}            -- emptied: still an array
    c.annotations = {}       -- emptied: still an object
    c.new2 = {1, 2}          -- built by the script: a sequence is an array
    c.new1 = {key = "v"}
    c.b = nil
    table.insert(c.a, {type = "user"})
    return json.encode(c)
    """
    assert run(state, code) == (
        '{"mounts":[],"annotations":{},"a":[{"type":"user"}],"new1":{"key":"v"},"new2":[1,2]}')


def test_unmarked_tables_encode_as_slurm_to_json_does(state: lua.ScrunLua) -> None:
    assert run(state, "return json.encode({})") == "[]"
    assert run(state, "return json.encode({'a', 'b'})") == '["a","b"]'
    assert run(state, "return json.encode({[1] = 'a', [3] = 'c'})") == '{"1":"a","3":"c"}'
    assert run(state, "return json.encode({[2] = 'b', x = 1})") == '{"2":"b","x":1}'


def test_null_is_kept_and_nameable(state: lua.ScrunLua) -> None:
    code = "local t = json.decode('{\"a\":null}') return t.a == json.null and json.encode(t)"
    assert run(state, code) == '{"a":null}'


def test_bytes_that_are_not_utf8_survive(state: lua.ScrunLua) -> None:
    result = state.runtime.execute(
        "local json = require 'json' return json.encode({s = '\\xff\\xfe'})")
    assert result == b'{"s":"\xff\xfe"}'


@pytest.mark.parametrize(("code", "expect"), [
    ("json.decode('{bad')", "json.decode: Expecting property name"),
    ("json.decode(nil)", "json.decode: expected a string"),
    ("json.encode({f = print})", "json.encode: cannot encode a function"),
    ("json.encode({0/0})", "json.encode: cannot encode nan"),
    ("json.encode({[true] = 1})", "json.encode: cannot use a boolean as an object key"),
    ("local t = {} t.t = t json.encode(t)", "nested too deeply"),
    ("local a = json.decode('[1]') a.x = 1 json.encode(a)", "non-index keys"),
])
def test_encode_and_decode_errors_name_the_line(state: lua.ScrunLua, tmp_path: Path,
                                                code: str, expect: str) -> None:
    script = tmp_path / "scrun.lua"
    script.write_text("local json = require 'json'\n"
                      f"function slurm_scrun_stage_in()\n{code}\nend\n"
                      "function slurm_scrun_stage_out() end\n")
    hooks = lua.load(script, lambda s: (0, ""), "/b", "/r")
    assert hooks is not None
    with pytest.raises(lua.HookError) as raised:
        hooks.stage_in("id", "/b", "/s", "/c", 1, 0, 0, [])
    assert str(raised.value).startswith(f"slurm_scrun_stage_in: {script}:3: ")
    assert expect in str(raised.value)
