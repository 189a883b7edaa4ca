"""This process's TCP connections (gloo's pairs), and their congestion control.

gloo opens its sockets inside ``init_process_group``; they are found here from the process's own
file descriptors (``/proc/self/fd`` socket inodes matched against ``/proc/net/tcp``), so the
congestion control can be read and set on them afterwards (TCP_CONGESTION on an established
socket), and their local ports are what the kernel MLTCP's mark map is keyed by.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

TCP_STATES_ESTABLISHED = "01"
AVAILABLE = "/proc/sys/net/ipv4/tcp_available_congestion_control"
DEFAULT_CC = "/proc/sys/net/ipv4/tcp_congestion_control"


@dataclass(frozen=True)
class Conn:
    fd: int
    local_port: int
    remote_port: int


def parse_proc_net_tcp(text: str) -> dict[int, tuple[int, int]]:
    """inode -> (local port, remote port) of the established connections in /proc/net/tcp[6] text."""
    out = {}
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10 or f[3] != TCP_STATES_ESTABLISHED:
            continue
        out[int(f[9])] = (int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16))
    return out


def own_connections(exclude_ports: set[int] = frozenset()) -> list[Conn]:
    """Established TCP connections held by this process, except those whose local or remote port
    is in ``exclude_ports`` (e.g. the rendezvous store's)."""
    by_inode: dict[int, tuple[int, int]] = {}
    for path in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(path) as fh:
                by_inode.update(parse_proc_net_tcp(fh.read()))
        except FileNotFoundError:
            continue
    conns = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inode = int(target[8:-1])
            if inode in by_inode:
                lp, rp = by_inode[inode]
                if lp not in exclude_ports and rp not in exclude_ports:
                    conns.append(Conn(int(name), lp, rp))
    return sorted(conns, key=lambda c: c.fd)


def _borrow(fd: int) -> socket.socket:
    return socket.socket(fileno=fd)


def get_cc(fd: int) -> str:
    s = _borrow(fd)
    try:
        return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()
    finally:
        s.detach()


def set_cc(fd: int, name: str) -> None:
    s = _borrow(fd)
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
    finally:
        s.detach()


def set_pacing(fd: int, mbit: float) -> None:
    """Pace the socket at ``mbit`` Mbit/s (SO_MAX_PACING_RATE: the kernel's internal TCP pacing,
    as a host whose NIC runs at that rate)."""
    from mltcp.traffic.kernel.transport import set_pacing as _set

    s = _borrow(fd)
    try:
        _set(s, mbit)
    finally:
        s.detach()


def available_ccs() -> list[str]:
    with open(AVAILABLE) as fh:
        return fh.read().split()


def default_cc() -> str:
    with open(DEFAULT_CC) as fh:
        return fh.read().strip()


def kernel_name(cc: str, available: list[str]) -> str | None:
    """The name ``cc`` is registered under (a BPF struct_ops one may show as ``bpf_NAME``), or None."""
    for name in (cc, f"bpf_{cc}"):
        if name in available:
            return name
    return None
