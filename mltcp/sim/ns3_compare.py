"""Fast engine vs ns-3 on the same scenario: per-job, per-iteration ratios (pure functions).

A ratio is fast / ns-3: 1.0 means the fast engine reproduced ns-3; 1.05 means it is 5 % slower.
"""

from __future__ import annotations

import math

from .. import metrics
from ..records import IterationRecord


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return 1.0 if a == 0 else math.inf
    return a / b


def job_ratios(fast: list[IterationRecord], ns3: list[IterationRecord], job: str, warmup: int) -> dict:
    f = sorted((r for r in fast if r.job == job), key=lambda r: r.iteration)
    n = sorted((r for r in ns3 if r.job == job), key=lambda r: r.iteration)
    per_iter = [round(_ratio(a.duration, b.duration), 4) for a, b in zip(f, n)]
    steady_ratios = sorted(per_iter[warmup:])
    sf, sn = metrics.summary(f, warmup), metrics.summary(n, warmup)
    df, dn = sum(r.drops for r in f), sum(r.drops for r in n)
    return {
        "iteration_ratio": per_iter,
        "avg_fast_s": sf["avg_iter_s"],
        "avg_ns3_s": sn["avg_iter_s"],
        "avg_ratio": round(_ratio(sf["avg_iter_s"], sn["avg_iter_s"]), 4),
        "avg_all_ratio": round(_ratio(sf["avg_iter_all_s"], sn["avg_iter_all_s"]), 4),
        # robust to a few outliers (e.g. ns-3 iterations that waited for a 200 ms RTO)
        "median_iteration_ratio": steady_ratios[len(steady_ratios) // 2] if steady_ratios else math.nan,
        "drops_fast": round(df, 1),
        "drops_ns3": round(dn, 1),
        "drops_ratio": round(_ratio(df, dn), 4),
    }


def ratios(sc, fast_results: dict, ns3_results: dict) -> dict:
    """{algorithm: {"jobs": {job: job_ratios}, "avg_ratio": ..., "drops_ratio": ...}} for every
    algorithm run by both engines."""
    out = {}
    for algo in fast_results:
        if algo not in ns3_results:
            continue
        f, n = fast_results[algo], ns3_results[algo]
        jobs = {j.name: job_ratios(f.records, n.records, j.name, sc.warmup_iterations) for j in sc.jobs}
        sf = metrics.summary(f.records, sc.warmup_iterations)
        sn = metrics.summary(n.records, sc.warmup_iterations)
        out[algo] = {
            "jobs": jobs,
            "avg_fast_s": sf["avg_iter_s"],
            "avg_ns3_s": sn["avg_iter_s"],
            "avg_ratio": round(_ratio(sf["avg_iter_s"], sn["avg_iter_s"]), 4),
            "drops_fast": round(f.drops, 1),
            "drops_ns3": round(n.drops, 1),
            "drops_ratio": round(_ratio(f.drops, n.drops), 4),
            "wall_fast_s": round(f.wall_time, 3),
            "wall_ns3_s": round(n.wall_time, 3),
        }
    return out


def ratio_table(sc, rat: dict, max_iters: int = 12):
    from rich.table import Table

    t = Table(title=f"{sc.name}: fast / ns-3 (after {sc.warmup_iterations} warm-up iterations)", title_justify="left")
    for c in (
        "cc",
        "job",
        "avg fast (ms)",
        "avg ns-3 (ms)",
        "avg ratio",
        "drops fast",
        "drops ns-3",
        f"per-iteration ratio (first {max_iters})",
    ):
        t.add_column(c, justify="left" if c in ("cc", "job") or c.startswith("per") else "right")
    for algo, r in rat.items():
        for job, x in r["jobs"].items():
            t.add_row(
                algo,
                job,
                f"{x['avg_fast_s'] * 1e3:.2f}",
                f"{x['avg_ns3_s'] * 1e3:.2f}",
                f"{x['avg_ratio']:.3f}",
                f"{x['drops_fast']:.0f}",
                f"{x['drops_ns3']:.0f}",
                " ".join(f"{v:.2f}" for v in x["iteration_ratio"][:max_iters]),
            )
    return t
