"""Mininet topologies for MLTCP experiments and the code that turns one into a running network.

Topologies (all node names start with a per-run prefix, see :mod:`mltcp.emulation.netns`):

* :class:`Dumbbell` – N sender hosts on switch s1, N receiver hosts on s2, one bottleneck s1–s2.
  Layer 2 (one subnet 10.0.0.0/24), so Mininet's LinuxBridge switches work without STP.
* :class:`Ring3` – three routers in a triangle, three bottleneck links; data is routed one way
  round the ring, so job k (sender at router k, receiver at router k+2) crosses two of the three
  links and every link carries two jobs: a circular dependency. ACKs return the way their data
  came (the other direction of the same two links), as in the simulator.
* :class:`LeafSpine` – 2 spines, 2 leaves, hosts per leaf; leaves split traffic over the spines
  with Linux ECMP (layer-4 hash); leaf–spine links are the bottlenecks.

Ring3 and LeafSpine have loops, so their switches are Linux routers (a namespace with forwarding
on and static routes) instead of bridges, or, in link mode ``switch``, ``mltcp-switch`` processes
routing with mltcp.p4's LPM table. Both take their routes from :meth:`EmuTopo.next_hops_to_host`.

Link modes (how a link's rate, delay, buffer and ECN threshold are applied):

* ``htb`` – htb rate + bfifo drop-tail buffer on both ends of each shaped link. Works on this
  kernel; no delay, no ECN marking.
* ``linux-tc`` – htb rate + RED with ECN marking (threshold in packets) + netem delay, like
  Mininet's TCLink. Needs sch_netem and sch_red (absent here: a clear error says so).
* ``switch`` – the project's userspace P4 switch (``mltcp-switch``) applies rate, delay, buffer
  and queue-depth ECN on its ports (see :func:`mltcp.emulation.network.software_switch_class`).
* ``bmv2`` – BMv2 ``simple_switch_grpc`` running p4c-compiled mltcp.p4 in place of mltcp-switch
  (mltcp.emulation.bmv2): rate and depth of each egress queue, queue-depth ECN; no delay.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
import zlib
from collections import deque
from dataclasses import dataclass

from mininet.link import Intf, Link
from mininet.net import Mininet
from mininet.node import Switch
from mininet.nodelib import LinuxBridge
from mininet.topo import Topo

# bad topology parameters or a link feature this machine cannot provide: the same error type
# as a bad topology file of the control plane
from mltcp import offloads, shaping
from mltcp.controlplane.topology import TopologyError

LINK_MODES = ("auto", "htb", "linux-tc", "switch", "bmv2")


@dataclass(frozen=True)
class LinkParams:
    """Parameters of one (bottleneck) link, both directions."""

    rate_mbps: float | None = None  # None: unshaped
    delay_ms: float = 0.0  # one-way
    buffer_bytes: int | None = None  # drop-tail limit; None: qdisc default
    ecn_threshold_pkts: int | None = None  # mark CE at this queue depth; None: no marking
    burst_bytes: int | None = None  # htb burst; None: DEFAULT_BURST_S of the rate (>= 15 kB); 0: tc's own (one MTU)

    def validate(self, where: str = "link") -> "LinkParams":
        if self.rate_mbps is not None and not (0 < self.rate_mbps <= 10_000):
            raise TopologyError(f"{where}: rate_mbps must be in (0, 10000], got {self.rate_mbps}")
        if self.delay_ms < 0:
            raise TopologyError(f"{where}: delay_ms must be >= 0, got {self.delay_ms}")
        if self.buffer_bytes is not None and self.buffer_bytes < 1500:
            raise TopologyError(f"{where}: buffer_bytes must be >= 1500, got {self.buffer_bytes}")
        if self.ecn_threshold_pkts is not None and self.ecn_threshold_pkts < 1:
            raise TopologyError(f"{where}: ecn_threshold_pkts must be >= 1")
        if self.burst_bytes is not None and self.burst_bytes < 0:
            raise TopologyError(f"{where}: burst_bytes must be >= 0, got {self.burst_bytes}")
        return self

    def link_opts(self) -> dict:
        """The parameters as Mininet link options (``addLink(a, b, **opts)``), in TCLink's terms:
        ``bw`` Mb/s, ``delay`` as a string with unit, ``max_queue_size`` packets, plus
        ``ecn_threshold`` (packets), ``buffer_bytes`` (a buffer that is not whole 1500-byte packets,
        exactly) and ``burst`` (the htb burst, bytes). Only what is set."""
        opts: dict = {}
        if self.rate_mbps is not None:
            opts["bw"] = self.rate_mbps
        if self.delay_ms > 0:
            opts["delay"] = f"{self.delay_ms:g}ms"
        if self.buffer_bytes is not None:
            opts["max_queue_size"] = max(1, self.buffer_bytes // 1500)
            if self.buffer_bytes % 1500:
                opts["buffer_bytes"] = self.buffer_bytes
        if self.ecn_threshold_pkts is not None:
            opts["ecn_threshold"] = self.ecn_threshold_pkts
        if self.burst_bytes is not None:
            opts["burst"] = self.burst_bytes
        return opts

    @classmethod
    def from_link_opts(
        cls, bw=None, delay=None, max_queue_size=None, ecn_threshold=None, buffer_bytes=None, burst=None
    ) -> "LinkParams":
        """The inverse of :meth:`link_opts` (``delay`` as "2ms", "500us" or a number of ms;
        ``buffer_bytes``, when given, before ``max_queue_size``)."""
        d = 0.0
        if delay is not None:
            txt = str(delay).strip()
            for unit, scale in (("ms", 1.0), ("us", 1e-3), ("s", 1e3)):
                if txt.endswith(unit):
                    d = float(txt[: -len(unit)]) * scale
                    break
            else:
                d = float(txt)
        if buffer_bytes is None and max_queue_size is not None:
            buffer_bytes = int(max_queue_size) * 1500
        return cls(
            rate_mbps=None if bw is None else float(bw),
            delay_ms=d,
            buffer_bytes=None if buffer_bytes is None else int(buffer_bytes),
            ecn_threshold_pkts=None if ecn_threshold is None else int(ecn_threshold),
            burst_bytes=None if burst is None else int(burst),
        ).validate("link options")


class Router(Switch):
    """A Linux router: its own namespace, IPv4 forwarding, static routes set by the builder."""

    def __init__(self, name, **params):
        params["inNamespace"] = True
        super().__init__(name, **params)

    def defaultDpid(self, dpid=None):  # routers need no datapath id
        return dpid or "0" * 16

    def start(self, _controllers):
        for key, val in (
            ("net.ipv4.ip_forward", 1),
            ("net.ipv4.conf.all.rp_filter", 0),
            ("net.ipv4.conf.default.rp_filter", 0),
            ("net.ipv4.fib_multipath_hash_policy", 1),
        ):
            self.cmd(f"sysctl -qw {key}={val}")
        for intf in self.intfList():
            if intf.name != "lo":
                self.cmd(f"sysctl -qw net.ipv4.conf.{intf.name}.rp_filter=0")
                self.cmd(f"ip link set {intf.name} up")

    def stop(self, deleteIntfs=True):
        super().stop(deleteIntfs)


class _PrefixBridge(LinuxBridge):
    """LinuxBridge whose names carry the run prefix (the dpid is not used by a bridge)."""

    def defaultDpid(self, dpid=None):
        return dpid or "0" * 16


class _FloodBridge(_PrefixBridge):
    """A bridge that does not learn (ageing 0: every frame is flooded). Behind mltcp.p4, which
    rewrites a forwarded frame's source MAC to its old destination MAC, a learning bridge would
    place the receiver's MAC on the switch's port and drop the frames meant for it."""

    def start(self, controllers):
        super().start(controllers)
        self.cmd("brctl setageing", self, "0")


class EmuTopo(Topo):
    """Base: records link parameters, bottlenecks, job endpoints and addressing for the builder."""

    layer2 = False

    def build(self, prefix: str = "m", switch_cls=None, **kw):
        self.prefix = prefix
        self.link_params: dict[frozenset, LinkParams] = {}
        self.bottlenecks: list[tuple[str, str]] = []
        self.job_pairs: list[tuple[str, str]] = []
        self.host_ip: dict[str, str] = {}  # name -> "a.b.c.d/len"
        self.host_router: dict[str, str] = {}  # routed topologies: host -> its router
        self.host_gw: dict[str, str] = {}  # routed topologies: host -> its gateway address
        self.host_mac: dict[str, str] = {}  # fixed, so a P4 switch can program itself in start()
        self.switch_cls = switch_cls or (_PrefixBridge if self.layer2 else Router)
        self.make(**kw)

    def make(self, **kw):  # pragma: no cover - abstract
        raise NotImplementedError

    # helpers for subclasses
    def name(self, short: str) -> str:
        return self.prefix + short

    def add_sw(self, short: str) -> str:
        # the topology travels with the switch: a P4 switch class computes its tables from it
        return self.addSwitch(self.name(short), cls=self.switch_cls, topo=self)

    def add_host(self, short: str, ip: str, gw: str | None = None) -> str:
        h = zlib.crc32((self.prefix + short).encode())
        mac = "02:4d:%02x:%02x:%02x:%02x" % ((h >> 24) & 255, (h >> 16) & 255, (h >> 8) & 255, h & 255)
        opts = {"ip": ip, "mac": mac}
        if gw:
            opts["defaultRoute"] = f"via {gw}"
        n = self.addHost(self.name(short), **opts)
        self.host_ip[n] = ip
        self.host_mac[n] = mac
        if gw:
            self.host_gw[n] = gw
        return n

    def add_link(self, a: str, b: str, params: LinkParams | None = None, bottleneck=False):
        # the options travel on the link (Mininet's addLink(**opts)): ShapedLink applies them,
        # a plain Link ignores them (the run's link mode applies them instead)
        self.addLink(a, b, **(params.validate(f"link {a}-{b}").link_opts() if params is not None else {}))
        if params is not None and params != LinkParams():
            self.link_params[frozenset((a, b))] = params.validate(f"link {a}-{b}")
        if bottleneck:
            self.bottlenecks.append((a, b))

    def set_shaper(self, shaper: str) -> None:
        """Who applies the links' options (see :class:`ShapedIntf`): tc on the interfaces
        (``htb``, ``linux-tc``) or the switches on their ports (``switch``, ``bmv2``). Set
        before the net is built."""
        for *_ends, info in self.links(withInfo=True):
            info["shaper"] = shaper

    def ip_of(self, host: str) -> str:
        return self.host_ip[host].split("/")[0]

    def switch_of(self, host: str) -> str:
        """The switch (or router) ``host`` is attached to."""
        if host in self.host_router:
            return self.host_router[host]
        sw = set(self.switches())
        for a, b in self.links():
            if a == host and b in sw:
                return b
            if b == host and a in sw:
                return a
        raise TopologyError(f"host {host} is not attached to a switch")

    def next_hops_to_host(self, router: str, host: str) -> list[str]:
        """Neighbour switches a packet for ``host`` may leave ``router`` towards ([] at the
        host's own switch); several for ECMP. The one routing policy of both the Linux routers
        and the software switches."""
        dest = self.switch_of(host)
        return [] if router == dest else self.next_hops(router, dest)

    def next_hops(self, router: str, dest_router: str) -> list[str]:
        """Neighbour routers on all shortest paths from router to dest_router (ECMP)."""
        adj = self._router_adj()
        dist = {dest_router: 0}
        q = deque([dest_router])
        while q:
            u = q.popleft()
            for v in adj[u]:
                if v not in dist:
                    dist[v] = dist[u] + 1
                    q.append(v)
        if router not in dist:
            raise TopologyError(f"no path from {router} to {dest_router}")
        return sorted(v for v in adj[router] if dist.get(v, 1 << 30) == dist[router] - 1)

    def _router_adj(self) -> dict[str, list[str]]:
        sw = set(self.switches())
        adj: dict[str, list[str]] = {s: [] for s in sw}
        for a, b in self.links():
            if a in sw and b in sw:
                adj[a].append(b)
                adj[b].append(a)
        return adj


class Dumbbell(EmuTopo):
    """n senders a1..an on s1, n receivers b1..bn on s2, bottleneck s1-s2 (layer 2). The one
    dumbbell: ``mltcp emulate``, ``mn --custom`` and the kernel-TCP experiment
    (:mod:`mltcp.traffic.kernel.net`) all build it."""

    layer2 = True

    def make(
        self,
        n: int = 2,
        bottleneck: LinkParams = LinkParams(),
        access: LinkParams | None = None,
        rx_bridge: bool = False,
        delay_node=None,
    ):
        """``rx_bridge``: s2 is a kernel bridge whatever ``switch_cls`` is, so a userspace switch
        runs once (s1) instead of twice. s1's egress towards s2 is the bottleneck (rate, buffer,
        delay); its egress towards each sender carries the bottleneck's delay for the return
        direction (ACKs), so the RTT is the same as with two shaped switches.

        ``delay_node``: a two-port Mininet switch class that delays every frame in both directions
        by its ``delay_us`` (the kernel path's delay line, for link modes without delay). With a
        bottleneck delay it stands between s1 and s2 as node ``w``: s1-w carries the bottleneck's
        rate and buffer, w the delay (base RTT twice the delay)."""
        if not 1 <= n <= 50:
            raise TopologyError(f"dumbbell: n (hosts per side) must be 1..50, got {n}")
        if delay_node is not None and rx_bridge:
            raise TopologyError("dumbbell: a delay node and rx_bridge do not go together")
        s1 = self.add_sw("s1")
        s2 = self.addSwitch(self.name("s2"), cls=_FloodBridge) if rx_bridge else self.add_sw("s2")
        if delay_node is not None and bottleneck.delay_ms > 0:
            w = self.addSwitch(self.name("w"), cls=delay_node, delay_us=round(bottleneck.delay_ms * 1e3))
            self.add_link(s1, w, dataclasses.replace(bottleneck, delay_ms=0.0), bottleneck=True)
            self.add_link(w, s2)
        else:
            self.add_link(s1, s2, bottleneck, bottleneck=True)
        back = LinkParams(delay_ms=bottleneck.delay_ms) if rx_bridge and bottleneck.delay_ms > 0 else access
        for i in range(1, n + 1):
            a = self.add_host(f"a{i}", f"10.0.0.{i}/24")
            b = self.add_host(f"b{i}", f"10.0.0.{100 + i}/24")
            self.add_link(a, s1, back)
            self.add_link(b, s2, access)
            self.job_pairs.append((a, b))


class _Routed(EmuTopo):
    def attach_host(self, router: str, r_idx: int, h_idx: int, short: str, access=None) -> str:
        h = self.add_host(short, f"10.{r_idx}.{h_idx}.1/24", gw=f"10.{r_idx}.{h_idx}.254")
        self.host_router[h] = router
        self.add_link(h, router, access)
        return h


class Ring3(_Routed):
    """Routers r1, r2, r3 in a triangle; one-way (r1->r2->r3->r1) routing.

    Job k sends from router k to router k+2, crossing two links; each link carries two jobs.
    Hosts per router: x (sender of the job starting here), y (receiver of the job ending here).
    Packets for a receiver go clockwise (r1->r2->r3->r1); packets for a sender (the ACKs) go
    counter-clockwise, so each job's ACKs cross its two links backwards, on directions that carry
    no data: as in the simulator, whose ACKs take the reverse path without queueing.
    """

    def make(self, bottleneck: LinkParams = LinkParams(), access: LinkParams | None = None):
        self.routers = [self.add_sw(f"r{k}") for k in (1, 2, 3)]
        for k in range(3):
            a, b = self.routers[k], self.routers[(k + 1) % 3]
            self.add_link(a, b, bottleneck, bottleneck=True)
        senders, receivers = [], []
        for k, r in enumerate(self.routers):
            senders.append(self.attach_host(r, k + 1, 1, f"x{k + 1}", access))
            receivers.append(self.attach_host(r, k + 1, 2, f"y{k + 1}", access))
        self.job_pairs = [(senders[k], receivers[(k + 2) % 3]) for k in range(3)]
        self.receivers = set(receivers)

    def next_hops_to_host(self, router, host):
        dest = self.host_router[host]
        if router == dest:
            return []
        step = 1 if host in self.receivers else -1
        return [self.routers[(self.routers.index(router) + step) % 3]]


class LeafSpine(_Routed):
    """2 spines p1, p2; 2 leaves l1, l2 with `hosts_per_leaf` hosts; jobs cross from l1 to l2."""

    def make(
        self,
        hosts_per_leaf: int = 2,
        bottleneck: LinkParams = LinkParams(),
        access: LinkParams | None = None,
        spines: int = 2,
        leaves: int = 2,
    ):
        if not 1 <= hosts_per_leaf <= 20:
            raise TopologyError(f"leafspine: hosts_per_leaf must be 1..20, got {hosts_per_leaf}")
        sp = [self.add_sw(f"p{i}") for i in range(1, spines + 1)]
        lf = [self.add_sw(f"l{i}") for i in range(1, leaves + 1)]
        for leaf in lf:
            for spine in sp:
                self.add_link(leaf, spine, bottleneck, bottleneck=True)
        hosts = {
            leaf: [self.attach_host(leaf, li + 1, hi, f"h{li + 1}{hi}", access) for hi in range(1, hosts_per_leaf + 1)]
            for li, leaf in enumerate(lf)
        }
        self.job_pairs = list(zip(hosts[lf[0]], hosts[lf[1]]))


TOPOLOGIES = {"dumbbell": Dumbbell, "ring": Ring3, "leafspine": LeafSpine}


def make_topology(
    kind: str, prefix: str, bottleneck: LinkParams, n_jobs: int = 2, switch_cls=None, rx_bridge: bool | None = None
) -> EmuTopo:
    """A topology by name with enough job endpoints for ``n_jobs``. With a userspace switch class
    the dumbbell's receiver side is a kernel bridge (``rx_bridge``, default on): one switch
    process instead of two on the data path."""
    if kind == "dumbbell":
        if rx_bridge is None:
            rx_bridge = switch_cls is not None
        return Dumbbell(
            prefix=prefix, switch_cls=switch_cls, n=max(1, n_jobs), bottleneck=bottleneck, rx_bridge=rx_bridge
        )
    if kind == "ring":
        if n_jobs > 3:
            raise TopologyError(f"ring topology carries 3 jobs, scenario has {n_jobs}")
        return Ring3(prefix=prefix, switch_cls=switch_cls, bottleneck=bottleneck)
    if kind == "leafspine":
        return LeafSpine(prefix=prefix, switch_cls=switch_cls, hosts_per_leaf=max(1, n_jobs), bottleneck=bottleneck)
    raise TopologyError(f"unknown topology {kind!r}; known: {', '.join(TOPOLOGIES)}")


# --------------------------------------------------------------------------- link shaping


# htb's bucket fills while the link idles and empties at memory speed: after every pause a flow
# gets the burst on top of the rate. 1 ms keeps that credit small and still lets htb's timers hold
# the rate on busy cores (measured in docs/design.md, link modes).
DEFAULT_BURST_S = 1e-3


def default_burst_bytes(rate_mbps: float, seconds: float = DEFAULT_BURST_S) -> int:
    """The htb burst of a link at ``rate_mbps`` when the scenario sets none: ``seconds`` of the
    rate, at least 15 kB (ten full frames)."""
    return max(15_000, int(rate_mbps * 1e6 / 8 * seconds))


def tc_commands(dev: str, p: LinkParams, mode: str) -> list[list[str]]:
    """tc command lines that shape egress of ``dev`` per ``p`` in link mode ``mode`` (pure)."""
    cmds: list[list[str]] = []
    parent = ["root"]
    if p.rate_mbps is not None:
        burst = p.burst_bytes
        if burst is None:
            burst = default_burst_bytes(p.rate_mbps)
        cmds += shaping.htb(dev, p.rate_mbps, burst)
        parent = shaping.HTB_CLASS
    if mode == "htb":
        if p.buffer_bytes is not None:
            cmds.append(shaping.bfifo(dev, parent, p.buffer_bytes))
    elif mode == "linux-tc":
        if p.ecn_threshold_pkts is not None:
            kmin = p.ecn_threshold_pkts * 1500
            limit = max(p.buffer_bytes or 0, kmin * 4)
            cmds.append(
                [
                    "tc",
                    "qdisc",
                    "replace",
                    "dev",
                    dev,
                    *parent,
                    "handle",
                    "6:",
                    "red",
                    "limit",
                    str(limit),
                    "min",
                    str(kmin),
                    "max",
                    str(kmin + 1500),
                    "avpkt",
                    "1500",
                    "burst",
                    str(p.ecn_threshold_pkts + 1),
                    "bandwidth",
                    f"{p.rate_mbps or 1000}mbit",
                    "probability",
                    "1",
                    "ecn",
                ]
            )
            parent = ["parent", "6:"]
        if p.delay_ms > 0 or (p.buffer_bytes is not None and p.ecn_threshold_pkts is None):
            netem = ["tc", "qdisc", "replace", "dev", dev, *parent, "handle", "10:", "netem"]
            if p.delay_ms > 0:
                netem += ["delay", f"{p.delay_ms}ms"]
            if p.buffer_bytes is not None:
                netem += ["limit", str(max(1, p.buffer_bytes // 1500))]
            cmds.append(netem)
    else:
        raise TopologyError(f"tc_commands: link mode {mode!r} is not applied with tc")
    return cmds


class ShapedIntf(Intf):
    """A TCIntf-style interface: its ``config(bw=, delay=, max_queue_size=, ecn_threshold=,
    buffer_bytes=, burst=, shaper=)`` keeps the link's options as :attr:`link_params` and applies them per ``shaper``:
    ``htb`` / ``linux-tc`` shape its egress with :func:`tc_commands`; ``switch`` / ``bmv2`` leave
    it to the P4 switch on the link's end, which shapes its own port from :attr:`link_params`.
    Without a shaper (``mn --custom``): ``linux-tc`` where this kernel has netem and red, else
    ``htb`` (rate and drop-tail buffer; a delay or ECN threshold it cannot apply is reported on
    stderr, never silently dropped)."""

    link_params = LinkParams()

    def config(
        self,
        bw=None,
        delay=None,
        max_queue_size=None,
        ecn_threshold=None,
        buffer_bytes=None,
        burst=None,
        shaper=None,
        **params,
    ):
        result = super().config(**params)
        p = LinkParams.from_link_opts(bw, delay, max_queue_size, ecn_threshold, buffer_bytes, burst)
        self.link_params = p
        if p == LinkParams() or shaper in ("switch", "bmv2"):
            return result
        if shaper is None:
            shaper = "linux-tc" if qdisc_available("netem") and qdisc_available("red") else "htb"
            if shaper == "htb" and (p.delay_ms > 0 or p.ecn_threshold_pkts is not None):
                print(
                    f"*** {self.name}: this kernel has no netem/red: delay and ECN not applied "
                    "(rate and buffer are); use mltcp emulate --link-mode switch for them",
                    file=sys.stderr,
                )
        for cmd in tc_commands(self.name, p, shaper):
            run_checked(self.node, cmd)
        return result


class ShapedLink(Link):
    """A link whose two interfaces are :class:`ShapedIntf` with the same options (as TCLink)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("cls1", ShapedIntf)
        kwargs.setdefault("cls2", ShapedIntf)
        super().__init__(*args, **kwargs)


# ``mn --custom emulation/topologies.py --topo dumbbell[,n,bw,delay_ms,buffer_bytes] --link shaped
# --switch lxbr --controller none`` (names as Mininet's own TOPOS/LINKS dicts)
def _mn_dumbbell(
    n: int = 2, bw: float = 100.0, delay_ms: float = 0.0, buffer_bytes: int = 150_000, prefix: str = ""
) -> Dumbbell:
    return Dumbbell(prefix=prefix, n=int(n), bottleneck=LinkParams(float(bw), float(delay_ms), int(buffer_bytes)))


# Only the layer-2 dumbbell: Ring3 and LeafSpine route, and their routes come from
# network.configure_routing after the start, which `mn` does not call.
topos = {"dumbbell": _mn_dumbbell}
links = {"shaped": ShapedLink}


def features(mode: str) -> dict[str, bool]:
    """Which link features a link mode provides on this machine's kind of kernel."""
    return {
        "htb": {"rate": True, "buffer": True, "delay": False, "ecn": False},
        "linux-tc": {"rate": True, "buffer": True, "delay": True, "ecn": True},
        "switch": {"rate": True, "buffer": True, "delay": True, "ecn": True},
        "bmv2": {"rate": True, "buffer": True, "delay": False, "ecn": True},
    }[mode]


_QDISC_PROBE = {
    "netem": ["netem", "delay", "1ms"],
    "red": [
        "red",
        "limit",
        "400000",
        "min",
        "30000",
        "max",
        "90000",
        "avpkt",
        "1500",
        "burst",
        "30",
        "bandwidth",
        "100mbit",
        "probability",
        "0.1",
        "ecn",
    ],
    "htb": ["htb", "default", "1"],
}


def qdisc_available(kind: str) -> bool:
    """Whether the kernel accepts qdisc ``kind`` (tried as root qdisc of a throwaway veth pair)."""
    import os

    dev = f"mq{os.getpid() % 1000000}"
    subprocess.run(
        ["ip", "link", "add", dev + "a", "type", "veth", "peer", "name", dev + "b"], capture_output=True, check=False
    )
    try:
        r = subprocess.run(
            ["tc", "qdisc", "add", "dev", dev + "a", "root", *_QDISC_PROBE.get(kind, [kind])],
            capture_output=True,
            text=True,
            check=False,
        )
        return r.returncode == 0
    finally:
        subprocess.run(["ip", "link", "del", dev + "a"], capture_output=True, check=False)


def run_checked(node, argv: list[str]) -> str:
    """Run ``argv`` in ``node`` (Mininet's ``Node.pexec``); :class:`TopologyError` naming the node
    and the command if it fails. Returns its output."""
    out, err, rc = node.pexec(*argv)
    if rc != 0:
        raise TopologyError(f"{node.name}: '{' '.join(argv)}' failed (exit {rc}): {(err or out).strip()}")
    return out


def peer_intf(intf):
    """The interface at the other end of ``intf``'s link."""
    link = intf.link
    return link.intf2 if link.intf1 is intf else link.intf1


def configure_routing(net: Mininet, topo: EmuTopo) -> None:
    """Address router ports and install static (ECMP where several) routes for routed topologies."""
    if topo.layer2:
        return
    sw = set(topo.switches())
    # router <-> router links get 10.200.<i>.1/.2
    peer_ip: dict[tuple[str, str], str] = {}  # (router, neighbour) -> neighbour's address on that link
    for i, link in enumerate(net.links, start=1):
        a, b = link.intf1.node, link.intf2.node
        if a.name in sw and b.name in sw:
            link.intf1.setIP(f"10.200.{i}.1/24")
            link.intf2.setIP(f"10.200.{i}.2/24")
            peer_ip[(a.name, b.name)] = f"10.200.{i}.2"
            peer_ip[(b.name, a.name)] = f"10.200.{i}.1"
        elif a.name in sw or b.name in sw:
            r_intf = link.intf1 if a.name in sw else link.intf2
            r_intf.setIP(f"{topo.host_gw[(b if a.name in sw else a).name]}/24")
    for r in sorted(sw):
        node = net[r]
        for h, hr in topo.host_router.items():
            if hr == r:
                continue
            subnet = topo.ip_of(h).rsplit(".", 1)[0] + ".0/24"
            hops = topo.next_hops_to_host(r, h)
            if len(hops) == 1:
                run_checked(node, ["ip", "route", "replace", subnet, "via", peer_ip[(r, hops[0])]])
            else:
                nh = []
                for n in hops:
                    nh += ["nexthop", "via", peer_ip[(r, n)]]
                run_checked(node, ["ip", "route", "replace", subnet, *nh])


def disable_offloads(net: Mininet, checksum: bool = False) -> None:
    """Segmentation/receive offloads off on every emulated interface, so queues hold wire-sized
    packets (a 64 KB GSO burst counted as one packet would make drop-tail and ECN coarse);
    ``checksum``: checksum offload off too (for nodes that copy frames, such as a delay line)."""
    for node in net.hosts + net.switches:
        for intf in node.intfList():
            if intf.name != "lo":
                node.cmd(offloads.shell_command(intf.name, checksum=checksum))


def rps_mask(cpus: int | None = None) -> str:
    """The CPU mask of every CPU (``cpus``: how many; None: this machine's) as sysfs takes it: hex,
    a comma between groups of 32 CPUs."""
    digits = format((1 << (cpus or os.cpu_count() or 1)) - 1, "x")
    groups = [digits[max(0, end - 8) : end] for end in range(len(digits), 0, -8)]
    return ",".join(reversed(groups))


def steer_flows_command(ifnames: list[str], mask: str) -> str:
    """One shell line that sets Receive Packet Steering on ``ifnames`` to ``mask``, in the netns it
    runs in (a sysfs of its own, mounted in a private mount namespace). Pure."""
    files = " ".join(f"/sys/class/net/{shlex.quote(n)}/queues/rx-*/rps_cpus" for n in ifnames)
    script = (
        "umount -l /sys && mount -t sysfs sysfs /sys && "
        "{ [ -e /sys/class/net/lo/queues/rx-0/rps_cpus ] || exit 0; } && "  # a kernel without RPS
        f"for f in {files}; do echo {mask} > $f || exit 1; done"
    )
    return f"unshare -m sh -c {shlex.quote(script)} 2>&1"


def steer_flows(net: Mininet) -> None:
    """Receive Packet Steering on every emulated interface: a veth hands each frame to the backlog
    of the CPU that sent it, and htb dequeues on whichever CPU its timer or the next enqueue runs,
    so without it the frames of one flow cross the link on both cores and arrive out of order (a
    TCP sender then retransmits what was not lost: DSACKs). With RPS a frame goes to the CPU its
    flow hashes to, so every flow stays in order (docs/design.md, link modes)."""
    mask = rps_mask()
    for node in net.hosts + net.switches:
        names = [i.name for i in node.intfList() if i.name != "lo"]
        if names and (err := node.cmd(steer_flows_command(names, mask)).strip()):
            raise TopologyError(f"{node.name}: could not set receive packet steering: {err}")


def bottleneck_intfs(net: Mininet, topo: EmuTopo) -> list:
    """Both interfaces of every bottleneck link."""
    names = {frozenset(b) for b in topo.bottlenecks}
    out = []
    for link in net.links:
        if frozenset((link.intf1.node.name, link.intf2.node.name)) in names:
            out += [link.intf1, link.intf2]
    return out


def qdisc_counters(intf) -> dict[str, int]:
    """From one ``tc -s qdisc show`` of ``intf``: the bytes its root qdisc has sent (what left on
    that link direction) and the packets its qdiscs dropped (sum over the hierarchy's leaves)."""
    out = intf.node.cmd(f"tc -s qdisc show dev {intf.name}")
    sent = re.search(r"Sent (\d+) bytes", out)
    drops = 0
    for block in re.split(r"\n(?=qdisc )", out):
        head = block.split("\n", 1)[0]
        if head.startswith("qdisc htb") and "parent" not in head:
            continue  # htb root aggregates its children; count the leaves only
        m = re.search(r"dropped (\d+)", block)
        if m:
            drops += int(m.group(1))
    return {"bytes": int(sent.group(1)) if sent else 0, "drops": drops}


def qdisc_drops(intf) -> int:
    """Packets dropped by the qdiscs on ``intf`` (sum over the hierarchy's leaves, from tc -s)."""
    return qdisc_counters(intf)["drops"]
