"""Issue 10's must-show table in the simulator: each scenario under its base algorithm and under
MLTCP with a configuration (a JSON object of [mltcp] / [cc_params] keys, as `mltcp tune` writes
them, over the scenario's own tables), over several seeds. Prints per seed and the geometric means;
nothing is asserted. A shipped scenario has no [mltcp] table ('{}': the shipped default); its tuned
experiment tuned/NAME (scenarios/tuned/NAME.toml) carries the table tuned on it.

    python bench/studies/tune_mustshow.py --seeds 1,2,3,4,5 two-jobs='{}' tuned/two-jobs='{}'
    python bench/studies/tune_mustshow.py tuned/cubic-two-jobs='{"mltcp.boundary": "mark"}'
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from mltcp import compare, metrics, tune_eval
from mltcp.sim.engine import simulate


def run(name: str, cfg: dict, seeds: list[int]) -> dict:
    rows = []
    for seed in seeds:
        case = tune_eval.make_cases([name], [seed])[0]
        sc0 = case.scenario()
        base = simulate(sc0, sc0.cc)
        sc = case.scenario(cfg)
        ml = simulate(sc, compare.mltcp_name(sc0.cc))
        sb, sm = metrics.summary(base.records, sc.warmup_iterations), metrics.summary(ml.records, sc.warmup_iterations)
        sig = "marks" if sc0.cc == "dcqcn" else "drops"
        bs, ms = (base.ecn_marks, ml.ecn_marks) if sig == "marks" else (base.drops, ml.drops)
        comp = {j.name: j.compute_s for j in sc.jobs}
        # a perfect interleave: each MLTCP iteration = its own compute phase (jitter, stragglers
        # included) + the job's communication alone (bytes / bottleneck rate + base RTT)
        alone = {j.name: sc.ideal_iter_s(j) - j.compute_s for j in sc.jobs}
        ideal = float(
            np.mean([r.comm_start - r.start + alone[r.job] for r in metrics.steady(ml.records, sc.warmup_iterations)])
        )
        rows.append(
            {
                "seed": seed,
                "avg": sb["avg_iter_s"] / sm["avg_iter_s"],
                "p99": sb["p99_iter_s"] / sm["p99_iter_s"],
                "sig": sig,
                "base_sig": float(bs),
                "mltcp_sig": float(ms),
                "conv": metrics.converged_at(ml.records, compare.link_sharing(sc)),
                "inter": metrics.interleaved_at(ml.records, compare.link_sharing(sc)),
                "base_conv": metrics.converged_at(base.records, compare.link_sharing(sc)),
                "reform": metrics.reform_after_stragglers(ml.records, comp, sc.warmup_iterations),
                "bound": sb["avg_iter_s"] / ideal,
                "p99_bound": sb["p99_iter_s"] / ideal,
                "base_rto": base.timeouts,
                "mltcp_rto": ml.timeouts,
                "mltcp_tlp": ml.probes,
            }
        )
    g = lambda k: math.exp(np.mean([math.log(r[k]) for r in rows]))
    reform = sum((r["reform"] for r in rows), [])
    return {
        "scenario": name,
        "config": cfg,
        "rows": rows,
        "avg": g("avg"),
        "p99": g("p99"),
        "bound": g("bound"),
        "p99_bound": g("p99_bound"),
        "worst_avg": min(r["avg"] for r in rows),
        "worst_p99": min(r["p99"] for r in rows),
        "sig_ratio_worst": max((r["mltcp_sig"] + 1) / (r["base_sig"] + 1) for r in rows),
        "conv_worst": max((r["conv"] if r["conv"] is not None else 10**6) for r in rows),
        "inter_worst": max((r["inter"] if r["inter"] is not None else 10**6) for r in rows),
        "reform": {
            "n": len(reform),
            "mean": float(np.mean(reform)) if reform else None,
            "max": max(reform) if reform else None,
            "share_le3": float(np.mean([m <= 3 for m in reform])) if reform else None,
        },
    }


def markdown_row(r: dict) -> str:
    """One markdown row. Columns: scenario, avg (worst), p99 (worst), avg / p99 bound,
    drops/marks base -> MLTCP (worst ratio), interleaved by (worst seed)."""
    never = lambda v: v if v < 10**6 else "never"
    rows = r["rows"]
    return (
        f"| {r['scenario']} | {r['avg']:.2f}x ({r['worst_avg']:.2f}) | {r['p99']:.2f}x ({r['worst_p99']:.2f}) | "
        f"{r['bound']:.2f}x / {r['p99_bound']:.2f}x | {rows[0]['sig']} {np.mean([x['base_sig'] for x in rows]):.0f} -> "
        f"{np.mean([x['mltcp_sig'] for x in rows]):.0f} (x{r['sig_ratio_worst']:.2f}) | "
        f"{never(r['inter_worst'])} / {never(r['conv_worst'])} |"
    )


def per_seed_rows(r: dict) -> list[str]:
    """Markdown rows, one per seed. Columns: scenario, seed, bound avg / p99, avg / p99, avg / bound,
    interleaved at, drops base -> MLTCP, RTOs base / MLTCP (MLTCP TLPs)."""
    out = []
    for x in r["rows"]:
        inter = "never" if x["inter"] is None else x["inter"]
        out.append(
            f"| {r['scenario']} | {x['seed']} | {x['bound']:.3f}x / {x['p99_bound']:.3f}x | {x['avg']:.3f}x / "
            f"{x['p99']:.3f}x | {x['avg'] / x['bound']:.3f} | {inter} | {x['sig']} {x['base_sig']:.0f} -> "
            f"{x['mltcp_sig']:.0f} | {x['base_rto']} / {x['mltcp_rto']} ({x['mltcp_tlp']}) |"
        )
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="one markdown table row per scenario")
    ap.add_argument("--per-seed", action="store_true", help="one markdown table row per scenario and seed")
    ap.add_argument("cases", nargs="+", help="scenario=JSON-config")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    for c in a.cases:
        name, _, cfg = c.partition("=")
        r = run(name, json.loads(cfg or "{}"), seeds)
        if a.json:
            print(json.dumps(r, default=str), flush=True)
            continue
        if a.markdown:
            print(markdown_row(r), flush=True)
            continue
        if a.per_seed:
            print("\n".join(per_seed_rows(r)), flush=True)
            continue
        conv = r["conv_worst"] if r["conv_worst"] < 10**6 else "never"
        inter = r["inter_worst"] if r["inter_worst"] < 10**6 else "never"
        print(
            f"{name:18s} avg {r['avg']:.3f}x (worst {r['worst_avg']:.3f}) p99 {r['p99']:.3f}x (worst "
            f"{r['worst_p99']:.3f}) "
            f"{r['rows'][0]['sig']} "
            f"{np.mean([x['base_sig'] for x in r['rows']]):.0f}->{np.mean([x['mltcp_sig'] for x in r['rows']]):.0f} "
            f"(worst ratio {r['sig_ratio_worst']:.2f}) converged by {conv} interleaved by {inter} bound "
            f"{r['bound']:.3f}x "
            f"reform {r['reform']}  cfg {json.dumps(r['config'])}",
            flush=True,
        )


if __name__ == "__main__":
    main()
