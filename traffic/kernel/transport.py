"""Kernel TCP transport for the job driver: one TCP connection per job, congestion control chosen
per socket (reno, cubic, mltcp_reno, mltcp_cubic). The one kernel-TCP iteration protocol: the
``mltcp kernel`` experiment and the emulation's kernel peers (mltcp.emulation.kernel_peer) both
speak it.

Wire format, per iteration: the sender writes a 16-byte header (magic u32, iteration u32,
nbytes u64, network order) and ``nbytes`` of payload; the receiver reads them all and answers with
16 bytes (iteration u64, first 8 bytes of the payload's BLAKE2b digest or zeros), so
:meth:`KernelTransport.send_iteration` returns only once the peer holds every byte.
"""

from __future__ import annotations

import hashlib
import socket
import struct
import threading
import time
from dataclasses import dataclass

from .netns import in_netns

HDR = struct.Struct("!IIQ")
ACK = struct.Struct("!Q8s")
MAGIC = 0x4D4C5443  # "MLTC"
CHUNK = 1 << 20
KERNEL_CCS = ("reno", "cubic", "dctcp", "mltcp_reno", "mltcp_cubic")  # dctcp: bpf_dctcp where the kernel has none

# struct tcp_info: 8 bytes of u8 fields, then u32 fields in this order (linux/tcp.h).
_TI_FIELDS = (
    "rto",
    "ato",
    "snd_mss",
    "rcv_mss",
    "unacked",
    "sacked",
    "lost",
    "retrans",
    "fackets",
    "last_data_sent",
    "last_ack_sent",
    "last_data_recv",
    "last_ack_recv",
    "pmtu",
    "rcv_ssthresh",
    "rtt",
    "rttvar",
    "snd_ssthresh",
    "snd_cwnd",
    "advmss",
    "reordering",
    "rcv_rtt",
    "rcv_space",
    "total_retrans",
)
_TI = struct.Struct("=8B%dI" % len(_TI_FIELDS))


class TransportError(RuntimeError):
    pass


