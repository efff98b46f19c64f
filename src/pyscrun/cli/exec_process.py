"""The OCI process an exec runs: podman's and docker's, read from --process; or, in
runc's own form (`exec ID CMD...`), the container's own process running CMD, changed
as runc's exec flags say."""

from __future__ import annotations

import json

from pyscrun.cli.main import Context
from pyscrun.errors import BundleError, UsageError

# runc's exec flag -> the process field its value replaces.
_REPLACED = {"cwd": "cwd", "apparmor": "apparmorProfile", "process_label": "selinuxLabel"}
# The capability sets `--cap` adds to, as runc's exec (ambient too where the process
# has an inheritable set: without it an ambient capability cannot be raised).
_CAP_SETS = ("bounding", "effective", "permitted")


def process_of(ctx: Context, bundle: str) -> dict[str, object]:
    """The process `scrun exec` was given, or made of its command and flags."""
    command = ctx.options.get("command")
    path = ctx.option("process")
    if path:
        return _read(path)
    if not (isinstance(command, list) and command):
        raise UsageError("exec needs a command, or --process FILE (the OCI process, as "
                         "podman and docker pass it)")
    return _of_command(ctx, bundle, [str(word) for word in command])


def _read(path: str) -> dict[str, object]:
    try:
        with open(path, encoding="utf-8") as source:
            process = json.load(source)
    except (OSError, ValueError, RecursionError) as err:
        raise BundleError(f"exec: cannot read the process in {path}: {err}") from None
    args = process.get("args") if isinstance(process, dict) else None
    if not (isinstance(args, list) and args and all(isinstance(a, str) for a in args)):
        raise BundleError(f"exec: the process in {path} needs args, a list of strings")
    return dict(process)


def _of_command(ctx: Context, bundle: str, command: list[str]) -> dict[str, object]:
    from pyscrun.oci import bundle as oci_bundle

    process = dict(oci_bundle.load(bundle).config["process"])
    process["args"] = command
    process["terminal"] = False
    entries = _strings(ctx.options.get("env"))
    if any("=" not in entry for entry in entries):
        raise UsageError("exec: -e takes NAME=VALUE")
    names = {entry.partition("=")[0] for entry in entries}
    process["env"] = [e for e in process.get("env") or [] if e.partition("=")[0] not in names]
    process["env"] += entries
    for option, field in _REPLACED.items():
        if value := ctx.option(option):
            process[field] = value
    if ctx.flag("no_new_privs"):
        process["noNewPrivileges"] = True
    if caps := _strings(ctx.options.get("cap")):
        process["capabilities"] = _with_caps(process.get("capabilities"), caps)
    user, gids = ctx.option("user"), _strings(ctx.options.get("additional_gids"))
    if user or gids:
        process["user"] = _with_user(process.get("user"), user, gids)
    return process


def _strings(values: object) -> list[str]:
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


def _with_caps(capabilities: object, caps: list[str]) -> dict[str, object]:
    sets = dict(capabilities) if isinstance(capabilities, dict) else {}
    names = [*_CAP_SETS, *(("ambient",) if sets.get("inheritable") is not None else ())]
    for name in names:
        sets[name] = [*(sets.get(name) or []), *caps]
    return sets


def _with_user(user: object, given: str | None, gids: list[str]) -> dict[str, object]:
    """--user UID[:GID] and each --additional-gids, numbers as runc reads them."""
    changed = dict(user) if isinstance(user, dict) else {}
    if given:
        uid, colon, gid = given.partition(":")
        changed["uid"] = _id(uid, "--user's uid")
        if colon:
            changed["gid"] = _id(gid, "--user's gid")
    if gids:
        changed["additionalGids"] = [*(changed.get("additionalGids") or []),
                                     *(_id(gid, "--additional-gids") for gid in gids)]
    return changed


def _id(text: str, what: str) -> int:
    if not text.isdigit() or not text.isascii() or int(text) > 0xFFFFFFFF:
        raise UsageError(f"exec: {what} must be a number, not {text!r}")
    return int(text)
