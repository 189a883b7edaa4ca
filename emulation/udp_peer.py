"""Userspace-transport peer for emulation: a job's sender/receiver over ``mltcp.traffic.transport``
(MLTCP shim over UDP, congestion control from :mod:`mltcp.cc`: reno, cubic, dcqcn, mltcp-*).

Same command line (the sender reads one JSON job document, ``send --spec FILE|-``) and JSON-lines
output as :mod:`mltcp.emulation.kernel_peer`, so the runner treats both alike:
``python -m mltcp.emulation.udp_peer recv|send ...``.
"""

from __future__ import annotations

import time

import typer

from .peer_io import emit as _emit
from .peer_io import RUN_OPT, SPEC_OPT, T0_OPT, read_send_doc, run_iterations, start_at

# The userspace sender's fields of the job document, beyond peer_io.SEND_FIELDS.
UDP_FIELDS = {
    "line_rate_mbps": ((int, float), 0.0),  # line rate (scales DCQCN's parameters)
    "min_rto_s": ((int, float), 0.2),  # minimum retransmission timeout (the scenario's min_rto)
    "idle_restart": (bool, True),  # halve the window per RTO idle (slow_start_after_idle)
    "cc_params": (dict, {}),  # DCQCN's and the MLTCP hook's settings (the scenario's tables)
    "pfc_ifname": (str, ""),  # lossless link: obey PAUSE/PFC frames arriving on this interface
    "reo_wnd_s": ((int, float), -1.0),  # RACK's reordering window (< 0: a quarter of the min RTT)
}

app = typer.Typer(add_completion=False, help="Userspace MLTCP transport peer (runs inside emulated hosts).")


@app.command()
def recv(
    port: int = typer.Option(..., help="UDP port to listen on"),
    t0: float = T0_OPT,
    bulk: bool = typer.Option(False, help="exit 1 s after the data stops (bulk runs)"),
    run: str = RUN_OPT,
):
    """Receive and acknowledge until killed (or, with --bulk, until idle for 1 s)."""
    from mltcp.traffic.transport.receiver import Receiver

    with Receiver(bind=("0.0.0.0", port)) as r:
        _emit({"type": "listening", "port": port})
        r.serve(idle_exit=1.0 if bulk else None)
        _emit({"type": "receiver", "flows": r.summary()})


@app.command()
def send(spec: str = SPEC_OPT, run: str = RUN_OPT):
    """Run the job's iterations (or a bulk transfer) over the userspace transport."""
    from mltcp.traffic.transport.transport import UdpTransport

    job, o = read_send_doc(spec, "udp_peer", UDP_FIELDS)
    if o["min_rto_s"] <= 0:
        raise SystemExit("udp_peer send: min_rto_s must be > 0")
    line = o["line_rate_mbps"] * 1e6 / 8 if o["line_rate_mbps"] > 0 else None
    nic = o["nic_rate_mbps"] * 1e6 / 8 if o["nic_rate_mbps"] > 0 else None
    pause = None
    if o["pfc_ifname"]:
        from mltcp.traffic.pause import PauseListener

        if not line:
            raise SystemExit("udp_peer send: pfc_ifname needs line_rate_mbps (a pause lasts quanta x 512 bit times)")
        pause = PauseListener(o["pfc_ifname"], line * 8)
    reo = o["reo_wnd_s"] if o["reo_wnd_s"] >= 0 else None
    with UdpTransport(
        f"{o['host']}:{o['port']}",
        cc=o["cc"],
        job_id=job.job_id,
        line_rate=line,
        timeout=120.0,
        cc_params=o["cc_params"],
        pause=pause,
        reo_wnd=reo,
        min_rto=o["min_rto_s"],
        idle_restart=o["idle_restart"],
        nic_rate=nic,
    ) as tr:
        if o["bulk_s"] > 0:
            t0 = start_at(o["t0"], job.job.start_offset_s)
            first = time.time() - t0
            end_at = time.time() + o["bulk_s"]
            sent, it = 0, 0
            while time.time() < end_at:
                sent += tr.send_iteration(4 << 20, it).bytes
                it += 1
            _emit({"type": "bulk", "bytes": sent, "first": first, "last": time.time() - t0})
            _emit({"type": "summary", "job": job.label, "cc": o["cc"], "bytes": sent, "retrans": tr.retransmits})
            return
        run_iterations(tr, job, o["t0"])
        flows = _flow_stats(tr)
        if pause is not None:
            for d in flows:
                d.update(pause_frames=pause.frames, paused_s=round(pause.paused_s, 4))
            pause.close()
        _emit({"type": "summary", "job": job.label, "cc": o["cc"], "retrans": tr.retransmits, "flows": flows})


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
