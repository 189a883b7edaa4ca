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
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from mltcp import compare, metrics
from mltcp.records import IterationRecord

from . import netns
from .network import build_network, resolve_link_mode
from .topologies import EmuTopo, LinkParams, TopologyError, bottleneck_intfs, features, make_topology, qdisc_drops

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
    job_id: int = 0
    line_rate_mbps: float = 0.0
    pace: float = 1.0               # the sender's NIC runs at this fraction of its link's rate
    min_rto_s: float = 0.2          # the scenario's (after --dilate: stretched) minimum RTO
    idle_restart: bool = True       # the scenario's slow_start_after_idle
    jitter: float = 0.0             # compute-time model of mltcp.workload.Job
    straggler_prob: float = 0.0
    straggler_delay_s: float = 0.0
    seed: int | None = None         # of the jitter/straggler draws


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


def needs_ecn(sc, cc: str = "") -> bool:
    """Whether the scenario's links mark ECN (or its algorithm, DCQCN, lives on marks)."""
    return "dcqcn" in (cc, sc.cc) or any(l.ecn != "none" for l in sc.links.values())


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


def rescale(sc, rate_mbps: float | None = None, delay_ms: float | None = None, iterations: int | None = None,
            buffer_kb: float | None = None, dilate: bool = False):
    """A copy of scenario ``sc`` with every link at ``rate_mbps`` (job bytes scaled by the same factor,
    so each job keeps its communication/compute ratio), one-way delay ``delay_ms`` per link, and
    ``iterations`` per job, drop-tail buffer ``buffer_kb`` per link. The simulator is run on the
    same copy for ``sim_vs_emu``.

    With ``dilate`` the rate change is a time dilation instead: bytes and buffers stay, and every
    duration (compute, start offsets, delays) is stretched by old_rate/new_rate, so the run is the
    same experiment in slow motion (same packets per round trip, same queue in packets)."""
    sc = dataclasses.replace(sc, links={k: dataclasses.replace(v) for k, v in sc.links.items()},
                             jobs=[dataclasses.replace(j) for j in sc.jobs])
    if rate_mbps is not None and rate_mbps <= 0:
        raise ValueError(f"--rate-mbps must be > 0, got {rate_mbps}")
    if rate_mbps is not None and dilate:
        rates = {v.rate_bps for v in sc.links.values()}
        if len(rates) != 1:
            raise ValueError("time dilation needs all links at one rate")
        stretch = rates.pop() / (rate_mbps * 1e6)
        for job in sc.jobs:
            job.compute_s *= stretch
            job.start_offset_s *= stretch
            job.straggler_delay_s *= stretch
        for link in sc.links.values():
            link.rate_bps = rate_mbps * 1e6
            link.delay_s *= stretch
        sc.host_delay_s *= stretch
        sc.min_rto_s *= stretch
        sc.step_s *= stretch
    elif rate_mbps is not None:
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
    if buffer_kb is not None:
        if buffer_kb < 1.5:
            raise ValueError(f"--buffer-kb must be >= 1.5, got {buffer_kb}")
        for link in sc.links.values():
            link.buffer_bytes = buffer_kb * 1e3
    if iterations is not None:
        if iterations < 1:
            raise ValueError(f"--iterations must be >= 1, got {iterations}")
        for job in sc.jobs:
            job.iterations = iterations
        sc.warmup_iterations = min(sc.warmup_iterations, max(0, iterations // 3))
    return sc


def check_ring_paths(sc) -> None:
    """The ring carries job k over (link k, link k+1): jobs[0].path = [a, b], jobs[1].path = [b, c],
    jobs[2].path = [c, a] for links a, b, c (each job shares one link with each neighbour)."""
    paths = [list(j.path) for j in sc.jobs]
    if any(len(p) != 2 for p in paths):
        raise TopologyError(f"{sc.source}: jobs[].path: the ring needs every job to cross two links")
    for k in range(1, len(paths)):
        if paths[k][0] != paths[k - 1][1]:
            raise TopologyError(f"{sc.source}: jobs[{k}].path: the ring needs it to start on "
                                f"{paths[k - 1][1]!r} (where jobs[{k - 1}] ends)")
    if len(paths) == 3 and paths[2][1] != paths[0][0]:
        raise TopologyError(f"{sc.source}: jobs[2].path: the ring needs it to end on {paths[0][0]!r}")


def check_emulatable(sc) -> None:
    """Refuse what the emulation would run wrongly: it runs one flow per job on the job's
    ``path``, with the scenario's ``compute_ms``. A job with several flows (``flows``, ``paths``,
    ``pattern``), per-iteration compute times from a trace, or a ``[fabric]`` would be emulated
    as something else, so it is an error, not an approximation."""
    for i, j in enumerate(sc.jobs):
        where = f"{sc.source}: jobs[{i}] ({j.name})"
        if j.flows != 1 or j.flow_paths is not None:
            raise TopologyError(f"{where}: flows = {j.flows}: the emulation runs one flow per job; "
                                "multi-flow jobs and collectives (flows, paths, pattern) run in "
                                "`mltcp simulate` only")
        if j.compute_series:
            raise TopologyError(f"{where}: trace: per-iteration compute times from a trace run in "
                                "`mltcp simulate` only (the emulated senders draw compute_ms)")
    if getattr(sc, "fabric", None) is not None:
        raise TopologyError(f"{sc.source}: fabric: the emulation builds dumbbell, ring or leafspine "
                            "topologies from [[links]]; a [fabric] runs in `mltcp simulate` only")


def plan_from_scenario(sc, topology: str = "auto") -> Plan:
    check_emulatable(sc)
    kind = choose_topology(sc) if topology == "auto" else topology
    if kind == "ring":
        check_ring_paths(sc)
    first = sc.links[sc.jobs[0].path[0]]
    # The minimum RTO and the cwnd restart after idle travel with the scenario: with --dilate the
    # RTO is stretched like the compute time, so "idle for longer than an RTO" (which halves the
    # window at each iteration start) happens in the emulation exactly when it does in the model.
    jobs = [JobPlan(j.name, int(round(j.bytes_per_iter)), j.compute_s, j.start_offset_s, j.iterations,
                    min_rto_s=sc.min_rto_s, idle_restart=sc.slow_start_after_idle, jitter=j.jitter,
                    straggler_prob=j.straggler_prob, straggler_delay_s=j.straggler_delay_s,
                    seed=None if sc.seed is None else sc.seed * 1000 + i)
            for i, j in enumerate(sc.jobs)]
    notes = []
    if any(j.jitter or j.straggler_prob for j in sc.jobs):
        notes.append("compute jitter and stragglers are drawn by each sender (mltcp.workload.Job model, "
                     "seeded), not the simulator's draws: compare the two statistically")
    return Plan(sc.name, kind, link_params_of(first, sc.mss), jobs, sc.warmup_iterations, sc, notes)


ETH_HEADER = 14
KERNEL_TCP_MSS = 1448   # 1500-byte IP packet, TCP with timestamps


def wire_factor(transport: str) -> float:
    """Frame bytes on the wire per payload byte of ``transport``'s full-sized packets.

    The simulator's links carry ``rate`` bytes/s of payload (whole segments, no headers); an
    emulated link's rate counts frames (htb and mltcp-switch both count the Ethernet frame). Run at
    the nominal rate, the userspace transport (1424 payload bytes in a 1514-byte frame) gets only
    94 % of the model's goodput, so a job's communication phase alone is 6 % longer than its
    compute phase in ``two-jobs`` and the two phases can no longer interleave without overlap."""
    if transport == "udp":
        from mltcp.traffic.transport import wire
        return (1500 + ETH_HEADER) / wire.DEFAULT_PAYLOAD
    return (1500 + ETH_HEADER) / KERNEL_TCP_MSS


def payload_rate_plan(plan: Plan, transport: str) -> None:
    """Raise the emulated links' frame rate so their payload rate is the scenario's (the model's)."""
    if plan.bottleneck.rate_mbps is None:
        return
    f = wire_factor(transport)
    plan.bottleneck = dataclasses.replace(plan.bottleneck, rate_mbps=round(plan.bottleneck.rate_mbps * f, 3))
    plan.notes.append(f"links run at {plan.bottleneck.rate_mbps:g} Mb/s of frames = the scenario's rate in "
                      f"payload bytes ({transport} headers: x{f:.4f}); --wire-rate turns this off")


def nic_rate_mbps(link_frame_mbps: float) -> float:
    """The pacing rate of a sender whose NIC runs at its first link's rate.

    The model's flows send at most at their first link's rate (its per-flow NIC credit), so a job
    alone on its bottleneck never builds a queue there: it is not window-limited, its window does
    not grow, nothing is dropped. The transport paces IP datagram bytes; the link counts Ethernet
    frames (14 bytes more), so the datagram rate that fills the link exactly is ``x 1500/1514``.
    Pacing at the link rate in datagram bytes would outrun the link by 0.9 % and let a lone flow
    fill the queue and lose packets every iteration."""
    return link_frame_mbps * 1500 / (1500 + ETH_HEADER)


def assign_endpoints(plan: Plan, topo: EmuTopo) -> None:
    if len(plan.jobs) > len(topo.job_pairs):
        raise TopologyError(f"topology {plan.topology} has {len(topo.job_pairs)} job endpoints, "
                            f"scenario {plan.scenario} has {len(plan.jobs)} jobs")
    for i, (job, (s, r)) in enumerate(zip(plan.jobs, topo.job_pairs)):
        job.sender, job.receiver, job.dst_ip, job.port = s, r, topo.ip_of(r), PORT_BASE + i
        job.job_id = i
        job.line_rate_mbps = (plan.bottleneck.rate_mbps or 0.0) * job.pace


# --------------------------------------------------------------------------- peers

def compute_args(job: JobPlan) -> list[str]:
    """The sender options of the job's compute-time model (none when it is constant)."""
    out = []
    if job.jitter:
        out += ["--jitter", repr(job.jitter)]
    if job.straggler_prob:
        out += ["--straggler-prob", repr(job.straggler_prob), "--straggler-delay-s", repr(job.straggler_delay_s)]
    if out and job.seed is not None:
        out += ["--seed", str(job.seed)]
    return out


def peer_commands(job: JobPlan, transport: str, cc: str, t0: float, run: str = "") -> tuple[list[str], list[str]]:
    """(receiver argv, sender argv) for one job; ``run`` tags kernel peers' command lines."""
    py = sys.executable
    if transport == "kernel":
        tag = ["--run", run] if run else []
        recv = [py, "-m", "mltcp.emulation.kernel_peer", "recv", *tag, "--port", str(job.port), "--t0", repr(t0)]
        send = [py, "-m", "mltcp.emulation.kernel_peer", "send", *tag, "--host", job.dst_ip, "--port", str(job.port),
                "--job", job.name, "--cc", cc, "--iterations", str(job.iterations), "--bytes", str(job.bytes),
                "--compute-s", repr(job.compute_s), "--t0", repr(t0),
                "--start-offset-s", repr(job.start_offset_s), *compute_args(job)]
        if job.line_rate_mbps > 0 and os.environ.get("MLTCP_KERNEL_PACING", "1") != "0":
            # paced like a NIC of the link's rate, as the udp sender and the model (docs/kernel.md)
            send += ["--nic-rate-mbps", repr(job.line_rate_mbps)]
        return recv, send
    if transport == "udp":
        if not udp_available():
            raise EmulationError("--transport udp needs the userspace transport (mltcp.traffic.transport), "
                                 "which is not importable in this checkout")
        m = [py, "-m", "mltcp.emulation.udp_peer"]
        tag = ["--run", run] if run else []
        recv = [*m, "recv", *tag, "--port", str(job.port), "--t0", repr(t0)]
        send = [*m, "send", *tag, "--host", job.dst_ip, "--port", str(job.port), "--job", job.name,
                "--job-id", str(job.job_id), "--cc", cc, "--iterations", str(job.iterations),
                "--bytes", str(job.bytes), "--compute-s", repr(job.compute_s), "--t0", repr(t0),
                "--start-offset-s", repr(job.start_offset_s), "--line-rate-mbps", repr(job.line_rate_mbps),
                "--min-rto-s", repr(job.min_rto_s), *compute_args(job)]
        if job.line_rate_mbps > 0:
            send += ["--nic-rate-mbps", repr(nic_rate_mbps(job.line_rate_mbps))]
        if not job.idle_restart:
            send.append("--no-idle-restart")
        return recv, send
    raise EmulationError(f"unknown transport {transport!r}; choose from {', '.join(TRANSPORTS)}")


def udp_available() -> bool:
    """Whether the userspace MLTCP transport (mltcp.traffic.transport) can be imported."""
    try:
        import importlib
        importlib.import_module("mltcp.traffic.transport.transport")
        importlib.import_module("mltcp.traffic.transport.receiver")
    except Exception:
        return False
    return True


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


_ROUTE_FLAGS = {"linkdown", "dead", "offload", "trap", "offload_failed", "rt_offload", "rt_trap"}


def route_rto_commands(route_lines: str, min_rto_s: float) -> list[str]:
    """``ip route change`` lines that give every route in ``ip route show`` output the minimum RTO
    ``min_rto_s`` (Linux's per-route ``rto_min``): kernel TCP then times out, and restarts its
    window after idle, on the scenario's (possibly dilated) RTO instead of its fixed 200 ms."""
    out = []
    for line in route_lines.splitlines():
        toks = [t for t in line.split() if t not in _ROUTE_FLAGS]
        if not toks or toks[0] in ("broadcast", "local", "multicast", "unreachable", "blackhole", "prohibit"):
            continue
        if "rto_min" in toks:                      # replace an existing value
            i = toks.index("rto_min")
            del toks[i:i + 2]
        out.append("ip route change " + " ".join(toks) + f" rto_min {max(1, round(min_rto_s * 1e3))}ms")
    return out


def set_kernel_min_rto(net, min_rto_s: float) -> None:
    for h in net.hosts:
        for cmd in route_rto_commands(h.cmd("ip -4 route show"), min_rto_s):
            res = h.cmd(cmd + " 2>&1; echo rc=$?")
            if not res.rstrip().endswith("rc=0"):
                raise EmulationError(f"{h.name}: '{cmd}' failed: {res.strip()}")


class _Peer:
    """A subprocess in a host whose stdout JSON lines are pushed onto a shared queue."""

    def __init__(self, node, argv: list[str], tag: str, q: queue.Queue, cleanup: netns.Cleanup):
        self.tag = tag
        self.proc = cleanup.add_proc(node.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE, text=True, bufsize=1))
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

    def go(self, t0: float) -> None:
        """Hand the run's start epoch to a peer waiting after its ready line."""
        self.proc.stdin.write(f"{t0!r}\n")
        self.proc.stdin.flush()


def start_together(senders: dict, q: queue.Queue, timeout_s: float, lead_s: float = 0.3) -> float:
    """Wait for every sender's ready line, then give them all one start epoch; returns it.
    Messages other than ready that arrive meanwhile go back on the queue."""
    waiting = {p.tag for p in senders.values()}
    held = []
    deadline = time.monotonic() + timeout_s
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            raise EmulationError(f"peers not ready after {timeout_s:.0f} s: {', '.join(sorted(waiting))}")
        try:
            tag, msg = q.get(timeout=min(left, 0.5))
        except queue.Empty:
            continue
        if msg["type"] == "ready":
            waiting.discard(tag)
        elif msg["type"] == "eof" and tag in waiting:
            p = next(p for p in senders.values() if p.tag == tag)
            p.proc.wait(timeout=5)
            raise EmulationError(f"{tag} exited {p.proc.returncode} before it was ready: "
                                 f"{' | '.join(p.err[-3:])}")
        else:
            held.append((tag, msg))
    for item in held:
        q.put(item)
    t0 = time.time() + lead_s
    for p in senders.values():
        p.go(t0)
    return t0


@dataclass
class ArmResult:
    cc: str
    records: list[IterationRecord]
    drops: int
    ecn_marks: int | None
    retrans: dict[str, int]
    link_mode: str
    wall_s: float
    peer_stats: dict = field(default_factory=dict)   # job -> the sender's per-flow counters (udp)


def switch_stat_sources(net, topo: EmuTopo):
    """([(switch, stats file)], {switch: bottleneck ports}) to read drops/marks after the switches stop."""
    bn = {frozenset(b) for b in topo.bottlenecks}
    logs = [(sw.name, sw.stats_file) for sw in net.switches if hasattr(sw, "stats_file")]
    ports = {sw.name: {port for intf, port in sw.ports.items() if getattr(intf, "link", None)
                       and frozenset((intf.link.intf1.node.name, intf.link.intf2.node.name)) in bn}
             for sw in net.switches}
    return logs, ports


def expected_duration(plan: Plan, rate_mbps: float | None) -> float:
    rate = (rate_mbps or plan.bottleneck.rate_mbps or 1000) * 1e6 / 8
    n = len(plan.jobs)
    per_iter = max(j.compute_s + n * j.bytes / rate for j in plan.jobs)
    return max(j.start_offset_s for j in plan.jobs) + per_iter * max(j.iterations for j in plan.jobs)


def run_arm(plan: Plan, cc: str, transport: str = "kernel", mltcp: bool = False, link_mode: str = "auto",
            on_record: Callable[[IterationRecord], None] | None = None,
            fail_after_records: int | None = None, timeout_s: float | None = None,
            switch_logs=None, pcap: bool = False) -> ArmResult:
    """Build the network, run all jobs once with one congestion control, tear everything down.

    ``fail_after_records`` raises after that many records (tests use it to check cleanup).
    ``switch_logs`` (link mode bmv2): keep the switches' logs, and with ``pcap`` their per-port
    pcaps, in that folder."""
    mode = resolve_link_mode(link_mode, plan.topology)
    if transport == "kernel":
        wire_cc = kernel_cc_name(cc, mltcp)
    else:
        wire_cc = f"mltcp-{cc}" if mltcp else cc
    prefix = netns.run_prefix()
    wall0 = time.monotonic()
    with netns.Cleanup(prefix) as cl:
        cl.remove_switch_logs = mode != "switch"   # collect_stats reads and removes them
        from .network import switch_class_for
        topo = make_topology(plan.topology, prefix, plan.bottleneck, n_jobs=len(plan.jobs),
                             switch_cls=switch_class_for(mode, switch_logs, pcap))
        topo.switch_policy = getattr(plan.scenario_obj, "switch", None)   # in-network MLTCP
        assign_endpoints(plan, topo)
        if mode == "bmv2":
            from .bmv2 import use_shim_port
            use_shim_port(plan.jobs)
        net = build_network(topo, mode, cl)
        if transport == "kernel":   # the scenario's RTO (stretched by --dilate), as the model's
            set_kernel_min_rto(net, min(j.min_rto_s for j in plan.jobs))
        if transport == "kernel" and features(mode)["ecn"]:
            for h in net.hosts:   # ECN-capable kernel TCP where the links can mark
                h.cmd("sysctl -qw net.ipv4.tcp_ecn=1")
        q: queue.Queue = queue.Queue()
        receivers, senders = {}, {}
        for job in plan.jobs:
            r_argv, _ = peer_commands(job, transport, wire_cc, 0.0, prefix)
            receivers[job.name] = _Peer(net[job.receiver], r_argv, f"recv:{job.name}", q, cl)
        for job in plan.jobs:
            _, s_argv = peer_commands(job, transport, wire_cc, -1.0, prefix)
            senders[job.name] = _Peer(net[job.sender], s_argv, f"send:{job.name}", q, cl)
        start_together(senders, q, timeout_s=60 + 2 * len(plan.jobs))
        records: list[IterationRecord] = []
        retrans: dict[str, int] = {}
        peer_stats: dict[str, list] = {}
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
                                      float(msg["comm_start"]), float(msg["end"]), float(msg["bytes"]),
                                      float(msg.get("drops", 0)), float(msg.get("marks", 0)))
                records.append(rec)
                if on_record:
                    on_record(rec)
                if fail_after_records is not None and len(records) >= fail_after_records:
                    raise EmulationError(f"injected failure after {len(records)} records")
            elif msg["type"] == "summary":
                retrans[msg["job"]] = int(msg.get("retrans", 0))
                if msg.get("flows"):
                    peer_stats[msg["job"]] = msg["flows"]
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
        if mode == "switch":
            sw_logs, bn_ports = switch_stat_sources(net, topo)
        elif mode == "bmv2":
            bm_switches = [sw for sw in net.switches if hasattr(sw, "thrift_port")]
        else:
            drops = sum(qdisc_drops(i) for i in bottleneck_intfs(net, topo))
            marks = None if mode == "htb" else 0
    if mode == "switch":  # the switches log their port statistics when they stop
        from .softswitch import collect_stats
        drops, marks = collect_stats(sw_logs, bn_ports)
    elif mode == "bmv2":  # the switches read their ECN-mark counters when they stop
        from .bmv2 import collect_stats, estimated_drops
        marks = collect_stats(bm_switches)
        drops = estimated_drops(records, peer_stats)   # BMv2 has no readable queue-drop counter
    return ArmResult(wire_cc, sorted(records, key=lambda r: (r.job, r.iteration)), drops, marks, retrans,
                     mode, time.monotonic() - wall0, peer_stats)


