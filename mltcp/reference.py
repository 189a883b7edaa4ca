"""Centralized references: what a scheduler that sees every job could give them.

MLTCP is a distributed way to approximate centralized flow scheduling, so it is measured against
centralized schedules run on the same scenario, with the jobs' own compute times (the same draws,
jitter and stragglers as the simulator's, from the scenario's seed):

- ``ref-fifo`` (ideal serializer): each communication phase holds every link of its job's paths
  while its bytes cross at the job's bottleneck rate, and ends one base RTT later (its time
  alone); phases are granted in the order they become ready, and a
  later phase goes first when the links it needs are free and an earlier one is still waiting
  for others (greedy list scheduling). On one bottleneck this is FIFO by phase start.
- ``ref-srf``: the same, granting the waiting phase with the shortest time alone first.
- ``ref-fair``: ideal fair sharing: the communicating jobs' bytes cross at their max-min fair rates
  (each at most its rate alone) with no loss and no slow start, each phase ending one base RTT
  after its last byte. Against the base it shows what the base loses to its transport (losses,
  ramp-up, an under-used link); against the serializers, what scheduling alone gains.
- ``ref-cassini``: CASSINI-style time shifts (Rajasekaran et al., "CASSINI: Network-Aware Job
  Scheduling in Machine Learning Clusters", NSDI'24): a central optimizer places each job's start
  offset on the circle of its period so its communication overlaps least with the jobs already
  placed that share a link with it (jobs in order of communication share, as the affinity graph's
  traversal does), then the jobs run the base congestion control in the simulator.
- ``ref-best``: per scenario, the best (lowest steady-state average iteration time) of ref-fifo,
  ref-srf, ref-fair, ref-cassini and the base congestion control's own run: a central scheduler can always
  choose the base's own sharing, so this reference is never worse than the base. It reports which
  one it took (``reference_pick``).

The serializers are not bounds on every schedule (fair sharing can beat serializing when periods
differ); ref-best is the reference the suites measure MLTCP's gain against.
"""

from __future__ import annotations

import copy
import heapq
from dataclasses import replace

import numpy as np

from . import compare
from .records import IterationRecord
from .scenario import Scenario

REFERENCES = ("fifo", "srf", "fair", "cassini", "best")
CANDIDATES = REFERENCES[:-1]  # what ref-best chooses from, beside the base's own run


def compute_draws(sc: Scenario) -> list[np.ndarray]:
    """Each job's compute times, drawn exactly as the simulator draws them (one Generator seeded
    by the scenario's seed, jobs in order)."""
    rng = np.random.default_rng(sc.seed)
    return [j.compute_times(rng, j.iterations) for j in sc.jobs]


def link_hold_s(sc: Scenario) -> list[float]:
    """How long each job's phase keeps its links busy: its bytes at its bottleneck rate."""
    return [j.bytes_per_iter / sc.bottleneck_Bps(j) for j in sc.jobs]


def comm_alone_s(sc: Scenario) -> list[float]:
    """Each job's communication phase alone: its link hold plus one base RTT (the last byte's ACK)."""
    return [h + sc.base_rtt(j) for h, j in zip(link_hold_s(sc), sc.jobs)]


def job_links(sc: Scenario) -> list[frozenset[str]]:
    return [frozenset(h for p in j.paths() for h in p) for j in sc.jobs]