def tcp_info(sock: socket.socket) -> dict[str, int]:
    """The fields of TCP_INFO up to tcpi_total_retrans (rtt in us, cwnd in segments), and the
    state, ca_state and options bytes."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TI.size)
    v = _TI.unpack(raw[: _TI.size].ljust(_TI.size, b"\0"))
    d = dict(zip(_TI_FIELDS, v[8:]))
    d["state"], d["ca_state"], d["options"] = v[0], v[1], v[5]  # options: TCPI_OPT_* (ECN = 8)
    return d


SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)
WIRE_PER_PAYLOAD = 1514 / 1448  # Ethernet frame bytes per payload byte of a full TCP segment


def pacing_rate_for_link(link_mbit: float) -> float:
    """The TCP pacing rate (Mbit/s of payload: the kernel paces skb->len, the segment's data) at
    which a sender's frames fill a link of ``link_mbit`` (frames) exactly: its NIC's rate."""
    return link_mbit / WIRE_PER_PAYLOAD


def set_pacing(sock: socket.socket, mbit: float) -> None:
    """Pace the socket at ``mbit`` Mbit/s at most (SO_MAX_PACING_RATE). This also switches on the
    kernel's internal TCP pacing for any congestion control (no fq qdisc needed): the socket then
    sends like a host whose NIC runs at that rate, not in bursts at memory speed."""
    if not mbit > 0:
        raise ValueError(f"pacing rate must be > 0 Mbit/s, got {mbit}")
    rate = min(int(mbit * 1e6 / 8), 0xFFFFFFFF - 1)
    sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, rate)


def congestion(sock: socket.socket) -> str:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()


def set_congestion(sock: socket.socket, cc: str) -> None:
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    except OSError as e:
        hint = " (is it loaded? `mltcp kernel load`)" if cc.startswith("mltcp_") else ""
        raise TransportError(f"cannot select congestion control {cc!r}: {e.strerror}{hint}") from None


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise TransportError(f"connection closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def payload_pattern(seed: int = 1) -> bytes:
    """1 MiB of deterministic pseudo-random bytes (so a corrupted stream shows in the digest)."""
    out = bytearray()
    h = hashlib.blake2b(seed.to_bytes(8, "big"))
    while len(out) < CHUNK:
        h.update(b"x")
        out += h.digest()
    return bytes(out[:CHUNK])


def serve_iterations(conn: socket.socket, verify: bool = False, on_iteration=None) -> int:
    """The receiving side of the iteration protocol on one connection, until the peer closes
    between iterations: read each header and its bytes, answer with the iteration (and with
    ``verify`` the payload's digest). ``on_iteration(nbytes)`` after each; returns the bytes received.
    A bad header or a close inside an iteration raises TransportError."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    total = 0
    while True:
        try:
            hdr = _recv_exact(conn, HDR.size)
        except TransportError:
            return total  # peer closed between iterations
        magic, iteration, nbytes = HDR.unpack(hdr)
        if magic != MAGIC:
            raise TransportError(f"bad header magic {magic:#x}")
        h = hashlib.blake2b(digest_size=8) if verify else None
        left = nbytes
        while left:
            k = conn.recv_into(view, min(left, CHUNK))
            if k == 0:
                raise TransportError(f"connection closed with {left} bytes of iteration {iteration} missing")
            if h:
                h.update(view[:k])
            left -= k
        total += nbytes
        if on_iteration is not None:
            on_iteration(nbytes)
        conn.sendall(ACK.pack(iteration, h.digest() if h else b"\0" * 8))


class Receiver:
    """Accepts connections and acknowledges each complete iteration. One thread per connection."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, ns: str | None = None, verify: bool = False, cc: str | None = None
    ):
        self.verify = verify
        with in_netns(ns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if cc:
            set_congestion(self.sock, cc)
        self.sock.bind((host, port))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.received: dict[int, int] = {}  # connection number -> payload bytes received
        self.errors: list[str] = []
        self._stop = False
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        n = 0
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn, n), daemon=True)
            t.start()
            self._threads.append(t)
            n += 1

    def _serve(self, conn: socket.socket, n: int) -> None:
        self.received[n] = 0

        def got(nbytes: int) -> None:
            self.received[n] += nbytes

        try:
            with conn:
                serve_iterations(conn, self.verify, got)
        except (OSError, TransportError) as e:
            self.errors.append(str(e))

    def close(self) -> None:
        self._stop = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        for t in self._threads:
            t.join(timeout=5)
        for c in self._conns:  # peers that never closed: unblock and drop
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@dataclass
class IterationStats:
    iteration: int
    nbytes: int
    start: float
    end: float
    retransmits: int  # tcpi_total_retrans increase during the iteration (read by run_job)
    cwnd: int  # cwnd (segments) at the end of the iteration


class KernelTransport:
    """One job's TCP connection. ``send_iteration`` blocks until the receiver has every byte.

    ``mark=True`` tells the BPF program explicitly that each iteration starts (mark map keyed by
    the local port) instead of relying on its idle-gap detection (the default). ``pacing_mbit``
    paces the socket at that rate (its NIC's, :func:`set_pacing`); None: unpaced.
    """

    def __init__(
        self,
        host: str,
        port: int,
        cc: str = "mltcp_reno",
        ns: str | None = None,
        verify: bool = False,
        mark: bool = False,
        connect_timeout: float = 10.0,
        pacing_mbit: float | None = None,
    ):
        if cc.removeprefix("bpf_") not in KERNEL_CCS:
            raise TransportError(f"unknown congestion control {cc!r}; choose from {', '.join(KERNEL_CCS)}")
        if mark and not cc.removeprefix("bpf_").startswith("mltcp_"):
            raise TransportError(f"mark needs an MLTCP congestion control, not {cc!r}")
        self.cc, self.verify = cc, verify
        with in_netns(ns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            set_congestion(self.sock, cc)
            if pacing_mbit:
                set_pacing(self.sock, pacing_mbit)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.settimeout(connect_timeout)
            self.sock.connect((host, port))
            self.sock.settimeout(None)
        except BaseException:
            self.sock.close()
            raise
        self.local_port = self.sock.getsockname()[1]
        self._maps = None
        if mark:
            from .maps import VariantMaps

            self._maps = VariantMaps(cc.removeprefix("bpf_"))
        self._pattern = memoryview(payload_pattern())
        self.history: list[IterationStats] = []

    def send_iteration(self, nbytes: int, iteration: int) -> IterationStats:
        if nbytes < 0:
            raise ValueError("nbytes must be >= 0")
        before = tcp_info(self.sock)["total_retrans"]
        start = time.monotonic()
        if self._maps:
            self._maps.mark(self.local_port)
        h = hashlib.blake2b(digest_size=8) if self.verify else None
        # MSG_MORE: the header leaves with the payload, not as a lone segment (which the BPF
        # tracker could take for an iteration of its own if the payload followed after a pause).
        self.sock.sendall(HDR.pack(MAGIC, iteration & 0xFFFFFFFF, nbytes), socket.MSG_MORE if nbytes else 0)
        left = nbytes
        while left:
            chunk = self._pattern[: min(left, CHUNK)]
            self.sock.sendall(chunk)
            if h:
                h.update(chunk)
            left -= len(chunk)
        it, digest = ACK.unpack(_recv_exact(self.sock, ACK.size))
        if it != iteration & 0xFFFFFFFF:
            raise TransportError(f"receiver acknowledged iteration {it}, expected {iteration}")
        if h and digest != h.digest():
            raise TransportError(f"iteration {iteration}: payload digest mismatch")
        info = tcp_info(self.sock)
        st = IterationStats(
            iteration, nbytes, start, time.monotonic(), info["total_retrans"] - before, info["snd_cwnd"]
        )
        self.history.append(st)
        return st

    def info(self) -> dict[str, int]:
        return tcp_info(self.sock)

    def close(self, timeout: float = 2.0) -> None:
        """Half-close, wait for the receiver's end of stream, then drop the socket at once
        (SO_LINGER 0: every byte was acknowledged by the application already), so no orphaned
        socket keeps a BPF congestion control alive after unload."""
        if self._maps:
            self._maps.close()
            self._maps = None
        try:
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.settimeout(timeout)
            while self.sock.recv(4096):
                pass
        except OSError:
            pass
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.sock.close()