# --------------------------------------------------------------------------- summaries

# the metrics live in mltcp.metrics, shared with the simulator's report (mltcp.compare.side)
per_job_avg = metrics.per_job_avg
interleaved_at = metrics.interleaved_at
LOOSE_OVERLAP = metrics.LOOSE_OVERLAP


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
    try:
        from mltcp.sim.engine import simulate
    except Exception:
        return None
    try:
        res = simulate(sc, cc_name)
    except Exception as e:  # the simulator's failure must not lose a finished emulation
        return {"error": f"simulator failed: {type(e).__name__}: {e}"}
    sim = per_job_avg(res.records, sc.warmup_iterations)
    emu = per_job_avg(emu_records, sc.warmup_iterations)
    return {job: round(emu[job] / sim[job], 4) for job in emu if job in sim and sim[job] > 0}


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
    job = dataclasses.replace(first, iterations=iterations, compute_s=min(first.compute_s, 0.05),
                              start_offset_s=0.0, pace=CALIBRATION_PACE)
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
    plan.notes.append(f"RTT calibration: the hosts add {got['host_rtt_ms']:.2f} ms per round trip, so each link "
                      f"runs {link:.3f} ms one way instead of {delay:g} ms (base RTT {2 * hops * delay:g} ms "
                      "as in the scenario); --no-rtt-calibration turns this off")
    return dict(got, scenario_rtt_ms=round(2 * hops * delay, 4), scenario_delay_ms=delay,
                link_delay_ms=round(link, 4), hops=hops)


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
            notes.append(f"ECN threshold {k} packets >= drop-tail buffer {buf} packets: the switch drops "
                         "before it marks (raise --buffer-kb, or use --dilate instead of a plain --rate-mbps)")
    bdp = lambda rtt_ms: link.rate_mbps * 1e6 / 8 * rtt_ms / 1e3 / mss
    if host_rtt_ms is not None and bdp(max(host_rtt_ms, scenario_rtt_ms)) > k >= bdp(scenario_rtt_ms):
        notes.append(f"the hosts add {host_rtt_ms:.2f} ms per round trip: at {link.rate_mbps:g} Mb/s the "
                     f"bandwidth-delay product is {bdp(max(host_rtt_ms, scenario_rtt_ms)):.0f} packets, above "
                     f"the ECN threshold of {k} (the scenario's is {bdp(scenario_rtt_ms):.0f}), so a marked "
                     "window-based sender cannot fill the link as in the simulator; a lower --rate-mbps with "
                     "--dilate keeps the scenario's regime")
    return notes


