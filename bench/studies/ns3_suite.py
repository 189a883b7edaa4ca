"""The shipped MLTCP default on a random-suite subset in both engines: does the speedup over the
base that the fast engine shows hold in ns-3 (jittered hosts)?

    python bench/studies/ns3_suite.py DIR [DIR ...] [--pick 20] [--seeds 1-3] [--iterations N]
                                      [--host-jitter 1] [--config JSON] [--json OUT.json] [--list]
    python bench/studies/ns3_suite.py --generate reno:301 --generate reno:302:compatible --n 60 --out /tmp/s

DIR is a suite written by ``mltcp scenarios generate`` (or ``--generate CC:SEED[:compatible]``,
written under ``--out`` with ``--n`` scenarios each). Directories are grouped by their base
algorithm (the files' ``cc``; ns-3 runs reno and cubic). The subset, per base algorithm: ``--pick``
scenarios split evenly over its directories (the first ones take the remainder), in each directory
the ones with the fewest data segments per run, sum over jobs of bytes x iterations / mss (ties by
file name). ns-3's cost grows with the packets it moves, so this keeps every run tractable; it
also means the subset leans to the suites' slowest links.

Each scenario x seed runs the base (the file's ``cc``) and ``mltcp-<cc>`` with no ``[mltcp]``
table (the shipped default, mltcp/defaults.py; ``--config`` writes settings into it as
bench/suite.py's does), once in the fast engine and once in ns-3 with
``Ns3Options(host_jitter=--host-jitter, recovery=--ns3-recovery)``, as ``mltcp simulate --engine
both --ns3-host-jitter X`` does; one progress line per run on stderr. As in bench/suite.py an
arm's avg (p99) is the mean over the seeds of each run's steady-state avg (p99), and a speedup is
base / mltcp. Printed per scenario: both engines' speedups, ns-3's over the fast engine's (1.0 =
the same), the p99 one again without the steady iterations that waited for an RTO (longer than
the run's median + 0.75 x min RTO), each arm's steady-state avg iteration time fast / ns-3
(ns3_compare.ratios), mean overlap, drops, RTO iterations and the ns-3 flows whose online switch
is engaged at the end. Diagnoses: ``--fast-recovery ns3`` (the fast engine without RACK-TLP, as
ns-3) and ``--ns3-linux-reno`` (ns-3's reno halves cwnd, not the bytes in flight). Summary:
in how many scenarios ns-3's speedup is within ``--tolerance`` (10 %) of the fast engine's, and
the do-no-harm tallies in each engine (avg >= 0.98x and p99 >= 0.95x of the base). Prints what it
measured; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path

import numpy as np

from mltcp import metrics, sweep
from mltcp.scenario import Scenario, from_dict
from mltcp.suite import InputError, gmean, parse_seeds

NS3_BASES = ("reno", "cubic")
ENGINES = ("fast", "ns3")
ARMS = ("base", "mltcp")
# a steady iteration longer than the run's median + this x min RTO waited for a retransmission timeout
RTO_SHARE = 0.75
RUN_KEYS = ("avg", "p99", "p99_no_rto", "rto_iters", "overlap", "drops", "rtos", "engaged", "wall_s")


# ---- the subset ---------------------------------------------------------------------------------


def scenario_cc(path: Path) -> str:
    return tomllib.loads(path.read_text()).get("cc", "reno")


def load_cut(path: Path, seed: int | None = None, iterations: int | None = None, config: dict | None = None):
    """The scenario as ``mltcp.sweep`` builds a task's: ``seed`` overrides the file's, every job cut
    to ``iterations`` (warm-up a quarter) if given, ``config`` (MLTCP settings) written in."""
    task = sweep.Task(str(path), scenario_cc(path), seed, iterations, config=config or None)
    return from_dict(sweep.scenario_tables(task), str(path))


def segments_per_run(sc: Scenario) -> float:
    """Data segments the jobs send in one run, without retransmissions: sum of bytes x iterations / mss."""
    return sum(j.bytes_per_iter * j.iterations for j in sc.jobs) / sc.mss


def select(dirs: list[Path], pick: int, iterations: int | None = None) -> dict[str, list[dict]]:
    """base algorithm -> the subset (the rule in the module docstring), each entry {path, suite,
    segments, rate_gbps, jobs}, ordered by directory, then by segments."""
    groups: dict[str, list[Path]] = {}
    for d in dirs:
        files = sorted(d.glob("*.toml"))
        if not files:
            raise InputError(f"{d}: no scenario files")
        ccs = {scenario_cc(f) for f in files}
        if len(ccs) != 1:
            raise InputError(f"{d}: mixes base algorithms {sorted(ccs)}")
        cc = ccs.pop()
        if cc not in NS3_BASES:
            raise InputError(f"{d}: base {cc!r} has no ns-3 counterpart (ns-3 runs {', '.join(NS3_BASES)})")
        groups.setdefault(cc, []).append(d)
    out = {}
    for cc, ds in groups.items():
        chosen = []
        for k, d in enumerate(ds):
            share = pick // len(ds) + (k < pick % len(ds))
            rows = []
            for f in sorted(d.glob("*.toml")):
                sc = load_cut(f, iterations=iterations)
                rows.append(
                    {
                        "path": str(f),
                        "suite": d.name,
                        "segments": round(segments_per_run(sc)),
                        "rate_gbps": round(min(sc.links[n].rate_bps for j in sc.jobs for n in j.path) / 1e9, 3),
                        "jobs": len(sc.jobs),
                    }
                )
            if len(rows) < share:
                raise InputError(f"{d}: {len(rows)} scenarios, fewer than its share {share} of --pick {pick}")
            chosen += sorted(rows, key=lambda r: (r["segments"], Path(r["path"]).name))[:share]
        out[cc] = chosen
    return out


# ---- the runs -----------------------------------------------------------------------------------


def one_run(
    path: Path, seed: int, iterations: int | None, engine: str, algo: str, ns3_opt, fast_recovery, config=None
) -> dict:
    """One arm of one scenario x seed in one engine; ``config`` goes to the MLTCP arm only."""
    from mltcp.sim import engine as fast_engine, ns3_engine

    sc = load_cut(path, seed, iterations, config if algo.startswith("mltcp-") else None)
    if engine == "fast":
        if fast_recovery:
            sc.loss_recovery = fast_recovery
        r = fast_engine.simulate(sc, algo)
        rtos, engaged = r.timeouts, None
    else:
        r = ns3_engine.run(sc, algo, options=ns3_opt)
        rtos = sum(r.ns3_stats["timeouts"])
        engaged = r.ns3_stats["mltcp_engaged"] if algo.startswith("mltcp-") else None
    s = metrics.summary(r.records, sc.warmup_iterations)
    d = metrics.iteration_times(metrics.steady(r.records, sc.warmup_iterations))
    waited = d > np.median(d) + RTO_SHARE * sc.min_rto_s  # a steady iteration that waited for an RTO
    ov = [v for (_, i), v in metrics.overlap_fractions(r.records).items() if i >= sc.warmup_iterations]
    return {
        "sc": sc,
        "result": r,
        "avg": s["avg_iter_s"],
        "p99": s["p99_iter_s"],
        "p99_no_rto": float(np.percentile(d[~waited], 99)),
        "rto_iters": int(waited.sum()),
        "overlap": float(np.mean(ov)) if ov else 0.0,
        "drops": float(r.drops),
        "rtos": int(rtos),
        "engaged": engaged,
        "wall_s": r.wall_time,
    }


def run_scenario(entry: dict, cc: str, seeds: list[int], args, ns3_opt, counter: list[int], total: int) -> dict:
    from mltcp.sim import ns3_compare

    path = Path(entry["path"])
    per_seed = []
    for seed in seeds:
        runs: dict = {e: {} for e in ENGINES}
        for eng in ENGINES:
            for arm, algo in zip(ARMS, (cc, f"mltcp-{cc}")):
                x = one_run(path, seed, args.iterations, eng, algo, ns3_opt, args.fast_recovery, args.config)
                runs[eng][arm] = x
                counter[0] += 1
                eng_txt = f" engaged {sum(v == 1 for v in x['engaged'])}/{len(x['engaged'])}" if x["engaged"] else ""
                print(
                    f"[{counter[0]}/{total}] {path.stem} seed {seed} {eng:<4} {algo:<11} avg {x['avg'] * 1e3:8.2f} ms "
                    f"p99 {x['p99'] * 1e3:8.2f} ms drops {x['drops']:6.0f} RTOs {x['rtos']:3d}{eng_txt} "
                    f"wall {x['wall_s']:6.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
        sc = runs["fast"]["base"]["sc"]
        rat = ns3_compare.ratios(
            sc,
            {a: runs["fast"][arm]["result"] for arm, a in zip(ARMS, (cc, f"mltcp-{cc}"))},
            {a: runs["ns3"][arm]["result"] for arm, a in zip(ARMS, (cc, f"mltcp-{cc}"))},
        )
        per_seed.append(
            {
                "seed": seed,
                **{f"{eng}_{arm}": {k: runs[eng][arm][k] for k in RUN_KEYS} for eng in ENGINES for arm in ARMS},
                "avg_ratio_fast_over_ns3": {arm: rat[a]["avg_ratio"] for arm, a in zip(ARMS, (cc, f"mltcp-{cc}"))},
            }
        )
    return aggregate(entry, per_seed, args.tolerance)


def aggregate(entry: dict, per_seed: list[dict], tolerance: float) -> dict:
    """Per scenario: the seed-means of each engine's arms, the speedups and their ratios."""
    mean = lambda xs: sum(xs) / len(xs)
    row = {"scenario": Path(entry["path"]).stem, **entry, "seeds": [s["seed"] for s in per_seed]}
    for eng in ENGINES:
        for arm in ARMS:
            rs = [s[f"{eng}_{arm}"] for s in per_seed]
            row[f"{eng}_{arm}"] = {
                "avg_s": mean([r["avg"] for r in rs]),
                "p99_s": mean([r["p99"] for r in rs]),
                "p99_no_rto_s": mean([r["p99_no_rto"] for r in rs]),
                "rto_iters": sum(r["rto_iters"] for r in rs),
                "overlap": mean([r["overlap"] for r in rs]),
                "drops": sum(r["drops"] for r in rs),
                "rtos": sum(r["rtos"] for r in rs),
                "wall_s": round(sum(r["wall_s"] for r in rs), 2),
            }
            if arm == "mltcp" and eng == "ns3":
                flags = [v for r in rs for v in (r["engaged"] or [])]
                row["ns3_engaged_at_end"] = [sum(v == 1 for v in flags), len(flags)]
        b, m = row[f"{eng}_base"], row[f"{eng}_mltcp"]
        row[f"{eng}_speedup_avg"] = b["avg_s"] / m["avg_s"]
        row[f"{eng}_speedup_p99"] = b["p99_s"] / m["p99_s"]
        row[f"{eng}_speedup_p99_no_rto"] = b["p99_no_rto_s"] / m["p99_no_rto_s"]
    for q in ("avg", "p99", "p99_no_rto"):
        row[f"speedup_ratio_{q}"] = row[f"ns3_speedup_{q}"] / row[f"fast_speedup_{q}"]
        row[f"within_{q}"] = bool(abs(row[f"speedup_ratio_{q}"] - 1) <= tolerance)
    for arm in ARMS:  # fast / ns-3 of the seed-mean steady-state avg iteration time
        row[f"iter_ratio_{arm}"] = row[f"fast_{arm}"]["avg_s"] / row[f"ns3_{arm}"]["avg_s"]
    row["per_seed"] = per_seed
    return row


