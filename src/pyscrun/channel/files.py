"""Directory trees across the channel, where a node and the login host share no file
system: checkpoint images both ways, a container's bundle to the node.

A tree goes as one `{"op":"file","area":A,"path":P}` message per regular file, its
bytes in FILE frames, an empty FILE frame at its end. The receiver writes each file
below the directory it gave that area and refuses any path that would leave it.
"""

from __future__ import annotations

import os

from pyscrun import messages
from pyscrun.channel import frames
from pyscrun.channel.peer import Peer, PeerGone
from pyscrun.errors import ChannelError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

SEND_TIMEOUT = 120.0
# GNU tar's status for "some files differ" (changed while read): a warning, not a failure.
_TAR_WARNED = 1
# Owners as numbers; unpacked with the modes as they were (as far as this process may
# set them: root, or root of the user namespace the owners map into).
_PACK = ["--numeric-owner"]
_UNPACK = ["--numeric-owner", "--same-permissions"]
# Sent data waits in the peer's buffer up to this much before the sender waits.
HIGH_WATER = 1 << 22


def tree_frames(root: str, area: str,
                skip: Callable[[str], bool] | None = None) -> Iterator[bytes]:
    """The frames of every regular file below root (top-level entries matching skip
    left out), made as they are taken."""
    for directory, subdirs, names in os.walk(root):
        relative = os.path.relpath(directory, root)
        if relative == "." and skip is not None:
            subdirs[:] = [d for d in subdirs if not skip(d)]
            names = [n for n in names if not skip(n)]
        for name in sorted(names):
            path = os.path.join(directory, name)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            yield frames.message({"op": "file", "area": area,
                                  "path": os.path.normpath(os.path.join(relative, name))})
            with open(path, "rb") as source:
                while chunk := source.read(frames.MAX_DATA):
                    yield frames.frame(frames.FILE, chunk)
            yield frames.frame(frames.FILE)


def tar_frames(root: str, area: str, path: str) -> Iterator[bytes]:
    """The tree at root (a rootfs) as the frames of one tar archive, the file path of
    area, as tar writes it: links, modes and owners as numbers kept (which tree_frames
    does not keep), and no copy of the archive made on either side. A generator closed
    before its end kills its tar."""
    import subprocess
    import tempfile

    if not os.path.isdir(root):
        raise ChannelError(f"{root} is not a directory here")
    with tempfile.TemporaryFile() as said:
        tar = subprocess.Popen(["tar", *_PACK, "-C", root, "-cf", "-", "."],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=said)
        assert tar.stdout is not None
        try:
            yield frames.message({"op": "file", "area": area, "path": path})
            while chunk := tar.stdout.read(frames.MAX_DATA):
                yield frames.frame(frames.FILE, chunk)
        finally:
            tar.stdout.close()  # a tar not read to its end then ends on SIGPIPE
            tar.wait()
        if tar.returncode not in (0, _TAR_WARNED):
            said.seek(0)
            raise ChannelError(f"tar of {root} failed: "
                               f"{_last_line(said.read(), tar.returncode)}")
        yield frames.frame(frames.FILE)


def send_all(peer: Peer, made: Iterable[bytes]) -> None:
    """Frames sent as they are made, waiting while the other end takes them (a node's
    agent sends its files so; the anchor, which serves others meanwhile, does not)."""
    for chunk in made:
        peer.send(chunk)
        if peer.pending >= HIGH_WATER and not peer.flush_blocking(SEND_TIMEOUT):
            raise ChannelError("the other end stopped taking the files")
    if not peer.flush_blocking(SEND_TIMEOUT):
        raise ChannelError("the other end stopped taking the files")


class TreeReceiver:
    """Files arriving for the areas given (area -> the directory they go below).
    archives: files that are tar archives, (area, path) -> the directory each is
    unpacked into as it arrives, never written out whole.

    A file that cannot be written here (a full disk, a read-only directory) is this
    side's failure, not the sender's: the rest of the tree is still read, to keep the
    channel in step, and dropped; `failed` says why, for the owner to report once the
    tree has arrived."""

    def __init__(self, areas: dict[str, str],
                 archives: dict[tuple[str, str], str] | None = None) -> None:
        self.areas = areas
        self.archives = archives or {}
        self.fd = -1
        self.unpacking: Unpacking | None = None
        self.failed: str | None = None
        self.area = ""  # the area of the file being written

    def begin(self, message: dict[str, object]) -> None:
        """A `file` message: the file its FILE frames fill. ValueError if it would
        land outside its area, or names none of them."""
        self.close()
        area, path = message.get("area"), message.get("path")
        if not isinstance(area, str) or area not in self.areas or not isinstance(path, str):
            raise ValueError(f"a file for no known place ({area!r})")
        self.area = area
        if (area, path) in self.archives:
            self._write(lambda: self._unpack(self.archives[area, path]))
            return
        parts = [part for part in path.split("/") if part not in ("", ".")]
        if os.path.isabs(path) or not parts or ".." in parts:
            raise ValueError(f"a file outside its place: {path!r}")
        self._write(lambda: self._open(self.areas[area], parts))

    def data(self, payload: bytes) -> None:
        if self.failed is not None:
            return
        if self.fd < 0:
            raise ValueError("file data without a file")
        if not payload:
            fd, self.fd = self.fd, -1
            if self.unpacking is not None:
                unpacking, self.unpacking = self.unpacking, None
                unpacking.finish()
            else:
                self._write(lambda: os.close(fd))  # a write-back error shows only here
            return
        view = memoryview(payload)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except BrokenPipeError:
            raise ValueError(self.unpacking.failure() if self.unpacking is not None
                             else "the file was closed") from None
        except OSError as err:
            self._fail(err)

    def close(self) -> None:
        """Whatever was under way ends, given up (an archive only part unpacked: its
        tar killed)."""
        fd, self.fd = self.fd, -1
        if self.unpacking is not None:
            self.unpacking.abandon()
            self.unpacking = None
        elif fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass  # what it held is lost either way

    def _open(self, root: str, parts: list[str]) -> None:
        """The file at parts below root, each directory on the way made or entered
        without following a link: one there, or swapped in meanwhile (the image path
        may be a share the nodes write too), fails the file (ELOOP, ENOTDIR), it never
        leads the write elsewhere."""
        os.makedirs(root, exist_ok=True)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts[:-1]:
                try:
                    os.mkdir(part, dir_fd=fd)
                except FileExistsError:
                    pass
                below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = below
            self.fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                              | os.O_CLOEXEC, 0o600, dir_fd=fd)
        finally:
            os.close(fd)

    def _unpack(self, root: str) -> None:
        self.unpacking = Unpacking(root)
        self.fd = self.unpacking.fd

    def _write(self, step: Callable[[], None]) -> None:
        """step, unless a write failed already; its own failure recorded."""
        if self.failed is not None:
            return
        try:
            step()
        except OSError as err:
            self._fail(err)

    def _fail(self, err: OSError) -> None:
        self.failed = f"cannot write in {self.areas[self.area]}: {err.strerror or err}"
        self.close()


