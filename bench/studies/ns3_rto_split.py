"""Split an `mltcp simulate SCENARIO --compare --json --engine both` report into ns-3 iterations
with and without a retransmission timeout, and print each arm's ns-3 avg / p99 / median over both
(docs/tuning.md, "Issue 10's must-show on the ns-3 engine").

The `both` report holds, per job, the per-iteration fast/ns-3 ratios; the fast engine is
deterministic, so each ns-3 iteration = the fast engine's same-seed iteration (from
`mltcp simulate SCENARIO --compare --out DIR`, records-<cc>.csv) / its ratio. An iteration longer
than ``--rto-s`` (default 0.15 s: the scenarios' minimum RTO is 0.2 s) counts as one with an RTO.
Prints what it computes; asserts nothing.

    mltcp simulate scenarios/two-jobs.toml --compare --json --engine both > both.json
    mltcp simulate scenarios/two-jobs.toml --compare --out fast/
    python bench/studies/ns3_rto_split.py both.json fast/
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np


def fast_iterations(path: Path) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            out.setdefault(r["job"], {})[int(r["iteration"])] = float(r["end"]) - float(r["start"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("both", type=Path, help="the --engine both JSON report")
    ap.add_argument("fast_dir", type=Path, help="the fast engine's --out directory (same scenario and seed)")
    ap.add_argument("--rto-s", type=float, default=0.15)
    a = ap.parse_args()
    rep = json.loads(a.both.read_text())
    warm = rep["fast"]["warmup_iterations"]
    arms = {}
    for cc, r in rep["ratios"].items():
        fast = fast_iterations(a.fast_dir / f"records-{cc}.csv")
        ns3 = np.array(
            [fast[j][i] / x for j, v in r["jobs"].items() for i, x in enumerate(v["iteration_ratio"]) if i >= warm]
        )
        slow = ns3 > a.rto_s
        arms[cc] = ns3, slow
        print(
            f"{cc}: ns-3 avg {ns3.mean() * 1e3:.1f} ms, p99 {np.percentile(ns3, 99) * 1e3:.1f}, median "
            f"{np.median(ns3) * 1e3:.1f}; {int(slow.sum())} of {len(ns3)} steady iterations > {a.rto_s} s; "
            f"without them avg {ns3[~slow].mean() * 1e3:.1f}, p99 {np.percentile(ns3[~slow], 99) * 1e3:.1f}"
        )
    base, mltcp = list(arms)
    (b, bs), (m, ms) = arms[base], arms[mltcp]
    print(
        f"ns-3 speedup avg / p99: {b.mean() / m.mean():.3f} / {np.percentile(b, 99) / np.percentile(m, 99):.3f}; "
        f"median {np.median(b) / np.median(m):.3f}; without the RTO iterations "
        f"{b[~bs].mean() / m[~ms].mean():.3f} / {np.percentile(b[~bs], 99) / np.percentile(m[~ms], 99):.3f}"
    )


if __name__ == "__main__":
    main()
