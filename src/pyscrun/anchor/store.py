"""The spool directory of each container under --root: layout, ids, atomic files."""

from __future__ import annotations

import os

from pyscrun import jsonc
from pyscrun.errors import ContainerExists, ContainerNotFound, ScrunError, UsageError
from pyscrun.fs import remove_tree, write_atomic
from pyscrun.oci.state import ContainerState

MAX_ID_LENGTH = 1024
# runc's rule for ids: nothing that could become a path of its own.
_ID_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+.-")
# Longer ids get a hashed directory name; '=' cannot occur in an id, so no clash.
_MAX_PLAIN_NAME = 200
STATE_FILE = "state.json"
SOCKET_NAME = "ctl"


def default_root(environ: dict[str, str] | os._Environ[str]) -> str:
    """Where state lives when podman passes no --root (it never does)."""
    from pyscrun import identity

    runtime_dir = environ.get("XDG_RUNTIME_DIR", "")
    if runtime_dir:
        if not identity.private_dir(runtime_dir):
            raise UsageError(
                f"XDG_RUNTIME_DIR={runtime_dir} is not a directory of {identity.user_name()}'s "
                "alone: log in again (pam_systemd makes /run/user/UID), set it to a directory "
                "of your own with mode 0700, or pass --root")
        return os.path.join(runtime_dir, "pyscrun")
    uid = identity.real_uid()
    if uid == 0:
        return "/run/pyscrun"
    user_run = f"/run/user/{uid}"
    if os.path.isdir(user_run):
        return os.path.join(user_run, "pyscrun")
    return os.path.join(environ.get("TMPDIR") or "/tmp", f"pyscrun-{uid}")


def checked_root(root: str) -> str:
    """root, unless a file is there or on the way there: then one line for every verb
    (as runc has), not each verb's own failure."""
    import stat

    try:
        if stat.S_ISDIR(os.stat(root).st_mode):
            return root
    except NotADirectoryError:
        pass
    except OSError:
        return root  # not made yet, or not ours to see: each verb says what it cannot do
    raise ScrunError(f"cannot keep container state in {root} (--root): not a directory")


def validate_id(container_id: str) -> str:
    if not container_id:
        raise UsageError("container id must not be empty")
    if len(container_id) > MAX_ID_LENGTH:
        raise UsageError(f"container id is longer than {MAX_ID_LENGTH} characters")
    if container_id in (".", "..") or not _ID_CHARACTERS.issuperset(container_id):
        raise UsageError(
            f"invalid container id {container_id!r}: use letters, digits and _ + . - only"
        )
    return container_id


class Store:
    """The containers under one --root, each in its own 0700 spool directory."""

    def __init__(self, root: str) -> None:
        self.root = root

    def spool_dir(self, container_id: str) -> str:
        name = container_id
        if len(name) > _MAX_PLAIN_NAME:
            import hashlib

            name = "=" + hashlib.sha256(name.encode()).hexdigest()
        return os.path.join(self.root, name)

    def make_spool_dir(self, container_id: str) -> str:
        try:
            os.makedirs(self.root, mode=0o700, exist_ok=True)
        except OSError as err:
            raise ScrunError(f"cannot create root directory {self.root}: {err.strerror}") from None
        spool = self.spool_dir(container_id)
        try:
            os.mkdir(spool, 0o700)
        except FileExistsError:
            raise ContainerExists(f"container {container_id!r} already exists") from None
        except OSError as err:
            raise ScrunError(f"cannot create {spool}: {err.strerror}") from None
        # Locked until this process (create) exits, by when the anchor has saved the
        # state: a spool dir without state whose lock is free was left by a create that
        # died first (remove_abandoned).
        import fcntl

        fcntl.flock(os.open(spool, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), fcntl.LOCK_EX)
        return spool

    def remove_abandoned(self, container_id: str) -> None:
        """Remove the spool dir of a create that died before its anchor saved any state
        (as runc's delete --force removes a state dir it cannot load); one whose create
        still runs is left to it."""
        import fcntl

        spool = self.spool_dir(validate_id(container_id))
        try:
            fd = os.open(spool, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        finally:
            os.close(fd)
        if not os.path.exists(os.path.join(spool, STATE_FILE)):
            remove_tree(spool)

    def save(self, state: ContainerState) -> None:
        data = jsonc.dumps(state.to_json()).encode()
        try:
            write_atomic(os.path.join(self.spool_dir(state.id), STATE_FILE), data)
        except OSError as err:
            raise ScrunError(f"cannot save state of {state.id!r}: {err.strerror}") from None

    def load(self, container_id: str) -> ContainerState:
        validate_id(container_id)
        path = os.path.join(self.spool_dir(container_id), STATE_FILE)
        try:
            with open(path, "rb") as state_file:
                raw = state_file.read()
        except FileNotFoundError:
            raise ContainerNotFound(f"container {container_id!r} does not exist") from None
        except OSError as err:
            raise ScrunError(f"cannot read state of {container_id!r}: {err.strerror}") from None
        try:
            return ContainerState.from_json(jsonc.loads(raw))
        except (ValueError, TypeError, RecursionError):
            raise ScrunError(f"state of {container_id!r} is corrupt: {path}") from None

    def socket_path(self, container_id: str) -> str:
        return os.path.join(self.spool_dir(container_id), SOCKET_NAME)

    def ids(self) -> list[str]:
        found = []
        try:
            entries = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        for entry in entries:
            try:
                with open(os.path.join(self.root, entry, STATE_FILE), "rb") as state_file:
                    found.append(ContainerState.from_json(jsonc.loads(state_file.read())).id)
            except (OSError, ValueError, TypeError, RecursionError):
                continue  # half written or not ours: `list` skips it
        return found

    def remove(self, container_id: str) -> None:
        remove_tree(self.spool_dir(container_id))
