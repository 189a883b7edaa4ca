"""RTT calibration: measure the round trip the emulated hosts and switch add (the model has no
host delay), and take it off the links' one-way delay so the senders' base RTT is the scenario's."""

from __future__ import annotations

import dataclasses

from .arm import run_arm
from .plan import EmulationError, Plan
from .report import rtt_seen
from .topologies import features


def calibrated_delay_ms(delay_ms: float, host_rtt_ms: float, hops: int) -> float:
    """One-way delay to configure on each link so that a sender's base RTT is the scenario's.

    The scenario's RTT is ``2 x hops x delay_ms``; the emulation's own processes (the Python
    sender, receiver and switch) add ``host_rtt_ms`` to every round trip, which the model does not
    have. That is taken off the links, spread over their ``2 x hops`` traversals, never below 0."""
    if hops < 1:
        raise ValueError(f"hops must be >= 1, got {hops}")
    return max(0.0, delay_ms - host_rtt_ms / (2 * hops))


# the calibration sender paces at this fraction of the link rate: paced at the link rate, pacing
# jitter keeps a queue of ~15-20 packets at the bottleneck, which the median RTT would count as the
# hosts' (measured: 2.4 / 6.3 / 12.1 ms at 106 / 27 / 13 Mb/s, i.e. 14-21 frame times)
CALIBRATION_PACE = 0.5


def measure_host_rtt(plan: Plan, transport: str, link_mode: str, iterations: int = 4) -> dict:
    """The round trip the hosts and the switch add: the first job alone for a few iterations over
    the same topology, rate and buffer with zero link delay, its sender paced at
    :data:`CALIBRATION_PACE` of the link rate so that it keeps no queue; the median RTT it sees (the
    link then adds only one frame's serialization, 0.12 ms at 100 Mb/s)."""
    first = plan.jobs[0]
    short = dataclasses.replace(
        first.job, iterations=iterations, compute_s=min(first.job.compute_s, 0.05), start_offset_s=0.0
    )
    job = dataclasses.replace(first, spec=dataclasses.replace(first.spec, job=short), pace=CALIBRATION_PACE)
    cal = dataclasses.replace(plan, jobs=[job], bottleneck=dataclasses.replace(plan.bottleneck, delay_ms=0.0))
    arm = run_arm(cal, "reno", transport, mltcp=False, link_mode=link_mode)
    rtt = (rtt_seen(arm) or {}).get(job.name)
    if rtt is None:
        raise EmulationError("RTT calibration: the sender reported no RTT samples")
    return {"host_rtt_ms": rtt["p50"], "host_rtt_p10_p90_ms": [rtt["p10"], rtt["p90"]], "wall_s": round(arm.wall_s, 2)}


def calibrate_rtt(plan: Plan, transport: str, mode: str) -> dict | None:
    """Measure the hosts' share of the RTT and take it off the links' delay (``plan`` is changed).
    None when there is nothing to calibrate: no delay, a link mode without delay, or the kernel
    transport (whose endpoints add little and report no per-ACK RTT)."""
    delay = plan.bottleneck.delay_ms
    if transport != "udp" or not features(mode)["delay"] or not delay:
        return None
    hops = len(plan.scenario_obj.jobs[0].path) if plan.scenario_obj is not None else 1
    got = measure_host_rtt(plan, transport, mode)
    link = calibrated_delay_ms(delay, got["host_rtt_ms"], hops)
    plan.bottleneck = dataclasses.replace(plan.bottleneck, delay_ms=round(link, 4))
    plan.notes.append(
        f"RTT calibration: the hosts add {got['host_rtt_ms']:.2f} ms per round trip, so each link "
        f"runs {link:.3f} ms one way instead of {delay:g} ms (base RTT {2 * hops * delay:g} ms "
        "as in the scenario); --no-rtt-calibration turns this off"
    )
    return dict(
        got,
        scenario_rtt_ms=round(2 * hops * delay, 4),
        scenario_delay_ms=delay,
        link_delay_ms=round(link, 4),
        hops=hops,
    )
