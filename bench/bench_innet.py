"""In-network MLTCP in the simulator: the same hosts through a plain ECN switch (switch_policy off)
and through the progress-aware one, per seed; ratios measured in one run (docs/in-network.md).

    python bench/bench_innet.py [--scenarios innet-ecn-reno-two-jobs,...] [--seeds 1,2,3]
                                [--policies ecn-by-progress,priority-by-progress] [--cc reno,mltcp-reno]
                                [--switch priority_ecn=off,bands=2]   (overrides of the [switch] table)
                                [--markdown]   (also one table row per scenario / cc / policy over the seeds)
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np

from mltcp import compare, scenario
from mltcp.sim.engine import simulate

# the [switch] fields --switch may override, each with its parser
SWITCH_FIELDS = {
    "bands": int,
    "ecn_scale_lo": float,
    "ecn_scale_hi": float,
    "priority_ecn": str,
    "priority_buffer": str,
    "priority_pin": lambda v: v.lower() in ("1", "true", "yes"),
    "contest_window_us": float,
}
DEFAULT = (
    "innet-ecn-reno-two-jobs",
    "innet-ecn-reno-three-jobs",
    "innet-ecn-reno-partial-compat",
    "innet-dcqcn-two-jobs",
)


def run(sc, cc: str, policy: str, seed: int) -> dict:
    s = dataclasses.replace(sc, seed=seed, switch=dataclasses.replace(sc.switch, name=policy))
    r = simulate(s, cc)
    out = compare.side(s, cc, r.records, r.drops, r.ecn_marks, r.pfc_pause_s, r.reordered)
    # drops and marks of the iterations after the warm-up (the measured ones)
    tail = [x for x in r.records if x.iteration >= s.warmup_iterations]
    out["drops_tail"] = round(sum(x.drops for x in tail))
    out["marks_tail"] = round(sum(x.marks for x in tail))
    out["per_job"] = per_job(tail)
    return out


def per_job(recs) -> dict:
    """Each job's avg / p99 iteration time and communication phase (ms), drops and marks, over ``recs``."""
    out = {}
    for j in sorted({x.job for x in recs}):
        d = np.array([x.duration for x in recs if x.job == j])
        out[j] = dict(
            avg_ms=round(float(d.mean()) * 1e3, 2),
            p99_ms=round(float(np.percentile(d, 99)) * 1e3, 2),
            comm_ms=round(float(np.mean([x.comm_duration for x in recs if x.job == j])) * 1e3, 2),
            drops=round(sum(x.drops for x in recs if x.job == j)),
            marks=round(sum(x.marks for x in recs if x.job == j)),
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=",".join(DEFAULT))
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--policies", default="")
    ap.add_argument("--cc", default="", help="algorithms (default: the scenario's cc)")
    ap.add_argument(
        "--switch",
        default="",
        help="KEY=VALUE,... overriding the scenarios' [switch] table "
        "(bands, ecn_scale_lo, ecn_scale_hi, priority_ecn, priority_buffer, priority_pin, "
        "contest_window_us)",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="also print one table row per scenario, cc and policy")
    ap.add_argument(
        "--per-job", action="store_true", help="also print each job's figures after the warm-up (off and on)"
    )
    a = ap.parse_args(argv)
    over = {}
    for kv in filter(None, a.switch.split(",")):
        k, _, v = kv.partition("=")
        if k not in SWITCH_FIELDS:
            ap.error(f"--switch: unknown field {k!r}")
        over[k] = SWITCH_FIELDS[k](v)
    rows = []
    for name in a.scenarios.split(","):
        sc = scenario.load(name)
        if over:
            sc = dataclasses.replace(sc, switch=dataclasses.replace(sc.switch, **over))
        pols = a.policies.split(",") if a.policies else [sc.switch.name]
        for cc in a.cc.split(",") if a.cc else [sc.cc]:
            for seed in (int(x) for x in a.seeds.split(",")):
                base = run(sc, cc, "off", seed)
                for pol in pols:
                    if pol == "ecn-by-progress" and sc.switch.bands > 16:
                        continue
                    if pol == "priority-by-progress" and sc.switch.bands > 8:
                        sc = dataclasses.replace(sc, switch=dataclasses.replace(sc.switch, bands=8))
                    m = run(sc, cc, pol, seed)
                    row = dict(
                        scenario=sc.name,
                        cc=cc,
                        policy=pol,
                        seed=seed,
                        avg_off_ms=round(base["avg_iter_s"] * 1e3, 2),
                        avg_ms=round(m["avg_iter_s"] * 1e3, 2),
                        speedup_avg=round(base["avg_iter_s"] / m["avg_iter_s"], 3),
                        p99_off_ms=round(base["p99_iter_s"] * 1e3, 2),
                        p99_ms=round(m["p99_iter_s"] * 1e3, 2),
                        speedup_p99=round(base["p99_iter_s"] / m["p99_iter_s"], 3),
                        drops_off=base["drops"],
                        drops=m["drops"],
                        marks_off=base["ecn_marks"],
                        marks=m["ecn_marks"],
                        drops_tail_off=base["drops_tail"],
                        drops_tail=m["drops_tail"],
                        marks_tail_off=base["marks_tail"],
                        marks_tail=m["marks_tail"],
                        converged_off=base["converged_at_iteration"],
                        converged=m["converged_at_iteration"],
                        interleaved_off=base["interleaved_at_iteration"],
                        interleaved=m["interleaved_at_iteration"],
                        ideal_ms=round(compare.ideal_iter_s(sc) * 1e3, 2),
                        per_job_off=base["per_job"],
                        per_job=m["per_job"],
                        pause_off_ms=_ms(base.get("pfc_pause_s")),
                        pause_ms=_ms(m.get("pfc_pause_s")),
                        reordered=m.get("reordered"),
                    )
                    rows.append(row)
                    if not a.json:
                        print(
                            f"{row['scenario']:32s} {cc:11s} {pol:21s} seed {seed}: avg {row['avg_off_ms']} -> "
                            f"{row['avg_ms']} ms ({row['speedup_avg']}x), p99 {row['p99_off_ms']} -> {row['p99_ms']} "
                            f"({row['speedup_p99']}x), drops {row['drops_off']} -> {row['drops']}, marks "
                            f"{row['marks_off']} -> {row['marks']} (after warm-up: drops {row['drops_tail_off']} -> "
                            f"{row['drops_tail']}, marks {row['marks_tail_off']} -> {row['marks_tail']}), "
                            f"converged at {row['converged_off']} -> "
                            f"{row['converged']}, interleaved at {row['interleaved_off']} -> {row['interleaved']} "
                            f"(ideal {row['ideal_ms']} ms)"
                            + (
                                f", PFC pause {row['pause_off_ms']} -> {row['pause_ms']} flow-ms"
                                if row["pause_ms"] is not None
                                else ""
                            )
                            + (f", reordered {row['reordered']:.0f} packets" if row["reordered"] is not None else ""),
                            flush=True,
                        )
                        if a.per_job:
                            for j, on in m["per_job"].items():
                                off = base["per_job"][j]
                                print(
                                    f"    job {j}: avg {off['avg_ms']} -> {on['avg_ms']} ms "
                                    f"({off['avg_ms'] / on['avg_ms']:.3f}x), p99 {off['p99_ms']} -> {on['p99_ms']}, "
                                    f"comm {off['comm_ms']} -> {on['comm_ms']}, drops {off['drops']} -> {on['drops']}, "
                                    f"marks {off['marks']} -> {on['marks']}",
                                    flush=True,
                                )
    if a.json:
        print(json.dumps(rows, indent=1))
    if a.markdown:
        print(markdown(rows))
    return 0


