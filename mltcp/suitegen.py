"""Random scenario suites: scenarios nobody tuned for, drawn from documented distributions.

A suite is a folder of ordinary scenario TOMLs (``mltcp scenarios generate OUTDIR``). Every draw is
from the one :class:`numpy.random.Generator` seeded by ``--seed``, so a suite is reproducible from
its command line. The distributions (docs/references.md has the table):

- jobs: 2-5 (circular: 3-5), each communicating for 5-40 ms per iteration when alone on the network;
- the bottleneck: 100 Mb/s - 25 Gb/s and a 20 us - 2 ms base RTT, both log-uniform; a drop-tail
  buffer of 0.5-8 BDP, log-uniform, never below 30 KB (so at least ~20 packets);
- compatible suites (``--compatible``): equal periods, the jobs' communication shares sum to 0.5-0.95
  of the period, so a perfect interleave exists; otherwise periods spread +-10-25 % around the
  first job's and the shares sum to 0.5-1.3 (some suites' jobs cannot all fit);
- start offsets uniform over one period; compute jitter 0-5 % (general suites); a straggling job
  (probability 0.02-0.1 of a delay of 0.2-1 compute time) in a fifth of general scenarios;
- topologies: dumbbell (one shared bottleneck; in general suites a third of the jobs also cross an
  access link of their own, 1-4x faster, adding 0-1x the one-way delay), leaf-spine (2-3 leaves,
  each job from one leaf's uplink to another's downlink) and circular (job k crosses links k and k+1 of a ring);
- ECN by base algorithm: DCTCP a step at max(20 packets, 0.2 BDP); DCQCN RED with the 25G
  Kmin/Kmax (100/400 KB) scaled to the rate, Pmax 0.2, a buffer of at least 4 Kmax, 1000-byte MTU;
  Reno and CUBIC none, or with ``--ecn`` (ECN-Reno / ECN-CUBIC hosts) a step at max(20 packets,
  1 BDP) capped at half the buffer: a window halved at one BDP of queue still fills the link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tomli_w

from .scenario import BASES, ScenarioError, load

TOPOLOGIES = ("dumbbell", "leaf-spine", "circular")
ECN_OPTIONAL = ("reno", "cubic")  # the bases whose suites mark ECN only with --ecn
BUFFER_FLOOR_BYTES = 30_000
ITERATIONS, WARMUP = 40, 10


@dataclass(frozen=True)
class Draw:
    """One scenario's draw before it is written: the network and each job's timing."""

    rate_bps: float
    rtt_s: float
    buffer_bdp: float
    comm_s: list[float]  # each job's communication time alone
    period_s: list[float]  # each job's iteration time alone
    offset_s: list[float]
    jitter: list[float]
    straggler: list[tuple[float, float]]  # (probability, delay in s) per job


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def draw(rng: np.random.Generator, n_jobs: int, compatible: bool) -> Draw:
    rate = _log_uniform(rng, 100e6, 25e9)
    rtt = _log_uniform(rng, 20e-6, 2e-3)
    buf = _log_uniform(rng, 0.5, 8.0)
    comm = [float(rng.uniform(5e-3, 40e-3)) for _ in range(n_jobs)]
    if compatible:
        load_share = rng.uniform(0.5, 0.95)
        period = [sum(comm) / load_share] * n_jobs
        jitter = [0.0] * n_jobs
        strag = [(0.0, 0.0)] * n_jobs
    else:
        load_share = rng.uniform(0.5, 1.3)
        spread = [0.0] + [float(rng.choice([-1, 1]) * rng.uniform(0.10, 0.25)) for _ in range(n_jobs - 1)]
        # the first job's period sets the scale; the others' are spread around it
        base = sum(c / (1 + s) for c, s in zip(comm, spread)) / load_share
        period = [max(base * (1 + s), c * 1.05) for c, s in zip(comm, spread)]
        jitter = [float(rng.uniform(0.0, 0.05)) for _ in range(n_jobs)]
        strag = [(0.0, 0.0)] * n_jobs
        if rng.random() < 0.2:
            k = int(rng.integers(n_jobs))
            strag[k] = (float(rng.uniform(0.02, 0.1)), float(rng.uniform(0.2, 1.0)) * (period[k] - comm[k]))
    offsets = [0.0] + [float(rng.uniform(0.0, period[0])) for _ in range(n_jobs - 1)]
    return Draw(rate, rtt, buf, comm, period, offsets, jitter, strag)


def _ms(x: float) -> float:
    return round(x * 1e3, 4)


def _link(name: str, rate_bps: float, delay_s: float, buffer_bytes: float, ecn: dict) -> dict:
    return {
        "name": name,
        "rate_mbps": round(rate_bps / 1e6, 3),
        "delay_us": round(delay_s * 1e6, 3),
        "buffer_kb": round(buffer_bytes / 1e3, 3),
        **ecn,
    }


def _ecn(cc: str, rate_bps: float, bdp: float, mss: int, buffer_bytes: float, ecn: bool) -> dict:
    if cc == "dctcp":
        return {"ecn": "step", "ecn_k_kb": round(max(20 * mss, 0.2 * bdp) / 1e3, 3)}
    if cc == "dcqcn":
        scale = rate_bps / 25e9
        return {
            "ecn": "red",
            "red_kmin_kb": round(max(100 * scale, 5 * mss / 1e3), 3),
            "red_kmax_kb": round(max(400 * scale, 20 * mss / 1e3), 3),
            "red_pmax": 0.2,
        }
    if ecn:  # ECN-Reno / ECN-CUBIC
        return {"ecn": "step", "ecn_k_kb": round(max(20 * mss, min(bdp, buffer_bytes / 2)) / 1e3, 3)}
    return {}


def _topology_links(
    topology: str, d: Draw, n: int, rng: np.random.Generator, cc: str, mss: int, multi_link: bool, marks: bool
):
    """(links, each job's path): one-way delay split evenly over a path's hops."""
    bdp = d.rate_bps / 8 * d.rtt_s
    buf = max(d.buffer_bdp * bdp, BUFFER_FLOOR_BYTES)
    ecn = _ecn(cc, d.rate_bps, bdp, mss, buf, marks)
    if cc == "dcqcn":
        buf = max(buf, 4 * ecn["red_kmax_kb"] * 1e3)
    one_way = d.rtt_s / 2
    if topology == "dumbbell":
        links = [_link("bottleneck", d.rate_bps, one_way, buf, ecn)]
        paths = []
        for k in range(n):  # general suites: a third of the jobs also cross an access link of their own
            if multi_link and rng.random() < 1 / 3:
                links.append(_link(f"access{k}", d.rate_bps * rng.uniform(1, 4), one_way * rng.uniform(0, 1), buf, ecn))
                paths.append([f"access{k}", "bottleneck"])
            else:
                paths.append(["bottleneck"])
        return links, paths
    if topology == "leaf-spine":
        leaves = int(rng.integers(2, 4))
        links = [_link(f"up{x}", d.rate_bps, one_way / 2, buf, ecn) for x in range(leaves)]
        links += [_link(f"down{x}", d.rate_bps, one_way / 2, buf, ecn) for x in range(leaves)]
        paths = []
        for _ in range(n):
            src, dst = rng.choice(leaves, size=2, replace=False)
            paths.append([f"up{src}", f"down{dst}"])
        return links, paths
    links = [_link(f"l{x}", d.rate_bps, one_way / 2, buf, ecn) for x in range(n)]
    return links, [[f"l{k}", f"l{(k + 1) % n}"] for k in range(n)]


def scenario_dict(
    index: int, seed: int, cc: str, topology: str, compatible: bool, rng: np.random.Generator, ecn: bool = False
) -> dict:
    n = int(rng.integers(3 if topology == "circular" else 2, 6))
    d = draw(rng, n, compatible)
    mss = 1000 if cc == "dcqcn" else 1448
    links, paths = _topology_links(topology, d, n, rng, cc, mss, not compatible, ecn)
    step_us = float(np.clip(round(d.rtt_s * 1e6 / 8), 2, 20))
    jobs = []
    for k in range(n):
        job = {
            "name": chr(ord("A") + k),
            "compute_ms": _ms(d.period_s[k] - d.comm_s[k]),
            "bytes": int(d.comm_s[k] * d.rate_bps / 8),
            "path": paths[k],
        }
        if d.offset_s[k] > 0:
            job["start_offset_ms"] = _ms(d.offset_s[k])
        if d.jitter[k] > 0:
            job["jitter"] = round(d.jitter[k], 4)
        if d.straggler[k][0] > 0:
            job["straggler_prob"] = round(d.straggler[k][0], 4)
            job["straggler_delay_ms"] = _ms(d.straggler[k][1])
        jobs.append(job)
    kind = "compatible" if compatible else "general"
    desc = (
        f"Random {kind} {topology} scenario {index} of suite seed {seed} (mltcp scenarios generate): "
        f"{n} jobs, {d.rate_bps / 1e9:.3g} Gb/s, {d.rtt_s * 1e6:.0f} us RTT, {d.buffer_bdp:.2f} BDP buffer."
    )
    return {
        "name": f"rand-{cc}{'-ecn' if ecn else ''}-{topology}-{kind}-{seed}-{index:04d}",
        "description": desc,
        "seed": seed * 100_000 + index,
        "iterations": ITERATIONS,
        "warmup_iterations": WARMUP,
        "cc": cc,
        "network": {"mss": mss, "step_us": step_us, "min_rto_ms": 200},
        "links": links,
        "jobs": jobs,
    }


def generate(
    outdir: Path,
    n: int,
    seed: int,
    cc: str = "reno",
    topology: str = "dumbbell",
    compatible: bool = False,
    ecn: bool = False,
) -> list[Path]:
    """Write ``n`` scenarios into ``outdir`` (created); each is loaded back before the next is drawn,
    and a file the loader refuses is not kept (a ScenarioError names its field). ``ecn``: Reno or
    CUBIC hosts behind marking switches (DCTCP and DCQCN suites always mark)."""
    if cc not in BASES:
        raise ValueError(f"cc: unknown base algorithm {cc!r} (choose from {', '.join(BASES)})")
    if ecn and cc not in ECN_OPTIONAL:
        raise ValueError(f"ecn: {cc} suites always mark ECN; --ecn is for {' and '.join(ECN_OPTIONAL)}")
    if topology not in TOPOLOGIES:
        raise ValueError(f"topology: unknown {topology!r} (choose from {', '.join(TOPOLOGIES)})")
    rng = np.random.default_rng(seed)
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for i in range(n):
        d = scenario_dict(i, seed, cc, topology, compatible, rng, ecn)
        path = outdir / f"{d['name']}.toml"
        tmp = path.with_suffix(".toml.tmp")
        tmp.write_bytes(tomli_w.dumps(d).encode())
        try:
            load(str(tmp))
        except ScenarioError:
            tmp.unlink()
            raise
        tmp.replace(path)
        written.append(path)
    return written
