"""ns-3 as a second engine: the same scenario TOML run packet by packet in ns-3 (PyPI ``ns3``).

``run(scenario, cc_name)`` returns the :class:`~mltcp.sim.engine.SimResult` the fast engine
returns, so the CLI reports the same JSON keys. Mapping of the scenario onto ns-3:

* every scenario link is a point-to-point link between two routers; consecutive links of a flow's
  path share a router (so the ring of ``circular.toml`` is a ring of three routers). The data
  direction's device queue is the link's drop-tail buffer (``buffer_bytes / mss`` packets); the
  reverse direction carries ACKs and never drops. The FqCoDel queue disc that ns-3 installs with
  the addresses is removed; links with ``ecn = "step"`` or ``"red"`` get a RED queue disc with
  instantaneous queue length (QW = 1) instead: step marking at K (MinTh K-1/2, MaxTh K), or
  RED marking between kmin and kmax with probability up to pmax; above MaxTh RED marks, as the
  fast engine does.
* every flow has its own sender host, joined to the first router by a link at the first link's
  rate (the NIC, as the fast engine's ``access`` rate) carrying ``host_delay / 2`` each way, and
  its own receiver host behind a fast, zero-delay link; routes are static host routes along the
  flow's path, ACKs come back along the same links.
* TCP: segment size = the scenario's MSS, initial window 10, MinRto = the scenario's
  ``min_rto_ms``, send and receive buffers large enough that the window is never limited by
  them, SACK on and PRR recovery (ns-3 and Linux defaults). ``DelAckCount`` defaults to 1: ns-3's
  TcpNewReno grows its window per ACK (not per acknowledged byte), so with the ns-3 default of 2
  it grows half as fast as the model (and Linux, which counts acked segments); see docs/ns3.md.
  CUBIC is ns-3's TcpCubic (HyStart on, as in Linux) with the scenario's ``[cc_params.cubic]``.
* MLTCP-Reno and MLTCP-CUBIC are C++ ``TcpCongestionOps`` subclasses of TcpNewReno / TcpCubic
  (:mod:`mltcp.sim.ns3_cxx`) with the scenario's ``[mltcp]`` parameters: F's shape (linear,
  capped, convex), the scaled decrease's two ends, the tracker's idle rule (fraction, minimum,
  ``idle_gap``), ``history`` and ``boundary`` (``mark``: the flow marks each iteration's start when
  it begins sending, as the fast engine does). A knob the ops do not implement is refused by
  :func:`check` (file and field named), never silently run at its default.
* Jobs alternate compute (the same compute times as the fast engine: same seed, same draws) and
  communication; an iteration ends when the last byte of every flow is acknowledged. Linux's cwnd
  restart after an idle RTO is applied when ``slow_start_after_idle`` is true, and CUBIC's epoch
  moves by the idle time when a flow starts sending again (Linux ``bictcp_cwnd_event``); ns-3
  lacks both.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..records import IterationRecord
from ..scenario import Scenario, ScenarioError
from .engine import SimResult, build_cc

ALGORITHMS = ("reno", "cubic", "mltcp-reno", "mltcp-cubic")
HEADER_BYTES = 40  # IPv4 20 + TCP 20 (+ 12 with the timestamp option)
PPP_BYTES = 2


@dataclass
class Ns3Options:
    """ns-3 settings the scenario format does not name (defaults: what our model assumes)."""

    del_ack_count: int = 1  # ACK every segment, as the fast engine's byte-counted feedback
    sack: bool = True  # ns-3 and Linux default
    timestamps: bool = False  # ns-3's TS option counts in ms: sub-ms RTT samples would read 0 or 1 ms
    payload_rates: bool = (
        True  # the scenario's rates carry payload, as in the fast engine: wire rate x (mss + headers) / mss
    )
    hystart: bool = True  # TcpCubic HyStart (ns-3 and Linux default)
    chunk_s: float = 0.1  # simulated seconds between progress reports
    linux_reno: bool = (
        False  # reno = ns-3's TcpLinuxReno (ssthresh from cwnd) instead of TcpNewReno (docs/ns3.md: tried, not kept)
    )
    nic_limited_growth: bool = (
        True  # Linux/fast-engine rule: no growth while the NIC, not cwnd, limits (no TSQ in ns-3)
    )
    trace_cwnd: bool = False  # record every cwnd change per flow (ns3_stats["cwnd_trace"], for diagnosis)
    # > 0: each packet a host sends waits U[0, x * one segment time at its NIC) (breaks phase lock; docs/ns3.md)
    host_jitter: float = 0.0
    recovery: str = "prr-rfc"  # fast recovery: "prr-rfc" (PRR counting delivered data once, as RFC 6937 and Linux:
    # ns3_cxx.PrrRfc), "prr" (ns-3 3.44's TcpPrrRecovery, which counts a SACKed dupACK
    # twice) or "classic" (TcpClassicRecovery); docs/ns3.md

    def __post_init__(self):
        if not 0.0 <= self.host_jitter <= 1.0:  # above one segment time a host would reorder its own packets
            raise ValueError(f"host_jitter must be in [0, 1], got {self.host_jitter!r}")
        if self.recovery not in RECOVERY_TYPES:
            raise ValueError(f"recovery must be one of {', '.join(RECOVERY_TYPES)}, got {self.recovery!r}")


RECOVERY_TYPES = {
    "prr": "TcpPrrRecovery",
    "prr-rfc": "TcpPrrRecovery",
    "classic": "TcpClassicRecovery",
}  # prr-rfc: replaced per socket


def available() -> tuple[bool, str]:
    """(True, "") when ns-3 imports here, else (False, the reason)."""
    try:
        from ns import ns  # noqa: F401
    except Exception as e:  # ImportError, or cppyy failing to load the libraries
        return False, f"ns-3 is not importable ({type(e).__name__}: {e}); install the extra: pip install 'mltcp[ns3]'"
    return True, ""


class _UnionFind:
    def __init__(self):
        self.parent: dict = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def preflight(sc: Scenario, algos: list[str]) -> None:
    """Cheap checks before starting worker processes: ns-3 installed (without importing it: that
    takes tens of seconds), every algorithm and scenario field supported. Raises ScenarioError."""
    import importlib.util

    if importlib.util.find_spec("ns") is None or importlib.util.find_spec("cppyy") is None:
        raise ScenarioError(
            sc.source, "--engine", "ns-3 is not installed here: pip install 'mltcp[ns3]' (PyPI ns3 with cppyy)"
        )
    for a in algos:
        check(sc, a)


def check(sc: Scenario, cc_name: str) -> None:
    """Raise ScenarioError if ``cc_name`` or a scenario setting has no ns-3 counterpart here."""
    if cc_name not in ALGORITHMS:
        raise ScenarioError(
            sc.source, "cc", f"{cc_name!r} is not available in the ns-3 engine (choose from {', '.join(ALGORITHMS)})"
        )
    reno = sc.cc_params.get("reno", {})
    if "beta" in reno and float(reno["beta"]) != 0.5:
        raise ScenarioError(
            sc.source,
            "cc_params.reno.beta",
            "ns-3's TcpNewReno halves its window: only 0.5 is supported by the ns-3 engine",
        )
    cub = sc.cc_params.get("cubic", {})
    if "cubic" in cc_name and cub.get("hystart", 1) not in (0, 1):
        raise ScenarioError(
            sc.source, "cc_params.cubic.hystart", "ns-3's TcpCubic has HyStart (1) or none (0), not HyStart++ (2)"
        )
    if "cubic" in cc_name and "hystart_train" in cub and float(cub["hystart_train"]) != 1.0:
        raise ScenarioError(
            sc.source,
            "cc_params.cubic.hystart_train",
            "ns-3's TcpCubic ends slow start at an ACK train of one minimum RTT: only 1.0 is supported by the "
            "ns-3 engine",
        )
    if "cubic" in cc_name and "hystart_rounds" in cub and int(cub["hystart_rounds"]) != 1:
        raise ScenarioError(
            sc.source,
            "cc_params.cubic.hystart_rounds",
            "ns-3's TcpCubic counts HyStart rounds its own way: only 1 is supported by the ns-3 engine",
        )
    if cc_name.startswith("mltcp-"):
        from ..cc.mltcp import hook_fields

        spelled = {p.name: k for k, p in hook_fields().items()}
        for name in _unmodelled_knobs(cc_name):
            if name in sc.mltcp_params:
                raise ScenarioError(
                    sc.source,
                    f"mltcp.{spelled.get(name, name)}",
                    f"the ns-3 engine's {cc_name} does not model this knob (it models: "
                    f"{', '.join(spelled.get(k, k) for k in HOOK_KNOBS)})",
                )
    for n, lk in sc.links.items():
        if lk.pfc:
            raise ScenarioError(
                sc.source,
                f"links.{n}.pfc",
                "the ns-3 engine has no PFC (lossless links): use the fast engine, or drop pfc",
            )
    for j in sc.jobs:
        if j.flow_bytes() >= 2**31:
            raise ScenarioError(
                sc.source,
                f"jobs.{j.name}.bytes",
                "more than 2 GB per flow and iteration is not supported by the ns-3 engine",
            )


# the MLTCP hook's knobs (mltcp.cc.mltcp.MLTCPHook) that the C++ Mltcp<Base> implements
HOOK_KNOBS = (
    "slope",
    "intercept",
    "shape",
    "cap",
    "exponent",
    "decrease_at_start",
    "decrease_at_end",
    "idle_fraction",
    "min_idle",
    "history",
    "idle_gap",
    "scale_decrease",
    "boundary",
    "restart_window",
    "adaptive",
    "trial",
    "contended_above",
    "hold_max",
    "min_window",
    "above_bdp_gain",
)


def _unmodelled_knobs(cc_name: str) -> list[str]:
    """[mltcp] parameters of ``cc_name``'s MLTCP variant that the ns-3 ops do not implement."""
    from ..cc import ALGORITHMS as CC, BASE_OF

    if cc_name not in BASE_OF:
        return []
    base = CC[BASE_OF[cc_name]]
    return [k for k in CC[cc_name].params if k not in base.params and k not in HOOK_KNOBS]