def _ms(s: float | None) -> float | None:
    return None if s is None else round(s * 1e3, 2)


def _seeds(rows, key, fmt="{}") -> str:
    """The seeds' values, 'a / b / c'; one value when all are equal; None is 'never'."""
    vals = ["never" if r[key] is None else fmt.format(r[key]) for r in rows]
    return vals[0] if len(set(vals)) == 1 else " / ".join(vals)


def markdown(rows: list[dict]) -> str:
    """One row per (scenario, cc, policy), the seeds' values in seed order, separated by '/' (and a
    column of PFC pause time, flow-ms, when a scenario has a lossless link)."""
    pfc = any(r["pause_ms"] is not None for r in rows)
    out = [
        "| scenario | cc | policy | seeds | avg off -> on (ms) | avg speed-up | p99 speed-up | interleaved at "
        "| drops off -> on (after warm-up) | ECN marks off -> on |"
        + (" PFC pause off -> on (flow-ms) |" if pfc else ""),
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if pfc else ""),
    ]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["scenario"], r["cc"], r["policy"]), []).append(r)
    for (name, cc, pol), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["seed"])
        seeds = ",".join(str(r["seed"]) for r in rs)
        avg = (
            f"{min(r['avg_off_ms'] for r in rs)}-{max(r['avg_off_ms'] for r in rs)} -> "
            f"{min(r['avg_ms'] for r in rs)}-{max(r['avg_ms'] for r in rs)}"
        )
        il = f"{_seeds(rs, 'interleaved')} (off: {_seeds(rs, 'interleaved_off')})"
        drops = (
            f"{_seeds(rs, 'drops_off', '{:.0f}')} -> {_seeds(rs, 'drops', '{:.0f}')} "
            f"({_seeds(rs, 'drops_tail_off', '{:.0f}')} -> {_seeds(rs, 'drops_tail', '{:.0f}')})"
        )
        marks = (
            f"{min(r['marks_off'] for r in rs):.0f}-{max(r['marks_off'] for r in rs):.0f} -> "
            f"{min(r['marks'] for r in rs):.0f}-{max(r['marks'] for r in rs):.0f}"
        )
        out.append(
            f"| {name} | {cc} | {pol} | {seeds} | {avg} | {_seeds(rs, 'speedup_avg')} | "
            f"{_seeds(rs, 'speedup_p99')} | {il} | {drops} | {marks} |"
            + (f" {_seeds(rs, 'pause_off_ms', '{:.1f}')} -> {_seeds(rs, 'pause_ms', '{:.1f}')} |" if pfc else "")
        )
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
