"""Trace the retransmission timeouts (and tail-loss probes) of one simulator run: which flow, which
iteration, where in it (bytes_ratio), and the flows' cwnd / ssthresh / in flight / held bytes and
the bottleneck queue in the milliseconds before. Prints what it saw; nothing is asserted.

    python bench/studies/trace_rto.py two-jobs --seed 7                       # MLTCP, the shipped default
    python bench/studies/trace_rto.py two-jobs --seed 7 --cc reno             # the baseline
    python bench/studies/trace_rto.py two-jobs --seed 7 --config '{"mltcp.slope": 2.0}' --before-ms 3
    python bench/studies/trace_rto.py cubic-two-jobs --rate-mbps 50 --dilate --iterations 30 --chunk-us 2000
        # the scenario `mltcp emulate ... --rate-mbps 50 --dilate --iterations 30` simulates for sim_vs_emu

It runs the compiled loop in short pauses (``--chunk-us``; pausing does not change the run: the
records are checked against an unpaused run) and snapshots the state after each pause.
"""

from __future__ import annotations

import argparse
import collections
import json


from mltcp import compare, tracker as trk, tune_eval
from mltcp.cc.base import CWND, SSTHRESH
from mltcp.sim import engine, state
from mltcp.sim.engine import simulate


def traced(sc, cc_name: str, chunk_s: float, keep: int, window: tuple[float, float] | None = None):
    """simulate(sc, cc_name) with a snapshot of the state every chunk_s; returns (result, events),
    each event = (kind, flow, snapshots of the last ``keep`` pauses, the snapshot after it); with
    ``window`` = (t0, t1) in seconds, also every snapshot in it (``res.timeline``)."""
    orig = engine._run
    events, hist, timeline = [], collections.deque(maxlen=keep), []

    def snap(v, t):
        F = len(v["flow_job"])
        mss = v["mss"]
        return {
            "t": t,
            "q": float(v["ls"][0, engine.Q] / mss),
            "drops": float(v["fs"][state.F_TOT_DROP] / mss),
            "flows": [
                {
                    "job": int(v["flow_job"][f]),
                    "it": int(v["it_idx"][v["flow_job"][f]]),
                    "phase": int(v["phase"][v["flow_job"][f]]),
                    "cwnd": v["tcp"][f, CWND] / mss,
                    "ssth": v["tcp"][f, SSTHRESH] / mss,
                    "inflight": v["inflight"][f] / mss,
                    "to_send": v["to_send"][f] / mss,
                    "hole": v["lr"][f, state.LR_HOLE] / mss,
                    "rto_at": v["lr"][f, state.LR_RTO_AT],
                    "probe": v["lr"][f, state.LR_PROBE],
                    "probed": v["lr"][f, state.LR_PROBED],
                    "r": trk.ratio(v["tr"], f) if v["mltcp"] else float("nan"),
                    "srtt_ms": v["srtt"][f] * 1e3,
                }
                for f in range(F)
            ],
        }

    def run(t_end, *groups):
        cfg, cc, topo, links, fl, jb, fb, rc, trace, fs, ks = groups
        v = {
            **cfg._asdict(),
            **cc._asdict(),
            **topo._asdict(),
            **links._asdict(),
            **fl._asdict(),
            **jb._asdict(),
            "trace": trace,
            "fs": fs,
            "ks": ks,
        }
        t = float(v["fs"][state.F_T])
        while True:
            rto0, tlp0 = v["fs"][state.F_TOT_RTO], v["fs"][state.F_TOT_TLP]
            held0 = v["lr"][:, state.LR_HOLE].copy()
            t = min(t + chunk_s, t_end)
            orig(t, *groups)
            s = snap(v, float(v["fs"][state.F_T]))
            held = [f for f in range(len(held0)) if held0[f] == 0 and v["lr"][f, state.LR_HOLE] > 0]
            if held:  # a loss now waits for a timer (no later segment can reveal it)
                events.append(("HOLD", held, list(hist), s))
            for kind, n0, n1 in (("RTO", rto0, v["fs"][state.F_TOT_RTO]), ("TLP", tlp0, v["fs"][state.F_TOT_TLP])):
                if n1 > n0:
                    # the flows whose held bytes went out in this pause
                    fl = [f for f in range(len(held0)) if held0[f] > 0 and v["lr"][f, state.LR_HOLE] == 0]
                    events.append((kind, fl, list(hist), s))
            hist.append(s)
            if window and window[0] <= s["t"] <= window[1]:
                timeline.append(s)
            if v["ks"][state.I_STATUS] != state.PAUSED or t >= t_end:
                return

    engine._run = run
    try:
        res = simulate(sc, cc_name, progress=lambda *_: None)
    finally:
        engine._run = orig
    res.timeline = timeline
    return res, events


