"""Planning an emulation run (pure, no network): scenario -> :class:`Plan` (topology kind, bottleneck
link in emulation units, one :class:`JobPlan` per job), the scenario rescaling of ``--rate-mbps``
/ ``--dilate``, what the emulation refuses, and the wire/NIC rate arithmetic that makes an emulated
link carry the model's payload rate."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mltcp.cc import BASES
from mltcp.scenario import cc_kwargs
from mltcp.traffic.driver import JobSpec
from mltcp.workload import Job

from .topologies import EmuTopo, LinkParams, TopologyError

if TYPE_CHECKING:
    from mltcp.scenario import Scenario

TRANSPORTS = ("kernel", "udp")
BASE_CCS = BASES  # every base algorithm (dcqcn on the userspace transport only)
KERNEL_BPF_CCS = ("dctcp",)  # as kernel TCP: bpf_dctcp, registered for the arm; no kernel MLTCP variant
PORT_BASE = 5001


class EmulationError(RuntimeError):
    """The emulation could not run as asked (missing component, peer failure, timeout)."""


# --------------------------------------------------------------------------- planning (pure)


@dataclass
class JobPlan:
    """One job of a run: its :class:`~mltcp.traffic.driver.JobSpec` (the scenario's workload
    :class:`~mltcp.workload.Job`, its shim id, the seed of its compute draws), which its sender
    receives as one JSON document, and where and how it runs."""

    spec: JobSpec
    sender: str = ""
    receiver: str = ""
    dst_ip: str = ""
    port: int = 0
    line_rate_mbps: float = 0.0
    pace: float = 1.0  # the sender's NIC runs at this fraction of its link's rate
    min_rto_s: float = 0.2  # the scenario's (after --dilate: stretched) minimum RTO
    idle_restart: bool = True  # the scenario's slow_start_after_idle
    hook: dict = field(default_factory=dict)  # the scenario's [mltcp] table (hook Param names)
    dcqcn: dict = field(default_factory=dict)  # its [cc_params.dcqcn] as constructor arguments (B/s, s)
    dctcp: dict = field(default_factory=dict)  # its [cc_params.dctcp] (g, alpha_init, loss_beta)

    @property
    def name(self) -> str:
        return self.spec.label

    @property
    def job(self) -> Job:
        return self.spec.job


def job_plan(
    name: str,
    nbytes: int,
    compute_s: float,
    start_offset_s: float = 0.0,
    iterations: int = 1,
    job_id: int = 0,
    seed: int | None = None,
    **placement,
) -> JobPlan:
    """A JobPlan from a job's numbers (benches and tests; runs build theirs from a scenario)."""
    job = Job(name, compute_s, nbytes, [], start_offset_s=start_offset_s, iterations=iterations)
    return JobPlan(JobSpec(job, job_id, seed=seed), **placement)


@dataclass
class Plan:
    scenario: str
    topology: str
    bottleneck: LinkParams
    jobs: list[JobPlan]
    warmup: int
    scenario_obj: Scenario | None = None  # the (possibly rescaled) scenario
    notes: list[str] = field(default_factory=list)


def link_params_of(link, mss: int = 1448) -> LinkParams:
    """Scenario link (mltcp.scenario.Link) -> LinkParams in emulation units."""
    ecn = None
    if link.ecn == "step":
        ecn = max(1, round(link.ecn_k_bytes / mss))
    elif link.ecn == "red":
        ecn = max(1, round(link.red_kmin_bytes / mss))
    return LinkParams(
        rate_mbps=link.rate_bps / 1e6,
        delay_ms=link.delay_s * 1e3,
        buffer_bytes=max(1500, int(link.buffer_bytes)),
        ecn_threshold_pkts=ecn,
    )


def needs_ecn(sc, cc: str = "") -> bool:
    """Whether the scenario's links mark ECN (or its algorithm, DCQCN or DCTCP, lives on marks)."""
    return bool({"dcqcn", "dctcp"} & {cc, sc.cc}) or any(l.ecn != "none" for l in sc.links.values())


