"""Kernel-TCP peer for emulation baselines: a job's sender and receiver over Linux TCP sockets.

Runs inside Mininet hosts as ``python -m mltcp.emulation.kernel_peer recv|send ...``.

The sender reads one JSON job document (``send --spec FILE|-``, see
:func:`mltcp.emulation.peer_io.read_send_doc`). Iteration mode (the job's ``iterations``): per iteration, sleep the compute time, then send a
12-byte header (iteration uint32, nbytes uint64) and ``nbytes`` of payload on one long-lived
connection; the receiver answers with the iteration number once all bytes arrived, which ends the
iteration. Bulk mode (``bulk_s`` D): send for D seconds; the receiver reports goodput.

Every record is one JSON line on stdout; times are seconds since ``--t0`` (a wall-clock epoch
shared by all peers of a run). The congestion control is set per socket with TCP_CONGESTION.
"""
from __future__ import annotations

import socket
import struct
import time

import typer

from mltcp.traffic.kernel.transport import tcp_info

from .peer_io import emit as _emit
from .peer_io import read_send_doc, run_iterations, start_at

HDR = struct.Struct("!IQ")
ACK = struct.Struct("!I")
CHUNK = 1 << 16
# The kernel sender's fields of the job document, beyond peer_io.SEND_FIELDS: ``mark`` tells the
# kernel MLTCP each iteration's start through the BPF program's map (default: its idle-gap detection).
KERNEL_FIELDS = {"mark": (bool, False)}

app = typer.Typer(add_completion=False, help="Kernel-TCP job peer (runs inside emulated hosts).")


def tcp_info_retrans(sock: socket.socket) -> int:
    """tcpi_total_retrans from TCP_INFO (the one parser: mltcp.traffic.kernel.transport.tcp_info)."""
    return tcp_info(sock)["total_retrans"]


def _recv_exact(conn: socket.socket, n: int, buf: bytearray) -> int:
    got = 0
    view = memoryview(buf)
    while got < n:
        r = conn.recv_into(view, min(len(buf), n - got))
        if r == 0:
            return got
        got += r
    return got


class IterationSocket:
    """One iteration = a 12-byte header, the bytes, and the receiver's answer, on one connection
    (the ``send_iteration`` interface of :func:`mltcp.traffic.driver.run_job`). With ``marks`` (an
    open :class:`mltcp.traffic.kernel.maps.VariantMaps`) each iteration first tells the kernel MLTCP
    that it starts (a map write keyed by the local port: microseconds)."""

    def __init__(self, sock: socket.socket, marks=None):
        self.sock = sock
        self.payload = memoryview(bytes(CHUNK))
        self.ack = bytearray(ACK.size)
        self.marks = marks
        self.port = sock.getsockname()[1]

    @property
    def retransmits(self) -> int:   # run_job takes the per-iteration difference
        return tcp_info_retrans(self.sock)

    def send_iteration(self, nbytes: int, it: int) -> None:
        s = self.sock
        if self.marks is not None:
            self.marks.mark(self.port)
        s.sendall(HDR.pack(it, nbytes))
        left = nbytes
        while left > 0:
            n = min(left, CHUNK)
            s.sendall(self.payload[:n])
            left -= n
        if _recv_exact(s, ACK.size, self.ack) < ACK.size or ACK.unpack(self.ack)[0] != it:
            raise SystemExit(f"kernel_peer send: bad or missing ack for iteration {it}")


@app.command()
def recv(port: int = typer.Option(..., help="TCP port to listen on"),
         t0: float = typer.Option(0.0, help="epoch the run's times are relative to"),
         bulk: bool = typer.Option(False, help="count bytes until EOF and report goodput"),
         run: str = typer.Option("", help="run tag (only marks the process as part of a run)")):
    """Accept one connection; answer each iteration (or count bulk bytes) until the peer closes."""
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(1)
    _emit({"type": "listening", "port": port})
    conn, _ = ls.accept()
    ls.close()
    buf = bytearray(1 << 20)
    if bulk:
        total, first, last = 0, None, None
        while True:
            r = conn.recv_into(buf)
            if r == 0:
                break
            now = time.time() - t0
            first = now if first is None else first
            last = now
            total += r
        _emit({"type": "bulk", "bytes": total, "first": first, "last": last})
        conn.close()
        return
    hdr = bytearray(HDR.size)
    while True:
        if _recv_exact(conn, HDR.size, hdr) < HDR.size:
            break
        it, nbytes = HDR.unpack(hdr)
        left = nbytes
        while left > 0:
            r = conn.recv_into(buf, min(len(buf), left))
            if r == 0:
                raise SystemExit(f"kernel_peer recv: connection closed inside iteration {it}")
            left -= r
        conn.sendall(ACK.pack(it))
    conn.close()


def _connect(host: str, port: int, cc: str, timeout_s: float, pacing_mbit: float = 0.0) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        except OSError as e:
            s.close()
            raise SystemExit(f"kernel_peer send: TCP_CONGESTION {cc!r} refused: {e}") from None
        if pacing_mbit > 0:
            from mltcp.traffic.kernel.transport import set_pacing
            set_pacing(s, pacing_mbit)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            s.connect((host, port))
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise SystemExit(f"kernel_peer send: cannot connect to {host}:{port}") from None
            time.sleep(0.05)


@app.command()
def send(spec: str = typer.Option("-", help="the job document (JSON; peer_io.read_send_doc): a file, or - for "
                                           "one line of stdin"),
         run: str = typer.Option("", help="run tag (only marks the process as part of a run)")):
    """Connect to the receiver and run the job's iterations (or a bulk transfer)."""
    job, o = read_send_doc(spec, "kernel_peer", KERNEL_FIELDS)
    cc = o["cc"]
    marks = None
    if o["mark"]:
        from mltcp.traffic.kernel.maps import VARIANTS, MapsError, VariantMaps
        variant = cc.removeprefix("bpf_")
        if variant not in VARIANTS:
            raise SystemExit(f"kernel_peer send: mark needs an MLTCP congestion control, not {cc!r}")
        try:
            marks = VariantMaps(variant)
        except (MapsError, OSError) as e:
            raise SystemExit(f"kernel_peer send: mark: cannot open the maps of {variant}: {e}") from None
    from mltcp.traffic.kernel.transport import pacing_rate_for_link
    nic = o["nic_rate_mbps"]
    s = _connect(o["host"], o["port"], cc, timeout_s=10.0, pacing_mbit=pacing_rate_for_link(nic) if nic > 0 else 0.0)
    conn = IterationSocket(s, marks)
    if o["bulk_s"] > 0:
        start_at(o["t0"], job.start_offset_s)
        end_at = time.time() + o["bulk_s"]
        sent = 0
        while time.time() < end_at:
            sent += s.send(conn.payload)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # wait for the receiver's close so everything was delivered
        _emit({"type": "summary", "job": job.label, "cc": cc, "bytes": sent, "retrans": tcp_info_retrans(s)})
        s.close()
        return
    run_iterations(conn, job, o["t0"])
    _emit({"type": "summary", "job": job.label, "cc": cc, "retrans": tcp_info_retrans(s)})
    s.close()


if __name__ == "__main__":
    app()