def fmt(s, flows):
    out = [f"  t={s['t'] * 1e3:9.3f} ms  queue {s['q']:5.1f} seg  drops {s['drops']:6.0f}"]
    for f in flows:
        x = s["flows"][f]
        out.append(
            f"      flow {f} (job {x['job']} it {x['it']} {'comm' if x['phase'] == 1 else 'idle'}) r={x['r']:.3f} "
            f"cwnd {x['cwnd']:6.2f} ssth {x['ssth']:6.2f} inflight {x['inflight']:5.1f} to_send {x['to_send']:7.1f} "
            f"hole {x['hole']:4.1f} rto_at {x['rto_at'] * 1e3:9.3f} probe {x['probe']:.0f}/{x['probed']:.0f} "
            f"srtt {x['srtt_ms']:.3f} ms"
        )
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cc", help="default: the scenario's MLTCP variant")
    ap.add_argument(
        "--config", default="{}", help="JSON of [mltcp] / [cc_params] keys (as bench/studies/tune_mustshow.py)"
    )
    ap.add_argument("--chunk-us", type=float, default=100.0)
    ap.add_argument("--before-ms", type=float, default=2.0, help="how much of the state before each event to print")
    ap.add_argument("--every", type=int, default=1, help="print every Nth snapshot before an event")
    ap.add_argument("--timeline", help="T0,T1 in ms: print every snapshot in between instead of the events")
    ap.add_argument("--summary", action="store_true", help="one line per event: the flow and the other flows' windows")
    ap.add_argument("--rate-mbps", type=float, help="rescaled as `mltcp emulate --rate-mbps` (emulation.plan.rescale)")
    ap.add_argument(
        "--dilate", action="store_true", help="with --rate-mbps: time dilation, as `mltcp emulate --dilate`"
    )
    ap.add_argument("--iterations", type=int, help="per job, as `mltcp emulate --iterations`")
    a = ap.parse_args()
    case = tune_eval.make_cases([a.scenario], [a.seed])[0]
    sc = case.scenario(json.loads(a.config))
    if a.rate_mbps is not None or a.iterations is not None:
        from mltcp.emulation.plan import rescale

        sc = rescale(sc, a.rate_mbps, None, a.iterations, None, a.dilate)
    cc = a.cc or compare.mltcp_name(case.scenario().cc)
    keep = max(1, int(a.before_ms * 1e3 / a.chunk_us))
    win = tuple(float(x) * 1e-3 for x in a.timeline.split(",")) if a.timeline else None
    res, events = traced(sc, cc, a.chunk_us * 1e-6, keep, win)
    plain = simulate(sc, cc)
    same = [(r.job, r.iteration, r.end) for r in res.records] == [(r.job, r.iteration, r.end) for r in plain.records]
    print(
        f"{sc.name} seed {a.seed} {cc}: {res.timeouts} RTOs, {res.probes} TLPs, drops {res.drops:.0f}; "
        f"paused run identical to the unpaused one: {same}"
    )
    slow = sorted(res.records, key=lambda r: r.start - r.end)[:3]
    print(
        "longest iterations: "
        + ", ".join(
            f"{r.job} it {r.iteration} {(r.end - r.start) * 1e3:.1f} ms (comm {(r.end - r.comm_start) * 1e3:.1f} ms)"
            for r in slow
        )
    )
    if win:
        flows = range(len(res.timeline[0]["flows"])) if res.timeline else []
        for s in res.timeline[:: a.every]:
            print(fmt(s, flows))
        return
    if a.summary:
        for kind, fl, hist, after in events:
            peak = max((s["q"] for s in hist), default=0.0)
            line = [f"{kind:4s} t={after['t'] * 1e3:9.3f} ms flows {fl} peak queue {peak:4.1f} seg:"]
            for f, x in enumerate(after["flows"]):
                b = hist[0]["flows"][f] if hist else x
                line.append(
                    f"[{f}: job {x['job']} it {x['it']} {'comm' if x['phase'] == 1 else 'idle'} r {x['r']:.2f} "
                    f"cwnd {b['cwnd']:.1f}->{x['cwnd']:.1f} ssth {x['ssth']:.1f} hole {x['hole']:.1f}]"
                )
            print(" ".join(line))
        return
    for kind, fl, hist, after in events:
        f0 = fl[0] if fl else 0
        print(
            f"\n{kind} on flow(s) {fl} at ~{after['t'] * 1e3:.3f} ms (job {after['flows'][f0]['job']}, "
            f"iteration {after['flows'][f0]['it']}); before:"
        )
        flows = range(len(after["flows"]))
        for s in hist[:: a.every]:
            print(fmt(s, flows))
        print("  after:\n" + fmt(after, flows))


if __name__ == "__main__":
    main()
