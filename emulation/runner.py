"""Run a scenario in Mininet: build its topology, run every job's sender/receiver in the hosts,
collect per-iteration records, and summarise them with the same JSON keys as ``mltcp simulate``.

What runs where: the network (namespaces, veths, bridges/routers, qdiscs) is built here with
Mininet; each job is a pair of subprocesses inside its two hosts, started with ``mnexec`` via
``host.popen``. Everything is removed in ``finally`` (and on SIGINT/SIGTERM), see
:class:`mltcp.emulation.netns.Cleanup`.
"""
from __future__ import annotations

import dataclasses
import json
import math
import queue
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from mltcp.records import IterationRecord

from . import netns
from .topologies import (EmuTopo, LinkParams, TopologyError, bottleneck_intfs, build_network,
                         make_topology, qdisc_drops, resolve_link_mode)

TRANSPORTS = ("kernel", "udp")
BASE_CCS = ("reno", "cubic", "dcqcn")
PORT_BASE = 5001


class EmulationError(RuntimeError):
    """The emulation could not run as asked (missing component, peer failure, timeout)."""


# --------------------------------------------------------------------------- planning (pure)

@dataclass
class JobPlan:
    name: str
    bytes: int
    compute_s: float
    start_offset_s: float
    iterations: int
    sender: str = ""
    receiver: str = ""
    dst_ip: str = ""
    port: int = 0


@dataclass
class Plan:
    scenario: str
    topology: str
    bottleneck: LinkParams
    jobs: list[JobPlan]
    warmup: int
    scenario_obj: object = None   # the (possibly rescaled) mltcp.scenario.Scenario
    notes: list[str] = field(default_factory=list)


def link_params_of(link, mss: int = 1448) -> LinkParams:
    """Scenario link (mltcp.scenario.Link) -> LinkParams in emulation units."""
    ecn = None
    if link.ecn == "step":
        ecn = max(1, round(link.ecn_k_bytes / mss))
    elif link.ecn == "red":
        ecn = max(1, round(link.red_kmin_bytes / mss))
    return LinkParams(rate_mbps=link.rate_bps / 1e6, delay_ms=link.delay_s * 1e3,
                      buffer_bytes=max(1500, int(link.buffer_bytes)), ecn_threshold_pkts=ecn)


def choose_topology(sc) -> str:
    """dumbbell when every job crosses the same single link, ring for three jobs each crossing two
    of three links round a cycle, else an error naming what is supported."""
    paths = [tuple(j.path) for j in sc.jobs]
    if all(len(p) == 1 for p in paths) and len({p[0] for p in paths}) == 1:
        return "dumbbell"
    if len(paths) <= 3 and all(len(p) == 2 for p in paths) and len(sc.links) == 3:
        return "ring"
    raise TopologyError(f"{sc.source}: jobs[].path: emulation supports jobs sharing one link (dumbbell) "
                        "or up to three jobs each crossing two of three links (ring); pass --topology")