def choose_topology(sc) -> str:
    """dumbbell when every job crosses the same single link, ring for three jobs each crossing two
    of three links round a cycle, else an error naming what is supported."""
    paths = [tuple(j.path) for j in sc.jobs]
    if all(len(p) == 1 for p in paths) and len({p[0] for p in paths}) == 1:
        return "dumbbell"
    if len(paths) <= 3 and all(len(p) == 2 for p in paths) and len(sc.links) == 3:
        return "ring"
    raise TopologyError(
        f"{sc.source}: jobs[].path: emulation supports jobs sharing one link (dumbbell) "
        "or up to three jobs each crossing two of three links (ring); pass --topology"
    )


def dilate_rate_params(table: dict, stretch: float) -> dict:
    """DCQCN's ``[cc_params.dcqcn]`` for a run ``stretch`` times slower: every rate (R_AI, R_HAI,
    the floor) / stretch, every time (timer, alpha interval) x stretch, the rest as they are; a
    field the scenario leaves out gets its default first, so the dilated run keeps the regime."""
    from mltcp.cc.dcqcn import Dcqcn

    out = dict(table)
    for prm in Dcqcn.params.values():
        if not prm.in_scenario or prm.unit not in ("B/s", "s"):
            continue
        v = float(out.get(prm.key, prm.default / prm.scale))
        out[prm.key] = v / stretch if prm.unit == "B/s" else v * stretch
    return out


def rescale(
    sc,
    rate_mbps: float | None = None,
    delay_ms: float | None = None,
    iterations: int | None = None,
    buffer_kb: float | None = None,
    dilate: bool = False,
):
    """A copy of scenario ``sc`` with every link at ``rate_mbps`` (job bytes scaled by the same factor,
    so each job keeps its communication/compute ratio), one-way delay ``delay_ms`` per link, and
    ``iterations`` per job, drop-tail buffer ``buffer_kb`` per link. The simulator is run on the
    same copy for ``sim_vs_emu``.

    With ``dilate`` the rate change is a time dilation instead: bytes and buffers stay, and every
    duration (compute, start offsets, delays) is stretched by old_rate/new_rate, so the run is the
    same experiment in slow motion (same packets per round trip, same queue in packets)."""
    sc = dataclasses.replace(
        sc,
        links={k: dataclasses.replace(v) for k, v in sc.links.items()},
        jobs=[dataclasses.replace(j) for j in sc.jobs],
        cc_params={k: dict(v) for k, v in sc.cc_params.items()},
        mltcp_params=dict(sc.mltcp_params),
    )
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
        if "min_idle" in sc.mltcp_params:
            sc.mltcp_params["min_idle"] *= stretch
        if sc.switch.contest_window_us:  # the switch's contest window is a time too
            sc.switch = dataclasses.replace(sc.switch, contest_window_us=sc.switch.contest_window_us * stretch)
        sc.cc_params["dcqcn"] = dilate_rate_params(sc.cc_params.get("dcqcn", {}), stretch)  # also for --cc dcqcn
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
            raise TopologyError(
                f"{sc.source}: jobs[{k}].path: the ring needs it to start on "
                f"{paths[k - 1][1]!r} (where jobs[{k - 1}] ends)"
            )
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
            raise TopologyError(
                f"{where}: flows = {j.flows}: the emulation runs one flow per job; "
                "multi-flow jobs and collectives (flows, paths, pattern) run in "
                "`mltcp simulate` only"
            )
        if j.compute_series:
            raise TopologyError(
                f"{where}: trace: per-iteration compute times from a trace run in "
                "`mltcp simulate` only (the emulated senders draw compute_ms)"
            )
    if getattr(sc, "fabric", None) is not None:
        raise TopologyError(
            f"{sc.source}: fabric: the emulation builds dumbbell, ring or leafspine "
            "topologies from [[links]]; a [fabric] runs in `mltcp simulate` only"
        )