class Unpacking:
    """A tar archive unpacked into root as its bytes are written to fd."""

    def __init__(self, root: str) -> None:
        import subprocess
        import tempfile

        os.makedirs(root, mode=0o755, exist_ok=True)
        self.root = root
        self.said = tempfile.TemporaryFile()  # noqa: SIM115 (closed when the tar ends)
        self.tar = subprocess.Popen(["tar", *_UNPACK, "-C", root, "-xf", "-"],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=self.said)
        assert self.tar.stdin is not None
        self.fd = self.tar.stdin.fileno()

    def finish(self) -> None:
        """The archive's end: ValueError unless tar unpacked it all."""
        self._close_input()
        if self.tar.wait() not in (0, _TAR_WARNED):
            raise ValueError(self.failure())
        self.said.close()

    def failure(self) -> str:
        self._close_input()
        self.tar.wait()
        self.said.seek(0)
        said = _last_line(self.said.read(), self.tar.returncode)
        self.said.close()
        return f"unpacking into {self.root} failed: {said}"

    def abandon(self) -> None:
        self.tar.kill()
        self._close_input()
        self.tar.wait()
        self.said.close()

    def _close_input(self) -> None:
        assert self.tar.stdin is not None
        try:
            self.tar.stdin.close()
        except BrokenPipeError:
            pass


def fetch_tree(peer: Peer, request: str, done: str, receiver: TreeReceiver,
               other: Callable[[list[tuple[int, bytes]]], None]) -> None:
    """Ask the anchor for a tree (the message `request`) and take its files until it
    says `done`; frames that are not part of the tree go to other. ChannelError when
    the anchor reports an error or the channel fails."""
    peer.send(frames.message({"op": request}))
    peer.sock.setblocking(True)
    peer.sock.settimeout(SEND_TIMEOUT)
    try:
        while True:
            peer.flush()
            received = peer.receive()
            for index, (kind, payload) in enumerate(received):
                message = (messages.check(frames.decode_message(payload), "orders")
                           if kind == frames.MESSAGE else {})
                if kind == frames.FILE:
                    receiver.data(payload)
                elif message.get("op") == "file":
                    receiver.begin(message)
                elif message.get("op") == done:
                    if message.get("error"):
                        raise ChannelError(str(message["error"]))
                    if receiver.failed is not None:
                        raise ChannelError(receiver.failed)
                    # What came with the end (stdin, orders) is not the tree's.
                    other(received[index + 1:])
                    return
                else:
                    other([(kind, payload)])
    except (PeerGone, TimeoutError, ValueError) as err:
        raise ChannelError(str(err)) from None
    finally:
        receiver.close()
        peer.sock.setblocking(False)


def pack_listed(root: str, names: list[str], archive: str) -> None:
    """The entries named (relative to root) as one tar archive, each alone (a directory
    without what it holds), owners as numbers as tar_frames keeps them."""
    listing = archive + ".names"
    with open(listing, "wb") as out:
        out.write(b"".join(os.fsencode(name) + b"\0" for name in names))
    try:
        _tar([*_PACK, "--no-recursion", "--null", "-C", root, "-T", listing, "-cf", archive],
             f"tar of the changes in {root}")
    finally:
        os.unlink(listing)


def unpack(archive: str, root: str) -> None:
    """The archive into root (made if missing), owners kept as far as this process may
    set them (root, or root of the user namespace the owners map into)."""
    os.makedirs(root, mode=0o755, exist_ok=True)
    _tar([*_UNPACK, "-C", root, "-xf", archive], f"unpacking into {root}")


def copy_over(source: str, target: str) -> None:
    """Every entry of source put in place in target, replacing what is there under its
    name (a directory by a file too), even where size and time match (source holds what
    is known to differ); nothing else in target is touched."""
    _run(["rsync", "-aHD", "--numeric-ids", "--force", "--ignore-times", source.rstrip("/") + "/",
          target.rstrip("/") + "/"], f"rsync into {target}", (0,))


def _tar(args: list[str], what: str) -> None:
    _run(["tar", *args], what, (0, _TAR_WARNED))


def _run(argv: list[str], what: str, fine: tuple[int, ...]) -> None:
    import subprocess

    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    if done.returncode not in fine:
        raise ChannelError(f"{what} failed: {_last_line(done.stderr, done.returncode)}")


def _last_line(said: bytes, status: int | None) -> str:
    """What a failed command said last (its status if nothing)."""
    lines = said.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else str(status)