def summarize(rows: list[dict], tolerance: float) -> dict:
    n = len(rows)
    out = {"scenarios": n, "tolerance": tolerance}
    out["within_avg"] = sum(r["within_avg"] for r in rows)
    out["within_p99"] = sum(r["within_p99"] for r in rows)
    out["within_both"] = sum(r["within_avg"] and r["within_p99"] for r in rows)
    out["within_p99_no_rto"] = sum(r["within_p99_no_rto"] for r in rows)
    for eng in ENGINES:
        sa, sp = [r[f"{eng}_speedup_avg"] for r in rows], [r[f"{eng}_speedup_p99"] for r in rows]
        out[eng] = {
            "avg_geo": gmean(sa),
            "avg_worst": min(sa),
            "p99_geo": gmean(sp),
            "p99_worst": min(sp),
            "avg_ge_0.98": sum(x >= 0.98 for x in sa),
            "p99_ge_0.95": sum(x >= 0.95 for x in sp),
            "below_0.90": sum(min(a, p) < 0.90 for a, p in zip(sa, sp)),
        }
    for arm in ARMS:
        xs = [r[f"iter_ratio_{arm}"] for r in rows]
        out[f"iter_ratio_{arm}_geo"] = gmean(xs)
        out[f"iter_ratio_{arm}_within"] = sum(abs(x - 1) <= tolerance for x in xs)
    return out


