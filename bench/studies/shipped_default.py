"""The shipped scenarios with and without their tuned ``[mltcp]`` tables: how much of each tuned
table's speedup the shipped default (the public F, no table) keeps, over seeds.

    python bench/studies/shipped_default.py                          # the scenarios the default must hold on, seeds 1-5
    python bench/studies/shipped_default.py two-jobs straggler --seeds 1-3

Per scenario and seed three runs: the base, MLTCP with the scenario's table, MLTCP with the table
removed (every other table as shipped). Prints per scenario the geometric means over the seeds of
the avg and p99 speedups over the base, both ways, and their ratio (untuned / tuned; the target
is >= 0.97), and the drops.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib

from mltcp import sweep
from mltcp.scenario import ScenarioError, resolve
from mltcp.suite import InputError, gmean, parse_seeds
from mltcp.tune_space import apply

SHIPPED = [
    "two-jobs",
    "three-jobs",
    "cubic-two-jobs",
    "dcqcn-two-jobs",
    "dctcp-two-jobs",
    "straggler",
    "partial-compat",
    "circular",
    "paper-slack",
    "resnet50-pair",
    "ring-allreduce",
]


def variants(name: str) -> tuple[dict, dict]:
    """The scenario's tables as shipped, and without its [mltcp] table."""
    raw = tomllib.loads(resolve(name).read_text())
    return raw, {k: v for k, v in raw.items() if k != "mltcp"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", default=SHIPPED)
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--config", default="{}", help="MLTCP settings for the untuned runs, JSON (mltcp.slope, ...)")
    a = ap.parse_args()
    try:
        seeds, config = parse_seeds(a.seeds), json.loads(a.config)
    except (InputError, json.JSONDecodeError) as e:
        ap.error(str(e))
    tasks, index, has_table = [], [], {}
    for name in a.scenarios:
        try:
            shipped, untuned = variants(name)
        except ScenarioError as e:
            sys.exit(f"shipped_default: {e}")
        has_table[name] = "mltcp" in shipped
        untuned = apply(untuned, config) if config else untuned
        cc = shipped.get("cc", "reno")
        for seed in seeds:
            for kind, raw, arm in (
                ("base", shipped, cc),
                ("tuned", shipped, f"mltcp-{cc}"),
                ("default", untuned, f"mltcp-{cc}"),
            ):
                tasks.append(sweep.Task(str(resolve(name)), arm, seed, raw=raw))  # its folder: relative paths
                index.append((name, seed, kind))
    recs = sweep.run_tasks(tasks, workers=a.workers)
    runs: dict = {}
    for (name, seed, kind), r in zip(index, recs):
        if not r["ok"]:
            print(f"{name} seed {seed} {kind}: failed: {r['error']}")
            continue
        runs.setdefault(name, {}).setdefault(seed, {})[kind] = r
    print(
        "| scenario | has a table | tuned avg / p99 | default avg / p99 | default / tuned avg / p99 "
        "| drops base / tuned / default |"
    )
    print("|---|---|---|---|---|---|")
    for name in a.scenarios:
        by_seed = [v for v in runs.get(name, {}).values() if len(v) == 3]
        if not by_seed:
            continue
        sp = {
            (kind, q): gmean([v["base"][f"{q}_iter_s"] / v[kind][f"{q}_iter_s"] for v in by_seed])
            for kind in ("tuned", "default")
            for q in ("avg", "p99")
        }
        drops = {k: sum(v[k]["drops"] for v in by_seed) / len(by_seed) for k in ("base", "tuned", "default")}
        print(
            f"| {name} | {'yes' if has_table[name] else 'no'} | {sp['tuned', 'avg']:.3f}x / {sp['tuned', 'p99']:.3f}x "
            f"| {sp['default', 'avg']:.3f}x / {sp['default', 'p99']:.3f}x "
            f"| {sp['default', 'avg'] / sp['tuned', 'avg']:.3f} / {sp['default', 'p99'] / sp['tuned', 'p99']:.3f} "
            f"| {drops['base']:.0f} / {drops['tuned']:.0f} / {drops['default']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