def serialize(sc: Scenario, order: str = "fifo") -> list[IterationRecord]:
    """Iteration records of the ideal serializer (``order``: fifo or srf; module docstring)."""
    comp, comm, hold, need = compute_draws(sc), comm_alone_s(sc), link_hold_s(sc), job_links(sc)
    busy: dict[str, float] = {}  # link -> time it becomes free
    ready: list[tuple[float, int, int]] = []  # (ready time, job, iteration) of computing jobs
    for j, job in enumerate(sc.jobs):
        heapq.heappush(ready, (job.start_offset_s + comp[j][0], j, 0))
    waiting: list[tuple[float, int, int]] = []
    running: list[tuple[float, int, int, float]] = []  # (end, job, iteration, comm start)
    start = {j: job.start_offset_s for j, job in enumerate(sc.jobs)}
    records: list[IterationRecord] = []
    key = (lambda w: (w[0], w[1])) if order == "fifo" else (lambda w: (comm[w[1]], w[0], w[1]))
    now = 0.0
    while ready or waiting or running:
        events = [ready[0][0]] if ready else []
        if running:
            events.append(running[0][0])
        if waiting:  # a waiting phase may start when a link frees, before the holder's last ACK
            events += [t for t in busy.values() if t > now]
        now = max(now, min(events))
        while ready and ready[0][0] <= now:
            waiting.append(heapq.heappop(ready))
        while running and running[0][0] <= now:
            end, j, k, cs = heapq.heappop(running)
            records.append(IterationRecord(sc.jobs[j].name, k, start[j], cs, end, sc.jobs[j].bytes_per_iter))
            start[j] = end
            if k + 1 < sc.jobs[j].iterations:
                heapq.heappush(ready, (end + comp[j][k + 1], j, k + 1))
        for w in sorted(waiting, key=key):
            t, j, k = w
            if all(busy.get(h, 0.0) <= now for h in need[j]):
                for h in need[j]:
                    busy[h] = now + hold[j]
                heapq.heappush(running, (now + comm[j], j, k, now))
                waiting.remove(w)
    records.sort(key=lambda r: (r.end, r.job))
    return records


def max_min_rates(
    active: list[int], need: list[frozenset[str]], job_cap: list[float], link_cap: dict[str, float]
) -> dict[int, float]:
    """Max-min fair rates (bytes/s) of the active jobs by progressive filling: every job not yet
    frozen rises at the same level until a link it crosses is full or it reaches its rate alone."""
    rate: dict[int, float] = {}
    todo = set(active)
    while todo:
        used = {h: sum(r for j, r in rate.items() if h in need[j]) for h in link_cap}
        users = {h: [j for j in todo if h in need[j]] for h in link_cap}
        level = min([job_cap[j] for j in todo] + [(link_cap[h] - used[h]) / len(u) for h, u in users.items() if u])
        full = {h for h, u in users.items() if u and (link_cap[h] - used[h]) / len(u) <= level * (1 + 1e-12)}
        frozen = {j for j in todo if job_cap[j] <= level * (1 + 1e-12) or need[j] & full}
        for j in frozen:
            rate[j] = level
        todo -= frozen
    return rate


def fair_share(sc: Scenario) -> list[IterationRecord]:
    """Iteration records of ideal fair sharing: every communicating job's bytes cross at its max-min
    fair rate (at most its rate alone), recomputed whenever a phase starts or its bytes are done,
    and its phase ends one base RTT after its last byte. A job is one aggregate over its paths' links."""
    comp, need = compute_draws(sc), job_links(sc)
    job_cap = [sc.bottleneck_Bps(j) for j in sc.jobs]
    link_cap = {h: sc.links[h].rate_Bps for h in set().union(*need)}
    rtt = [sc.base_rtt(j) for j in sc.jobs]
    ready = [(job.start_offset_s + comp[j][0], j, 0) for j, job in enumerate(sc.jobs)]
    heapq.heapify(ready)
    left: dict[int, float] = {}  # job -> bytes still to cross
    it, comm_start = {}, {}
    start = {j: job.start_offset_s for j, job in enumerate(sc.jobs)}
    tails: list[tuple[float, int]] = []  # (phase end, job): last byte across, ACK on its way
    records: list[IterationRecord] = []
    now, rate = 0.0, {}
    while ready or left or tails:
        t = min(
            [now + left[j] / rate[j] for j in left]
            + ([ready[0][0]] if ready else [])
            + ([tails[0][0]] if tails else [])
        )
        for j in left:
            left[j] -= rate[j] * (t - now)
        now = t
        for j in [j for j in left if left[j] <= 1e-9 * sc.jobs[j].bytes_per_iter]:
            del left[j]
            heapq.heappush(tails, (now + rtt[j], j))
        while tails and tails[0][0] <= now:
            end, j = heapq.heappop(tails)
            k = it[j]
            records.append(IterationRecord(sc.jobs[j].name, k, start[j], comm_start[j], end, sc.jobs[j].bytes_per_iter))
            start[j] = end
            if k + 1 < sc.jobs[j].iterations:
                heapq.heappush(ready, (end + comp[j][k + 1], j, k + 1))
        while ready and ready[0][0] <= now:
            _, j, k = heapq.heappop(ready)
            left[j], it[j], comm_start[j] = sc.jobs[j].bytes_per_iter, k, now
        rate = max_min_rates(list(left), need, job_cap, link_cap)
    records.sort(key=lambda r: (r.end, r.job))
    return records


