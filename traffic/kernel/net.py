"""The kernel experiment's network: the emulation's dumbbell (:class:`mltcp.emulation.topologies.Dumbbell`)
built by Mininet in link mode ``htb`` (:func:`mltcp.emulation.network.build_network`), plus what
kernel TCP from this process needs.

Senders a1..an, receivers b1..bn (one subnet, 10.0.0.i and 10.0.0.100+i); job i sends from a_i to
b_i through s1's port towards the receivers: htb at ``rate_mbit`` with a bfifo of
``buffer_bytes`` (drop-tail), the bottleneck. With ``delay_us`` > 0 a delay-line node
(:class:`.delayline.DelayLineSwitch`) stands behind that port and delays every frame by
``delay_us`` in each direction (base RTT = 2 x delay_us). Sockets live in the hosts' namespaces
through :func:`.netns.in_netns` on ``/proc/<host pid>/ns/net`` (:meth:`KernelNet.ns`).
Everything is removed by :meth:`KernelNet.destroy` (mltcp.emulation.netns.Cleanup), also after a
partial build.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from mltcp.emulation.netns import Cleanup, run_prefix
from mltcp.emulation.network import build_network
from mltcp.emulation.peers import set_kernel_min_rto
from mltcp.emulation.topologies import Dumbbell, LinkParams, bottleneck_intfs, disable_offloads, run_checked

from . import tcprog
from .delayline import DelayLine, DelayLineSwitch
from .netns import NetnsError, netns_path


def build_ecn_marker(rate_mbit: float, k_pkts: int, limit_bytes: int) -> Path:
    """ecn_mark.bpf.c compiled for this bottleneck (its numbers are constants), into the cache."""
    return tcprog.build(
        "ecn_mark.bpf.c",
        {"RATE_BPS": f"{round(rate_mbit * 1e6)}ULL", "K_BYTES": k_pkts * 1514, "LIMIT_BYTES": limit_bytes},
    )


@dataclass
class KernelNet:
    """The dumbbell for ``n`` jobs with the kernel path's settings: ``min_rto_ms`` > 0 the senders'
    route rto_min (Linux default 200 ms), ``idle_restart`` their tcp_slow_start_after_idle
    (RFC 2861), ``ecn_k_pkts`` > 0 CE at >= K full frames queued (ecn_mark.bpf.c on the
    bottleneck port's egress, tcp_ecn=1 on every host)."""

    n: int = 2
    rate_mbit: float = 100.0
    buffer_bytes: int = 150_000
    delay_us: int = 0
    min_rto_ms: int = 0
    idle_restart: bool = True
    ecn_k_pkts: int = 0
    burst_bytes: int = 0  # the bottleneck's htb burst; 0: tc's own (one MTU)
    prefix: str = field(default_factory=run_prefix)
    topo: Dumbbell | None = None
    wire: DelayLine | None = None  # the delay line (its counters stay after destroy)
    _cleanup: Cleanup | None = None

    @property
    def net(self):
        return self._cleanup.net if self._cleanup is not None else None

    @property
    def senders(self) -> list:
        return [self.net[a] for a, _ in self.topo.job_pairs]

    @property
    def receivers(self) -> list:
        return [self.net[b] for _, b in self.topo.job_pairs]

    @staticmethod
    def ns(node) -> str:
        """The namespace file of a host, for :func:`.netns.in_netns` (``ns=`` of the transports)."""
        return netns_path(node.pid)

    def ip(self, node) -> str:
        return self.topo.ip_of(node.name)

    @property
    def bottleneck(self):
        """s1's interface on the bottleneck link (its egress carries the data)."""
        s1 = self.net[self.topo.name("s1")]
        return next(i for i in bottleneck_intfs(self.net, self.topo) if i.node is s1)

    def build(self) -> "KernelNet":
        if os.geteuid() != 0:
            raise NetnsError("network namespaces need root")
        bottleneck = LinkParams(
            rate_mbps=self.rate_mbit,
            delay_ms=self.delay_us / 1e3,
            buffer_bytes=self.buffer_bytes,
            burst_bytes=self.burst_bytes,
        )
        self.topo = Dumbbell(prefix=self.prefix, n=self.n, bottleneck=bottleneck, delay_node=DelayLineSwitch)
        self._cleanup = Cleanup(self.prefix)
        try:
            net = build_network(self.topo, "htb", self._cleanup)
            if self.delay_us > 0:
                # the delay line copies frames: a partial checksum would stay wrong
                disable_offloads(net, checksum=True)
                self.wire = net[self.topo.name("w")].line
            if not self.idle_restart:
                for a in self.senders:
                    run_checked(a, ["sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=0"])
            if self.min_rto_ms > 0:
                set_kernel_min_rto(self.senders, self.min_rto_ms / 1e3)
            if self.ecn_k_pkts > 0:
                self._mark_ecn()
        except BaseException:
            self.destroy()
            raise
        return self

    def _mark_ecn(self) -> None:
        obj = build_ecn_marker(self.rate_mbit, self.ecn_k_pkts, self.buffer_bytes)
        tcprog.attach(netns_path(self.bottleneck.node.pid), self.bottleneck.name, obj)
        for h in self.senders + self.receivers:
            run_checked(h, ["sysctl", "-qw", "net.ipv4.tcp_ecn=1"])

    def ecn_stats(self) -> dict[str, int] | None:
        """The marker's counters (frames seen, marked CE), or None without ECN."""
        if self.ecn_k_pkts <= 0:
            return None
        val = tcprog.array_map(netns_path(self.bottleneck.node.pid), self.bottleneck.name, "ecn_vq")
        _, _, marked, seen = struct.unpack("<4Q", val[:32])
        return {"marked": marked, "seen": seen}

    def bottleneck_stats(self) -> str:
        port = self.bottleneck
        return run_checked(port.node, ["tc", "-s", "qdisc", "show", "dev", port.name])

    def destroy(self) -> None:
        if self._cleanup is None:
            return
        net = self._cleanup.net
        for sw in net.switches if net is not None else []:
            if isinstance(sw, DelayLineSwitch) and sw.line is not None:
                sw.line.stop()  # first: its process would keep the namespace alive
        self._cleanup.run()

    def __enter__(self) -> "KernelNet":
        return self.build()

    def __exit__(self, *exc) -> None:
        self.destroy()
