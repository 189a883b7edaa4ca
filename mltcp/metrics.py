"""Figures of merit computed from per-iteration records (pure functions)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .records import IterationRecord

OVERLAP_THRESHOLD = 0.10  # a communication phase that shares < 10 % of its time counts as alone


def steady(records: list[IterationRecord], warmup: int) -> list[IterationRecord]:
    """Records after each job's first ``warmup`` iterations."""
    return [r for r in records if r.iteration >= warmup]


def iteration_times(records: list[IterationRecord]) -> np.ndarray:
    return np.array([r.duration for r in records])


def summary(records: list[IterationRecord], warmup: int) -> dict[str, float]:
    """avg and p99 iteration time over steady-state iterations, and over all iterations."""
    s = iteration_times(steady(records, warmup))
    a = iteration_times(records)
    return {
        "avg_iter_s": float(s.mean()) if len(s) else float("nan"),
        "p99_iter_s": float(np.percentile(s, 99)) if len(s) else float("nan"),
        "avg_iter_all_s": float(a.mean()) if len(a) else float("nan"),
        "p99_iter_all_s": float(np.percentile(a, 99)) if len(a) else float("nan"),
        "iterations": int(len(a)),
    }


def overlap_fractions(
    records: list[IterationRecord], shares: dict[str, set[str]] | None = None
) -> dict[tuple[str, int], float]:
    """For each (job, iteration): the fraction of its communication phase during which another job
    that shares a link with it (``shares``; all jobs if None) was also communicating."""
    by_job: dict[str, list[IterationRecord]] = defaultdict(list)
    for r in records:
        by_job[r.job].append(r)
    iv = {j: (np.array([r.comm_start for r in rs]), np.array([r.end for r in rs])) for j, rs in by_job.items()}
    out = {}
    for j, rs in by_job.items():
        others = [o for o in by_job if o != j and (shares is None or o in shares.get(j, set()))]
        if others:
            os_ = np.concatenate([iv[o][0] for o in others])
            oe = np.concatenate([iv[o][1] for o in others])
            order = np.argsort(os_)
            os_, oe = _union(os_[order], oe[order])
        for r in rs:
            length = r.end - r.comm_start
            if not others or length <= 0:
                out[(j, r.iteration)] = 0.0
                continue
            inter = np.clip(np.minimum(oe, r.end) - np.maximum(os_, r.comm_start), 0.0, None).sum()
            out[(j, r.iteration)] = float(inter / length)
    return out


def _union(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    us, ue = [], []
    for a, b in zip(s, e):
        if us and a <= ue[-1]:
            ue[-1] = max(ue[-1], b)
        else:
            us.append(a)
            ue.append(b)
    return np.array(us), np.array(ue)


def converged_at(
    records: list[IterationRecord],
    shares: dict[str, set[str]] | None = None,
    threshold: float = OVERLAP_THRESHOLD,
    min_tail: int = 5,
) -> int | None:
    """The first iteration from which no job's communication overlaps a competitor's by more than
    ``threshold`` for the rest of the run (at least ``min_tail`` iterations); None if never."""
    ov = overlap_fractions(records, shares)
    if not ov:
        return None
    last = max(i for (_, i) in ov)
    bad = [i for (_, i), f in ov.items() if f > threshold]
    first_clean = (max(bad) + 1) if bad else 0
    return first_clean if last - first_clean + 1 >= min_tail else None


def speedup(baseline: float, improved: float) -> float:
    return float(baseline / improved) if improved > 0 else float("nan")


def reform_after_stragglers(
    records: list[IterationRecord],
    compute_s: dict[str, float],
    warmup: int = 0,
    threshold: float = OVERLAP_THRESHOLD,
    slow: float = 1.25,
) -> list[int]:
    """Iterations the interleave needs to re-form after each straggler.

    A straggler is an iteration whose compute phase is over ``slow`` x its job's nominal compute
    time; it counts when the job's previous iteration was interleaved (overlap <= ``threshold``).
    The count is m >= 0 such that the straggling job's iterations i+1+m and i+2+m are both
    interleaved again (0: the one after the straggler already is). Events cut short by the run's
    end or by another straggler (of any job) before the interleave re-formed are left out."""
    ov = overlap_fractions(records)
    by_job: dict[str, dict[int, IterationRecord]] = defaultdict(dict)
    for r in records:
        by_job[r.job][r.iteration] = r
    slow_at = sorted(r.comm_start for r in records if r.comm_start - r.start > slow * compute_s[r.job])
    out = []
    for j, rs in by_job.items():
        last = max(rs)
        for i, r in sorted(rs.items()):
            if i < warmup or r.comm_start - r.start <= slow * compute_s[j]:
                continue
            if ov.get((j, i - 1), 1.0) > threshold:
                continue
            m = 0
            while i + 2 + m <= last and not (ov[(j, i + 1 + m)] <= threshold and ov[(j, i + 2 + m)] <= threshold):
                m += 1
            if i + 2 + m > last:
                continue  # the run ended first
            done = rs[i + 2 + m].end
            if any(r.comm_start < t < done for t in slow_at):
                continue  # another straggler came first: not this one's count
            out.append(m)
    return out


def per_job_avg(records: list[IterationRecord], warmup: int) -> dict[str, float]:
    """Average steady-state iteration time per job."""
    out: dict[str, list[float]] = {}
    for r in steady(records, warmup):
        out.setdefault(r.job, []).append(r.duration)
    return {k: sum(v) / len(v) for k, v in out.items()}


LOOSE_OVERLAP = 0.2  # interleaved_at: the loose overlap threshold (docs/design.md, Emulation)


def interleaved_at(
    records: list[IterationRecord],
    shares=None,
    threshold: float = LOOSE_OVERLAP,
    ok_fraction: float = 0.85,
    min_tail: int = 5,
) -> int | None:
    """First iteration i whose overlap (the largest over the jobs, mltcp.overlap_fractions)
    is below ``threshold`` and from which at least ``ok_fraction`` of the iterations are (at least
    ``min_tail`` of them): interleaving that one late hiccup of a real host does not undo."""
    ov = overlap_fractions(records, shares)
    worst: dict[int, float] = {}
    for (_, it), f in ov.items():
        worst[it] = max(worst.get(it, 0.0), f)
    its = sorted(worst)
    for k, it in enumerate(its):
        tail = its[k:]
        if len(tail) < min_tail or worst[it] >= threshold:
            continue
        if sum(worst[t] < threshold for t in tail) >= ok_fraction * len(tail):
            return it
    return None