def _overlap_on_circle(a0: float, a_len: float, b0: float, b_len: float, period: float) -> float:
    """Length of the overlap of two arcs [a0, a0+a_len) and [b0, b0+b_len) on a circle."""
    total = 0.0
    for shift in (-period, 0.0, period):
        lo, hi = max(a0, b0 + shift), min(a0 + a_len, b0 + b_len + shift)
        total += max(0.0, hi - lo)
    return total


def cassini_offsets(sc: Scenario, grid: int = 200) -> list[float]:
    """Start offsets (s) that a CASSINI-like central optimizer picks (module docstring). Jobs with
    different periods share the circle of the longest; each later job tries ``grid`` shifts."""
    comm, need = comm_alone_s(sc), job_links(sc)
    period = [sc.ideal_iter_s(j) for j in sc.jobs]
    circle = max(period)
    order = sorted(range(len(sc.jobs)), key=lambda j: -comm[j] / period[j])
    placed: list[int] = []
    offset = [0.0] * len(sc.jobs)
    for j in order:
        others = [o for o in placed if need[o] & need[j]]
        if others:
            # a job's communication ends its iteration: it occupies [offset + compute, offset + period)
            def cost(x: float) -> float:
                cj = (x + period[j] - comm[j]) % circle
                return sum(
                    _overlap_on_circle(cj, comm[j], (offset[o] + period[o] - comm[o]) % circle, comm[o], circle)
                    for o in others
                )

            candidates = np.linspace(0.0, circle, grid, endpoint=False)
            offset[j] = float(min(candidates, key=cost))
        placed.append(j)
    first = min(offset)
    return [o - first for o in offset]


def shifted(sc: Scenario, offsets: list[float]) -> Scenario:
    """The scenario with its jobs' start offsets replaced."""
    out = copy.copy(sc)
    out.jobs = [replace(j, start_offset_s=o) for j, o in zip(sc.jobs, offsets)]
    return out


def best_of(sides: list[dict]) -> dict:
    """ref-best from the candidates' summaries and the base's: the lowest steady-state average."""
    best = min(sides, key=lambda s: s["avg_iter_s"])
    return {**best, "cc": "ref-best", "reference_pick": best["cc"]}


def reference_side(sc: Scenario, name: str, base_side: dict | None = None) -> dict:
    """One reference's summary, with the keys of any other arm (:func:`mltcp.compare.side`).
    ``base_side`` is the base arm's summary when the caller already has it (for best)."""
    if name in ("fifo", "srf"):
        return compare.side(sc, f"ref-{name}", serialize(sc, name), 0.0, 0.0)
    if name == "fair":
        return compare.side(sc, "ref-fair", fair_share(sc), 0.0, 0.0)
    from .sim.engine import simulate

    if name == "cassini":
        res = simulate(shifted(sc, cassini_offsets(sc)), sc.cc)
        return compare.side(sc, "ref-cassini", res.records, res.drops, res.ecn_marks)
    if name != "best":
        raise ValueError(f"unknown reference {name!r} (choose from {', '.join(REFERENCES)})")
    if base_side is None:
        res = simulate(sc, sc.cc)
        base_side = compare.side(sc, sc.cc, res.records, res.drops, res.ecn_marks)
    return best_of([reference_side(sc, n) for n in CANDIDATES] + [base_side])
