"""The simulator's noise floor on a suite: the base against itself with every job but the first 10 us later.

    python bench/suite_noise.py DIR [--shift-us 10] [--seeds 1-3] [--workers N]

Prints the same do-no-harm tallies as bench/suite.py: how often the base, shifted by 10 us, stays
within 0.98x (avg) and 0.95x (p99) of the unshifted base, per scenario over the mean of the seeds
(default: the file's own seed, one run), and how often its drops are no higher.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

from mltcp import sweep
from mltcp.suite import parse_seeds


def shifted(raw: dict, shift_ms: float) -> dict:
    jobs = [dict(j) for j in raw["jobs"]]
    for j in jobs[1:]:
        j["start_offset_ms"] = j.get("start_offset_ms", 0.0) + shift_ms
    return {**raw, "jobs": jobs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--shift-us", type=float, default=10.0)
    ap.add_argument("--seeds", default=None, help="e.g. 1-3 (default: the file's seed)")
    ap.add_argument("--workers", type=int, default=None)
    a = ap.parse_args(argv)
    seeds = parse_seeds(a.seeds) if a.seeds else [None]
    files = sorted(a.dir.glob("*.toml"))
    if not files:
        print(f"error: {a.dir}: no scenario files", file=sys.stderr)
        return 2
    tasks = []
    for f in files:
        raw = tomllib.loads(f.read_text())
        if "start_offset_s" in str(raw):
            print(f"error: {f}: give start offsets in ms for this bench", file=sys.stderr)
            return 2
        cc = raw.get("cc", "reno")
        for seed in seeds:
            tasks += [sweep.Task(str(f), cc, seed), sweep.Task(str(f), cc, seed, raw=shifted(raw, a.shift_us / 1e3))]
    recs = sweep.run_tasks(tasks, workers=a.workers)
    k = 2 * len(seeds)
    groups = [recs[i : i + k] for i in range(0, len(recs), k)]
    mean = lambda rs, key: sum(r[key] for r in rs) / len(rs)  # noqa: E731
    pairs = [
        (
            {key: mean(g[0::2], key) for key in ("avg_iter_s", "p99_iter_s", "drops")},
            {key: mean(g[1::2], key) for key in ("avg_iter_s", "p99_iter_s", "drops")},
        )
        for g in groups
    ]
    sa = [b["avg_iter_s"] / s["avg_iter_s"] for b, s in pairs]
    sp = [b["p99_iter_s"] / s["p99_iter_s"] for b, s in pairs]
    n = len(pairs)
    print(
        f"{a.dir}: {n} scenarios x seeds {a.seeds or 'of the files'}, the base against itself shifted by "
        f"{a.shift_us:g} us"
    )
    print(f"  avg ratio {min(sa):.3f} .. {max(sa):.3f}, within 0.98x in {sum(x >= 0.98 for x in sa) / n:.0%}")
    print(f"  p99 ratio {min(sp):.3f} .. {max(sp):.3f}, within 0.95x in {sum(x >= 0.95 for x in sp) / n:.0%}")
    print(f"  drops <= the unshifted run's in {sum(s['drops'] <= b['drops'] for b, s in pairs) / n:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