# ---- output -------------------------------------------------------------------------------------


def print_table(cc: str, rows: list[dict]) -> None:
    cols = [
        ("scenario", 38),
        ("j", 1),
        ("Gb/s", 5),
        ("kseg", 5),
        ("fast avg", 8),
        ("p99", 6),
        ("ns-3 avg", 8),
        ("p99", 6),
        ("ratio avg", 9),
        ("p99", 6),
        ("p99-RTO", 7),
        ("it f/n base", 11),
        ("mltcp", 6),
        ("ovl f/n base", 12),
        ("mltcp", 9),
        ("drops f/n base", 14),
        ("mltcp", 11),
        ("RTO its f/n base", 16),
        ("mltcp", 7),
        ("eng", 5),
    ]
    print(
        f"\n{cc}: speedup = base / mltcp-{cc} (seed-means); ratio = ns-3 speedup / fast speedup (* = off by more "
        "than the tolerance); p99-RTO = the p99 ratio without the steady iterations that waited for an RTO; "
        "it f/n = steady avg iteration time fast / ns-3; ovl = mean overlap of a communication phase with the "
        "others'; RTO its = steady iterations that waited for an RTO (over the seeds); eng = ns-3 flows whose "
        "switch is engaged at the end"
    )
    head = " ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(cols))
    print(head)
    print("-" * len(head))
    for r in rows:
        flag = lambda q: " " if r[f"within_{q}"] else "*"
        pair = lambda key, arm, fmt: f"{r[f'fast_{arm}'][key]:{fmt}}/{r[f'ns3_{arm}'][key]:{fmt}}"
        e = r["ns3_engaged_at_end"]
        vals = [
            r["scenario"],
            r["jobs"],
            f"{r['rate_gbps']:.2f}",
            f"{r['segments'] / 1e3:.0f}",
            f"{r['fast_speedup_avg']:.3f}",
            f"{r['fast_speedup_p99']:.3f}",
            f"{r['ns3_speedup_avg']:.3f}",
            f"{r['ns3_speedup_p99']:.3f}",
            f"{r['speedup_ratio_avg']:.3f}{flag('avg')}",
            f"{r['speedup_ratio_p99']:.3f}{flag('p99')}",
            f"{r['speedup_ratio_p99_no_rto']:.3f}{flag('p99_no_rto')}",
            f"{r['iter_ratio_base']:.3f}",
            f"{r['iter_ratio_mltcp']:.3f}",
            pair("overlap", "base", ".2f"),
            pair("overlap", "mltcp", ".2f"),
            pair("drops", "base", ".0f"),
            pair("drops", "mltcp", ".0f"),
            pair("rto_iters", "base", "d"),
            pair("rto_iters", "mltcp", "d"),
            f"{e[0]}/{e[1]}",
        ]
        print(" ".join(f"{v:<{w}}" if i == 0 else f"{v!s:>{w}}" for i, (v, (_, w)) in enumerate(zip(vals, cols))))