def hook_numbers(sc: Scenario, cc_name: str) -> tuple[list[float], bool]:
    """The ``[mltcp]`` table as the 20 numbers ``MakeCc`` takes (order in ns3_cxx.SetHook), from
    the same Param declarations and defaults the fast engine uses, and whether the flows mark
    iteration starts (boundary = mark); ([], False) for a base algorithm."""
    if not cc_name.startswith("mltcp-"):
        return [], False
    from ..cc.mltcp import SHAPES

    c = build_cc(sc, cc_name)
    return [
        float(c.slope),
        float(c.intercept),
        float(SHAPES.index(c.shape)),
        float(c.cap),
        float(c.exponent),
        float(c.decrease_at_start),
        float(c.decrease_at_end),
        float(c.idle_fraction),
        float(c.idle_rule_min()),
        float(c.history),
        float(c.idle_gap == "min2"),
        float(bool(c.scale_decrease)),
        float(c.restart_window),
        float(c.boundary == "tx_start"),
        float(bool(c.adaptive)),
        float(c.trial),
        float(c.contended_above),
        float(c.hold_max),
        float(c.min_window),
        float(c.above_bdp_gain),
    ], c.boundary == "mark"


def cppyy_vector(xs: list[float]):
    import cppyy

    v = cppyy.gbl.std.vector["double"]()
    for x in xs:
        v.push_back(float(x))
    return v


