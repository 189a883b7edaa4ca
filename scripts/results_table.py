#!/usr/bin/env python3
"""Print the README's "results across the built-in scenarios" table, measured now.

Runs what ``mltcp simulate NAME --compare --json`` runs for each scenario (seeded,
deterministic) and prints one Markdown row per scenario. Usage::

    python scripts/results_table.py [--seeds N] [NAME ...]

With ``--seeds N`` each scenario runs with its ``seed`` set to 1..N and the row shows the
range of the speedups over the seeds.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

from mltcp.cli import _algorithms, build_report, run_simulations
from mltcp.scenario import load

DEFAULT = ["two-jobs", "three-jobs", "circular", "straggler", "partial-compat", "cubic-two-jobs",
           "dcqcn-two-jobs", "dctcp-two-jobs", "dctcp-three-jobs", "paper-like", "resnet50-pair",
           "ring-allreduce", "thousand-jobs",
           "two-jobs-no-rack", "three-jobs-no-rack", "cubic-two-jobs-no-rack"]


def run(name: str, seed: int | None) -> dict:
    sc = load(name)
    if seed is not None:
        sc = dataclasses.replace(sc, seed=seed)
    return build_report(sc, run_simulations(sc, _algorithms(sc, None, True), quiet=True))


def span(vals: list[float], fmt: str) -> str:
    lo, hi = min(vals), max(vals)
    return fmt.format(lo) if abs(hi - lo) < 0.005 else f"{fmt.format(lo)}–{fmt.format(hi)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=DEFAULT)
    ap.add_argument("--seeds", type=int, default=0, help="run seeds 1..N (0: the scenario's own seed)")
    a = ap.parse_args()
    print("| scenario | base cc | speedup avg / p99 | interleaved at | drops base → MLTCP | ECN marks base → MLTCP |")
    print("|---|---|---|---|---|---|")
    for name in a.names:
        seeds = list(range(1, a.seeds + 1)) or [None]
        reps = []
        for s in seeds:
            reps.append(run(name, s))
            print(f"  {name} seed {s}: done", file=sys.stderr)
        b = reps[0]["baseline"]
        conv = [r["converged_at_iteration"] for r in reps]
        conv_s = ", ".join("never" if c is None else str(c) for c in conv)
        drops = " ; ".join(f"{int(r['baseline']['drops'])} → {int(r['mltcp']['drops'])}" for r in reps)
        marks = " ; ".join(f"{int(r['baseline']['ecn_marks'])} → {int(r['mltcp']['ecn_marks'])}" for r in reps)
        print(f"| `{name}` | {b['cc']} | {span([r['speedup_avg'] for r in reps], '{:.2f}')}x / "
              f"{span([r['speedup_p99'] for r in reps], '{:.2f}')}x | {conv_s} | {drops} | {marks} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
