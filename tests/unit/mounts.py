"""Real file system faults that stop root too, who writes through any mode: a full
tmpfs, a read-only bind mount. Mounted for one test, unmounted after it."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path


class Mounts:
    def __init__(self) -> None:
        self.made: list[Path] = []

    def full_tmpfs(self, path: Path) -> None:
        """path, a tmpfs of 64 KiB with no room left but for empty files (a probe)."""
        path.mkdir()
        self._mount(path, "-t", "tmpfs", "-o", "size=64k", "tmpfs")
        filler = os.open(path / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(filler, b"x" * 4096)
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise
        finally:
            os.close(filler)

    def read_only(self, path: Path) -> None:
        """path (made if missing), as it is, read-only from now on."""
        path.mkdir(exist_ok=True)
        self._mount(path, "--bind", "-o", "ro", str(path))

    def _mount(self, path: Path, *how: str) -> None:
        subprocess.run(["mount", *how, str(path)], check=True)
        self.made.append(path)

    def undo(self) -> None:
        """Lazily: a file still open there (an anchor's) must not keep a mount."""
        for path in reversed(self.made):
            subprocess.run(["umount", "--lazy", str(path)], check=True)
        self.made = []