def rescale(sc, rate_mbps: float | None = None, delay_ms: float | None = None, iterations: int | None = None):
    """A copy of scenario ``sc`` with every link at ``rate_mbps`` (job bytes scaled by the same factor,
    so each job keeps its communication/compute ratio), one-way delay ``delay_ms`` per link, and
    ``iterations`` per job. The simulator is run on the same copy for ``sim_vs_emu``."""
    sc = dataclasses.replace(sc, links={k: dataclasses.replace(v) for k, v in sc.links.items()},
                             jobs=[dataclasses.replace(j) for j in sc.jobs])
    if rate_mbps is not None:
        if rate_mbps <= 0:
            raise ValueError(f"--rate-mbps must be > 0, got {rate_mbps}")
        for job in sc.jobs:
            factor = rate_mbps * 1e6 / min(sc.links[n].rate_bps for n in job.path)
            job.bytes_per_iter = job.bytes_per_iter * factor
        for link in sc.links.values():
            f = rate_mbps * 1e6 / link.rate_bps
            link.rate_bps = rate_mbps * 1e6
            link.buffer_bytes *= f
            link.ecn_k_bytes *= f
            link.red_kmin_bytes *= f
            link.red_kmax_bytes *= f
    if delay_ms is not None:
        if delay_ms < 0:
            raise ValueError(f"--delay-ms must be >= 0, got {delay_ms}")
        for link in sc.links.values():
            link.delay_s = delay_ms / 1e3
    if iterations is not None:
        if iterations < 1:
            raise ValueError(f"--iterations must be >= 1, got {iterations}")
        for job in sc.jobs:
            job.iterations = iterations
        sc.warmup_iterations = min(sc.warmup_iterations, max(0, iterations // 3))
    return sc


def plan_from_scenario(sc, topology: str = "auto") -> Plan:
    kind = choose_topology(sc) if topology == "auto" else topology
    first = sc.links[sc.jobs[0].path[0]]
    jobs = [JobPlan(j.name, int(round(j.bytes_per_iter)), j.compute_s, j.start_offset_s, j.iterations)
            for j in sc.jobs]
    notes = []
    if any(j.jitter or j.straggler_prob for j in sc.jobs):
        notes.append("compute jitter/stragglers are not emulated (constant compute time)")
    return Plan(sc.name, kind, link_params_of(first, sc.mss), jobs, sc.warmup_iterations, sc, notes)


def assign_endpoints(plan: Plan, topo: EmuTopo) -> None:
    if len(plan.jobs) > len(topo.job_pairs):
        raise TopologyError(f"topology {plan.topology} has {len(topo.job_pairs)} job endpoints, "
                            f"scenario {plan.scenario} has {len(plan.jobs)} jobs")
    for i, (job, (s, r)) in enumerate(zip(plan.jobs, topo.job_pairs)):
        job.sender, job.receiver, job.dst_ip, job.port = s, r, topo.ip_of(r), PORT_BASE + i


# --------------------------------------------------------------------------- peers

def peer_commands(job: JobPlan, transport: str, cc: str, t0: float, run: str = "") -> tuple[list[str], list[str]]:
    """(receiver argv, sender argv) for one job; ``run`` tags kernel peers' command lines."""
    py = sys.executable
    if transport == "kernel":
        tag = ["--run", run] if run else []
        recv = [py, "-m", "mltcp.emulation.kernel_peer", "recv", *tag, "--port", str(job.port), "--t0", repr(t0)]
        send = [py, "-m", "mltcp.emulation.kernel_peer", "send", *tag, "--host", job.dst_ip, "--port", str(job.port),
                "--job", job.name, "--cc", cc, "--iterations", str(job.iterations), "--bytes", str(job.bytes),
                "--compute-s", repr(job.compute_s), "--t0", repr(t0),
                "--start-offset-s", repr(job.start_offset_s)]
        return recv, send
    if transport == "udp":
        udp = udp_transport_cli()
        if udp is None:
            raise EmulationError("--transport udp needs the userspace transport CLI (`mltcp traffic send/recv`), "
                                 "which is not available in this checkout")
        recv = [*udp, "recv", "--port", str(job.port), "--t0", repr(t0)]
        send = [*udp, "send", "--host", job.dst_ip, "--port", str(job.port), "--job", job.name, "--cc", cc,
                "--iterations", str(job.iterations), "--bytes", str(job.bytes), "--compute-s", repr(job.compute_s),
                "--t0", repr(t0), "--start-offset-s", repr(job.start_offset_s)]
        return recv, send
    raise EmulationError(f"unknown transport {transport!r}; choose from {', '.join(TRANSPORTS)}")


def udp_transport_cli() -> list[str] | None:
    """argv prefix of `mltcp traffic` if the userspace transport has landed."""
    try:
        import importlib
        importlib.import_module("mltcp.traffic.cli")
    except Exception:
        return None
    return [sys.executable, "-m", "mltcp.traffic.cli"]


def kernel_cc_name(cc: str, mltcp: bool) -> str:
    """Kernel TCP_CONGESTION name for an arm; MLTCP needs the BPF struct_ops algorithm registered."""
    if not mltcp:
        if cc not in ("reno", "cubic"):
            raise EmulationError(f"kernel transport supports --cc reno or cubic, not {cc}")
        return cc
    avail = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    for name in (f"mltcp_{cc}", f"bpf_mltcp_{cc}"):
        if name in avail:
            return name
    raise EmulationError(f"kernel MLTCP-{cc} is not registered (tcp_available_congestion_control: "
                         f"{' '.join(avail)}); load the BPF congestion control from traffic/kernel first")


class _Peer:
    """A subprocess in a host whose stdout JSON lines are pushed onto a shared queue."""

    def __init__(self, node, argv: list[str], tag: str, q: queue.Queue, cleanup: netns.Cleanup):
        self.tag = tag
        self.proc = cleanup.add_proc(node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                text=True, bufsize=1))
        self.err: list[str] = []
        threading.Thread(target=self._read_out, args=(q,), daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self, q):
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                q.put((self.tag, json.loads(line)))
            except json.JSONDecodeError:
                q.put((self.tag, {"type": "text", "text": line}))
        q.put((self.tag, {"type": "eof"}))

    def _read_err(self):
        for line in self.proc.stderr:
            self.err.append(line.rstrip())


@dataclass
class ArmResult:
    cc: str
    records: list[IterationRecord]
    drops: int
    ecn_marks: int | None
    retrans: dict[str, int]
    link_mode: str
    wall_s: float


def expected_duration(plan: Plan, rate_mbps: float | None) -> float:
    rate = (rate_mbps or plan.bottleneck.rate_mbps or 1000) * 1e6 / 8
    n = len(plan.jobs)
    per_iter = max(j.compute_s + n * j.bytes / rate for j in plan.jobs)
    return max(j.start_offset_s for j in plan.jobs) + per_iter * max(j.iterations for j in plan.jobs)


def run_arm(plan: Plan, cc: str, transport: str = "kernel", mltcp: bool = False, link_mode: str = "auto",
            on_record: Callable[[IterationRecord], None] | None = None,
            fail_after_records: int | None = None, timeout_s: float | None = None) -> ArmResult:
    """Build the network, run all jobs once with one congestion control, tear everything down.

    ``fail_after_records`` raises after that many records (tests use it to check cleanup)."""
    mode = resolve_link_mode(link_mode)
    if transport == "kernel":
        wire_cc = kernel_cc_name(cc, mltcp)
    else:
        wire_cc = f"mltcp-{cc}" if mltcp else cc
    prefix = netns.run_prefix()
    wall0 = time.monotonic()
    with netns.Cleanup(prefix) as cl:
        from .topologies import software_switch_class
        topo = make_topology(plan.topology, prefix, plan.bottleneck, n_jobs=len(plan.jobs),
                             switch_cls=software_switch_class() if mode == "switch" else None)
        assign_endpoints(plan, topo)
        net = build_network(topo, mode, cl)
        q: queue.Queue = queue.Queue()
        t0 = time.time() + 1.0 + 0.1 * len(plan.jobs)
        receivers, senders = {}, {}
        for job in plan.jobs:
            r_argv, s_argv = peer_commands(job, transport, wire_cc, t0, prefix)
            receivers[job.name] = _Peer(net[job.receiver], r_argv, f"recv:{job.name}", q, cl)
        for job in plan.jobs:
            _, s_argv = peer_commands(job, transport, wire_cc, t0, prefix)
            senders[job.name] = _Peer(net[job.sender], s_argv, f"send:{job.name}", q, cl)
        records: list[IterationRecord] = []
        retrans: dict[str, int] = {}
        done: set[str] = set()
        limit = timeout_s or (3 * expected_duration(plan, None) + 30)
        deadline = time.monotonic() + limit
        while len(done) < len(senders):
            left = deadline - time.monotonic()
            if left <= 0:
                raise EmulationError(f"emulation did not finish within {limit:.0f} s "
                                     f"({len(records)} records collected)")
            try:
                tag, msg = q.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            kind, name = tag.split(":", 1)
            if msg["type"] == "iter":
                rec = IterationRecord(msg["job"], int(msg["iteration"]), float(msg["start"]),
                                      float(msg["comm_start"]), float(msg["end"]), float(msg["bytes"]))
                records.append(rec)
                if on_record:
                    on_record(rec)
                if fail_after_records is not None and len(records) >= fail_after_records:
                    raise EmulationError(f"injected failure after {len(records)} records")
            elif msg["type"] == "summary":
                retrans[msg["job"]] = int(msg.get("retrans", 0))
            elif msg["type"] == "eof" and kind == "send":
                p = senders[name].proc
                p.wait(timeout=5)
                if p.returncode != 0:
                    raise EmulationError(f"sender of {name} exited {p.returncode}: {' | '.join(senders[name].err[-3:])}")
                done.add(name)
            elif msg["type"] == "eof" and kind == "recv":
                p = receivers[name].proc
                p.wait(timeout=5)
                if p.returncode not in (0, None) and name not in done:
                    raise EmulationError(f"receiver of {name} exited {p.returncode}: "
                                         f"{' | '.join(receivers[name].err[-3:])}")
        drops = sum(qdisc_drops(i) for i in bottleneck_intfs(net, topo)) if mode != "switch" else 0
        marks = None if mode == "htb" else 0
    return ArmResult(wire_cc, sorted(records, key=lambda r: (r.job, r.iteration)), drops, marks, retrans,
                     mode, time.monotonic() - wall0)


# --------------------------------------------------------------------------- metrics

def _metrics():
    try:
        from mltcp import metrics  # the lead's shared functions, once they exist
        return metrics
    except Exception:
        return None


def avg_p99(records: list[IterationRecord], warmup: int) -> tuple[float, float]:
    m = _metrics()
    if m is not None and hasattr(m, "avg_p99"):
        return m.avg_p99(records, warmup)
    import numpy as np
    d = np.array([r.duration for r in records if r.iteration >= warmup] or [r.duration for r in records])
    if d.size == 0:
        return math.nan, math.nan
    return float(d.mean()), float(np.percentile(d, 99))


def per_job_avg(records: list[IterationRecord], warmup: int) -> dict[str, float]:
    out: dict[str, list[float]] = {}
    for r in records:
        if r.iteration >= warmup:
            out.setdefault(r.job, []).append(r.duration)
    return {k: sum(v) / len(v) for k, v in out.items()}


def converged_at(records: list[IterationRecord]) -> int | None:
    m = _metrics()
    if m is not None and hasattr(m, "converged_at_iteration"):
        return m.converged_at_iteration(records)
    return interleave_iteration(records)


def overlap_fraction(records: list[IterationRecord], iteration: int) -> float:
    """Fraction of the communication time of ``iteration`` (all jobs) during which two or more jobs
    communicated at once."""
    iv = [(r.comm_start, r.end) for r in records if r.iteration == iteration]
    if len(iv) < 2:
        return 0.0
    events = sorted([(a, 1) for a, _ in iv] + [(b, -1) for _, b in iv])
    busy = both = 0.0
    level, last = 0, events[0][0]
    for t, d in events:
        if level >= 1:
            busy += t - last
        if level >= 2:
            both += t - last
        level += d
        last = t
    return both / busy if busy > 0 else 0.0


def interleave_iteration(records: list[IterationRecord], threshold: float = 0.1) -> int | None:
    """First iteration from which every later iteration has communication overlap < threshold."""
    its = sorted({r.iteration for r in records})
    ok_from = None
    for it in its:
        if overlap_fraction(records, it) < threshold:
            ok_from = it if ok_from is None else ok_from
        else:
            ok_from = None
    return ok_from


# --------------------------------------------------------------------------- whole experiment

def arm_summary(arm: ArmResult, warmup: int) -> dict:
    avg, p99 = avg_p99(arm.records, warmup)
    return {"cc": arm.cc, "avg_iter_s": avg, "p99_iter_s": p99, "drops": arm.drops, "ecn_marks": arm.ecn_marks,
            "retransmissions": sum(arm.retrans.values()), "iterations": len(arm.records),
            "per_job_avg_iter_s": per_job_avg(arm.records, warmup),
            "interleaved_from_iteration": interleave_iteration(arm.records), "wall_s": round(arm.wall_s, 2)}


def sim_vs_emu(sc, cc_name: str, emu_records: list[IterationRecord], warmup: int) -> dict | None:
    """Per-job ratio emulated/simulated average iteration time (simulator run in-process)."""
    try:
        from mltcp.sim.engine import simulate
    except Exception:
        return None
    res = simulate(sc, cc_name)
    sim = per_job_avg(res.records, warmup)
    emu = per_job_avg(emu_records, warmup)
    return {job: emu[job] / sim[job] for job in emu if job in sim and sim[job] > 0}


def run_experiment(sc, cc: str = "reno", compare: bool = False, transport: str = "kernel",
                   link_mode: str = "auto", topology: str = "auto",
                   on_record: Callable[[str, IterationRecord], None] | None = None,
                   with_sim: bool = True) -> dict:
    """Baseline (and with ``compare`` MLTCP) arms of scenario ``sc``; returns the JSON document."""
    if cc not in BASE_CCS:
        raise EmulationError(f"--cc must be one of {', '.join(BASE_CCS)}, got {cc}")
    if transport not in TRANSPORTS:
        raise EmulationError(f"--transport must be one of {', '.join(TRANSPORTS)}, got {transport}")
    if cc == "dcqcn" and transport == "kernel":
        raise EmulationError("DCQCN is rate-based: use --transport udp")
    plan = plan_from_scenario(sc, topology)
    out: dict = {"scenario": plan.scenario, "emulation": {
        "topology": plan.topology, "transport": transport, "link_mode": resolve_link_mode(link_mode),
        "bottleneck": dataclasses.asdict(plan.bottleneck), "jobs": len(plan.jobs),
        "iterations": max(j.iterations for j in plan.jobs), "warmup_iterations": plan.warmup,
        "notes": plan.notes}}
    cb = (lambda arm: (lambda r: on_record(arm, r))) if on_record else (lambda arm: None)
    base = run_arm(plan, cc, transport, mltcp=False, link_mode=link_mode, on_record=cb("baseline"))
    out["baseline"] = arm_summary(base, plan.warmup)
    ideal = [sc.ideal_iter_s(j) for j in sc.jobs] if hasattr(sc, "ideal_iter_s") else []
    out["ideal_iter_s"] = (sum(ideal) / len(ideal)) if ideal else None
    sims = {}
    if with_sim:
        sims["baseline"] = sim_vs_emu(sc, cc, base.records, plan.warmup)
    if compare:
        ml = run_arm(plan, cc, transport, mltcp=True, link_mode=link_mode, on_record=cb("mltcp"))
        out["mltcp"] = arm_summary(ml, plan.warmup)
        out["speedup_avg"] = out["baseline"]["avg_iter_s"] / out["mltcp"]["avg_iter_s"]
        out["speedup_p99"] = out["baseline"]["p99_iter_s"] / out["mltcp"]["p99_iter_s"]
        out["converged_at_iteration"] = converged_at(ml.records)
        if with_sim:
            sims["mltcp"] = sim_vs_emu(sc, f"mltcp-{cc}", ml.records, plan.warmup)
    else:
        out["mltcp"] = None
        out["speedup_avg"] = out["speedup_p99"] = None
        out["converged_at_iteration"] = converged_at(base.records)
    out["sim_vs_emu"] = sims if with_sim else None
    return out


def have_mininet_prereqs() -> str | None:
    """None if this process can run Mininet networks, else the reason it cannot."""
    import os
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("mnexec", "ip", "tc", "brctl"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    return None
