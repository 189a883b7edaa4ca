"""The emulation's report: per arm the simulator's keys (:func:`mltcp.compare.side`) plus what only
the emulation measures (retransmissions, wall time, the senders' counters and RTTs), and the
emulated/simulated ratio of each job's average iteration time."""

from __future__ import annotations

from mltcp import compare, metrics
from mltcp.records import IterationRecord

from .arm import ArmResult
from .topologies import LinkParams


def arm_summary(arm: ArmResult, sc) -> dict:
    """The simulator's per-arm keys (mltcp.compare.side) plus what only the emulation measures.

    ``interleaved_at_iteration`` (:func:`interleaved_at`) relaxes ``converged_at_iteration`` (every
    later iteration under 5 % overlap): with real hosts a job's solo communication phase is a
    little longer than in the model, and when it exceeds half the period even a perfect interleave
    keeps ~10 % overlap; and one late hiccup of a host should not erase an interleave."""
    # flow-seconds the senders spent paused by the switch's PFC frames (lossless links; the
    # simulator's pfc_pause_s); without PFC frames obeyed (kernel TCP, BMv2) it stays 0
    paused = sum(f.get("paused_s", 0.0) for flows in (arm.peer_stats or {}).values() for f in flows)
    d = compare.side(sc, arm.cc, arm.records, arm.drops, arm.ecn_marks or 0, pfc_pause_s=paused)
    if arm.ecn_marks is None:
        d["ecn_marks"] = None  # this link mode cannot mark: not "zero marks"
    d.update(
        retransmissions=sum(arm.retrans.values()), retransmissions_per_job=arm.retrans, wall_s=round(arm.wall_s, 2)
    )
    if arm.peer_stats:
        d["sender_stats"] = arm.peer_stats
    if arm.stamp_stats:
        d["stamp_stats"] = arm.stamp_stats  # the MLTCP IPv4 option on kernel TCP (stamp.bpf.c)
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


def sim_vs_emu_arms(sc, cc: str, base_records: list[IterationRecord], ml_records: list[IterationRecord] | None) -> dict:
    """``sim_vs_emu`` of both arms: the base ``cc``'s, and its MLTCP variant's when it ran."""
    from mltcp import compare

    out = {"baseline": sim_vs_emu(sc, cc, base_records)}
    if ml_records is not None:
        out["mltcp"] = sim_vs_emu(sc, compare.mltcp_name(cc), ml_records)
    return out


def rtt_seen(arm: ArmResult) -> dict[str, dict] | None:
    """Per job, the RTT percentiles (ms) its sender saw in this arm (userspace transport only)."""
    out = {job: flows[0]["rtt_ms"] for job, flows in arm.peer_stats.items() if flows and flows[0].get("rtt_ms")}
    return out or None


def regime_notes(link: LinkParams, mss: int, scenario_rtt_ms: float, host_rtt_ms: float | None) -> list[str]:
    """Where the emulated bottleneck leaves the simulator's regime (docs/in-network.md): an ECN
    threshold at or above the drop-tail buffer (~1500-byte packets, as mltcp-switch and BMv2 count
    it) drops before it marks; and when the hosts' own RTT makes the link's bandwidth-delay product
    larger than the ECN threshold although the scenario's is not, a window-based sender marked at
    the threshold cannot fill the link alone (the simulator's can)."""
    notes = []
    k = link.ecn_threshold_pkts
    if not k or not link.rate_mbps:
        return notes
    if link.buffer_bytes is not None:
        buf = max(1, round(link.buffer_bytes / 1500))
        if k >= buf:
            notes.append(
                f"ECN threshold {k} packets >= drop-tail buffer {buf} packets: the switch drops "
                "before it marks (raise --buffer-kb, or use --dilate instead of a plain --rate-mbps)"
            )
    bdp = lambda rtt_ms: link.rate_mbps * 1e6 / 8 * rtt_ms / 1e3 / mss
    if host_rtt_ms is not None and bdp(max(host_rtt_ms, scenario_rtt_ms)) > k >= bdp(scenario_rtt_ms):
        notes.append(
            f"the hosts add {host_rtt_ms:.2f} ms per round trip: at {link.rate_mbps:g} Mb/s the "
            f"bandwidth-delay product is {bdp(max(host_rtt_ms, scenario_rtt_ms)):.0f} packets, above "
            f"the ECN threshold of {k} (the scenario's is {bdp(scenario_rtt_ms):.0f}), so a marked "
            "window-based sender cannot fill the link as in the simulator; a lower --rate-mbps with "
            "--dilate keeps the scenario's regime"
        )
    return notes
