"""Simulator speed (not a test: prints what it measures, as ratios taken in one run).

1. JIT: the engine is compiled by numba on first use and cached on disk; timed in fresh
   processes, once with an empty cache (compile) and once with the cache (load).
2. The issue-9 case -- two jobs on a 100 Mb/s dumbbell, 2.2 ms RTT, 100-packet drop-tail, 0.2 s
   compute + 2.5 MB per iteration, job B +10 ms, 20 iterations -- with Reno and CUBIC, in the fast
   engine (warm: best of 3) and in ns-3 (``mltcp.sim.ns3_engine``, when it imports), same run.
3. Two flows at 1 Gb/s (the two-jobs scenario): simulated seconds per wall second.
4. N jobs in pairs, each pair on its own 1 Gb/s link (jobs/sim s/wall s/slots per second).
5. 10,000 jobs on a k = 28 fat-tree with ECMP, 10 iterations (the fat-tree-10k scenario when
   it ships with the package, otherwise the same fabric built here), in the scenario's cc (reno)
   unless --fat-tree-cc: wall and CPU time split into scenario load (fabric, ECMP routes, job
   expansion), engine setup + records, and the compiled loop; the total wall time against the
   issue's 60 s, printed as measured (with the load average: the machine is shared).

    python bench/bench_sim.py [--no-ns3] [--jobs 2,10,100,1000] [--fat-tree-k 28] [--skip-jit]
    python bench/bench_sim.py --only-fat-tree [--fat-tree-cc mltcp-reno] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import zlib

from rich.console import Console
from rich.table import Table

from mltcp import metrics
from mltcp.scenario import Link, builtin_names, from_dict, load
from mltcp.sim.engine import simulate
from mltcp.workload import Job

con = Console(width=200)


def ns3_case(iterations: int = 20):
    return from_dict(
        {
            "name": "ns3-case",
            "iterations": iterations,
            "warmup_iterations": 2,
            "links": [{"name": "bn", "rate_mbps": 100, "delay_us": 1100, "buffer_pkts": 100}],
            "jobs": [
                {"name": "A", "compute_ms": 200, "bytes": 2_500_000, "path": ["bn"]},
                {"name": "B", "compute_ms": 200, "bytes": 2_500_000, "path": ["bn"], "start_offset_ms": 10},
            ],
        },
        "<bench ns3-case>",
    )


def pairs(n_jobs: int, iterations: int):
    return from_dict(
        {
            "name": f"bench-{n_jobs}",
            "iterations": iterations,
            "warmup_iterations": 1,
            "links": [
                {"name": "link", "count": max(2, n_jobs // 2), "rate_gbps": 1.0, "delay_us": 50, "buffer_bdp": 4.0}
            ],
            "jobs": [
                {
                    "name": "job",
                    "count": n_jobs,
                    "share": 2,
                    "stagger_ms": 0.5,
                    "compute_ms": 20,
                    "bytes": 2_500_000,
                    "path": ["link{g}"],
                }
            ],
        },
        f"<bench {n_jobs}>",
    )


def fat_tree_jobs(k: int, n_jobs: int = 10_000, iterations: int = 10):
    """fat-tree-10k: a k-ary fat-tree of 1 Gb/s links (10 us, 100 packets); jobs a{i}, b{i} send
    from host i to host i + H/2 across the core, b 1 ms later; ECMP picks the aggregation and
    core switch from a hash of the flow."""
    if "fat-tree-10k" in builtin_names() and k == 28:
        sc = load("fat-tree-10k")
        return sc, "scenarios/fat-tree-10k.toml"
    base = from_dict(
        {
            "name": "fat-tree",
            "iterations": iterations,
            "warmup_iterations": 2,
            "links": [{"name": "x", "rate_gbps": 1, "delay_us": 10, "buffer_pkts": 100}],
            "jobs": [{"name": "x", "compute_ms": 20, "bytes": 2_500_000, "path": ["x"]}],
        },
        "<bench fat-tree>",
    )
    h = k // 2
    hosts = k**3 // 4
    links: dict[str, Link] = {}

    def link(name):
        if name not in links:
            links[name] = Link(name, 1e9, 10e-6, 100 * base.mss)
        return name

    def path(src, dst, key):
        hsh = zlib.crc32(key.encode())
        ps, es = divmod(src // h, h)  # pod, edge switch of each host
        pd, ed = divmod(dst // h, h)
        a, c = hsh % h, (hsh // h) % h  # aggregation index, core index within its group
        return [
            link(f"h{src}-e{ps}.{es}"),
            link(f"e{ps}.{es}-a{ps}.{a}"),
            link(f"a{ps}.{a}-c{a}.{c}"),
            link(f"c{a}.{c}-a{pd}.{a}"),
            link(f"a{pd}.{a}-e{pd}.{ed}"),
            link(f"e{pd}.{ed}-h{dst}"),
        ]

    jobs = []
    for i in range(n_jobs // 2):
        for name, off in (("a", 0.0), ("b", 1e-3)):
            p = path(i, (i + hosts // 2) % hosts, f"{name}{i}")
            jobs.append(Job(f"{name}{i}", 0.02, 2_500_000, p, start_offset_s=off, iterations=iterations))
    base.links, base.jobs = links, jobs
    return base, f"k = {k} fat-tree built in bench (fat-tree-10k is not a built-in scenario here)"


def jit_times(skip: bool) -> None:
    if skip:
        con.print("JIT timing skipped (--skip-jit)")
        return
    code = (
        "import time; t = time.perf_counter(); from mltcp.sim.engine import simulate; "
        "import sys; sys.path.insert(0, %r); from bench_sim import ns3_case; "
        "r = simulate(ns3_case(3), 'mltcp-reno'); print(time.perf_counter() - t)"
    ) % os.path.dirname(__file__)
    t = Table(title="JIT (fresh process: import + first 3-iteration run)", title_justify="left")
    for c in ("numba cache", "wall s"):
        t.add_column(c, justify="right")
    with tempfile.TemporaryDirectory(prefix="mltcp-bench-jit-") as d:
        for label, env in (
            ("empty (compile)", {"NUMBA_CACHE_DIR": d}),
            ("filled by the run above (load)", {"NUMBA_CACHE_DIR": d}),
            ("the package's own", {}),
        ):
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env})
            t.add_row(label, f"{float(p.stdout):.2f}" if p.returncode == 0 else f"failed: {p.stderr.strip()[-200:]}")
    con.print(t)


def timed(fn):
    """(wall s, CPU s of this process, result): on a shared machine CPU time is what the code costs."""
    w, c = time.perf_counter(), time.process_time()
    r = fn()
    return time.perf_counter() - w, time.process_time() - c, r


def best_of(n, fn):
    runs = [timed(fn) for _ in range(n)]
    return min(x[0] for x in runs), min(x[1] for x in runs), runs[-1][2]


def vs_ns3(use_ns3: bool, iterations: int) -> None:
    reason = ""
    ns3 = None
    if not use_ns3:
        reason = "--no-ns3 given"
    else:
        try:
            from mltcp.sim import ns3_engine as ns3
        except ImportError as e:
            reason = f"mltcp.sim.ns3_engine does not import ({e})"
        else:
            ok, why = ns3.available() if hasattr(ns3, "available") else (True, "")
            if not ok:
                ns3, reason = None, why
    t = Table(
        title=f"issue-9 case: 2 jobs, 100 Mb/s, 2.2 ms RTT, 100-pkt drop-tail, {iterations} iterations",
        title_justify="left",
    )
    for c in (
        "cc",
        "fast wall / CPU s (warm, best of 3)",
        "ns-3 wall / CPU s",
        "ns-3 / fast (wall, CPU)",
        "fast avg iter ms",
        "ns-3 avg iter ms",
        "fast drops",
        "ns-3 drops",
        "slots processed / all",
    ):
        t.add_column(c, justify="right")
    for cc in ("reno", "cubic"):
        sc = ns3_case(iterations)
        simulate(sc, cc)  # JIT / cache load outside the timing
        fast_w, fast_c, r = best_of(3, lambda: simulate(sc, cc))
        f_avg = metrics.summary(r.records, sc.warmup_iterations)["avg_iter_s"] * 1e3
        row = [cc, f"{fast_w:.4f} / {fast_c:.4f}"]
        if ns3 is not None:
            ns_w, ns_c, n = timed(lambda: ns3.run(sc, cc))
            n_avg = metrics.summary(n.records, sc.warmup_iterations)["avg_iter_s"] * 1e3
            row += [
                f"{ns_w:.2f} / {ns_c:.2f}",
                f"{ns_w / fast_w:,.0f}x, {ns_c / fast_c:,.0f}x",
                f"{f_avg:.1f}",
                f"{n_avg:.1f}",
                f"{r.drops:.0f}",
                f"{n.drops:.0f}",
            ]
        else:
            row += ["-", "-", f"{f_avg:.1f}", "-", f"{r.drops:.0f}", "-"]
        row.append(f"{r.steps:,} / {r.slots:,}")
        t.add_row(*row)
    con.print(t)
    if ns3 is None:
        con.print(f"ns-3 not run: {reason}")


def real_time() -> None:
    sc = load("two-jobs")
    simulate(sc, "reno")
    t = Table(title="two flows at 1 Gb/s (two-jobs, 60 iterations): speed against real time", title_justify="left")
    for c in ("cc", "simulated s", "wall / CPU s (best of 3)", "x real time (wall, CPU)"):
        t.add_column(c, justify="right")
    for cc in ("reno", "mltcp-reno", "cubic", "mltcp-cubic", "dcqcn"):
        w, c, r = best_of(3, lambda: simulate(sc, cc))
        t.add_row(cc, f"{r.sim_time:.3f}", f"{w:.4f} / {c:.4f}", f"{r.sim_time / w:,.0f}, {r.sim_time / c:,.0f}")
    con.print(t)


def scale(jobs: str, iterations: int, cc: str) -> None:
    t = Table(title=f"jobs in pairs on 1 Gb/s links ({cc}, {iterations} iterations per job)", title_justify="left")
    for c in ("jobs", "simulated s", "wall s", "CPU s", "sim s / CPU s", "slots processed / CPU s", "packets / CPU s"):
        t.add_column(c, justify="right")
    for n in (int(x) for x in jobs.split(",")):
        sc = pairs(n, iterations)
        wall, cpu, r = timed(lambda: simulate(sc, cc))
        t.add_row(
            str(n),
            f"{r.sim_time:.3f}",
            f"{wall:.3f}",
            f"{cpu:.3f}",
            f"{r.sim_time / cpu:.2f}",
            f"{r.steps / cpu:,.0f}",
            f"{r.bytes_sent / sc.mss / cpu:,.0f}",
        )
    con.print(t)


def fat_tree(k: int, cc: str | None, repeats: int = 1) -> None:
    simulate(ns3_case(3), "reno")  # JIT cache load outside the timing
    rows = []
    for _ in range(repeats):
        load_avg = os.getloadavg()[0]
        built, built_c, (sc, origin) = timed(lambda: fat_tree_jobs(k))
        algo = cc or sc.cc
        run, run_c, r = timed(lambda: simulate(sc, algo))
        rows.append((load_avg, built, built_c, run, run_c, r))
    flows = sum(len(j.paths()) for j in sc.jobs)
    s = metrics.summary(r.records, sc.warmup_iterations)
    t = Table(
        title=f"{len(sc.jobs):,} jobs ({flows:,} flows) on {len(sc.links):,} directed links, "
        f"{sc.jobs[0].iterations} iterations, {algo}",
        title_justify="left",
    )
    for c in (
        "load avg",
        "scenario load wall / CPU s",
        "engine setup + records wall s",
        "compiled loop wall s",
        "simulate CPU s",
        "total wall / CPU s",
        "total wall < 60 s",
        "simulated s",
        "iterations",
        "avg iter ms",
        "drops",
    ):
        t.add_column(c, justify="right")
    for load_avg, built, built_c, run, run_c, r in rows:
        total = built + run
        t.add_row(
            f"{load_avg:.1f}",
            f"{built:.2f} / {built_c:.2f}",
            f"{run - r.loop_time:.2f}",
            f"{r.loop_time:.2f}",
            f"{run_c:.2f}",
            f"{total:.2f} / {built_c + run_c:.2f}",
            "yes" if total < 60 else "no",
            f"{r.sim_time:.3f}",
            f"{len(r.records):,}",
            f"{s['avg_iter_s'] * 1e3:.1f}",
            f"{r.drops:,.0f}",
        )
    con.print(t)
    con.print(
        f"fabric: {origin}; {os.cpu_count()} CPUs; wall time on this shared machine follows its load "
        f"(CPU s is what the run costs)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default="2,10,100,1000")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--ns3-iterations", type=int, default=20)
    ap.add_argument("--cc", default="mltcp-reno")
    ap.add_argument("--no-ns3", action="store_true")
    ap.add_argument("--skip-jit", action="store_true")
    ap.add_argument("--fat-tree-k", type=int, default=28, help="0: no fat-tree run")
    ap.add_argument("--fat-tree-cc", default=None, help="default: the scenario's cc (fat-tree-10k: reno)")
    ap.add_argument("--only-fat-tree", action="store_true", help="run the fat-tree section only")
    ap.add_argument("--repeats", type=int, default=1, help="fat-tree runs (one row each)")
    a = ap.parse_args()
    con.print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (timings are noisy on a shared machine)")
    if not a.only_fat_tree:
        jit_times(a.skip_jit)
        vs_ns3(not a.no_ns3, a.ns3_iterations)
        real_time()
        if a.jobs:
            scale(a.jobs, a.iterations, a.cc)
    if a.fat_tree_k:
        fat_tree(a.fat_tree_k, a.fat_tree_cc, a.repeats)


if __name__ == "__main__":
    main()
