from __future__ import annotations

import signal

import pytest

from pyscrun.cli.flags import parse
from pyscrun.cli.signals import parse_signal
from pyscrun.cli.update import parse_size
from pyscrun.errors import ScrunError, UsageError


def test_conmon_style_create() -> None:
    parsed = parse(["--log-format=json", "--log", "/x/oci-log", "create", "--bundle", "/b",
                    "--pid-file", "/p", "abc"])
    assert parsed.verb is not None and parsed.verb.name == "create"
    assert parsed.options["log_format"] == "json"
    assert parsed.options["log"] == "/x/oci-log"
    assert parsed.options["bundle"] == "/b"
    assert parsed.options["pid_file"] == "/p"
    assert parsed.args == {"container-id": "abc"}


def test_go_style_single_dash_and_ignored_flags() -> None:
    parsed = parse(["-root", "/r", "--systemd-cgroup", "--rootless=true", "--cgroup-manager",
                    "cgroupfs", "create", "-b=/b", "--no-pivot", "--no-new-keyring",
                    "--preserve-fds", "2", "id"])
    assert parsed.options["root"] == "/r"
    assert parsed.options["bundle"] == "/b"
    assert parsed.options["preserve_fds"] == "2"


def test_kill_with_all_and_signal() -> None:
    parsed = parse(["kill", "--all", "id", "KILL"])
    assert parsed.options["all"] is True
    assert parsed.args == {"container-id": "id", "signal": "KILL"}


def test_verbosity_counts() -> None:
    assert parse(["-v", "-v", "state", "x"]).options["v"] == 2
    assert parse(["-vvv", "state", "x"]).options["v"] == 3


@pytest.mark.parametrize("argv", [["create"], ["state", "a", "b"], ["kill", "--nope", "x"],
                                  ["--root"], ["frob", "x"], ["delete", "--force=maybe", "x"]])
def test_usage_errors(argv: list[str]) -> None:
    with pytest.raises(UsageError):
        parse(argv)


@pytest.mark.parametrize(("text", "number"), [(None, 15), ("TERM", 15), ("SIGKILL", 9),
                                              ("9", 9), ("usr1", 10), ("0", 0)])
def test_signals(text: str | None, number: int) -> None:
    assert parse_signal(text) == number


@pytest.mark.parametrize("text", ["999", "SIGNOPE", "-1", "SIG0"])
def test_bad_signals(text: str) -> None:
    with pytest.raises(ScrunError):
        parse_signal(text)


def test_every_signal_name_of_the_signal_module_and_only_those() -> None:
    for member in signal.Signals:
        assert parse_signal(member.name) == member.value
        assert parse_signal(member.name.removeprefix("SIG").lower()) == member.value
    for not_a_signal in ("SIG_DFL", "_DFL", "SIG_IGN", "SIG_BLOCK", "NSIG", "ITIMER_REAL"):
        with pytest.raises(ScrunError):
            parse_signal(not_a_signal)


def test_exec_takes_a_command_whose_flags_are_its_own() -> None:
    parsed = parse(["exec", "-e", "A=1", "--env=B=2", "--cwd", "/x", "cid", "sh", "-c",
                          "echo -e hi"])
    assert parsed.args == {"container-id": "cid"}
    assert parsed.options["env"] == ["A=1", "B=2"]
    assert parsed.options["cwd"] == "/x"
    assert parsed.options["command"] == ["sh", "-c", "echo -e hi"]
    assert parse(["exec", "cid", "--", "ls", "-l"]).options["command"] == ["ls", "-l"]


# What runc 1.1's update set (memory.limit_in_bytes) or refused, side by side.
RUNC_SIZES = {"512MB": 512 << 20, "1g": 1 << 30, "1G": 1 << 30, "100000000": 100000000,
              "1kib": 1024, "1KiB": 1024, "1kb": 1024, "1b": 1, "1i": 1, "1ib": 1,
              "512 MB": 512 << 20, "1.5g": 3 << 29, "2p": 2 << 50, "1MIB": 1 << 20,
              "10gb": 10 << 30, "-1": -1}
RUNC_NOT_SIZES = ("1.5.2g", "1e3", ".5g", "0x10", "1gibb", " 1g", "1g ", "1\n", "lots", "",
                  "-2", "99999999999p", "9" * 400, "1\u212a")


@pytest.mark.parametrize(("text", "size"), RUNC_SIZES.items())
def test_update_reads_sizes_as_runc(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", RUNC_NOT_SIZES)
def test_update_refuses_what_runc_refuses(text: str) -> None:
    assert parse_size(text) is None


def test_update_takes_runc_spelling_of_cpu_shares() -> None:
    for spelling in ("--cpu-share", "--cpu-shares"):
        assert parse(["update", spelling, "512", "cid"]).options["cpu_share"] == "512"


def test_ps_options_after_the_id_are_ps_own() -> None:
    parsed = parse(["ps", "--format", "table", "cid", "-o", "pid,args", "-f"])
    assert parsed.args == {"container-id": "cid"}
    assert parsed.options["format"] == "table"
    assert parsed.options["command"] == ["-o", "pid,args", "-f"]
