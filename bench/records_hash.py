"""One sha256 over the iteration records of a fixed list of simulations, to show that a change of
the engine's structure changes no result (not a test: it prints hashes to compare across commits).

The list covers the loop's code paths: every shipped scenario that runs in seconds (iterations
cut to ``--iterations``) and every tuned experiment (scenarios/tuned/, the tables tuned on them,
pinned without the online switch) with its base algorithm and the MLTCP variant; extra scenarios for what
no shipped one exercises (lossless PFC links, the fluid loss model, MLTCP's knobs: boundaries,
shapes, the scaled decrease, the window restart, DCQCN's ``dcqcn_f_*`` flags); and the run modes
(no slot skipping, chunked runs with progress reports, cwnd samples, rate traces).

Each case prints the sha256 of its records as ``mltcp.records.write_csv`` writes them and of its
run statistics (drops, marks, bytes, slots, timeouts, probes, pauses, traces); the last lines are
the hashes over every case. Run it at two commits (``git worktree add /tmp/base <commit>``):

    python bench/records_hash.py [--iterations 6] [--only two-jobs] [-v]
    cd /tmp/base && PYTHONPATH=/tmp/base python /work/main/bench/records_hash.py
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import mltcp
from mltcp.records import write_csv
from mltcp.scenario import Scenario, from_dict, load
from mltcp.sim.engine import simulate

SCENARIO_DIR = Path(mltcp.__file__).resolve().parent.parent / "scenarios"
# the shipped scenarios that run in seconds (not fat-tree-10k, thousand-jobs), a fixed list so that
# a scenario added later does not change the hash
SCENARIOS = """circular cubic-two-jobs-no-rack cubic-two-jobs dcqcn-two-jobs dctcp-three-jobs dctcp-two-jobs
holdout-deep-buffer holdout-five-jobs holdout-two-jobs-100m holdout-two-jobs-10g-shallow innet-dcqcn-partial-compat
innet-dcqcn-three-jobs innet-dcqcn-two-jobs innet-ecn-reno-partial-compat innet-ecn-reno-three-jobs
innet-ecn-reno-two-jobs ns3-dumbbell-100m-shared ns3-dumbbell-100m ns3-dumbbell-1g-deep ns3-dumbbell-1g-shallow
ns3-dumbbell-1g-shared-deep ns3-dumbbell-1g-shared-mid paper-like paper-slack partial-compat resnet50-pair
ring-allreduce straggler three-jobs-no-rack three-jobs two-jobs-no-rack two-jobs""".split()
SCENARIOS += [
    f"tuned/{n}"
    for n in """cubic-two-jobs-no-rack cubic-two-jobs dcqcn-two-jobs dctcp-three-jobs dctcp-two-jobs paper-slack
