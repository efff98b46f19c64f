"""The output variables of the man page, which the job (stage-in, node agents) sees."""

from __future__ import annotations

from pyscrun import OCI_VERSION, identity

_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def output_env(
    *, container_id: str, anchor_pid: int, bundle: str, submission_bundle: str,
    annotations: dict[str, str], pid_file: str | None, socket: str, spool_dir: str,
    config_file: str, root: str, rootfs: str, submission_rootfs: str,
    log_file: str | None, log_format: str, in_a_job: bool,
) -> dict[str, str]:
    uid, gid = identity.real_uid(), identity.real_gid()
    env = {
        "SCRUN_OCI_VERSION": OCI_VERSION,
        "SCRUN_CONTAINER_ID": container_id,
        "SCRUN_PID": str(anchor_pid),
        "SCRUN_BUNDLE": bundle,
        "SCRUN_SUBMISSION_BUNDLE": submission_bundle,
        "SCRUN_PID_FILE": pid_file or "",
        "SCRUN_SOCKET": socket,
        "SCRUN_SPOOL_DIR": spool_dir,
        "SCRUN_SUBMISSION_CONFIG_FILE": config_file,
        "SCRUN_USER": identity.user_name(uid),
        "SCRUN_USER_ID": str(uid),
        "SCRUN_GROUP": identity.group_name(gid),
        "SCRUN_GROUP_ID": str(gid),
        "SCRUN_ROOT": root,
        "SCRUN_ROOTFS_PATH": rootfs,
        "SCRUN_SUBMISSION_ROOTFS_PATH": submission_rootfs,
        "SCRUN_LOG_FILE": log_file or "",
        "SCRUN_LOG_FORMAT": log_format,
    }
    if in_a_job:
        # Slurm's own names; where no job exists (the local backend) the container
        # gets no SLURM_* variable at all.
        env["SLURM_CONTAINER"] = bundle
        env["SLURM_CONTAINER_ID"] = container_id
    for key, value in annotations.items():
        # Slurm's name, the key as it is (what scrun.lua and the step see), and a name
        # a shell passes on too (none with a dot or dash): org.foo-bar -> ORG_FOO_BAR.
        env["SCRUN_ANNOTATION_" + key.replace("=", "_")] = value
        name = "".join(c if c in _NAME_CHARS else "_" for c in key)
        env["SCRUN_ANNOTATION_" + name.upper()] = value
    return env
