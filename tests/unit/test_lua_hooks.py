"""scrun.lua loading, the stage functions, the slurm table and every failure mode."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyscrun.anchor import staging
from pyscrun.conf.site import load as load_site
from pyscrun.hooks import lua
from pyscrun.oci.bundle import Bundle

STAGE_FUNCTIONS = """\
function slurm_scrun_stage_in() return slurm.SUCCESS end
function slurm_scrun_stage_out() return slurm.SUCCESS end
"""


class Runner:
    """A remote_command runner that records its scripts."""

    def __init__(self, status: int = 0, output: str = "") -> None:
        self.scripts: list[str] = []
        self.result = (status, output)

    def __call__(self, script: str) -> tuple[int, str]:
        self.scripts.append(script)
        return self.result


def load(tmp_path: Path, text: str, runner: lua.CommandRunner | None = None,
         bundle: str = "/b", root_path: str = "/b/rootfs") -> lua.ScrunLua:
    script = tmp_path / "scrun.lua"
    script.write_text(text)
    hooks = lua.load(script, runner or Runner(), bundle, root_path)
    assert hooks is not None
    return hooks


def load_error(tmp_path: Path, text: str) -> str:
    script = tmp_path / "scrun.lua"
    script.write_text(text)
    with pytest.raises(lua.HookError) as raised:
        lua.load(script, Runner(), "/b", "/r")
    message = str(raised.value)
    assert "\n" not in message
    return message


def stage_in_error(hooks: lua.ScrunLua, container_id: str = "id") -> str:
    with pytest.raises(lua.HookError) as raised:
        hooks.stage_in(container_id, "/b", "/s", "/c", 1, 0, 0, [])
    message = str(raised.value)
    assert "\n" not in message
    return message


# -- loading -----------------------------------------------------------------------------
def test_absent_script_means_no_staging_said_at_info(tmp_path: Path, logged: io.StringIO) -> None:
    assert staging.load_hooks(str(tmp_path / "scrun.lua"), Runner(), "/b", "/r") is None
    assert logged.getvalue() == f"t: info: no {tmp_path / 'scrun.lua'}: containers are not staged\n"


def test_lua_is_not_imported_without_a_script(tmp_path: Path) -> None:
    code = ("import sys\n"
            "from pyscrun.anchor import staging\n"
            f"staging.load_hooks({str(tmp_path / 'scrun.lua')!r}, None, '/b', '/r')\n"
            "print(sorted(m for m in sys.modules if m.startswith(('lupa', 'pyscrun.hooks'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"


def test_syntax_error(tmp_path: Path) -> None:
    message = load_error(tmp_path, "function slurm_scrun_stage_in(\n  x = \nend\n")
    assert message == f"{tmp_path}/scrun.lua:2: ')' expected near '='"


def test_missing_functions(tmp_path: Path) -> None:
    message = load_error(tmp_path, "function slurm_scrun_stage_in() end\n")
    assert message == f"{tmp_path}/scrun.lua: required function slurm_scrun_stage_out is not defined"
    message = load_error(tmp_path, "slurm_scrun_stage_in = 1\n")
    assert message.endswith(
        "required function slurm_scrun_stage_in and slurm_scrun_stage_out are not defined")


def test_runtime_error_on_load(tmp_path: Path) -> None:
    message = load_error(tmp_path, STAGE_FUNCTIONS + "local x\n\nx()\n")
    assert message == f"{tmp_path}/scrun.lua:5: attempt to call a nil value (local 'x')"


def test_non_success_on_load_names_the_return(tmp_path: Path) -> None:
    message = load_error(tmp_path, STAGE_FUNCTIONS + "\nreturn slurm.ERROR\n")
    assert message == f"{tmp_path}/scrun.lua:4: returned -1 on load instead of slurm.SUCCESS"
    message = load_error(tmp_path, STAGE_FUNCTIONS + "return 7.9\n")
    assert "returned 7 on load" in message


def test_load_result_read_as_slurm_reads_it(tmp_path: Path) -> None:
    # Slurm takes the chunk's result with lua_tonumber: nothing, or text, counts as 0.
    for ending in ("", "return slurm.SUCCESS\n", "return '0'\n", "return nil\n", "return true\n"):
        load(tmp_path, STAGE_FUNCTIONS + ending)


def test_shebang_and_byte_order_mark_keep_line_numbers(tmp_path: Path) -> None:
    message = load_error(tmp_path, "\ufeff#!/usr/bin/lua\n" + STAGE_FUNCTIONS + "error('x')\n")
    assert message == f"{tmp_path}/scrun.lua:4: x"


def test_unreadable_script(tmp_path: Path) -> None:
    (tmp_path / "scrun.lua").mkdir()
    with pytest.raises(lua.HookError, match=r"cannot read .*scrun\.lua: Is a directory"):
        lua.load(tmp_path / "scrun.lua", Runner(), "/b", "/r")


def test_loaded_once_with_its_state(tmp_path: Path) -> None:
    hooks = load(tmp_path, """
    count = 0
    function slurm_scrun_stage_in() count = count + 1 return slurm.SUCCESS end
    function slurm_scrun_stage_out() return count == 1 and 0 or 1 end
    """)
    hooks.stage_in("id", "/b", "/s", "/c", 1, 0, 0, [])
    hooks.stage_out("id", "/b", "/b", "/r", "/r", "/s", "/c", 1, 0, 0)


# -- the stage functions -----------------------------------------------------------------------
def test_stage_in_arguments(tmp_path: Path, logged: io.StringIO) -> None:
    hooks = load(tmp_path, """
    function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
      slurm.log_info("%s|%s|%s|%s|%d|%d|%d|%s", id, bundle, spool_dir, config_file, job_id,
                     user_id, group_id, math.type(job_id))
      local seen = {}
      for i, entry in ipairs(job_env) do seen[#seen + 1] = i .. "=" .. entry end
      slurm.log_info("%d %s", #job_env, table.concat(seen, ","))
      return slurm.SUCCESS
    end
    function slurm_scrun_stage_out() end
    """)
    result = hooks.stage_in("cid", "/bundle", "/spool", "/bundle/config.json", 77, 1000, 100,
                            ["A=1", "B=x=y", "C="])
    assert result == lua.StageResult("/b", "/b/rootfs")
    lines = logged.getvalue().splitlines()
    assert "t: info: scrun.lua: cid|/bundle|/spool|/bundle/config.json|77|1000|100|integer" in lines
    assert "t: info: scrun.lua: 3 1=A=1,2=B=x=y,3=C=" in lines


def test_stage_out_arguments(tmp_path: Path, logged: io.StringIO) -> None:
    hooks = load(tmp_path, """
    function slurm_scrun_stage_in() end
    function slurm_scrun_stage_out(...)
      slurm.log_info("%d: %s", select("#", ...), table.concat({...}, "|"))
    end
    """)
    hooks.stage_out("cid", "/new", "/old", "/new/rootfs", "/old/rootfs", "/spool", "/c.json",
                    77, 1000, 100)
    assert ("t: info: scrun.lua: 10: cid|/new|/old|/new/rootfs|/old/rootfs|/spool|/c.json|77|1000|100"
            in logged.getvalue().splitlines())


def test_set_paths(tmp_path: Path) -> None:
    hooks = load(tmp_path, """
    function slurm_scrun_stage_in()
      assert(slurm.set_bundle_path("/staged/") == "/b")
      assert(slurm.set_root_path("/staged/rootfs/") == "/b/rootfs")
      return slurm.SUCCESS
    end
    function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path)
      assert(bundle == "/staged/" and orig_bundle == "/b", bundle)
    end
    """)
    result = hooks.stage_in("id", "/b", "/s", "/c", 1, 0, 0, [])
    assert result == lua.StageResult("/staged/", "/staged/rootfs/")
    hooks.stage_out("id", result.bundle, "/b", result.root_path, "/b/rootfs", "/s", "/c", 1, 0, 0)


def test_stage_in_runtime_error(tmp_path: Path) -> None:
    hooks = load(tmp_path, """function slurm_scrun_stage_in(id)
      local config = nil
      return config.root
    end
    function slurm_scrun_stage_out() end
    """)
    assert stage_in_error(hooks) == (f"slurm_scrun_stage_in: {tmp_path}/scrun.lua:3: "
                                     "attempt to index a nil value (local 'config')")


def test_stage_in_failure_result_names_its_return(tmp_path: Path) -> None:
    hooks = load(tmp_path, """function slurm_scrun_stage_in(id)
      if id == "a" then
        return slurm.ERROR
      end
      return "1"
    end
    function slurm_scrun_stage_out() return -1 end
    """)
    assert stage_in_error(hooks, "a") == (f"slurm_scrun_stage_in: {tmp_path}/scrun.lua:3: "
                                          "returned -1 instead of slurm.SUCCESS")
    assert stage_in_error(hooks, "b").endswith("scrun.lua:5: returned 1 instead of slurm.SUCCESS")
    with pytest.raises(lua.HookError, match=r"^slurm_scrun_stage_out: .*:7: returned -1"):
        hooks.stage_out("id", "/b", "/b", "/r", "/r", "/s", "/c", 1, 0, 0)


def test_non_numeric_result_is_success_as_in_slurm(tmp_path: Path, logged: io.StringIO) -> None:
    hooks = load(tmp_path, """
    function slurm_scrun_stage_in() end
    function slurm_scrun_stage_out() return {} end
    """)
    hooks.stage_in("id", "/b", "/s", "/c", 1, 0, 0, [])
    hooks.stage_out("id", "/b", "/b", "/r", "/r", "/s", "/c", 1, 0, 0)
    assert "slurm_scrun_stage_out: non-numeric return code" in logged.getvalue()


@pytest.mark.parametrize(("body", "expect"), [
    ("error({})", ":2: table: 0x"),
    ("error('no position', 0)", ":2: no position"),
    ("error('two\\nlines')", ":2: two lines"),
    ("slurm.set_bundle_path({})", ":2: slurm.set_bundle_path: expected a string, got table"),
    ("slurm.remote_command(nil)", ":2: slurm.remote_command: expected a string, got nil"),
    ("os.exit(0)", ":2: os.exit is not allowed in scrun.lua"),
    ("python.eval('1')", ":2: attempt to index a nil value (global 'python')"),
    ("require('python')", ":2: module 'python' not found"),
    ("local f = load('x(') f()", ":2: attempt to call a nil value (local 'f')"),
    ("helper()", ":5: attempt to call a nil value (global 'nothing')"),
])
def test_errors_carry_the_scripts_line(tmp_path: Path, body: str, expect: str) -> None:
    hooks = load(tmp_path, f"""function slurm_scrun_stage_in()
      {body}
    end
    function helper()
      nothing()
    end
    function slurm_scrun_stage_out() end
    """)
    message = stage_in_error(hooks)
    assert message.startswith(f"slurm_scrun_stage_in: {tmp_path}/scrun.lua:")
    assert expect in message


def test_long_messages_are_cut(tmp_path: Path) -> None:
    hooks = load(tmp_path, "function slurm_scrun_stage_in() error(string.rep('x', 5000)) end\n"
                 "function slurm_scrun_stage_out() end\n")
    assert len(stage_in_error(hooks)) < 1200


# -- the slurm table -------------------------------------------------------------------------
def test_constants_are_slurms(tmp_path: Path) -> None:
    hooks = load(tmp_path, STAGE_FUNCTIONS)
    assert hooks.runtime.execute("return slurm.SUCCESS, slurm.ERROR, slurm.FAILURE") == (0, -1, -1)
    assert hooks.runtime.execute(
        "return slurm.NO_VAL, slurm.NO_VAL16, slurm.INFINITE, slurm.NO_VAL64, slurm.INFINITE64"
    ) == (0xFFFFFFFE, 0xFFFE, 0xFFFFFFFF, 2.0**64, 2.0**64)
    assert hooks.runtime.execute(
        "return slurm.SLURM_SUCCESS, slurm.SLURM_ERROR, slurm.ESLURM_INVALID_PARTITION_NAME,"
        " slurm.ESLURM_ACCESS_DENIED, slurm.ESPANK_ERROR, slurm.ESLURM_CONTAINER_NOT_CONFIGURED,"
        " slurm.EINPROGRESS, slurm.ESLURM_JOB_SETTING_DB_INX"
    ) == (0, -1, 2000, 2002, 3000, 10000, 115, 2103)
    assert hooks.runtime.execute(
        "return slurm.JOB_SHARED_MCS, slurm.MEM_PER_CPU, slurm.STEPMGR_ENABLED"
    ) == (3, 2.0**63, 2**41)
    # Slurm's spelling, not the header's; and its lua_pushnumber's floats.
    assert hooks.runtime.execute("return slurm.MAIL_JOB_TIME890, slurm.MAIL_JOB_TIME90") == (32, None)
    assert hooks.runtime.execute("return math.type(slurm.SUCCESS), tostring(slurm.NO_VAL)") == (
        b"float", b"4294967294.0")


def test_an_error_code_returned_fails_the_stage(tmp_path: Path) -> None:
    hooks = load(tmp_path, """function slurm_scrun_stage_in()
      return slurm.ESLURM_ACCESS_DENIED
    end
    function slurm_scrun_stage_out() return slurm.ESLURM_CONTAINER_NOT_CONFIGURED end
    """)
    assert stage_in_error(hooks) == (f"slurm_scrun_stage_in: {tmp_path}/scrun.lua:2: "
                                     "returned 2002 instead of slurm.SUCCESS")
    with pytest.raises(lua.HookError, match=r":4: returned 10000 instead of slurm.SUCCESS$"):
        hooks.stage_out("id", "/b", "/b", "/r", "/r", "/s", "/c", 1, 0, 0)
    assert "returned 2051 on load" in load_error(tmp_path, STAGE_FUNCTIONS
                                                 + "return slurm.ESLURM_INVALID_TIME_LIMIT\n")


def test_cluster_name_is_slurm_conf_s_in_lower_case(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text("SlurmctldHost=h\nClusterName=Blue # the lab's\n")
    site = load_site(str(tmp_path / "slurm.conf"))
    assert site.cluster_name() == "blue"
    script = tmp_path / "scrun.lua"
    script.write_text(STAGE_FUNCTIONS)
    hooks = staging.load_hooks(str(script), Runner(), "/b", "/r", None, site.cluster_name())
    assert hooks is not None and hooks.runtime.execute("return slurm.CLUSTER_NAME") == b"blue"
    assert load(tmp_path, STAGE_FUNCTIONS).runtime.execute("return slurm.CLUSTER_NAME") is None
    (tmp_path / "slurm.conf").write_text("SlurmctldHost=h\n")
    assert load_site(str(tmp_path / "slurm.conf")).cluster_name() is None


def test_remote_command(tmp_path: Path) -> None:
    runner = Runner(0, "n1\nn2\nn3\n")
    hooks = load(tmp_path, STAGE_FUNCTIONS, runner)
    assert hooks.runtime.execute("return slurm.remote_command('hostname')") == (0, b"n1\nn2\nn3\n")
    assert runner.scripts == ["hostname"]
    runner.result = (-9, "")
    assert hooks.runtime.execute("return slurm.remote_command('x')") == (137, b"")


def test_remote_command_failure_is_a_lua_error(tmp_path: Path) -> None:
    def broken(script: str) -> tuple[int, str]:
        raise lua.HookError("srun not found")

    hooks = load(tmp_path, """function slurm_scrun_stage_in()
      local ok, err = pcall(slurm.remote_command, "x")
      assert(not ok and err:find("srun not found"))
      slurm.remote_command("x")
    end
    function slurm_scrun_stage_out() end
    """, broken)
    assert stage_in_error(hooks).endswith(":4: slurm.remote_command: srun not found")


def test_allocator_command_runs_here(tmp_path: Path) -> None:
    hooks = load(tmp_path, STAGE_FUNCTIONS)
    assert hooks.runtime.execute(
        "return slurm.allocator_command('echo $((1 + 2)); echo err >&2; exit 4')") == (4, b"3\nerr\n")
    assert hooks.runtime.execute("return slurm.allocator_command('kill -9 $$')") == (137, b"")
    marker = tmp_path / "ran"
    hooks.runtime.execute(f"slurm.allocator_command('touch {marker}')")
    assert marker.exists()


def test_commands_while_the_script_loads_run_as_slurms_do(tmp_path: Path) -> None:
    """At load, before any job (create, as Slurm's scrun loads it): allocator_command
    runs here, remote_command fails as srun does without a job; neither fails the
    load. Once the job runs, the job's own commands are bound."""
    (tmp_path / "slurm.conf").write_text("SlurmctldHost=h\n")
    (tmp_path / "scrun.lua").write_text(
        "local rc, out = slurm.allocator_command('echo /scratch')\n"
        "scratch = out\n"
        "remote_rc = slurm.remote_command('hostname')\n" + STAGE_FUNCTIONS)
    hooks = staging.preload_hooks(load_site(str(tmp_path / "slurm.conf")),
                                  Bundle(str(tmp_path), {"root": {"path": "rootfs"}}))
    assert hooks is not None
    assert hooks.runtime.execute("return scratch, remote_rc") == (b"/scratch\n", 1)
    runner = Runner(0, "n1\n")
    hooks.bind(runner, Runner(0, "here\n"), -1)
    assert hooks.runtime.execute("return slurm.remote_command('hostname')") == (0, b"n1\n")


def test_log_levels(tmp_path: Path, logged: io.StringIO) -> None:
    hooks = load(tmp_path, STAGE_FUNCTIONS)
    hooks.runtime.execute("""
    slurm.log_error("e %d", 1)
    slurm.error("e2")
    slurm.log_info("i %s", "x")
    slurm.log_verbose("v")
    slurm.log_debug("d")
    slurm.log_debug2("d2")
    slurm.log_debug3("d3")
    slurm.log_debug4("d4")
    slurm.log("man page order", 1)
    slurm.log(2, "slurm order")
    slurm.log(9, "beyond")
    slurm.log(-1, "below: not logged")
    slurm.log("no level")
    """)
    assert logged.getvalue().splitlines() == [
        "t: error: scrun.lua: e 1", "t: error: scrun.lua: e2", "t: info: scrun.lua: i x",
        "t: verbose: scrun.lua: v", "t: debug: scrun.lua: d", "t: debug2: scrun.lua: d2",
        "t: debug3: scrun.lua: d3", "t: debug4: scrun.lua: d4",
        "t: verbose: scrun.lua: man page order", "t: debug: scrun.lua: slurm order",
        "t: debug4: scrun.lua: beyond", "t: info: scrun.lua: no level",
    ]


def test_json_and_slurm_json_are_there(tmp_path: Path) -> None:
    hooks = load(tmp_path, "local json = require 'json'\n" + STAGE_FUNCTIONS)
    code = "local json = require 'json' return json.encode(slurm.from_json('{\"a\":[]}'))"
    assert hooks.runtime.execute(code) == b'{"a":[]}'


# -- modules ---------------------------------------------------------------------------------
# Debian's liblua5.4 path, as its `lua5.4 -e 'print(package.path)'` prints it.
DEBIAN_PATH = (b"/usr/local/share/lua/5.4/?.lua;/usr/local/share/lua/5.4/?/init.lua;"
               b"/usr/local/lib/lua/5.4/?.lua;/usr/local/lib/lua/5.4/?/init.lua;"
               b"/usr/share/lua/5.4/?.lua;/usr/share/lua/5.4/?/init.lua;./?.lua;./?/init.lua")


def test_package_path_is_the_distribution_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LUA_PATH", raising=False)
    monkeypatch.delenv("LUA_PATH_5_4", raising=False)
    assert load(tmp_path, STAGE_FUNCTIONS).runtime.eval("package.path") == DEBIAN_PATH
    # liblua's rules: LUA_PATH_5_4 before LUA_PATH, the first ';;' for the default.
    assert lua.package_path("5.4", {b"LUA_PATH": b"/a/?.lua;;/b/?.lua;;"}) == (
        b"/a/?.lua;" + DEBIAN_PATH + b";/b/?.lua;;")
    assert lua.package_path("5.4", {b"LUA_PATH": b"/a/?.lua"}) == b"/a/?.lua"
    assert lua.package_path("5.4", {b"LUA_PATH_5_4": b";;", b"LUA_PATH": b"/a/?.lua"}) == DEBIAN_PATH
    assert lua.package_path("5.4", {b"LUA_PATH_5_4": b"", b"LUA_PATH": b"/a/?.lua"}) == b""


def test_site_modules_on_lua_path_and_the_site_s_json_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    modules = tmp_path / "modules"
    (modules / "sitepkg").mkdir(parents=True)
    (modules / "sitemod.lua").write_text("return {answer = 42}\n")
    (modules / "sitepkg" / "init.lua").write_text("return {name = ...}\n")
    (modules / "json.lua").write_text("return {site = true}\n")
    monkeypatch.delenv("LUA_PATH_5_4", raising=False)
    monkeypatch.setenv("LUA_PATH", f"{modules}/?.lua;{modules}/?/init.lua;;")
    hooks = load(tmp_path, """local sitemod, sitepkg = require 'sitemod', require 'sitepkg'
    local json = require 'json'
    function slurm_scrun_stage_in()
      if sitemod.answer == 42 and sitepkg.name == "sitepkg" and json.site then
        return slurm.SUCCESS
      end
      return slurm.ERROR
    end
    function slurm_scrun_stage_out() end
    """)
    assert hooks.runtime.eval("package.path").endswith(b";" + DEBIAN_PATH)
    hooks.stage_in("id", "/b", "/s", "/c", 1, 0, 0, [])


def test_load_with_real_paths(tmp_path: Path) -> None:
    """Paths with bytes that are not UTF-8 pass through unchanged."""
    odd = os.fsdecode(b"/tmp/\xff")
    hooks = load(tmp_path, """function slurm_scrun_stage_in(id, bundle)
      slurm.set_bundle_path(bundle .. "/x")
    end
    function slurm_scrun_stage_out() end
    """)
    assert hooks.stage_in("id", odd, "/s", "/c", 1, 0, 0, []).bundle == odd + "/x"
