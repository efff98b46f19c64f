"""The console of a terminal container: a pty whose master goes to --console-socket."""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import termios

from pyscrun.errors import ScrunError

# typing costs milliseconds at every start of the CLI: for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def open_console(console_socket: str, size: dict[str, Any] | None) -> int:
    """Send a new pty's master to console_socket (as runc does); return the slave fd."""
    master, slave = os.openpty()
    try:
        if size:
            winsize = struct.pack("HHHH", int(size.get("height", 0)), int(size.get("width", 0)),
                                  0, 0)
            fcntl.ioctl(slave, termios.TIOCSWINSZ, winsize)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(console_socket)
            socket.send_fds(sock, [os.ttyname(slave).encode()], [master])
    except OSError as err:
        os.close(slave)
        raise ScrunError(
            f"cannot hand the console to {console_socket}: {err.strerror or err}"
        ) from None
    finally:
        os.close(master)
    return slave


def make_controlling_terminal(fd: int) -> None:
    """In a new session: fd becomes its controlling terminal and the process's stdio."""
    os.setsid()
    fcntl.ioctl(fd, termios.TIOCSCTTY, 0)
    for target in (0, 1, 2):
        os.dup2(fd, target)
    if fd > 2:
        os.close(fd)
