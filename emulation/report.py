"""The emulation's report: per arm the simulator's keys (:func:`mltcp.compare.side`) plus what only
the emulation measures (retransmissions, wall time, the senders' counters and RTTs), and the
emulated/simulated ratio of each job's average iteration time."""
from __future__ import annotations

from mltcp import compare, metrics
from mltcp.records import IterationRecord

from .arm import ArmResult

def arm_summary(arm: ArmResult, sc) -> dict:
    """The simulator's per-arm keys (mltcp.compare.side) plus what only the emulation measures.

    ``interleaved_at_iteration`` (:func:`interleaved_at`) relaxes ``converged_at_iteration`` (every
    later iteration under 5 % overlap): with real hosts a job's solo communication phase is a
    little longer than in the model, and when it exceeds half the period even a perfect interleave
    keeps ~10 % overlap; and one late hiccup of a host should not erase an interleave."""
    d = compare.side(sc, arm.cc, arm.records, arm.drops, arm.ecn_marks or 0)
    if arm.ecn_marks is None:
        d["ecn_marks"] = None          # this link mode cannot mark: not "zero marks"
    d.update(retransmissions=sum(arm.retrans.values()), retransmissions_per_job=arm.retrans,
             wall_s=round(arm.wall_s, 2))
    if arm.peer_stats:
        d["sender_stats"] = arm.peer_stats
    return d


def sim_vs_emu(sc, cc_name: str, emu_records: list[IterationRecord]) -> dict | None:
    """Per-job ratio emulated/simulated average iteration time (simulator run in-process on the
    same, possibly rescaled, scenario)."""
    from mltcp.sim.engine import simulate
    try:
        res = simulate(sc, cc_name)
    except Exception as e:  # the simulator's failure must not lose a finished emulation
        return {"error": f"simulator failed: {type(e).__name__}: {e}"}
    sim = metrics.per_job_avg(res.records, sc.warmup_iterations)
    emu = metrics.per_job_avg(emu_records, sc.warmup_iterations)
    return {job: round(emu[job] / sim[job], 4) for job in emu if job in sim and sim[job] > 0}


def rtt_seen(arm: ArmResult) -> dict[str, dict] | None:
    """Per job, the RTT percentiles (ms) its sender saw in this arm (userspace transport only)."""
    out = {job: flows[0]["rtt_ms"] for job, flows in arm.peer_stats.items() if flows and flows[0].get("rtt_ms")}
    return out or None