def plan_from_scenario(sc, topology: str = "auto") -> Plan:
    check_emulatable(sc)
    kind = choose_topology(sc) if topology == "auto" else topology
    if kind == "ring":
        check_ring_paths(sc)
    first = sc.links[sc.jobs[0].path[0]]
    # The minimum RTO and the cwnd restart after idle travel with the scenario: with --dilate the
    # RTO is stretched like the compute time, so "idle for longer than an RTO" (which halves the
    # window at each iteration start) happens in the emulation exactly when it does in the model.
    jobs = [
        JobPlan(
            JobSpec(dataclasses.replace(j), i, seed=None if sc.seed is None else sc.seed * 1000 + i),
            min_rto_s=sc.min_rto_s,
            idle_restart=sc.slow_start_after_idle,
            hook=dict(sc.mltcp_params),
            dcqcn=cc_kwargs(sc, "dcqcn") if sc.cc_params.get("dcqcn") else {},
            dctcp=cc_kwargs(sc, "dctcp") if sc.cc_params.get("dctcp") else {},
        )
        for i, j in enumerate(sc.jobs)
    ]
    notes = []
    if any(j.jitter or j.straggler_prob for j in sc.jobs):
        notes.append(
            "compute jitter and stragglers are drawn by each sender (mltcp.workload.Job model, "
            "seeded), not the simulator's draws: compare the two statistically"
        )
    lossless = [n for n, lk in sc.links.items() if lk.pfc]
    if lossless:
        notes.append(
            f"links {', '.join(lossless)} are lossless (pfc) in the scenario: emulated only by mltcp-switch "
            "with userspace senders (PFC frames from the switch, obeyed by the senders); kernel TCP "
            "and BMv2 have no PFC here, so there a full queue drops"
        )
    return Plan(sc.name, kind, link_params_of(first, sc.mss), jobs, sc.warmup_iterations, sc, notes)


ETH_HEADER = 14
KERNEL_TCP_MSS = 1448  # 1500-byte IP packet, TCP with timestamps


def wire_factor(transport: str) -> float:
    """Frame bytes on the wire per payload byte of ``transport``'s full-sized packets.

    The simulator's links carry ``rate`` bytes/s of payload (whole segments, no headers); an
    emulated link's rate counts frames (htb and mltcp-switch both count the Ethernet frame). Run at
    the nominal rate, the userspace transport (1400 payload bytes in a 1498-byte frame: headers and
    the MAC; the handshake key adds 16 bytes to a flow's first datagrams only) gets only 93 % of the
    model's goodput, so a job's communication phase alone is 7 % longer than its compute phase in
    ``two-jobs`` and the two phases can no longer interleave without overlap."""
    if transport == "udp":
        from mltcp.traffic.transport import wire

        frame = ETH_HEADER + wire.IP_UDP_OVERHEAD + wire.FIXED_LEN + wire.DEFAULT_PAYLOAD + wire.TAG_LEN
        return frame / wire.DEFAULT_PAYLOAD
    return (1500 + ETH_HEADER) / KERNEL_TCP_MSS


def payload_rate_plan(plan: Plan, transport: str) -> None:
    """Raise the emulated links' frame rate so their payload rate is the scenario's (the model's)."""
    if plan.bottleneck.rate_mbps is None:
        return
    f = wire_factor(transport)
    plan.bottleneck = dataclasses.replace(plan.bottleneck, rate_mbps=round(plan.bottleneck.rate_mbps * f, 3))
    plan.notes.append(
        f"links run at {plan.bottleneck.rate_mbps:g} Mb/s of frames = the scenario's rate in "
        f"payload bytes ({transport} headers: x{f:.4f}); --wire-rate turns this off"
    )


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
        raise TopologyError(
            f"topology {plan.topology} has {len(topo.job_pairs)} job endpoints, "
            f"scenario {plan.scenario} has {len(plan.jobs)} jobs"
        )
    for i, (job, (s, r)) in enumerate(zip(plan.jobs, topo.job_pairs)):
        job.sender, job.receiver, job.dst_ip, job.port = s, r, topo.ip_of(r), PORT_BASE + i
        job.spec.job_id = i
        job.line_rate_mbps = (plan.bottleneck.rate_mbps or 0.0) * job.pace


def expected_duration(plan: Plan, rate_mbps: float | None) -> float:
    rate = (rate_mbps or plan.bottleneck.rate_mbps or 1000) * 1e6 / 8
    n = len(plan.jobs)
    per_iter = max(j.job.compute_s + n * j.spec.bytes_per_iter / rate for j in plan.jobs)
    return max(j.job.start_offset_s for j in plan.jobs) + per_iter * max(j.job.iterations for j in plan.jobs)