def rtt_seen(arm: ArmResult) -> dict[str, dict] | None:
    """Per job, the RTT percentiles (ms) its sender saw in this arm (userspace transport only)."""
    out = {job: flows[0]["rtt_ms"] for job, flows in arm.peer_stats.items() if flows and flows[0].get("rtt_ms")}
    return out or None


def run_experiment(sc, cc: str = "reno", compare_mltcp: bool = False, transport: str = "kernel",
                   link_mode: str = "auto", topology: str = "auto",
                   on_record: Callable[[str, IterationRecord], None] | None = None,
                   with_sim: bool = True, records_dir=None, payload_rate: bool = True,
                   rtt_calibration: bool = True, switch_logs=None, pcap: bool = False) -> dict:
    """Baseline (and with ``compare_mltcp`` the MLTCP) arm of scenario ``sc``: the JSON document of
    ``mltcp simulate`` (mltcp.compare.report) plus ``sim_vs_emu`` and an ``emulation`` section.
    With ``records_dir`` each arm's per-iteration records go to ``<dir>/<arm>.csv``. With
    ``payload_rate`` the links' frame rate is raised so that they carry the scenario's rate in
    payload bytes, as the simulator's links do (:func:`wire_factor`). With ``rtt_calibration`` the
    links' delay is lowered by what the hosts add to the RTT (:func:`calibrate_rtt`), so the senders'
    base RTT is the scenario's; the simulator for ``sim_vs_emu`` runs with the scenario's delay."""
    if cc not in BASE_CCS:
        raise EmulationError(f"--cc must be one of {', '.join(BASE_CCS)}, got {cc}")
    if transport not in TRANSPORTS:
        raise EmulationError(f"--transport must be one of {', '.join(TRANSPORTS)}, got {transport}")
    if cc == "dcqcn" and transport == "kernel":
        raise EmulationError("DCQCN is rate-based: use --transport udp")
    plan = plan_from_scenario(sc, topology)
    if payload_rate:
        payload_rate_plan(plan, transport)
    mode = resolve_link_mode(link_mode, plan.topology, ecn=needs_ecn(sc, cc))
    if transport == "kernel":   # fail before the first arm, not after it
        kernel_cc_name(cc, False)
        if compare_mltcp:
            kernel_cc_name(cc, True)
    elif not udp_available():
        raise EmulationError("--transport udp needs the userspace transport (mltcp.traffic.transport)")
    calibration = calibrate_rtt(plan, transport, mode) if rtt_calibration else None
    scenario_rtt_ms = 2e3 * sum(sc.links[n].delay_s for n in sc.jobs[0].path) if sc.jobs else 0.0
    plan.notes += regime_notes(plan.bottleneck, sc.mss, scenario_rtt_ms,
                               calibration["host_rtt_ms"] if calibration else None)
    cb = (lambda arm: (lambda r: on_record(arm, r))) if on_record else (lambda arm: None)
    from pathlib import Path
    logs = (lambda arm: None) if switch_logs is None else (lambda arm: Path(switch_logs) / arm)
    base = run_arm(plan, cc, transport, mltcp=False, link_mode=mode, on_record=cb("baseline"),
                   switch_logs=logs("baseline"), pcap=pcap)
    ml = None
    if compare_mltcp:
        ml = run_arm(plan, cc, transport, mltcp=True, link_mode=mode, on_record=cb("mltcp"),
                     switch_logs=logs("mltcp"), pcap=pcap)
    if records_dir is not None:
        from mltcp.records import write_csv
        Path(records_dir).mkdir(parents=True, exist_ok=True)
        write_csv(base.records, Path(records_dir) / "baseline.csv")
        if ml is not None:
            write_csv(ml.records, Path(records_dir) / "mltcp.csv")
    out = compare.report(sc, arm_summary(base, sc), arm_summary(ml, sc) if ml else None)
    if ml is None:
        out["mltcp"] = None
        out["speedup_avg"] = out["speedup_p99"] = None
    if with_sim:
        out["sim_vs_emu"] = {"baseline": sim_vs_emu(sc, cc, base.records)}
        if ml is not None:
            out["sim_vs_emu"]["mltcp"] = sim_vs_emu(sc, compare.mltcp_name(cc), ml.records)
    else:
        out["sim_vs_emu"] = None
    out["emulation"] = {
        "topology": plan.topology, "transport": transport, "link_mode": mode, "features": features(mode),
        "bottleneck": dataclasses.asdict(plan.bottleneck), "jobs": len(plan.jobs),
        "iterations": max(j.iterations for j in plan.jobs), "notes": plan.notes,
        "rtt_calibration": calibration,
        "rtt_ms": {"baseline": rtt_seen(base), **({"mltcp": rtt_seen(ml)} if ml is not None else {})}}
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
