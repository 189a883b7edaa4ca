"""Simulator speed as the number of jobs grows (not a test: prints what it measures).

Each case is the two-jobs pair replicated N/2 times, every pair on its own 1 Gb/s link, run with
MLTCP-Reno for a fixed number of iterations. Reported: simulated seconds per wall second, slots
(steps) per second, and packets per second (bytes sent / MSS over wall time).

    python bench/bench_sim.py [--jobs 2,10,100,1000] [--iterations 10]
"""
from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from mltcp.scenario import from_dict
from mltcp.sim.engine import simulate


def pairs(n_jobs: int, iterations: int):
    return from_dict({
        "name": f"bench-{n_jobs}", "iterations": iterations, "warmup_iterations": 1,
        "links": [{"name": "link", "count": max(2, n_jobs // 2), "rate_gbps": 1.0, "delay_us": 50, "buffer_bdp": 4.0}],
        "jobs": [{"name": "job", "count": n_jobs, "share": 2, "stagger_ms": 0.5, "compute_ms": 20,
                  "bytes": 2_500_000, "path": ["link{g}"]}],
    }, f"<bench {n_jobs}>")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default="2,10,100,1000")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--cc", default="mltcp-reno")
    a = ap.parse_args()
    t = Table(title=f"simulator speed ({a.cc}, {a.iterations} iterations per job)")
    for c in ("jobs", "simulated s", "wall s", "sim s / wall s", "slots / s", "packets / s", "iterations / s"):
        t.add_column(c, justify="right")
    for n in (int(x) for x in a.jobs.split(",")):
        sc = pairs(n, a.iterations)
        w0 = time.perf_counter()
        r = simulate(sc, a.cc)
        wall = time.perf_counter() - w0
        t.add_row(str(n), f"{r.sim_time:.3f}", f"{wall:.2f}", f"{r.sim_time / wall:.3f}", f"{r.steps / wall:,.0f}",
                  f"{r.bytes_sent / sc.mss / wall:,.0f}", f"{len(r.records) / wall:,.1f}")
    Console().print(t)


if __name__ == "__main__":
    main()