def _flows(sc: Scenario) -> list[tuple[int, list[str]]]:
    out = []
    for ji, job in enumerate(sc.jobs):
        for path in job.paths():
            out.append((ji, list(path)))
    return out


def _routers(sc: Scenario, flows) -> tuple[dict, list[str]]:
    """Router of each link end: consecutive links of a path share a router. Returns
    ({(link, 0 or 1): router id}, links used in order)."""
    uf = _UnionFind()
    used: list[str] = []
    for _, path in flows:
        for name in path:
            if name not in used:
                used.append(name)
            uf.find((name, 0))
            uf.find((name, 1))
        for a, b in zip(path, path[1:]):
            uf.union((a, 1), (b, 0))
    for name in used:
        if uf.find((name, 0)) == uf.find((name, 1)):
            raise ScenarioError(
                sc.source, "jobs.path", f"link {name!r} would join a router to itself (paths form a loop through it)"
            )
    roots: dict = {}
    ends = {}
    for name in used:
        for side in (0, 1):
            r = uf.find((name, side))
            ends[(name, side)] = roots.setdefault(r, len(roots))
    return ends, used


def _tcp_defaults(ns, sc: Scenario, cc_name: str, opt: "Ns3Options", ecn: bool) -> tuple[str, dict]:
    """ns-3's TCP and algorithm defaults (reset first: one process may run several scenarios);
    returns (base algorithm, the scenario's cubic parameters)."""
    mss = int(sc.mss)
    ns.Config.Reset()
    ns.RngSeedManager.SetSeed(max(1, int(sc.seed)))  # host jitter's draws: one stream per sender
    ns.RngSeedManager.SetRun(1)
    ns.Ipv4AddressGenerator.Reset()
    big = max(64 << 20, int(2 * max(j.flow_bytes() for j in sc.jobs)) + (1 << 20))
    sd = ns.Config.SetDefault
    sd("ns3::TcpSocket::SegmentSize", ns.UintegerValue(mss))
    sd("ns3::TcpSocket::InitialCwnd", ns.UintegerValue(10))
    sd("ns3::TcpSocket::DelAckCount", ns.UintegerValue(opt.del_ack_count))
    sd("ns3::TcpSocket::SndBufSize", ns.UintegerValue(big))
    sd("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(big))
    sd("ns3::TcpSocket::DataRetries", ns.UintegerValue(100))
    sd("ns3::TcpSocketBase::MinRto", ns.TimeValue(ns.Seconds(sc.min_rto_s)))
    sd("ns3::TcpSocketBase::Sack", ns.BooleanValue(opt.sack))
    sd("ns3::TcpSocketBase::Timestamp", ns.BooleanValue(opt.timestamps))
    sd("ns3::TcpSocketBase::WindowScaling", ns.BooleanValue(True))
    sd("ns3::TcpL4Protocol::RecoveryType", ns.TypeIdValue(getattr(ns, RECOVERY_TYPES[opt.recovery]).GetTypeId()))
    if ecn:
        sd("ns3::TcpSocketBase::UseEcn", ns.StringValue("On"))
    cub = sc.cc_params.get("cubic", {})
    sd("ns3::TcpCubic::HyStart", ns.BooleanValue(opt.hystart and cub.get("hystart", 1) != 0))
    if "c" in cub:
        sd("ns3::TcpCubic::C", ns.DoubleValue(float(cub["c"])))
    if "beta" in cub:
        sd("ns3::TcpCubic::Beta", ns.DoubleValue(float(cub["beta"])))
    if "fast_convergence" in cub:
        sd("ns3::TcpCubic::FastConvergence", ns.BooleanValue(bool(cub["fast_convergence"])))
    base = "cubic" if "cubic" in cc_name else "reno"
    sd(
        "ns3::TcpL4Protocol::SocketType",
        ns.StringValue(
            "ns3::TcpCubic" if base == "cubic" else "ns3::TcpLinuxReno" if opt.linux_reno else "ns3::TcpNewReno"
        ),
    )
    return base, cub


class _Net:
    """What the set-up functions build, step by step: nodes, point-to-point links, devices."""

    def __init__(self, ns, cx, sc: Scenario, opt: "Ns3Options", flows, ends, used):
        self.ns, self.cx, self.sc, self.opt, self.flows, self.ends, self.used = ns, cx, sc, opt, flows, ends, used
        self.mss = int(sc.mss)
        self.subnet = 0
        self.containers = []
        self.hdr = HEADER_BYTES + (12 if opt.timestamps else 0)
        self.wire = (self.mss + self.hdr + PPP_BYTES) / self.mss if opt.payload_rates else 1.0

    def p2p(self, a, b, rate_bps: float, delay_s: float):
        ns = self.ns
        h = ns.PointToPointHelper()
        h.SetDeviceAttribute("DataRate", ns.DataRateValue(ns.DataRate(int(round(rate_bps * self.wire)))))
        h.SetDeviceAttribute("Mtu", ns.UintegerValue(max(1500, self.mss + self.hdr + 8)))
        h.SetChannelAttribute("Delay", ns.TimeValue(ns.Seconds(delay_s)))
        devs = h.Install(a, b)
        addr = ns.Ipv4AddressHelper()
        net = (10 << 24) + 4 * self.subnet
        self.subnet += 1
        addr.SetBase(ns.Ipv4Address(net), ns.Ipv4Mask("255.255.255.252"))
        ifs = addr.Assign(devs)
        self.containers.append(devs)
        return devs, ifs


def _build_topology(net: _Net) -> None:
    """Routers, one sender and one receiver node per flow, the scenario's links between routers,
    each flow's access links; drop-tail everywhere (no FqCoDel)."""
    ns, cx, sc, opt, mss = net.ns, net.cx, net.sc, net.opt, net.mss
    net.n_routers = len(set(net.ends.values()))
    net.routers, net.senders, net.receivers = ns.NodeContainer(), ns.NodeContainer(), ns.NodeContainer()
    net.routers.Create(net.n_routers)
    net.senders.Create(len(net.flows))
    net.receivers.Create(len(net.flows))
    stack = ns.InternetStackHelper()
    stack.Install(net.routers)
    stack.Install(net.senders)
    stack.Install(net.receivers)
    huge_q = 1 << 20
    net.link_dev = {}
    for name in net.used:
        lk = sc.links[name]
        devs, ifs = net.p2p(
            net.routers.Get(net.ends[(name, 0)]), net.routers.Get(net.ends[(name, 1)]), lk.rate_bps, lk.delay_s
        )
        net.link_dev[name] = (devs.Get(0), devs.Get(1), ifs.GetAddress(0), ifs.GetAddress(1))
        cx.SetDeviceQueue(devs.Get(0), max(1, int(round(lk.buffer_bytes / mss))))
        cx.SetDeviceQueue(devs.Get(1), huge_q)
    rx_rate = max(100e9, 10 * max(sc.links[n].rate_bps for n in net.used))
    net.access = []
    for fi, (ji, path) in enumerate(net.flows):
        first, last = path[0], path[-1]
        s_devs, s_ifs = net.p2p(
            net.senders.Get(fi), net.routers.Get(net.ends[(first, 0)]), sc.links[first].rate_bps, sc.host_delay_s / 2
        )
        if opt.host_jitter > 0:
            cx.AddHostJitter(
                s_devs.Get(0),
                s_devs.Get(1),
                sc.host_delay_s / 2,
                opt.host_jitter * mss * 8 / sc.links[first].rate_bps,
                fi,
            )
        r_devs, r_ifs = net.p2p(net.routers.Get(net.ends[(last, 1)]), net.receivers.Get(fi), rx_rate, 0.0)
        for d in (s_devs.Get(0), s_devs.Get(1), r_devs.Get(0), r_devs.Get(1)):
            cx.SetDeviceQueue(d, huge_q)
        net.access.append((s_devs, s_ifs, r_devs, r_ifs))
    # drop-tail: remove the FqCoDel that Assign() installed on every device
    tch = ns.TrafficControlHelper()
    for devs in net.containers:
        tch.Uninstall(devs)


def _install_queues(net: _Net):
    """Drop and mark counters on every router and link; RED (ECN marks) on the ECN links."""
    ns, cx, sc, mss = net.ns, net.cx, net.sc, net.mss
    counters = cx.MakeCounters()
    counters.KeepDrops(bool(net.opt.trace_cwnd))
    for i in range(net.n_routers):  # a full device queue stops the TC layer, which drops (TcDrop)
        counters.WatchNode(net.routers.Get(i))
    net.discs = []
    for name in net.used:
        lk = sc.links[name]
        fwd = net.link_dev[name][0]
        if lk.ecn == "none":
            counters.WatchDevice(fwd)
            continue
        buf = max(1, int(round(lk.buffer_bytes / mss)))
        if lk.ecn == "step":
            k = max(1.0, lk.ecn_k_bytes / mss)
            lo, hi, pmax = k - 0.5, k, 1.0
        else:
            lo, hi, pmax = lk.red_kmin_bytes / mss, lk.red_kmax_bytes / mss, lk.red_pmax
        for key, val in (
            ("MinTh", ns.DoubleValue(lo)),
            ("MaxTh", ns.DoubleValue(hi)),
            ("LInterm", ns.DoubleValue(1.0 / pmax)),
            ("QW", ns.DoubleValue(1.0)),
            ("UseEcn", ns.BooleanValue(True)),
            ("UseHardDrop", ns.BooleanValue(False)),
            ("Gentle", ns.BooleanValue(False)),
            ("MaxSize", ns.QueueSizeValue(ns.QueueSize(f"{buf}p"))),
        ):
            ns.Config.SetDefault(f"ns3::RedQueueDisc::{key}", val)
        cx.SetDeviceQueue(fwd, 1)  # the queue disc holds the backlog, not the device
        red = ns.TrafficControlHelper()
        red.SetRootQueueDisc("ns3::RedQueueDisc")
        qd = red.Install(fwd).Get(0)
        counters.WatchDisc(qd)
        net.discs.append(qd)
    return counters


def _install_routes(net: _Net) -> None:
    """Host routes along each flow's path, and back."""
    cx, ends = net.cx, net.ends
    for fi, (ji, path) in enumerate(net.flows):
        s_devs, s_ifs, r_devs, r_ifs = net.access[fi]
        s_ip, r_ip = s_ifs.GetAddress(0), r_ifs.GetAddress(1)
        cx.AddHostRoute(net.senders.Get(fi), s_devs.Get(0), r_ip, s_ifs.GetAddress(1))
        for name in path:
            d_in, d_out, ip_in, ip_out = net.link_dev[name]
            cx.AddHostRoute(net.routers.Get(ends[(name, 0)]), d_in, r_ip, ip_out)
            cx.AddHostRoute(net.routers.Get(ends[(name, 1)]), d_out, s_ip, ip_in)
        cx.AddHostRoute(net.routers.Get(ends[(path[-1], 1)]), r_devs.Get(0), r_ip, r_ip)
        cx.AddHostRoute(net.routers.Get(ends[(path[0], 0)]), s_devs.Get(1), s_ip, s_ip)
        cx.AddHostRoute(net.receivers.Get(fi), r_devs.Get(1), s_ip, r_ifs.GetAddress(0))


def _install_applications(net: _Net, counters, cc_name: str, base: str, cub: dict, bin_w: float):
    """Each job's iteration driver (the fast engine's compute times) and each flow's sender with
    its congestion control and receiver sink; returns (jobs, flows, ccs, source address -> job)."""
    ns, cx, sc, opt = net.ns, net.cx, net.sc, net.opt
    rng = np.random.default_rng(sc.seed)  # the fast engine's draws, in its order
    comp = [j.compute_times(rng, j.iterations) for j in sc.jobs]
    hook, marks = hook_numbers(sc, cc_name)
    keep = float(cub.get("beta", 0.7)) if base == "cubic" else 0.5
    jobs, ccs, flow_objs, src_job = [], [], [], {}
    port = 5000
    for ji, job in enumerate(sc.jobs):
        jb = cx.MakeJob(ji, float(job.start_offset_s), int(round(job.flow_bytes())), bin_w)
        for c in comp[ji]:
            jb.compute.push_back(float(c))
        jobs.append(jb)
    for fi, (ji, path) in enumerate(net.flows):
        s_devs, s_ifs, r_devs, r_ifs = net.access[fi]
        r_ip = r_ifs.GetAddress(1)
        sink = ns.PacketSinkHelper(
            "ns3::TcpSocketFactory", ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo()
        )
        apps = sink.Install(net.receivers.Get(fi))
        apps.Start(ns.Seconds(0))
        jobs[ji].WatchSink(apps.Get(0))
        hv = cppyy_vector(hook)
        cc = cx.MakeCc(cc_name, hv, keep, opt.linux_reno)
        if opt.nic_limited_growth:
            cx.SetNic(cc, s_devs.Get(0), float(sc.nic_backlog_segments))
        ccs.append(cc)
        f = cx.MakeFlow(
            net.senders.Get(fi), ns.InetSocketAddress(r_ip, port).ConvertTo(), cc, bool(sc.slow_start_after_idle), marks
        )
        if opt.trace_cwnd:
            f.SetDebug(True)
        f.SetPrrRfc(opt.recovery == "prr-rfc")
        cx.Attach(jobs[ji], f)
        counters.Add(s_ifs.GetAddress(0), jobs[ji])
        src_job[int(s_ifs.GetAddress(0).Get())] = ji
        flow_objs.append(f)
    for jb in jobs:
        cx.ScheduleJob(jb)
    return jobs, flow_objs, ccs, src_job


def _simulate_chunks(ns, sc: Scenario, jobs, chunk_s: float, progress, max_sim_time: float | None) -> float:
    """Run ns-3 in chunks of simulated time until every job is done, reporting progress;
    returns the simulated time of the last record."""
    iters = np.array([j.iterations for j in sc.jobs], dtype=float)
    horizon = max_sim_time or float(
        sum(j.start_offset_s for j in sc.jobs) + 50 * max(j.iterations * sc.ideal_iter_s(j) for j in sc.jobs) + 10
    )
    t = 0.0
    while not all(jb.done for jb in jobs):
        ns.Simulator.Stop(ns.Seconds(chunk_s))
        ns.Simulator.Run()
        t = ns.Simulator.Now().GetSeconds()
        if progress is not None:
            progress(t, float(np.mean(np.array([jb.iter for jb in jobs]) / iters)))
        if t > horizon:
            raise RuntimeError(f"{sc.source}: ns-3 run did not finish within {horizon:.1f} simulated seconds")
    if progress is not None:
        progress(t, 1.0)
    return max(jb.rEnd[len(jb.rEnd) - 1] for jb in jobs if len(jb.rEnd))


def _records_and_trace(sc: Scenario, jobs, bin_w: float):
    """The iteration records (in end order) and the per-job rate trace of the run."""
    records = []
    for ji, (job, jb) in enumerate(zip(sc.jobs, jobs)):
        for i in range(len(jb.rEnd)):
            records.append(
                IterationRecord(
                    job.name,
                    i,
                    float(jb.rStart[i]),
                    float(jb.rComm[i]),
                    float(jb.rEnd[i]),
                    float(job.bytes_per_iter),
                    float(jb.rDrops[i]),
                    float(jb.rMarks[i]),
                )
            )
    records.sort(key=lambda r: (r.end, r.job))
    trace_t, trace_rate = np.zeros(0), np.zeros((0, len(jobs)))
    if bin_w:
        nb = max(len(jb.bins) for jb in jobs)
        if nb:
            trace_rate = np.zeros((nb, len(jobs)))
            for ji, jb in enumerate(jobs):
                v = np.array(list(jb.bins), dtype=float)
                trace_rate[: len(v), ji] = v * 8 / bin_w
            trace_t = (np.arange(nb) + 0.5) * bin_w
    return records, trace_t, trace_rate


def _ns3_stats(net: _Net, counters, flow_objs, ccs, src_job) -> dict:
    """ns-3's own counters, per flow (retransmissions, timeouts, recoveries, ...)."""
    cx, sc = net.cx, net.sc
    stats = {
        "retransmissions": [int(f.retx) for f in flow_objs],
        "timeouts": [int(f.timeouts) for f in flow_objs],
        "fast_recoveries": [int(f.recoveries) for f in flow_objs],
        "cubic_epoch_shifts": [int(f.epochShifts) for f in flow_objs],
        "iteration_restarts": [int(f.iterationRestarts) for f in flow_objs],
        "flow_job": [sc.jobs[ji].name for ji, _ in net.flows],
        "bytes_per_iter_learned": [float(cx.MltcpBytesPerIter(c)) for c in ccs],
        "mltcp_engaged": [int(cx.MltcpEngaged(c)) for c in ccs],  # the online switch at the end (-1: not MLTCP)
        "other_drops": float(counters.otherDrops),
        "growth_held_nic_limited": [int(cx.HeldGrowths(c)) for c in ccs],
        # per RTO: bytes of the iteration still unacknowledged, and never sent (0 = tail loss)
        "rto_bytes_left": [[float(x) for x in f.rtoLeft] for f in flow_objs],
        "rto_bytes_unsent": [[float(x) for x in f.rtoUnsent] for f in flow_objs],
    }
    if net.opt.trace_cwnd:  # (time s, cwnd bytes, ssthresh bytes) at every change; RTO times
        stats["cwnd_trace"] = [np.array([list(f.cwT), list(f.cwV), list(f.ssV)]) for f in flow_objs]
        stats["rto_times"] = [list(f.rtoT) for f in flow_objs]
        stats["drop_trace"] = (
            np.array(list(counters.dropT)),  # every drop: time s, job index
            np.array([src_job[int(a)] for a in counters.dropSrc], dtype=int),
        )
    return stats


def run(
    sc: Scenario,
    cc_name: str,
    progress: Callable[[float, float], None] | None = None,
    trace_interval: float | None = None,
    max_sim_time: float | None = None,
    options: Ns3Options | None = None,
) -> SimResult:
    """Run ``sc`` under ``cc_name`` in ns-3 and return the fast engine's result type."""
    check(sc, cc_name)
    opt = options or Ns3Options()
    from .ns3_cxx import load

    ns, cx = load()
    wall0 = time.perf_counter()
    flows = _flows(sc)
    ends, used = _routers(sc, flows)
    base, cub = _tcp_defaults(ns, sc, cc_name, opt, any(sc.links[n].ecn != "none" for n in used))
    net = _Net(ns, cx, sc, opt, flows, ends, used)
    _build_topology(net)
    counters = _install_queues(net)
    _install_routes(net)
    bin_w = float(trace_interval or 0.0)
    jobs, flow_objs, ccs, src_job = _install_applications(net, counters, cc_name, base, cub, bin_w)
    try:
        t = _simulate_chunks(ns, sc, jobs, opt.chunk_s, progress, max_sim_time)
        records, trace_t, trace_rate = _records_and_trace(sc, jobs, bin_w)
        sent = float(sum(f.txBytes for f in flow_objs))
        acked = float(sum(f.acked for f in flow_objs))
        events = int(ns.Simulator.GetEventCount())
        drops, marks = float(counters.drops), float(counters.marks)
        stats = _ns3_stats(net, counters, flow_objs, ccs, src_job)
    finally:
        ns.Simulator.Destroy()
    res = SimResult(
        sc.name,
        cc_name,
        records,
        drops,
        marks,
        t,
        time.perf_counter() - wall0,
        events,
        trace_t,
        trace_rate,
        [j.name for j in sc.jobs],
        sent,
        acked,
        0.0,
    )
    res.ns3_stats = stats  # ns-3's own counters, per flow (not part of the common result)
    return res
