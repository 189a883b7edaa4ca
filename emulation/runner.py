"""Run a scenario in Mininet (orchestration): build its topology, run every job's sender/receiver in the hosts,
collect per-iteration records, and summarise them with the same JSON keys as ``mltcp simulate``.

What runs where: the network (namespaces, veths, bridges/routers, qdiscs) is built here with
Mininet; each job is a pair of subprocesses inside its two hosts, started with ``mnexec`` via
``host.popen``. Everything is removed in ``finally`` (and on SIGINT/SIGTERM), see
:class:`mltcp.emulation.netns.Cleanup`.

The parts: :mod:`.plan` (scenario -> plan, pure), :mod:`.peers` (the job processes),
:mod:`.arm` (one network, one congestion control), :mod:`.calibrate` (host RTT), :mod:`.report`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from mltcp import compare
from mltcp.records import IterationRecord, write_csv

from .arm import run_arm
from .calibrate import calibrate_rtt
from .network import resolve_link_mode
from .peers import kernel_cc_name, udp_available
from .plan import BASE_CCS, KERNEL_BPF_CCS, TRANSPORTS, EmulationError, needs_ecn, payload_rate_plan, plan_from_scenario
from .report import arm_summary, regime_notes, rtt_seen, sim_vs_emu_arms
from .topologies import features


def _refuse_priority_on_bmv2(sc, mode: str) -> None:
    if sc.switch.name != "priority-by-progress":
        return
    if mode == "bmv2":
        raise EmulationError(
            'switch_policy = "priority-by-progress" is not emulated on BMv2: the prebuilt BMv2 has '
            "no priority queues, and one built with them (--priority-queues) paces each queue at "
            "the port's rate, so a port would carry more than its line (docs/in-network.md); "
            "use --link-mode switch"
        )


def run_experiment(
    sc,
    cc: str = "reno",
    compare_mltcp: bool = False,
    transport: str = "kernel",
    link_mode: str = "auto",
    topology: str = "auto",
    on_record: Callable[[str, IterationRecord], None] | None = None,
    with_sim: bool = True,
    records_dir=None,
    payload_rate: bool = True,
    rtt_calibration: bool = True,
    switch_logs=None,
    pcap: bool = False,
) -> dict:
    """Baseline (and with ``compare_mltcp`` the MLTCP) arm of scenario ``sc``: the JSON document of
    ``mltcp simulate`` (mltcp.compare.report) plus ``sim_vs_emu`` and an ``emulation`` section.
    With ``records_dir`` each arm's per-iteration records go to ``<dir>/<arm>.csv``. With
    ``payload_rate`` the links' frame rate is raised so that they carry the scenario's rate in
    payload bytes, as the simulator's links do (:func:`wire_factor`). With ``rtt_calibration`` the
    links' delay is lowered by what the hosts add to the RTT (:func:`calibrate_rtt`), so the senders'
    base RTT is the scenario's; the simulator for ``sim_vs_emu`` runs with the scenario's delay."""
    from .ddp import is_ddp, run_ddp_experiment

    if is_ddp(sc):  # real PyTorch DDP ranks on kernel TCP (emulation/ddp.py)
        kind = "dumbbell" if topology == "auto" else topology
        return run_ddp_experiment(
            sc,
            cc,
            compare_mltcp,
            on_record=on_record,
            records_dir=records_dir,
            pcap=pcap,
            topology=kind,
            with_sim=with_sim,
        )
    if cc not in BASE_CCS:
        raise EmulationError(f"--cc must be one of {', '.join(BASE_CCS)}, got {cc}")
    if transport not in TRANSPORTS:
        raise EmulationError(f"--transport must be one of {', '.join(TRANSPORTS)}, got {transport}")
    if cc == "dcqcn" and transport == "kernel":
        raise EmulationError("DCQCN is rate-based: use --transport udp")
    if cc in KERNEL_BPF_CCS and transport == "kernel" and compare_mltcp:
        raise EmulationError(
            f"kernel TCP has no MLTCP variant of {cc}: drop --compare, or use --transport udp "
            f"(mltcp-{cc} in the userspace transport)"
        )
    plan = plan_from_scenario(sc, topology)
    if payload_rate:
        payload_rate_plan(plan, transport)
    _refuse_priority_on_bmv2(sc, link_mode)  # asked for by name: before looking for BMv2
    mode = resolve_link_mode(link_mode, plan.topology, ecn=needs_ecn(sc, cc))
    _refuse_priority_on_bmv2(sc, mode)
    if transport == "kernel":  # fail before the first arm, not after it
        kernel_cc_name(cc, False)
        if compare_mltcp:
            kernel_cc_name(cc, True)
    elif not udp_available():
        raise EmulationError("--transport udp needs the userspace transport (mltcp.traffic.transport)")
    calibration = calibrate_rtt(plan, transport, mode) if rtt_calibration else None
    scenario_rtt_ms = 2e3 * sum(sc.links[n].delay_s for n in sc.jobs[0].path) if sc.jobs else 0.0
    plan.notes += regime_notes(
        plan.bottleneck, sc.mss, scenario_rtt_ms, calibration["host_rtt_ms"] if calibration else None
    )
    cb = (lambda arm: lambda r: on_record(arm, r)) if on_record else (lambda arm: None)
    logs = (lambda arm: None) if switch_logs is None else (lambda arm: Path(switch_logs) / arm)
    base = run_arm(
        plan,
        cc,
        transport,
        mltcp=False,
        link_mode=mode,
        on_record=cb("baseline"),
        switch_logs=logs("baseline"),
        pcap=pcap,
    )
    ml = None
    if compare_mltcp:
        ml = run_arm(
            plan, cc, transport, mltcp=True, link_mode=mode, on_record=cb("mltcp"), switch_logs=logs("mltcp"), pcap=pcap
        )
    if records_dir is not None:
        Path(records_dir).mkdir(parents=True, exist_ok=True)
        write_csv(base.records, Path(records_dir) / "baseline.csv")
        if ml is not None:
            write_csv(ml.records, Path(records_dir) / "mltcp.csv")
    out = compare.report(sc, arm_summary(base, sc), arm_summary(ml, sc) if ml else None)
    if with_sim:
        out["sim_vs_emu"] = sim_vs_emu_arms(sc, cc, base.records, ml.records if ml is not None else None)
    else:
        out["sim_vs_emu"] = None
    out["emulation"] = {
        "topology": plan.topology,
        "transport": transport,
        "link_mode": mode,
        "features": features(mode),
        "bottleneck": dataclasses.asdict(plan.bottleneck),
        "jobs": len(plan.jobs),
        "iterations": max(j.job.iterations for j in plan.jobs),
        "notes": plan.notes,
        "rtt_calibration": calibration,
        "rtt_ms": {"baseline": rtt_seen(base), **({"mltcp": rtt_seen(ml)} if ml is not None else {})},
    }
    return out
