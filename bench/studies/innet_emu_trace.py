"""Why the emulated progress-aware switch does not interleave two jobs as the simulator's does
(docs/in-network.md, Emulation): per-iteration traces of an emulated run (``mltcp emulate run
--records DIR``) and of the simulator on the same scenario, side by side.

For each iteration of job A it prints the phase gap to job B (B's communication start minus A's,
as a fraction of the iteration), the overlap of A's communication phase with B's, each job's
communication phase over the time it takes alone, which of the two was ahead (started its phase
first, so its bytes_ratio, and band, is higher while they overlap) and the ECN marks of the one
ahead and the one behind. The summary says what share of the marks during overlaps went to the job
behind (the policy's intent: all of them) and how many marks a job gets while it is alone.

    python bench/studies/innet_emu_trace.py --scenario innet-ecn-reno-two-jobs [--policy ecn-by-progress]
        [--seed 1] [--emu RUN.csv ...] [--rows]

Times of an emulated run are divided by its dilation, measured from its compute phases against the
scenario's compute time, so both traces are in the scenario's milliseconds.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from mltcp import compare, metrics, scenario
from mltcp.records import read_csv
from mltcp.sim.engine import simulate


def pairs(records, a: str = "A", b: str = "B"):
    """Each iteration of ``a`` with the ``b`` iteration whose communication phase overlaps it most
    (None when none overlaps)."""
    ra = sorted((r for r in records if r.job == a), key=lambda r: r.iteration)
    rb = sorted((r for r in records if r.job == b), key=lambda r: r.iteration)
    out = []
    for x in ra:
        best, olap = None, 0.0
        for y in rb:
            o = min(x.end, y.end) - max(x.comm_start, y.comm_start)
            if o > olap:
                best, olap = y, o
        near = min(rb, key=lambda y: abs(y.comm_start - x.comm_start)) if rb else None
        out.append((x, best, near))
    return out


def trace(sc, records, scale: float = 1.0) -> tuple[list[dict], dict]:
    """Per-iteration rows and a summary; ``scale``: the run's times over the scenario's."""
    period = compare.ideal_iter_s(sc) * scale
    comm_alone = (compare.ideal_iter_s(sc) - sc.jobs[0].compute_s) * scale
    ov = metrics.overlap_fractions(records)
    rows = []
    for x, y, near in pairs(records):
        gap = ((near.comm_start - x.comm_start) / period + 0.5) % 1.0 - 0.5 if near else None
        row = dict(
            it=x.iteration,
            gap=gap,
            overlap=ov[("A", x.iteration)],
            comm_a=(x.end - x.comm_start) / comm_alone,
            marks_a=x.marks,
            drops_a=x.drops,
            comm_b=(near.end - near.comm_start) / comm_alone if near else None,
            marks_b=near.marks if near else None,
            ahead=None,
            marks_ahead=None,
            marks_behind=None,
        )
        if y is not None:
            first, second = (x, y) if x.comm_start <= y.comm_start else (y, x)
            row.update(ahead=first.job, marks_ahead=first.marks, marks_behind=second.marks)
        rows.append(row)
    over = [r for r in rows if r["ahead"] is not None and r["overlap"] >= 0.05]
    alone = [r for r in rows if r["overlap"] < 0.05]
    behind = sum(r["marks_behind"] for r in over)
    ahead = sum(r["marks_ahead"] for r in over)
    gaps = np.array([abs(r["gap"]) for r in rows if r["gap"] is not None])
    summ = dict(
        iterations=len(rows),
        overlapped=len(over),
        mean_overlap=float(np.mean([r["overlap"] for r in rows])) if rows else None,
        marks_behind_share=behind / (behind + ahead) if behind + ahead else None,
        marks_per_overlap=(behind + ahead) / len(over) if over else None,
        marks_per_alone_phase=sum(r["marks_a"] for r in alone) / len(alone) if alone else None,
        comm_stretch=float(np.mean([r["comm_a"] for r in rows])) if rows else None,
        gap_growth=float(np.mean(np.diff(gaps))) if len(gaps) > 1 else None,
        first_gap=float(gaps[0]) if len(gaps) else None,
        last_gap=float(gaps[-1]) if len(gaps) else None,
        interleaved_at=metrics.interleaved_at(records),
    )
    return rows, summ


def dilation(sc, records) -> float:
    """How much slower a run's clock is than the scenario's: median compute phase / compute time."""
    comp = np.median([r.comm_start - r.start for r in records if r.iteration > 0])
    return float(comp / sc.jobs[0].compute_s)


def fmt_summary(name: str, s: dict) -> str:
    f = lambda v, p=2: "-" if v is None else (f"{v:.{p}f}" if isinstance(v, float) else str(v))  # noqa: E731
    return (
        f"{name:34s} overlap {f(s['mean_overlap'])}, overlapped iterations {s['overlapped']}/{s['iterations']}, "
        f"marks on the job behind {f(s['marks_behind_share'])}, marks per overlapped iteration "
        f"{f(s['marks_per_overlap'], 1)}, per alone phase {f(s['marks_per_alone_phase'], 1)}, comm phase / alone "
        f"{f(s['comm_stretch'])}, |gap| {f(s['first_gap'])} -> {f(s['last_gap'])} (mean change per iteration "
        f"{f(s['gap_growth'], 3)}), interleaved at {f(s['interleaved_at'])}"
    )


def fmt_rows(rows) -> str:
    f = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    out = ["  it    gap  overlap  comm A  comm B  ahead  marks ahead  marks behind  marks A  marks B  drops A"]
    for r in rows:
        out.append(
            f"  {r['it']:2d} {f(r['gap']):>6s} {f(r['overlap']):>8s} {f(r['comm_a']):>7s} {f(r['comm_b']):>7s} "
            f"{r['ahead'] or '-':>6s} {f(r['marks_ahead'], 0):>12s} {f(r['marks_behind'], 0):>13s} "
            f"{f(r['marks_a'], 0):>8s} {f(r['marks_b'], 0):>8s} {f(r['drops_a'], 0):>8s}"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="innet-ecn-reno-two-jobs")
    ap.add_argument("--policy", default=None, help="the simulator's switch_policy (default: the scenario's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=None, help="only the first N iterations of the simulated run")
    ap.add_argument("--switch", default="", help="KEY=VALUE,... over the simulator's [switch] table (floats)")
    ap.add_argument("--emu", nargs="*", default=[], help="records CSVs of emulated runs (mltcp emulate run --records)")
    ap.add_argument("--rows", action="store_true", help="print the per-iteration rows too")
    a = ap.parse_args(argv)
    sc = scenario.load(a.scenario)
    over = {k: float(v) for k, v in (kv.split("=", 1) for kv in filter(None, a.switch.split(",")))}
    for pol in [a.policy] if a.policy else ["off", sc.switch.name]:
        s = dataclasses.replace(sc, seed=a.seed, switch=dataclasses.replace(sc.switch, name=pol, **over))
        recs = [r for r in simulate(s, s.cc).records if a.iterations is None or r.iteration < a.iterations]
        rows, summ = trace(s, recs)
        print(fmt_summary(f"simulator {pol} seed {a.seed}", summ))
        if a.rows:
            print(fmt_rows(rows))
    for path in a.emu:
        recs = read_csv(Path(path))
        scale = dilation(sc, recs)
        rows, summ = trace(sc, recs, scale)
        print(fmt_summary(f"{path} (x{scale:.1f})", summ))
        if a.rows:
            print(fmt_rows(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
