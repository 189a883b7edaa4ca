"""Why ecn-by-progress does not interleave plain DCQCN hosts (docs/in-network.md), measured in the simulator:

1. a grid over the policy's table (bands x ecn_scale_lo x ecn_scale_hi) against the plain ECN switch;
2. the interleaved schedule itself: job B started one compute phase after A (already interleaved) with
   the policy off and on, and the usual 1 ms offset;
3. the rate a DCQCN flow sends at while it is alone on the link (no overlap) in the 1 ms-offset run,
   against the link rate: after each overlap the rate has to climb back by additive increase.

    python bench/studies/innet_dcqcn_why.py [--scenario innet-dcqcn-two-jobs] [--seeds 1,2,3] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools

import numpy as np

from mltcp import compare, scenario
from mltcp.sim.engine import simulate


def run(sc, policy: str, seed: int, offset_s: float | None = None, trace: float | None = None, **table):
    jobs = (
        sc.jobs
        if offset_s is None
        else [sc.jobs[0]] + [dataclasses.replace(j, start_offset_s=offset_s) for j in sc.jobs[1:]]
    )
    s = dataclasses.replace(sc, seed=seed, jobs=jobs, switch=dataclasses.replace(sc.switch, name=policy, **table))
    r = simulate(s, sc.cc, trace_interval=trace)
    return r, compare.side(s, sc.cc, r.records, r.drops, r.ecn_marks)


def fmt(m) -> str:
    return (
        f"avg {m['avg_iter_s'] * 1e3:6.2f} ms, p99 {m['p99_iter_s'] * 1e3:6.2f} ms, drops {m['drops']:.0f}, "
        f"marks {m['ecn_marks']:.0f}, interleaved at {m['converged_at_iteration']}"
    )


def alone_rate(r, sc) -> tuple[float, float]:
    """Median and 90th percentile of a job's send rate (b/s) over trace bins where it is the only one sending,
    after the warm-up."""
    t0 = min(x.end for x in r.records if x.iteration == sc.warmup_iterations)
    rate = r.trace_rate[r.trace_t >= t0]
    alone = rate[((rate > 0).sum(axis=1) == 1)].max(axis=1)
    return float(np.median(alone)), float(np.percentile(alone, 90))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="innet-dcqcn-two-jobs")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--quick", action="store_true", help="a 2 x 2 x 2 grid instead of 2 x 4 x 4")
    a = ap.parse_args(argv)
    sc = scenario.load(a.scenario)
    seeds = [int(x) for x in a.seeds.split(",")]
    link_gbps = min(l.rate_bps for l in sc.links.values()) / 1e9
    base = {s: run(sc, "off", s)[1] for s in seeds}
    for s in seeds:
        print(f"plain ECN switch, seed {s}: {fmt(base[s])}")
    print("1. grid (speed-up over the plain switch: avg / p99, worst seed first; drops and marks summed over seeds)")
    lo_v, hi_v = ((0.05, 1.0), (1.0, 100.0)) if a.quick else ((0.01, 0.1, 0.5, 1.0), (1.0, 4.0, 25.0, 100.0))
    for bands, lo, hi in itertools.product((4, 16), lo_v, hi_v):
        if lo > hi:
            continue
        ms = {s: run(sc, "ecn-by-progress", s, bands=bands, ecn_scale_lo=lo, ecn_scale_hi=hi)[1] for s in seeds}
        sa = sorted(base[s]["avg_iter_s"] / ms[s]["avg_iter_s"] for s in seeds)
        sp = sorted(base[s]["p99_iter_s"] / ms[s]["p99_iter_s"] for s in seeds)
        print(
            f"  bands {bands:2d} lo {lo:5g} hi {hi:5g}: avg {'/'.join(f'{x:.3f}' for x in sa)}x, "
            f"p99 {'/'.join(f'{x:.2f}' for x in sp)}x, drops {sum(base[s]['drops'] for s in seeds):.0f} -> "
            f"{sum(ms[s]['drops'] for s in seeds):.0f}, marks {sum(base[s]['ecn_marks'] for s in seeds):.0f} -> "
            f"{sum(ms[s]['ecn_marks'] for s in seeds):.0f}, interleaved at "
            f"{[ms[s]['converged_at_iteration'] for s in seeds]}",
            flush=True,
        )
    print("2. the interleaved schedule (B starts one compute phase after A), seed", seeds[0])
    comp = sc.jobs[0].compute_s
    for pol in ("off", "ecn-by-progress"):
        print(f"  {pol:16s} offset {comp * 1e3:g} ms: {fmt(run(sc, pol, seeds[0], offset_s=comp)[1])}")
    print(f"3. a job's send rate while alone on the {link_gbps:g} Gb/s link (after the warm-up), seed", seeds[0])
    for pol in ("off", "ecn-by-progress"):
        r, _ = run(sc, pol, seeds[0], trace=0.5e-3)
        med, p90 = alone_rate(r, sc)
        print(f"  {pol:16s}: median {med / 1e9:.2f} Gb/s, p90 {p90 / 1e9:.2f} Gb/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