def print_summary(cc: str, s: dict) -> None:
    n, tol = s["scenarios"], s["tolerance"]
    print(
        f"\n{cc}: ns-3 speedup within {tol:.0%} of the fast engine's: avg {s['within_avg']}/{n}, "
        f"p99 {s['within_p99']}/{n}, both {s['within_both']}/{n}; p99 without the iterations that waited for "
        f"an RTO {s['within_p99_no_rto']}/{n}"
    )
    for eng, label in (("ns3", "ns-3"), ("fast", "fast")):
        x = s[eng]
        print(
            f"  {label:<4} speedup avg geo {x['avg_geo']:.3f}x (worst {x['avg_worst']:.3f}), "
            f"p99 geo {x['p99_geo']:.3f}x "
            f"(worst {x['p99_worst']:.3f}); do no harm: avg >= 0.98x in {x['avg_ge_0.98']}/{n}, "
            f"p99 >= 0.95x in {x['p99_ge_0.95']}/{n}, below 0.90x {x['below_0.90']}/{n}"
        )
    print(
        f"  steady avg iteration time fast / ns-3: base geo {s['iter_ratio_base_geo']:.3f} "
        f"(within {tol:.0%} in {s['iter_ratio_base_within']}/{n}), mltcp geo {s['iter_ratio_mltcp_geo']:.3f} "
        f"(within {tol:.0%} in {s['iter_ratio_mltcp_within']}/{n})"
    )