partial-compat straggler three-jobs-no-rack three-jobs two-jobs-no-rack two-jobs""".split()
]


def cut(sc: Scenario, iterations: int) -> Scenario:
    return dataclasses.replace(
        sc, jobs=[dataclasses.replace(j, iterations=min(j.iterations, iterations)) for j in sc.jobs]
    )


def with_hook(sc: Scenario, **knobs) -> Scenario:
    return dataclasses.replace(sc, mltcp_params={**sc.mltcp_params, **knobs})


def pfc_dumbbell(iterations: int) -> Scenario:
    lk = {
        "name": "bn",
        "rate_gbps": 1.0,
        "delay_us": 50,
        "pfc": True,
        "buffer_bdp": 1.0,
        "ecn": "step",
        "ecn_k_pkts": 5,
    }
    return from_dict(
        {
            "name": "pfc",
            "iterations": iterations,
            "warmup_iterations": 1,
            "links": [lk],
            "jobs": [
                {"name": f"J{i}", "compute_ms": 20, "bytes": 2_500_000, "path": ["bn"], "start_offset_ms": i}
                for i in range(2)
            ],
        },
        "<records_hash pfc>",
    )


def pfc_priority(iterations: int) -> Scenario:
    lk = {"name": "bn", "rate_gbps": 1.0, "delay_us": 50, "buffer_kb": 4000, "pfc": True}
    return from_dict(
        {
            "name": "pfc-priority",
            "iterations": iterations,
            "warmup_iterations": 0,
            "links": [lk],
            "switch_policy": "priority-by-progress",
            "switch": {"bands": 8, "priority_ecn": "off"},
            "jobs": [
                {"name": f"J{i}", "compute_ms": 5, "bytes": 1_000_000, "path": ["bn"], "start_offset_ms": i}
                for i in range(3)
            ],
        },
        "<records_hash pfc-priority>",
    )


def cases(iterations: int):
    """(label, scenario, cc, simulate keyword arguments) for every case."""
    for name in SCENARIOS:
        sc = cut(load(str(SCENARIO_DIR / f"{name}.toml")), iterations)
        yield name, sc, sc.cc, {}
        yield name, sc, f"mltcp-{sc.cc}", {}
    two = cut(load(str(SCENARIO_DIR / "two-jobs.toml")), iterations)
    for cc in ("cubic", "dctcp", "dcqcn", "mltcp-cubic", "mltcp-dctcp", "mltcp-dcqcn"):
        yield "two-jobs", two, cc, {}
    yield "two-jobs fluid", dataclasses.replace(two, loss_model="fluid"), "mltcp-reno", {}
    yield "two-jobs no-skip", two, "mltcp-reno", {"skip": False}
    yield "two-jobs progress", two, "mltcp-cubic", {"progress": lambda t, f: None}
    yield "two-jobs cwnd-samples", two, "reno", {"cwnd_sample_s": 0.01}
    yield "two-jobs trace", two, "mltcp-reno", {"trace_interval": 0.005}
    knobs = {
        "mark": {"boundary": "mark"},
        "tx_start": {"boundary": "tx_start", "idle_gap": "min2"},
        "capped": {"shape": "capped", "cap": 1.5},
        "convex": {"shape": "convex", "exponent": 3.0},
        "scaled-decrease": {"scale_decrease": True, "decrease_at_start": 0.7, "decrease_at_end": 0.3},
        "restart": {"restart_window": 10.0, "history": 1},
    }
    for label, kw in knobs.items():
        for cc in ("mltcp-reno", "mltcp-cubic"):
            yield f"two-jobs {label}", with_hook(two, **kw), cc, {}
    dcqcn = cut(load(str(SCENARIO_DIR / "dcqcn-two-jobs.toml")), iterations)
    flags = {"dcqcn_f_recovery": True, "dcqcn_f_steps": True, "dcqcn_f_timer": True, "dcqcn_f_rai": False}
    yield "dcqcn-two-jobs f-flags", with_hook(dcqcn, **flags), "mltcp-dcqcn", {}
    yield "dcqcn-two-jobs scaled-decrease", with_hook(dcqcn, scale_decrease=True), "mltcp-dcqcn", {}
    for cc in ("reno", "cubic", "dcqcn", "mltcp-reno"):
        yield "pfc", pfc_dumbbell(iterations), cc, {}
    for cc in ("dcqcn", "mltcp-dcqcn", "reno"):
        yield "pfc-priority", pfc_priority(iterations), cc, {}


def stats_bytes(r) -> bytes:
    """The run's statistics and traces, as bytes (hashed beside the records)."""
    nums = np.array(
        [
            r.drops,
            r.ecn_marks,
            r.sim_time,
            r.steps,
            r.bytes_sent,
            r.bytes_acked,
            r.bytes_in_flight,
            r.slots,
            r.timeouts,
            r.probes,
            r.pfc_pause_s,
            r.reordered,
        ],
        dtype=np.float64,
    )
    parts = [nums.tobytes(), np.ascontiguousarray(r.trace_t).tobytes(), np.ascontiguousarray(r.trace_rate).tobytes()]
    if r.cwnd_trace is not None:
        parts.append(np.ascontiguousarray(r.cwnd_trace).tobytes())
    return b"".join(parts)


def records_bytes(records, folder: Path) -> bytes:
    path = folder / "records.csv"
    write_csv(records, path)
    return path.read_bytes()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=6, help="iterations per job (cut from the scenario's)")
    ap.add_argument("--only", default="", help="run the cases whose label starts with this")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each case's wall time")
    a = ap.parse_args(argv)
    all_records, all_stats = hashlib.sha256(), hashlib.sha256()
    n = 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for label, sc, cc, kw in cases(a.iterations):
            if a.only and not label.startswith(a.only):
                continue
            w = time.perf_counter()
            r = simulate(sc, cc, **kw)
            rec, st = records_bytes(r.records, Path(tmp)), stats_bytes(r)
            all_records.update(rec)
            all_stats.update(st)
            n += 1
            extra = f"  {time.perf_counter() - w:6.2f} s" if a.verbose else ""
            print(
                f"{hashlib.sha256(rec).hexdigest()[:16]} {hashlib.sha256(st).hexdigest()[:16]}  "
                f"{label:<34} {cc:<12} {len(r.records):4d} records{extra}",
                flush=True,
            )
    print(f"cases {n}, {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(f"records sha256 {all_records.hexdigest()}")
    print(f"stats   sha256 {all_stats.hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
