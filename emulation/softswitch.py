"""Link mode ``switch``: the project's P4 software switch (``MltcpSwitch``, emulation/switch/) on
the emulated network, programmed over P4Runtime by ``mltcp.controlplane``.

The switch applies each link's rate, one-way delay, drop-tail buffer (packets) and queue-depth
ECN threshold on its egress ports; forwarding is mltcp.p4's ``ipv4_lpm`` (one /32 route per host,
destination MAC rewritten to the host's), so hosts get static ARP entries. Every topology: on the
dumbbell one switch is the bottleneck (the other side is a kernel bridge); on the ring and the
leaf-spine every router is an ``mltcp-switch``, routed as the topology says
(:meth:`EmuTopo.next_hops_to_host`). Hosts of a routed topology send to their gateway address,
resolved by a static ARP entry to :data:`GATEWAY_MAC`, a MAC no interface has: the switch ports
live in the root namespace, and a frame addressed to one of their own MACs would also be taken up
by the root namespace's IP stack.
"""

from __future__ import annotations

import json
import os
import sys
import zlib

from .topologies import LinkParams, TopologyError, peer_intf, run_checked


GATEWAY_MAC = "02:4d:4c:54:43:fe"  # locally administered; "MLTC" + fe


def switch_class():
    """:class:`ProgrammedSwitch` (mltcp-switch that configures and programs itself in start()),
    or None when the software switch is not importable."""
    try:
        from mltcp.emulation.switch.mininet_node import mininet_switch_class
    except ImportError:  # its packages (grpcio, p4runtime) missing; other errors are bugs
        return None
    base = mininet_switch_class()

    class ProgrammedSwitch(base):
        """mltcp-switch as a Mininet switch of an emulated topology: ``start()`` takes each
        port's rate/delay/buffer from its link's options (ShapedIntf.link_params), starts the
        switch, then pushes mltcp.p4 and the routes/ECN thresholds computed from ``topo``."""

        def __init__(self, name, topo=None, **params):
            super().__init__(name, **params)
            self.topo = topo
            # per-port counters, written as JSON by mltcp-switch when it stops
            self.stats_file = self.log_file.rsplit(".log", 1)[0] + ".stats.json"
            self.link_opts["stats_file"] = self.stats_file

        def start(self, controllers) -> None:
            self.link_opts["port_config"] = port_config(self, self.topo)
            super().start(controllers)
            if self.topo is not None:
                program_switch(switch_tables(self.topo, self), self.name)

    return ProgrammedSwitch


def _linked_ports(sw):
    """(intf, port) of ``sw``'s ports that have a link."""
    return [
        (intf, port) for intf, port in sw.ports.items() if intf.name != "lo" and getattr(intf, "link", None) is not None
    ]


def port_params(intf) -> LinkParams | None:
    """The link options of ``intf`` (a ShapedIntf), None if it has none."""
    p = getattr(intf, "link_params", None)
    return None if p is None or p == LinkParams() else p


def port_config(sw, topo=None) -> dict[int, str]:
    """mltcp-switch --port-config of every shaped port of ``sw``; with ``topo``, its lossless
    setting (``pfc_headroom``: PFC on the strict-priority queues) and a policy's ``priority_pin``."""
    cfg = {}
    pfc = getattr(topo, "pfc_headroom", 0)
    pol = getattr(topo, "switch_policy", None)
    unpinned = pol is not None and pol.name == "priority-by-progress" and not pol.priority_pin
    for intf, port in _linked_ports(sw):
        p = port_params(intf)
        if p is not None and port_spec(p):
            spec = port_spec(p)
            if pfc and p.buffer_bytes is not None and p.buffer_bytes // 1500 > pfc:
                spec += f",pfc={pfc}"
            if unpinned:
                spec += ",pin=0"
            cfg[port] = spec
    return cfg


def port_spec(p: LinkParams) -> str:
    """mltcp-switch --port-config value for one port (buffer in ~1500-byte packets)."""
    parts = []
    if p.rate_mbps is not None:
        parts.append(f"rate={p.rate_mbps:g}mbit")
    if p.delay_ms > 0:
        parts.append(f"delay={p.delay_ms:g}ms")
    if p.buffer_bytes is not None:
        parts.append(f"buffer={max(1, p.buffer_bytes // 1500)}")  # whole packets, as max_queue_size
    return ",".join(parts)


def ecmp_pick(hops: list[str], host_ip: str) -> str:
    """One next hop out of several for a destination: mltcp.p4's LPM entry holds one action (no
    action selector), so equal-cost paths are split per destination host, by a hash of its address."""
    return sorted(hops)[zlib.crc32(host_ip.encode()) % len(hops)]


