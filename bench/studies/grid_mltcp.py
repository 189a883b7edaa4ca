"""A small grid over a scenario's [mltcp] / [cc_params] keys (as `mltcp tune` writes them): per
configuration, over the seeds, the geometric-mean avg / p99 speedups, the worst seed's, the
MLTCP runs' retransmission timeouts per seed, the worst drops ratio and the worst interleave
iteration. Prints what it measured, one line (or one JSON object) per configuration. The grid
changes the keys it names and keeps the scenario's others: on a shipped scenario those of the
shipped default, on a tuned experiment (tuned/NAME) those of the table tuned on it.

    python bench/studies/grid_mltcp.py tuned/two-jobs --seeds 1,2,3,4,5 \\
        --grid '{"mltcp.slope": [2, 4], "mltcp.decrease_at_end": [0.2, 0.35]}' --base '{"mltcp.cap": 3}'
"""

from __future__ import annotations

import argparse
import itertools
import json
import math

import numpy as np

from mltcp import compare, metrics, tune_eval
from mltcp.sim.engine import simulate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--grid", default="{}", help="JSON: key -> list of values (cartesian product)")
    ap.add_argument("--base", default="{}", help="JSON: keys set in every configuration")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    grid, base_cfg = json.loads(a.grid), json.loads(a.base)
    cases = tune_eval.make_cases([a.scenario], seeds)
    sc0s = [c.scenario() for c in cases]
    base_runs = [simulate(sc, sc.cc) for sc in sc0s]
    bases = [metrics.summary(r.records, sc.warmup_iterations) for r, sc in zip(base_runs, sc0s)]
    keys = list(grid)
    for vals in itertools.product(*(grid[k] for k in keys)):
        cfg = {**base_cfg, **dict(zip(keys, vals))}
        rows = []
        for case, sc0, b, br in zip(cases, sc0s, bases, base_runs):
            sc = case.scenario(cfg)
            ml = simulate(sc, compare.mltcp_name(sc0.cc))
            m = metrics.summary(ml.records, sc.warmup_iterations)
            rows.append(
                {
                    "avg": b["avg_iter_s"] / m["avg_iter_s"],
                    "p99": b["p99_iter_s"] / m["p99_iter_s"],
                    "rto": ml.timeouts,
                    "drops": ml.drops,
                    "base_drops": br.drops,
                    "inter": metrics.interleaved_at(ml.records, compare.link_sharing(sc)),
                }
            )
        g = lambda k: math.exp(np.mean([math.log(r[k]) for r in rows]))
        inter = [r["inter"] for r in rows]
        out = {
            "config": cfg,
            "avg": g("avg"),
            "p99": g("p99"),
            "worst_avg": min(r["avg"] for r in rows),
            "worst_p99": min(r["p99"] for r in rows),
            "rto": [r["rto"] for r in rows],
            "drops": [round(r["drops"]) for r in rows],
            "drops_ratio_worst": max((r["drops"] + 1) / (r["base_drops"] + 1) for r in rows),
            "inter_worst": None if None in inter else max(inter),
        }
        if a.json:
            print(json.dumps(out), flush=True)
        else:
            print(
                f"{json.dumps(dict(zip(keys, vals)))}: avg {out['avg']:.3f} ({out['worst_avg']:.3f}) p99 "
                f"{out['p99']:.3f} "
                f"({out['worst_p99']:.3f}) RTOs {sum(out['rto'])} on "
                f"{sum(1 for x in out['rto'] if x)}/{len(rows)} "
                f"seeds{'' if len(rows) > 10 else ' ' + str(out['rto'])} drops x{out['drops_ratio_worst']:.2f} "
                f"(mean {np.mean(out['drops']):.0f}) inter {out['inter_worst']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
