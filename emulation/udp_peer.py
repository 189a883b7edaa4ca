"""Userspace-transport peer for emulation: a job's sender/receiver over ``mltcp.traffic.transport``
(MLTCP shim over UDP, congestion control from :mod:`mltcp.cc`: reno, cubic, dcqcn, mltcp-*).

Same command line and JSON-lines output as :mod:`mltcp.emulation.kernel_peer`, so the runner
treats both alike: ``python -m mltcp.emulation.udp_peer recv|send ...``.
"""
from __future__ import annotations

import time

import typer

from .peer_io import (JITTER, SEED, STRAGGLER_DELAY_S, STRAGGLER_PROB, check_send_mode, emit as _emit,
                      run_iterations, start_at)

app = typer.Typer(add_completion=False, help="Userspace MLTCP transport peer (runs inside emulated hosts).")


@app.command()
def recv(port: int = typer.Option(..., help="UDP port to listen on"),
         t0: float = typer.Option(0.0, help="epoch the run's times are relative to"),
         bulk: bool = typer.Option(False, help="exit 1 s after the data stops (bulk runs)"),
         run: str = typer.Option("", help="run tag (only marks the process as part of a run)")):
    """Receive and acknowledge until killed (or, with --bulk, until idle for 1 s)."""
    from mltcp.traffic.transport.receiver import Receiver
    with Receiver(bind=("0.0.0.0", port)) as r:
        _emit({"type": "listening", "port": port})
        r.serve(idle_exit=1.0 if bulk else None)
        _emit({"type": "receiver", "flows": r.summary()})


@app.command()
def send(host: str = typer.Option(..., help="receiver address"),
         port: int = typer.Option(...),
         job: str = typer.Option("job0"),
         job_id: int = typer.Option(0, help="job id carried in the MLTCP shim"),
         cc: str = typer.Option("reno", help="reno | cubic | dcqcn | mltcp-reno | mltcp-cubic | mltcp-dcqcn"),
         iterations: int = typer.Option(0),
         nbytes: int = typer.Option(0, "--bytes"),
         compute_s: float = typer.Option(0.0),
         t0: float = typer.Option(0.0, help="epoch of the run (< 0: read it from stdin after a ready line)"),
         start_offset_s: float = typer.Option(0.0),
         line_rate_mbps: float = typer.Option(0.0, help="line rate (scales DCQCN's parameters)"),
         bulk_s: float = typer.Option(0.0, help="bulk mode: send for this many seconds"),
         nic_rate_mbps: float = typer.Option(0.0, help="pace at this NIC line rate (0: unpaced bursts)"),
         min_rto_s: float = typer.Option(0.2, help="minimum retransmission timeout (the scenario's min_rto)"),
         idle_restart: bool = typer.Option(True, "--idle-restart/--no-idle-restart",
                                           help="halve the window per RTO idle (slow_start_after_idle)"),
         jitter: float = JITTER,
         straggler_prob: float = STRAGGLER_PROB,
         straggler_delay_s: float = STRAGGLER_DELAY_S,
         seed: int = SEED,
         run: str = typer.Option("", help="run tag (only marks the process as part of a run)")):
    """Run the job's iterations (or a bulk transfer) over the userspace transport."""
    from mltcp.traffic.transport.transport import UdpTransport
    check_send_mode("udp_peer", iterations, nbytes, bulk_s)
    line = line_rate_mbps * 1e6 / 8 if line_rate_mbps > 0 else None
    if min_rto_s <= 0:
        raise SystemExit("udp_peer send: --min-rto-s must be > 0")
    with UdpTransport(f"{host}:{port}", cc=cc, job_id=job_id, line_rate=line, timeout=120.0,
                      min_rto=min_rto_s, idle_restart=idle_restart,
                      nic_rate=nic_rate_mbps * 1e6 / 8 if nic_rate_mbps > 0 else None) as tr:
        t0 = start_at(t0, start_offset_s)
        if bulk_s > 0:
            first = time.time() - t0
            end_at = time.time() + bulk_s
            sent, it = 0, 0
            while time.time() < end_at:
                sent += tr.send_iteration(4 << 20, it).bytes
                it += 1
            _emit({"type": "bulk", "bytes": sent, "first": first, "last": time.time() - t0})
            _emit({"type": "summary", "job": job, "cc": cc, "bytes": sent, "retrans": tr.retransmits})
            return
        run_iterations(tr, job, iterations, nbytes, compute_s, t0, jitter, straggler_prob, straggler_delay_s, seed)
        _emit({"type": "summary", "job": job, "cc": cc, "retrans": tr.retransmits, "flows": _flow_stats(tr)})


def _flow_stats(tr) -> list[dict]:
    """Per-flow transport counters (timeouts, tail-loss probes, idle restarts, ...), the MLTCP
    tracker's learned bytes per iteration and this process's CPU seconds, for diagnosis."""
    import resource
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out = []
    for f, d in zip(tr.flows, tr.stats()):
        trk = getattr(f.st, "tracker", None)
        if trk is not None:
            d["tracker_bytes_per_iter"] = float(trk.bytes_per_iter[0])
            d["tracker_iterations"] = int(trk.iteration[0])
        d["cpu_s"] = round(ru.ru_utime + ru.ru_stime, 3)
        out.append(d)
    return out


if __name__ == "__main__":
    app()