def switch_tables(topo, sw) -> dict:
    """Routes (prefix, port, mac) and ECN thresholds (port, K) for switch ``sw`` of ``topo`` (an
    emulation.topologies.EmuTopo: host addresses, MACs and next hops)."""
    port_to = {peer_intf(intf).node.name: port for intf, port in _linked_ports(sw)}
    routes, ecn = [], []
    for h in topo.hosts():
        hops = topo.next_hops_to_host(sw.name, h)
        ip = topo.ip_of(h)
        nxt = h if not hops else ecmp_pick(hops, ip)
        if nxt not in port_to:
            raise TopologyError(f"switch {sw.name}: no port towards {nxt} (route to host {h})")
        routes.append([f"{ip}/32", port_to[nxt], topo.host_mac[h]])
    for intf, port in _linked_ports(sw):
        p = port_params(intf)
        if p is not None and p.ecn_threshold_pkts:
            ecn.append([port, p.ecn_threshold_pkts])
    out = {"grpc": sw.grpc_address, "device_id": sw.device_id, "routes": routes, "ecn": ecn}
    pol = getattr(topo, "switch_policy", None)  # in-network MLTCP (docs/in-network.md)
    if pol is not None and pol.active:
        ports = ecn if pol.name == "ecn-by-progress" else [[port, None] for _, port, _ in routes]
        out["progress"] = {"policy": policy_spec(pol), "ports": sorted({tuple(p) for p in ports})}
    return out


def policy_spec(pol) -> dict:
    """A switch policy as JSON for the switch's programming step: its ``[switch]`` fields, which
    :func:`mltcp.progress_policy.from_table` reads back (``links`` is the simulator's only)."""
    table = {"name": pol.name, "bands": pol.bands, "ecn_scale_lo": pol.ecn_scale_lo, "ecn_scale_hi": pol.ecn_scale_hi}
    if pol.name == "priority-by-progress":  # what its band queues mark, and how deep they are
        table.update(priority_ecn=pol.priority_ecn, priority_buffer=pol.priority_buffer, priority_pin=pol.priority_pin)
    if pol.name == "ecn-by-progress" and pol.contest_window_us:
        table["contest_window_us"] = pol.contest_window_us
    return table


def set_host_arp(net, topo) -> None:
    """Static ARP: on the dumbbell every host knows every other's MAC; on a routed topology each
    host's gateway address resolves to :data:`GATEWAY_MAC` (mltcp.p4 answers no ARP)."""
    if topo.layer2:
        net.staticArp()
        return
    for h in net.hosts:
        run_checked(
            h,
            [
                "ip",
                "neigh",
                "replace",
                topo.host_gw[h.name],
                "lladdr",
                GATEWAY_MAC,
                "dev",
                h.defaultIntf().name,
                "nud",
                "permanent",
            ],
        )


def program_switch(spec: dict, name: str | None = None, timeout_s: float = 120.0) -> None:
    """Push the pipeline and install ``spec``'s routes and ECN thresholds (the dict
    :func:`switch_tables` makes); :class:`TopologyError` naming the switch if that fails."""
    # here, not at the top: the control plane's packages are only needed in link mode `switch`
    from mltcp.controlplane.client import ControlPlaneError, connect
    from mltcp.controlplane.topology import Route

    name = name or spec["grpc"]
    try:
        with connect(
            spec["grpc"], device_id=spec["device_id"], name=name, timeout=timeout_s, retry_timeout=timeout_s
        ) as conn:
            conn.push_pipeline()
            conn.install_routes([Route(p, int(port), mac) for p, port, mac in spec["routes"]])
            for port, k in spec["ecn"]:
                conn.set_ecn_threshold(int(port), int(k))
            apply_progress_policy(conn, spec)
    except ControlPlaneError as e:
        raise TopologyError(f"programming switch {name} failed: {e}") from e


def apply_progress_policy(conn, spec: dict) -> None:
    """In-network MLTCP (docs/in-network.md): ``spec["progress"]`` = {"policy": {...}, "ports":
    [[port, base ECN threshold or None], ...]} from switch_tables; absent: off."""
    pr = spec.get("progress")
    if not pr:
        return
    from mltcp.progress_policy import from_table

    t = dict(pr["policy"])
    pol = from_table(t.pop("name"), t)
    for port, k in pr["ports"]:
        conn.set_progress_policy(int(port), pol, None if k is None else int(k))


def port_stats(path: str) -> dict[int, dict]:
    """The per-port statistics mltcp-switch wrote to ``--stats-file`` when it stopped ({} if it
    wrote none)."""
    try:
        with open(path) as fh:
            return {int(port): st for port, st in json.load(fh).items()}
    except (OSError, ValueError):
        return {}


def collect_stats(switches, bottleneck_ports: dict[str, set[int]]) -> tuple[int, int]:
    """(queue drops, ECN marks) on the bottleneck ports, from the stopped switches' stats files
    ([(switch name, stats file)]); removes them and the switches' logs beside them."""
    drops = marks = 0
    for name, path in switches:
        st = port_stats(path)
        for port in bottleneck_ports.get(name, set()):
            drops += int(st.get(port, {}).get("dropped", 0))
            marks += int(st.get(port, {}).get("ecn_marked", 0))
        for f in (path, path.rsplit(".stats.json", 1)[0] + ".log"):
            try:
                os.unlink(f)
            except OSError:
                pass
    return drops, marks


if __name__ == "__main__":  # python -m mltcp.emulation.softswitch '<json spec>' (bench_switch)
    program_switch(json.loads(sys.argv[1]))
