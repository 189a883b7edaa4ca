"""The shipped scenarios against their tuned experiments: how much of each tuned table's speedup the
shipped default keeps, over seeds.

    python bench/studies/shipped_default.py                          # the scenarios the default must hold on, seeds 1-5
    python bench/studies/shipped_default.py two-jobs straggler --seeds 1-3

A shipped scenario (scenarios/NAME.toml) has no ``[mltcp]`` table and runs the shipped default; its
tuned experiment (scenarios/tuned/NAME.toml, where there is one) is the same scenario with the table
tuned on it. Per scenario and seed three runs: the base and MLTCP on the shipped scenario, MLTCP on
the tuned one (the base runs once: the tuned file changes only MLTCP). Prints per scenario the
geometric means over the seeds of the avg and p99 speedups over the base, both ways, and their ratio
(default / tuned; the target is >= 0.97), and the drops. A scenario without a tuned experiment runs
the default alone, and its tuned columns say so.
"""

from __future__ import annotations

import argparse
import json
import sys

from mltcp import sweep
from mltcp.scenario import ScenarioError, builtin_dir, load, resolve
from mltcp.suite import InputError, gmean, parse_seeds

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


def tuned_of(name: str) -> str | None:
    """scenarios/tuned/NAME.toml as a path string, or None when the scenario has no tuned experiment."""
    p = builtin_dir() / "tuned" / f"{name}.toml"
    return str(p) if p.is_file() else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", default=SHIPPED)
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--config", default="{}", help="MLTCP settings for the default runs, JSON (mltcp.slope, ...)")
    a = ap.parse_args()
    try:
        seeds, config = parse_seeds(a.seeds), json.loads(a.config)
    except (InputError, json.JSONDecodeError) as e:
        ap.error(str(e))
    tasks, index, tuned = [], [], {}
    for name in a.scenarios:
        try:
            shipped = load(name)
            tuned[name] = tuned_of(name)
            if tuned[name] is not None:
                load(tuned[name])
        except ScenarioError as e:
            sys.exit(f"shipped_default: {e}")
        if shipped.mltcp_params:
            sys.exit(f"shipped_default: {name} has an [mltcp] table: it does not run the shipped default")
        path, arm = str(resolve(name)), f"mltcp-{shipped.cc}"
        for seed in seeds:
            runs = [("base", path, shipped.cc, None), ("default", path, arm, config or None)]
            if tuned[name] is not None:
                runs.append(("tuned", tuned[name], arm, None))
            for kind, src, cc, cfg in runs:
                tasks.append(sweep.Task(src, cc, seed, config=cfg))
                index.append((name, seed, kind))
    recs = sweep.run_tasks(tasks, workers=a.workers)
    runs_of: dict = {}
    for (name, seed, kind), r in zip(index, recs):
        if not r["ok"]:
            print(f"{name} seed {seed} {kind}: failed: {r['error']}")
            continue
        runs_of.setdefault(name, {}).setdefault(seed, {})[kind] = r
    print(
        "| scenario | tuned experiment | default avg / p99 | tuned avg / p99 | default / tuned avg / p99 "
        "| drops base / default / tuned |"
    )
    print("|---|---|---|---|---|---|")
    for name in a.scenarios:
        kinds = ("base", "default") + (("tuned",) if tuned[name] else ())
        by_seed = [v for v in runs_of.get(name, {}).values() if all(k in v for k in kinds)]
        if not by_seed:
            continue
        sp = {
            (kind, q): gmean([v["base"][f"{q}_iter_s"] / v[kind][f"{q}_iter_s"] for v in by_seed])
            for kind in kinds[1:]
            for q in ("avg", "p99")
        }
        drops = {k: sum(v[k]["drops"] for v in by_seed) / len(by_seed) for k in kinds}
        default = f"{sp['default', 'avg']:.3f}x / {sp['default', 'p99']:.3f}x"
        if tuned[name]:
            exp = f"tuned/{name}"
            tuned_sp = f"{sp['tuned', 'avg']:.3f}x / {sp['tuned', 'p99']:.3f}x"
            ratio = f"{sp['default', 'avg'] / sp['tuned', 'avg']:.3f} / {sp['default', 'p99'] / sp['tuned', 'p99']:.3f}"
            drop_s = f"{drops['base']:.0f} / {drops['default']:.0f} / {drops['tuned']:.0f}"
        else:
            exp, tuned_sp, ratio = "none", "-", "-"
            drop_s = f"{drops['base']:.0f} / {drops['default']:.0f} / -"
        print(f"| {name} | {exp} | {default} | {tuned_sp} | {ratio} | {drop_s} |", flush=True)


if __name__ == "__main__":
    main()
