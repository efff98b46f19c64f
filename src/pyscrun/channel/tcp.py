"""Listening and dialing: a port the site opens for connections back from its nodes."""

from __future__ import annotations

import _socket
import errno

from pyscrun.errors import ChannelError

# Connections not yet proven (or idle agents) an anchor takes at once: enough for
# every task of a big container, few enough that nobody can exhaust its descriptors.
BACKLOG = 128


def parse_port_range(text: str, where: str) -> tuple[int, int]:
    """`LOW-HIGH` (or one port), as slurm.conf's SrunPortRange."""
    low, _, high = text.strip().partition("-")
    try:
        first, last = int(low), int(high or low)
    except ValueError:
        first = last = -1
    if not 1 <= first <= last <= 65535:
        raise ChannelError(f"{where}: a port range is LOW-HIGH within 1-65535, not {text!r}")
    return first, last


# A peer whose machine crashed, or that a network cut took away, sends no FIN: without
# probes its connection would look alive for as long as nothing is sent on it (an agent
# only reads its anchor's). Probed after this idle time, every interval, and given up
# after that many unanswered probes: about two minutes. The kernel answers the probes
# of a process Slurm stopped (a suspended job): that connection stays.
KEEPALIVE = ((_socket.TCP_KEEPIDLE, 60), (_socket.TCP_KEEPINTVL, 10), (_socket.TCP_KEEPCNT, 6))


def _keep_alive(conn: _socket.socket) -> None:
    """Probe the peer while the connection is idle; accepted connections inherit it
    from their listener."""
    conn.setsockopt(_socket.SOL_SOCKET, _socket.SO_KEEPALIVE, 1)
    for option, value in KEEPALIVE:
        conn.setsockopt(_socket.IPPROTO_TCP, option, value)


def _bound(port: int, loopback_only: bool) -> _socket.socket:
    # The C socket type alone, as the node agent's dialing side: connections are
    # accepted through pyscrun.sockets.
    if loopback_only:
        server = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        try:
            server.bind(("127.0.0.1", port))
        except OSError:
            server.close()
            raise
        return server
    try:
        server = _socket.socket(_socket.AF_INET6, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        server.setsockopt(_socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY, 0)
        address: tuple[str, int] = ("::", port)
    except OSError:
        server = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        address = ("0.0.0.0", port)
    try:
        server.bind(address)
    except OSError:
        server.close()
        raise
    return server


def listen(port_range: tuple[int, int] | None, loopback_only: bool = False) -> _socket.socket:
    """A listening socket on every address of this host (or on loopback alone, for
    agents on this machine), on a free port of the range (any free port without one)."""
    if port_range is None:
        ports = [0]
    else:
        import random

        ports = list(range(port_range[0], port_range[1] + 1))
        random.shuffle(ports)
    for port in ports:
        try:
            server = _bound(port, loopback_only)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                continue
            raise ChannelError(f"cannot listen on port {port}: {err.strerror}") from None
        _keep_alive(server)
        server.listen(BACKLOG)
        return server
    assert port_range is not None
    raise ChannelError(f"no free port in {port_range[0]}-{port_range[1]} to listen on")


def port_of(server: _socket.socket) -> int:
    return int(server.getsockname()[1])


def launch_host(env: dict[str, str]) -> str:
    """The host srun was started on, as Slurm tells a task of its step: the address
    slurmd saw srun come from (the one its own I/O connects to). '' outside a step."""
    return env.get("SLURM_SRUN_COMM_HOST") or env.get("SLURM_LAUNCH_NODE_IPADDR") or ""


def dial(host: str, port: int, timeout: float) -> _socket.socket:
    """A connection to host's port, trying each of its addresses in turn (as the socket
    module's create_connection, which the agent does without)."""
    # An ASCII name as bytes: getaddrinfo encodes a str with the idna codec, whose import
    # (with re and unicodedata) would cost the node agent 2 ms before its first dial.
    name: str | bytes = host.encode() if host.isascii() else host
    failure: OSError | None = None
    try:
        addresses = _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM)
    except OSError as err:
        failure = err
        addresses = []
    for family, kind, proto, _, address in addresses:
        conn = _socket.socket(family, kind, proto)
        try:
            conn.settimeout(timeout)
            conn.connect(address)
        except OSError as err:
            conn.close()
            failure = err
            continue
        conn.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        _keep_alive(conn)
        return conn
    why = (failure.strerror or str(failure)) if failure is not None else "no address"
    raise ChannelError(f"cannot reach {host} port {port}: {why}")
