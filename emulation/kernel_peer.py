"""Kernel-TCP peer for emulation baselines: a job's sender and receiver over Linux TCP sockets.

Runs inside Mininet hosts as ``python -m mltcp.emulation.kernel_peer recv|send ...``.

The sender reads one JSON job document (``send --spec FILE|-``, see
:func:`mltcp.emulation.peer_io.read_send_doc`). Iteration mode (the job's ``iterations``): per
iteration, sleep the compute time, then send the iteration on one long-lived connection in the
one kernel-TCP iteration protocol (:mod:`mltcp.traffic.kernel.transport`: a 16-byte header, the
bytes, the receiver's 16-byte answer once it holds them all, which ends the iteration). Bulk mode
(``bulk_s`` D): send for D seconds; the receiver reports goodput.

Every record is one JSON line on stdout; times are seconds since ``--t0`` (a wall-clock epoch
shared by all peers of a run). The congestion control is set per socket with TCP_CONGESTION.
"""

from __future__ import annotations

import socket
import time

import typer

from mltcp.traffic.kernel.maps import MapsError
from mltcp.traffic.kernel.transport import (
    KernelTransport,
    TransportError,
    pacing_rate_for_link,
    serve_iterations,
    tcp_info,
)

from .peer_io import emit as _emit
from .peer_io import RUN_OPT, SPEC_OPT, T0_OPT, read_send_doc, run_iterations, start_at

# The kernel sender's fields of the job document, beyond peer_io.SEND_FIELDS: ``mark`` tells the
# kernel MLTCP each iteration's start through the BPF program's map (default: its idle-gap detection).
KERNEL_FIELDS = {"mark": (bool, False)}

app = typer.Typer(add_completion=False, help="Kernel-TCP job peer (runs inside emulated hosts).")


@app.command()
def recv(
    port: int = typer.Option(..., help="TCP port to listen on"),
    t0: float = T0_OPT,
    bulk: bool = typer.Option(False, help="count bytes until EOF and report goodput"),
    run: str = RUN_OPT,
):
    """Accept one connection; answer each iteration (or count bulk bytes) until the peer closes."""
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(1)
    _emit({"type": "listening", "port": port})
    conn, _ = ls.accept()
    ls.close()
    with conn:
        if not bulk:
            try:
                serve_iterations(conn)
            except TransportError as e:
                raise SystemExit(f"kernel_peer recv: {e}") from None
            return
        buf = bytearray(1 << 20)
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


def _connect(host: str, port: int, cc: str, mark: bool, timeout_s: float, pacing_mbit: float | None) -> KernelTransport:
    """The job's connection, retried until the receiver listens (it starts at the same time)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return KernelTransport(host, port, cc=cc, mark=mark, pacing_mbit=pacing_mbit)
        except (TransportError, MapsError) as e:
            raise SystemExit(f"kernel_peer send: {e}") from None
        except OSError as e:
            if time.monotonic() > deadline:
                raise SystemExit(f"kernel_peer send: cannot connect to {host}:{port}: {e}") from None
            time.sleep(0.05)


@app.command()
def send(spec: str = SPEC_OPT, run: str = RUN_OPT):
    """Connect to the receiver and run the job's iterations (or a bulk transfer)."""
    job, o = read_send_doc(spec, "kernel_peer", KERNEL_FIELDS)
    cc, nic = o["cc"], o["nic_rate_mbps"]
    tr = _connect(o["host"], o["port"], cc, o["mark"], 10.0, pacing_rate_for_link(nic) if nic > 0 else None)
    try:
        if o["bulk_s"] > 0:
            start_at(o["t0"], job.job.start_offset_s)
            payload = memoryview(bytes(1 << 16))
            end_at = time.time() + o["bulk_s"]
            sent = 0
            while time.time() < end_at:
                sent += tr.sock.send(payload)
            tr.sock.shutdown(socket.SHUT_WR)
            tr.sock.recv(1)  # wait for the receiver's close so everything was delivered
            _emit(
                {
                    "type": "summary",
                    "job": job.label,
                    "cc": cc,
                    "bytes": sent,
                    "retrans": tcp_info(tr.sock)["total_retrans"],
                }
            )
            return
        try:
            run_iterations(tr, job, o["t0"])
        except TransportError as e:
            raise SystemExit(f"kernel_peer send: {e}") from None
        _emit({"type": "summary", "job": job.label, "cc": cc, "retrans": tcp_info(tr.sock)["total_retrans"]})
    finally:
        tr.close()  # half-close, wait for the receiver's end: everything was delivered


if __name__ == "__main__":
    app()
