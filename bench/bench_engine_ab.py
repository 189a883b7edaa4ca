"""The fast engine's speed against another checkout of it, measured interleaved in one run (not a
test: it prints ratios). Each round runs one fresh process per tree (A: this checkout, B: the other,
e.g. ``git worktree add /tmp/base <commit>``), alternating A, B, A, B...; a process times the
compiled loop (``SimResult.loop_time``, after a warm-up run) of each case, best of ``--repeats``.
Printed: per case the median over rounds of each tree's time and B / A (> 1: this checkout is faster).

    python bench/bench_engine_ab.py /tmp/base [--rounds 5] [--repeats 3] [--iterations 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
CASES = [
    ("two-jobs", "reno"),
    ("two-jobs", "mltcp-reno"),
    ("cubic-two-jobs", "mltcp-cubic"),
    ("dctcp-three-jobs", "mltcp-dctcp"),
    ("dcqcn-two-jobs", "mltcp-dcqcn"),
    ("innet-dcqcn-two-jobs", "dcqcn"),
    ("innet-ecn-reno-three-jobs", "mltcp-reno"),
    ("ring-allreduce", "mltcp-reno"),
    ("holdout-five-jobs", "mltcp-reno"),
    ("ns3-dumbbell-100m", "reno"),
]

CHILD = """
import dataclasses, json, sys
from pathlib import Path
from mltcp.scenario import load
from mltcp.sim.engine import simulate
root, iterations, repeats = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out = {}
for name, cc in json.loads(sys.argv[4]):
    sc = load(str(root / "scenarios" / f"{name}.toml"))
    jobs = [dataclasses.replace(j, iterations=min(j.iterations, iterations)) for j in sc.jobs]
    sc = dataclasses.replace(sc, jobs=jobs)
    simulate(sc, cc)
    out[f"{name} {cc}"] = min(simulate(sc, cc).loop_time for _ in range(repeats))
print(json.dumps(out))
"""


def measure(tree: Path, iterations: int, repeats: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), str(iterations), str(repeats), json.dumps(CASES)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("other", type=Path, help="the other checkout (B)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=40)
    a = ap.parse_args(argv)
    times: dict[str, dict[str, list[float]]] = {"A": {}, "B": {}}
    for r in range(a.rounds):
        for side, tree in (("A", HERE), ("B", a.other.resolve())):
            for case, t in measure(tree, a.iterations, a.repeats).items():
                times[side].setdefault(case, []).append(t)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    ratios = []
    print(f"{'case':<40} {'A ms':>9} {'B ms':>9} {'B / A':>7}")
    for case in times["A"]:
        ta, tb = statistics.median(times["A"][case]), statistics.median(times["B"][case])
        ratios.append(tb / ta)
        print(f"{case:<40} {ta * 1e3:9.2f} {tb * 1e3:9.2f} {tb / ta:7.3f}")
    geo = statistics.geometric_mean(ratios)
    print(f"geometric mean of B / A over {len(ratios)} cases: {geo:.3f} (A = {HERE}, B = {a.other})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