def _generate(specs: list[str], n: int, out: Path) -> list[Path]:
    from mltcp import suitegen

    dirs = []
    for spec in specs:
        parts = spec.split(":")
        if len(parts) not in (2, 3) or parts[0] not in NS3_BASES or (len(parts) == 3 and parts[2] != "compatible"):
            raise InputError(f"--generate: {spec!r} is not CC:SEED or CC:SEED:compatible (CC one of {NS3_BASES})")
        try:
            seed = int(parts[1])
        except ValueError:
            raise InputError(f"--generate: {spec!r}: the seed is not an integer") from None
        compat = len(parts) == 3
        d = out / f"{parts[0]}-{seed}{'-compatible' if compat else ''}"
        suitegen.generate(d, n, seed, cc=parts[0], compatible=compat)
        print(f"wrote {n} scenarios into {d}", file=sys.stderr)
        dirs.append(d)
    return dirs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="*", type=Path, help="suites written by mltcp scenarios generate")
    ap.add_argument("--generate", action="append", default=[], metavar="CC:SEED[:compatible]")
    ap.add_argument("--n", type=int, default=60, help="with --generate: scenarios per suite")
    ap.add_argument("--out", type=Path, default=Path("out/ns3-suite"), help="with --generate: where the suites go")
    ap.add_argument("--pick", type=int, default=20, help="scenarios per base algorithm")
    ap.add_argument("--seeds", default="1-3")
    ap.add_argument("--iterations", type=int, default=None, help="every job cut to this many (default: the file's)")
    ap.add_argument("--host-jitter", type=float, default=1.0, help="ns-3 host jitter, as --ns3-host-jitter")
    ap.add_argument("--ns3-recovery", default="prr-rfc", help="as mltcp simulate --ns3-recovery")
    ap.add_argument(
        "--fast-recovery",
        choices=("linux", "ns3"),
        default=None,
        help="diagnosis: the fast engine's loss_recovery (default: the file's, linux: RACK-TLP)",
    )
    ap.add_argument(
        "--ns3-linux-reno",
        action="store_true",
        help="diagnosis: ns-3's reno is TcpLinuxReno (ssthresh = cwnd / 2, as Linux) instead of TcpNewReno "
        "(ssthresh = bytes in flight / 2)",
    )
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument(
        "--config",
        type=json.loads,
        default={},
        help="MLTCP settings written into every MLTCP arm, JSON as bench/suite.py's --config",
    )
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--list", action="store_true", help="print the subset and stop")
    a = ap.parse_args(argv)
    try:
        from mltcp.sim.ns3_engine import Ns3Options

        seeds = parse_seeds(a.seeds)
        if a.iterations is not None and not 8 <= a.iterations <= 100_000:
            raise InputError(f"--iterations: {a.iterations} is not in 8..100000")
        if a.pick < 1:
            raise InputError(f"--pick: {a.pick} < 1")
        try:
            ns3_opt = Ns3Options(host_jitter=a.host_jitter, recovery=a.ns3_recovery, linux_reno=a.ns3_linux_reno)
        except ValueError as e:
            raise InputError(f"--host-jitter/--ns3-recovery: {e}") from None
        dirs = list(a.dirs) + (_generate(a.generate, a.n, a.out) if a.generate else [])
        if not dirs:
            raise InputError("no suite: give directories or --generate")
        subset = select(dirs, a.pick, a.iterations)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rule = (
        f"subset: per base algorithm {a.pick} scenarios split evenly over its directories, in each the ones with "
        "the fewest data segments per run (sum of bytes x iterations / mss)"
    )
    print(rule)
    for cc, entries in subset.items():
        for e in entries:
            print(
                f"  {cc:<5} {Path(e['path']).stem:<40} {e['segments']:>8} segments  {e['rate_gbps']:.3f} Gb/s  "
                f"{e['jobs']} jobs"
            )
    if a.list:
        if a.json:
            a.json.write_text(json.dumps({"rule": rule, "subset": subset}, indent=1))
        return 0
    from mltcp.sim import ns3_engine

    ok, why = ns3_engine.available()
    if not ok:
        print(f"error: {why}", file=sys.stderr)
        return 2
    total = sum(len(v) for v in subset.values()) * len(seeds) * len(ENGINES) * len(ARMS)
    counter, t0 = [0], time.perf_counter()
    report = {
        "rule": rule,
        "seeds": seeds,
        "iterations": a.iterations,
        "host_jitter": a.host_jitter,
        "ns3_recovery": a.ns3_recovery,
        "ns3_reno": "TcpLinuxReno" if a.ns3_linux_reno else "TcpNewReno",
        "fast_recovery": a.fast_recovery or "the scenario's",
        "config": a.config,
        "groups": {},
    }
    for cc, entries in subset.items():
        rows = [run_scenario(e, cc, seeds, a, ns3_opt, counter, total) for e in entries]
        report["groups"][cc] = {"rows": rows, "summary": summarize(rows, a.tolerance)}
    wall = time.perf_counter() - t0
    for cc, g in report["groups"].items():
        print_table(cc, g["rows"])
        print_summary(cc, g["summary"])
    its = f"{a.iterations} iterations per job" if a.iterations else "the files' iterations"
    print(
        f"\nseeds {a.seeds}; {its}; ns-3 host jitter {a.host_jitter}, recovery {a.ns3_recovery}, reno "
        f"{report['ns3_reno']}; fast engine "
        f"loss_recovery {a.fast_recovery or 'as the files (linux)'}; wall {wall:.0f} s"
    )
    report["wall_s"] = round(wall, 1)
    if a.json:
        a.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
