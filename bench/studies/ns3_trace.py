"""Trace one fidelity case in both engines, side by side (diagnosis for docs/ns3.md "Fidelity").

Per job and iteration: duration in each engine, drops, and each flow's cwnd (segments) when the
iteration's communication starts, its maximum during it and ssthresh at its end; RTO times.
The fast engine samples its windows every ``--sample-us`` (default 100 us); ns-3 records every
cwnd change (CongestionWindow trace source). Prints what it measured; asserts nothing.

    python bench/studies/ns3_trace.py ns3-dumbbell-100m cubic
    python bench/studies/ns3_trace.py ns3-dumbbell-1g-shallow reno --npz /tmp/trace.npz
    python bench/studies/ns3_trace.py ns3-dumbbell-1g-deep reno --host-jitter 1 --seed 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mltcp import metrics  # noqa: E402
from mltcp.scenario import load  # noqa: E402
from mltcp.sim import engine, ns3_engine  # noqa: E402


def _at(t, v, x):
    """Value of the step series (t, v) at time x (the last change at or before x)."""
    i = np.searchsorted(t, x, side="right") - 1
    return v[max(i, 0)] if len(v) else float("nan")


def _window_stats(t, cw, ss, recs, flow_of_job, mss, lag=0.0):
    """Per iteration: cwnd as the communication starts (after the restart after idle: ``lag`` is the
    fast engine's sampling interval, whose sample at comm_start precedes it), its maximum, ssthresh
    at the end."""
    out = {}
    for r in recs:
        m = (t >= r.comm_start) & (t <= r.end)
        f = flow_of_job[r.job]
        c0 = _at(t, cw[f], r.comm_start + lag) / mss
        cmax = (cw[f][m].max() / mss) if m.any() else c0
        s1 = _at(t, ss[f], r.end) / mss
        out[(r.job, r.iteration)] = (c0, cmax, s1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("case")
    ap.add_argument("cc")
    ap.add_argument("--sample-us", type=float, default=100.0)
    ap.add_argument("--npz", type=Path)
    ap.add_argument("--seed", type=int, help="the scenario's seed instead of its own")
    ap.add_argument("--host-jitter", type=float, default=0.0, help="ns-3 Ns3Options.host_jitter (0: as shipped)")
    ap.add_argument(
        "--ns3-recovery",
        choices=sorted(ns3_engine.RECOVERY_TYPES),
        default="prr-rfc",
        help="ns-3's fast recovery (Ns3Options.recovery)",
    )
    a = ap.parse_args()
    sc = load(a.case if a.case.endswith(".toml") else str(ROOT / "scenarios" / f"{a.case}.toml"))
    if a.seed is not None:
        sc.seed = a.seed
    mss = float(sc.mss)
    f = engine.simulate(sc, a.cc, cwnd_sample_s=a.sample_us * 1e-6)
    n = ns3_engine.run(
        sc, a.cc, options=ns3_engine.Ns3Options(trace_cwnd=True, host_jitter=a.host_jitter, recovery=a.ns3_recovery)
    )
    F = (f.cwnd_trace.shape[1] - 1) // 3
    ft = f.cwnd_trace[:, 0]
    fcw = [f.cwnd_trace[:, 1 + i] for i in range(F)]
    fss = [f.cwnd_trace[:, 1 + F + i] for i in range(F)]
    nt = [tr[0] for tr in n.ns3_stats["cwnd_trace"]]
    job_flow = {j.name: i for i, j in enumerate(sc.jobs)}  # one flow per job in these cases
    fs = _window_stats(ft, fcw, fss, f.records, job_flow, mss, lag=a.sample_us * 1e-6)
    ns_ = {}
    for r in n.records:
        i = job_flow[r.job]
        t, cw, ss = n.ns3_stats["cwnd_trace"][i]
        ns_.update(_window_stats(t, {i: cw}, {i: ss}, [r], job_flow, mss))
    frec = {(r.job, r.iteration): r for r in f.records}
    nrec = {(r.job, r.iteration): r for r in n.records}
    print(
        f"{a.case} {a.cc}: fast RTOs {f.timeouts}, ns-3 RTOs {n.ns3_stats['timeouts']} at "
        f"{[[round(x, 3) for x in v] for v in n.ns3_stats['rto_times']]}; drops fast {f.drops:.0f} ns-3 {n.drops:.0f}; "
        f"ns-3 fast recoveries {n.ns3_stats['fast_recoveries']}, retransmitted segments "
        f"{n.ns3_stats['retransmissions']}"
    )
    ov_f, ov_n = metrics.overlap_fractions(f.records), metrics.overlap_fractions(n.records)
    print(f"overlap fast {ov_f}  ns-3 {ov_n}")
    print(
        "job it | fast: start comm(ms) drops cwnd0 cwndmax ssth_end | ns-3: start comm(ms) drops cwnd0 cwndmax ssth_end"
    )
    for key in sorted(frec, key=lambda k: (k[1], k[0])):
        if key not in nrec:
            continue
        r, q = frec[key], nrec[key]
        a0, b0 = fs[key], ns_[key]
        print(
            f"{key[0]:>3} {key[1]:>2} | {r.comm_start * 1e3:8.1f} {(r.end - r.comm_start) * 1e3:7.1f} {r.drops:5.0f} "
            f"{a0[0]:6.1f} {a0[1]:6.1f} {a0[2]:6.1f} | {q.comm_start * 1e3:8.1f} {(q.end - q.comm_start) * 1e3:7.1f} "
            f"{q.drops:5.0f} {b0[0]:6.1f} {b0[1]:6.1f} {b0[2]:6.1f}"
        )
    if a.npz:
        np.savez(a.npz, fast=f.cwnd_trace, **{f"ns3_{i}": tr for i, tr in enumerate(n.ns3_stats["cwnd_trace"])})
    del nt


if __name__ == "__main__":
    main()
