"""A signal to the anchor while scrun.lua runs: it fails the script's call, whether the
script waits on a command, loops without one, or catches the error and goes on; the
next call (stage_out after a failed stage_in) runs its commands again."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyscrun.errors import Interrupted
from pyscrun.hooks import lua
from tests.unit.test_lua_hooks import Runner, stage_in_error


@pytest.fixture
def signals() -> Iterator[tuple[int, int]]:
    """A self-pipe as selfpipe.catch makes it, written to by hand: (reader, writer)."""
    reader, writer = os.pipe()
    os.set_blocking(reader, False)
    yield reader, writer
    os.close(reader)
    os.close(writer)


class Interrupting(Runner):
    """A runner whose commands a signal interrupts, as child.run raises it."""

    def __call__(self, script: str) -> tuple[int, str]:
        self.scripts.append(script)
        raise Interrupted(signal.SIGTERM)


def load(tmp_path: Path, text: str, runner: lua.CommandRunner, interrupt_fd: int = -1,
         ) -> lua.ScrunLua:
    script = tmp_path / "scrun.lua"
    script.write_text(text)
    hooks = lua.load(script, runner, "/b", "/b/rootfs", runner)
    # As the anchor binds a script create loaded to its self-pipe.
    hooks.bind(runner, runner, interrupt_fd)
    return hooks


def test_an_interrupted_command_fails_the_stage_at_its_line(tmp_path: Path) -> None:
    hooks = load(tmp_path, """function slurm_scrun_stage_in()
      slurm.allocator_command("rsync -a /here /there")
      return slurm.SUCCESS
    end
    function slurm_scrun_stage_out() return slurm.SUCCESS end
    """, Interrupting())
    assert stage_in_error(hooks) == (f"slurm_scrun_stage_in: {tmp_path}/scrun.lua:2: "
                                     "slurm.allocator_command: interrupted by SIGTERM")


def test_a_script_that_catches_the_interruption_fails_all_the_same(tmp_path: Path) -> None:
    """Nor does it run another command: it would wait on that one in turn."""
    runner = Interrupting()
    hooks = load(tmp_path, """function slurm_scrun_stage_in()
      pcall(slurm.remote_command, "first")
      pcall(slurm.remote_command, "second")
      return slurm.SUCCESS
    end
    function slurm_scrun_stage_out() return slurm.SUCCESS end
    """, runner)
    assert stage_in_error(hooks) == (f"slurm_scrun_stage_in: {tmp_path}/scrun.lua: "
                                     "interrupted by SIGTERM")
    assert runner.scripts == ["first"]


def test_stage_out_after_an_interrupted_stage_in_runs_its_commands(tmp_path: Path) -> None:
    runner = Interrupting()
    hooks = load(tmp_path, """function slurm_scrun_stage_in()
      slurm.remote_command("in")
    end
    function slurm_scrun_stage_out()
      local ok = pcall(slurm.remote_command, "out")
      return slurm.SUCCESS
    end
    """, runner)
    stage_in_error(hooks)
    with pytest.raises(lua.HookError, match="interrupted by SIGTERM"):
        hooks.stage_out("id", "/b", "/b", "/r", "/r", "/s", "/c", 1, 0, 0)
    assert runner.scripts == ["in", "out"]


def test_a_script_that_loops_without_a_command_is_interrupted(
        tmp_path: Path, signals: tuple[int, int]) -> None:
    reader, writer = signals
    hooks = load(tmp_path, """function slurm_scrun_stage_in()
      while true do end
    end
    function slurm_scrun_stage_out() return slurm.SUCCESS end
    """, Runner(), reader)
    os.write(writer, bytes([signal.SIGHUP]))
    assert stage_in_error(hooks) == (f"slurm_scrun_stage_in: {tmp_path}/scrun.lua:2: "
                                     "interrupted by SIGHUP")


def test_a_signal_that_came_between_commands_interrupts_the_next(
        tmp_path: Path, signals: tuple[int, int]) -> None:
    reader, writer = signals
    runner = Runner()
    hooks = load(tmp_path, """function slurm_scrun_stage_in()
      slurm.allocator_command("first")
      slurm.allocator_command("second")
    end
    function slurm_scrun_stage_out() return slurm.SUCCESS end
    """, lambda script: (os.write(writer, bytes([signal.SIGINT])), runner(script))[1], reader)
    assert stage_in_error(hooks).endswith(":3: slurm.allocator_command: interrupted by SIGINT")
    assert runner.scripts == ["first"]
