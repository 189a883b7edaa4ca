"""A sweep of many short simulations (scenarios x arms x seeds) on Dask: 2 workers against 1 on this
machine, with an embedded LocalCluster started inside the time, and through a separately started
``dask scheduler`` + 1 or 2 ``dask worker`` processes over TCP loopback, already up (as a cluster
runs a sweep; records must equal the embedded run's), that pair repeated since this machine's speed
drifts; the same work in a plain process pool for comparison. Also: the cost of one run
(wall time, memory), and a worker's first run with numba's cache warm and with it empty.

    .venv/bin/python bench/bench_sweep.py                 # 1,000 runs (about 16 minutes on 2 idle cores)
    .venv/bin/python bench/bench_sweep.py --runs 40       # a quick check that it works

Timings are ratios measured in one run, on whatever else the machine is doing: run it idle.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from mltcp import sweep

SCENARIOS = ["two-jobs", "three-jobs", "partial-compat", "straggler", "circular"]
ARMS = ["reno", "mltcp-reno", "cubic", "mltcp-cubic"]


def make_tasks(runs: int, iterations: int) -> list[sweep.Task]:
    seeds = max(1, runs // (len(SCENARIOS) * len(ARMS)))
    return sweep.tasks_for(SCENARIOS, ARMS, list(range(1, seeds + 1)), iterations)[:runs]


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def first_run_in_a_fresh_process(task: sweep.Task, cache_dir: str | None) -> float:
    """Seconds from a new interpreter's start to the end of one run (imports, numba load or compile)."""
    env = dict(os.environ)
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    code = (
        "import time; t = time.perf_counter(); from mltcp import sweep; "
        f"sweep.run_task(sweep.Task({task.scenario!r}, {task.arm!r}, {task.seed}, {task.iterations})); "
        "print(time.perf_counter() - t)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(r.stdout.strip().splitlines()[-1])


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def worker_rss_mb(address: str) -> list[float]:
    from distributed import Client

    with Client(address, timeout=10) as c:
        return sorted(c.run(_rss_mb).values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1000, help="runs in the sweep (scenarios x arms x seeds)")
    ap.add_argument(
        "--iterations",
        type=int,
        default=300,
        help="iterations per run (the scenarios cut to this; 300: about 0.2 s a run on an idle core)",
    )
    ap.add_argument("--repeat", type=int, default=2, help="times the 1-vs-2 pair on clusters already up is timed")
    ap.add_argument("--pool-runs", type=int, default=200, help="runs timed in this process vs a pool of 2")
    ap.add_argument("--no-cold", action="store_true", help="skip the empty-cache compile measurement (~1-2 min)")
    a = ap.parse_args()
    tasks = make_tasks(a.runs, a.iterations)
    print(
        f"sweep: {len(tasks)} runs = {len(SCENARIOS)} scenarios x {len(ARMS)} arms x "
        f"{len(tasks) // (len(SCENARIOS) * len(ARMS))} seeds, {a.iterations} iterations each; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    res: dict = {"runs": len(tasks), "iterations": a.iterations, "load_before": os.getloadavg()[0]}

    # one run's cost, here (the cache warm after the first)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sweep.run_tasks(tasks[: len(ARMS)], workers=1, progress=False)
    sample = tasks[: min(40, len(tasks))]
    t, recs = timed(lambda: sweep.run_tasks(sample, workers=1, progress=False))
    res["per_run_s"] = t / len(sample)
    res["per_run_sim_s"] = sum(r["wall_s"] for r in recs) / len(recs)
    res["rss_growth_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    res["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"one run in process: {res['per_run_s'] * 1e3:.0f} ms ({res['per_run_sim_s'] * 1e3:.0f} ms in the simulator); "
        f"process peak RSS {res['rss_mb']:.0f} MB (+{res['rss_growth_mb']:.0f} MB for the runs)",
        flush=True,
    )

    # a new worker process's first run: numba's cache warm vs empty
    res["fresh_process_warm_cache_s"] = first_run_in_a_fresh_process(tasks[1], None)
    print(f"fresh process, first run, cache warm: {res['fresh_process_warm_cache_s']:.1f} s", flush=True)
    if not a.no_cold:
        with tempfile.TemporaryDirectory() as empty:
            res["fresh_process_cold_cache_s"] = first_run_in_a_fresh_process(tasks[1], empty)
        print(
            f"fresh process, first run, cache empty (compiles): {res['fresh_process_cold_cache_s']:.1f} s", flush=True
        )

    # the sweep: 1 Dask worker, 2 Dask workers (each a LocalCluster started and closed inside the time)
    t1, one = timed(lambda: sweep.run_tasks(tasks, workers=1, engine="dask", progress=True))
    print(f"embedded LocalCluster, 1 worker:  {t1:.1f} s", flush=True)
    t2, two = timed(lambda: sweep.run_tasks(tasks, workers=2, engine="dask", progress=True))
    print(f"embedded LocalCluster, 2 workers: {t2:.1f} s -> {t1 / t2:.2f}x", flush=True)
    res.update(
        dask_1_worker_s=t1, dask_2_workers_s=t2, speedup_2_vs_1=t1 / t2, identical_1_vs_2=sweep.records_equal(one, two)
    )

    # the same sweep through a separately started scheduler + 1, then 2 workers over TCP loopback, as a
    # cluster runs it: each cluster up and warm (one run per worker) before the clock starts; the pair
    # timed --repeat times, 1 and 2 alternating, since this machine's speed drifts by 10-20 % over minutes
    from mltcp.dask_local import LoopbackCluster

    up: dict[int, list[float]] = {1: [], 2: []}
    for rep in range(a.repeat):
        for n in (1, 2):
            with LoopbackCluster(workers=n) as c:
                sweep.run_tasks(tasks[:n], scheduler=c.address, progress=False)
                t, ext = timed(lambda: sweep.run_tasks(tasks, scheduler=c.address, progress=True))
                up[n].append(t)
                sweep.close_clients()
                if n == 2 and rep == 0:
                    res["worker_rss_mb"] = worker_rss_mb(c.address)
                    res["identical_tcp_vs_embedded"] = sweep.records_equal(ext, two)
            print(f"[{rep + 1}] dask scheduler + {n} dask worker(s) over TCP, already up: {t:.1f} s", flush=True)
    pairs = [one_s / two_s for one_s, two_s in zip(up[1], up[2])]
    res.update(
        tcp_1_worker_s=up[1],
        tcp_2_workers_s=up[2],
        tcp_speedup_2_vs_1_each=pairs,
        tcp_speedup_2_vs_1=sorted(pairs)[len(pairs) // 2] if len(pairs) % 2 else sum(pairs) / len(pairs),
        failed=sum(not r["ok"] for r in two),
    )
    print(
        f"clusters already up: 2 workers vs 1 {res['tcp_speedup_2_vs_1']:.2f}x "
        f"(pairs: {', '.join(f'{p:.2f}' for p in pairs)}); "
        f"records identical to the embedded run: {res['identical_tcp_vs_embedded']}; "
        f"worker RSS after the sweep {', '.join(f'{m:.0f}' for m in res['worker_rss_mb'])} MB",
        flush=True,
    )

    # the same work without Dask, for comparison: part of the sweep in this process, then in a plain
    # pool of 2 forked processes (one submit per run), timed the same way
    part = tasks[: min(len(tasks), a.pool_runs)]
    c1, _ = timed(lambda: sweep.run_tasks(part, workers=1, progress=False))
    c2, _ = timed(lambda: sweep.run_tasks(part, workers=2, engine="processes", progress=False))
    res.update(pool_runs=len(part), pool_1_s=c1, pool_2_s=c2, pool_2_vs_1=c1 / c2)
    print(
        f"without Dask: {len(part)} runs in this process {c1:.1f} s, "
        f"in a pool of 2 processes {c2:.1f} s -> {c1 / c2:.2f}x"
    )
    res["load_after"] = os.getloadavg()[0]
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()}))


if __name__ == "__main__":
    main()
