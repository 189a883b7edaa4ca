"""Jobs joining and leaving under the online switch: per pair of jobs that share the link for a
while, the iteration from which their communication stops overlapping, and the switch's changes.

    python bench/studies/join_leave.py                      # scenarios/join-leave.toml, seeds 1-3
    python bench/studies/join_leave.py --seeds 1-5 --config '{"mltcp.adaptive": false}'

Per arm (the base, MLTCP with the shipped default, and MLTCP with --config if given) and seed it
prints, for each pair of jobs that run at the same time, the pair's first iteration (counted from
the later job's start) after which no iteration of either overlaps the other by more than 10 % for
as long as both run (or "never"), and the avg and p99 iteration time of each job.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from mltcp import metrics, sweep
from mltcp.sim.engine import simulate
from mltcp.suite import parse_seeds


def pair_interleaved_at(records, a: str, b: str, threshold: float = 0.10) -> int | None:
    """The first iteration of the later of jobs a and b from which, while both run, neither overlaps
    the other by more than ``threshold``; None if that never holds for the last 5 shared ones."""
    ra = [r for r in records if r.job == a]
    rb = [r for r in records if r.job == b]
    start, end = max(ra[0].start, rb[0].start), min(ra[-1].end, rb[-1].end)
    both = [r for r in ra + rb if r.start >= start and r.end <= end]
    if not both:
        return None
    ov = metrics.overlap_fractions(both)
    later = b if rb[0].start >= ra[0].start else a
    its = sorted(i for (j, i) in ov if j == later)
    bad_t = [r.start for r in both if ov[(r.job, r.iteration)] > threshold]
    clean = [
        i for i in its if not bad_t or next(r for r in both if r.job == later and r.iteration == i).start > max(bad_t)
    ]
    if len(clean) < 5:
        return None
    first_iter = min(r.iteration for r in both if r.job == later)
    return clean[0] - first_iter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", nargs="?", default="join-leave")
    ap.add_argument("--seeds", default="1-3")
    ap.add_argument("--config", default=None, help="a third arm: MLTCP with these settings, JSON")
    a = ap.parse_args()
    arms = [("base", None, False), ("default", None, True)]
    if a.config:
        arms.append(("config", json.loads(a.config), True))
    for seed in parse_seeds(a.seeds):
        for label, cfg, ml in arms:
            sc = sweep.build(sweep.Task(a.scenario, "x", seed, config=cfg))
            r = simulate(sc, f"mltcp-{sc.cc}" if ml else sc.cc)
            names = [j.name for j in sc.jobs]
            pairs = []
            for i, x in enumerate(names):
                for y in names[i + 1 :]:
                    rx = [q for q in r.records if q.job == x]
                    ry = [q for q in r.records if q.job == y]
                    if max(rx[0].start, ry[0].start) < min(rx[-1].end, ry[-1].end):
                        at = pair_interleaved_at(r.records, x, y)
                        pairs.append(f"{x}+{y} at {at if at is not None else 'never'}")
            jobs = []
            for n in names:
                d = np.array([q.duration for q in r.records if q.job == n][sc.warmup_iterations :]) * 1e3
                jobs.append(f"{n} {d.mean():.1f}/{np.percentile(d, 99):.1f} ms")
            print(f"seed {seed} {label:8s} {'; '.join(pairs):32s} | {', '.join(jobs)} | drops {r.drops:.0f}")


if __name__ == "__main__":
    main()
