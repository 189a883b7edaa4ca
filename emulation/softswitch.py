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

import ast
import json
import os
import sys
import zlib

from .topologies import EmuTopo, LinkParams, TopologyError, _run


GATEWAY_MAC = "02:4d:4c:54:43:fe"   # locally administered; "MLTC" + fe


def switch_class():
    """MltcpSwitch, or None when the software switch is not importable."""
    try:
        from mltcp.emulation.switch.mininet_node import mininet_switch_class
    except ImportError:  # its packages (grpcio, p4runtime) missing; other errors are bugs
        return None
    return mininet_switch_class()


def port_spec(p: LinkParams) -> str:
    """mltcp-switch --port-config value for one port (buffer in ~1500-byte packets)."""
    parts = []
    if p.rate_mbps is not None:
        parts.append(f"rate={p.rate_mbps:g}mbit")
    if p.delay_ms > 0:
        parts.append(f"delay={p.delay_ms:g}ms")
    if p.buffer_bytes is not None:
        parts.append(f"buffer={max(1, round(p.buffer_bytes / 1500))}")
    return ",".join(parts)


def _peer(intf):
    link = intf.link
    return link.intf2 if link.intf1 is intf else link.intf1


def configure_ports(net, topo: EmuTopo) -> None:
    """Before net.start(): per-port link parameters of every switch."""
    for sw in net.switches:
        if not hasattr(sw, "link_opts"):   # a kernel bridge beside the software switch
            continue
        cfg = {}
        for intf, port in sw.ports.items():
            if intf.name == "lo" or getattr(intf, "link", None) is None:
                continue
            p = topo.link_params.get(frozenset((sw.name, _peer(intf).node.name)))
            if p is not None and port_spec(p):
                cfg[port] = port_spec(p)
        sw.link_opts["port_config"] = cfg


def ecmp_pick(hops: list[str], host_ip: str) -> str:
    """One next hop out of several for a destination: mltcp.p4's LPM entry holds one action (no
    action selector), so equal-cost paths are split per destination host, by a hash of its address."""
    return sorted(hops)[zlib.crc32(host_ip.encode()) % len(hops)]


def switch_tables(net, topo: EmuTopo, sw) -> dict:
    """Routes (prefix, port, mac) and ECN thresholds (port, K) for switch ``sw``."""
    port_to = {}   # neighbour node name -> sw's port towards it
    for intf, port in sw.ports.items():
        if getattr(intf, "link", None) is not None:
            port_to[_peer(intf).node.name] = port
    routes, ecn = [], []
    for h in net.hosts:
        hops = topo.next_hops_to_host(sw.name, h.name)
        nxt = h.name if not hops else ecmp_pick(hops, h.IP())
        if nxt not in port_to:
            raise TopologyError(f"switch {sw.name}: no port towards {nxt} (route to host {h.name})")
        routes.append([f"{h.IP()}/32", port_to[nxt], h.MAC()])
    for intf, port in sw.ports.items():
        if getattr(intf, "link", None) is None:
            continue
        p = topo.link_params.get(frozenset((sw.name, _peer(intf).node.name)))
        if p is not None and p.ecn_threshold_pkts:
            ecn.append([port, p.ecn_threshold_pkts])
    out = {"grpc": sw.grpc_address, "device_id": sw.device_id, "routes": routes, "ecn": ecn}
    pol = getattr(topo, "switch_policy", None)     # in-network MLTCP (docs/in-network.md)
    if pol is not None and pol.active:
        ports = ecn if pol.name == "ecn-by-progress" else [[port, None] for _, port, _ in routes]
        out["progress"] = {"policy": {"name": pol.name, "bands": pol.bands, "ecn_scale_lo": pol.ecn_scale_lo,
                                      "ecn_scale_hi": pol.ecn_scale_hi},
                           "ports": sorted({tuple(p) for p in ports})}
    return out


def set_host_arp(net, topo: EmuTopo) -> None:
    """Static ARP: on the dumbbell every host knows every other's MAC; on a routed topology each
    host's gateway address resolves to :data:`GATEWAY_MAC` (mltcp.p4 answers no ARP)."""
    if topo.layer2:
        net.staticArp()
        return
    for h in net.hosts:
        _run(h, ["ip", "neigh", "replace", topo.host_gw[h.name], "lladdr", GATEWAY_MAC,
                 "dev", h.defaultIntf().name, "nud", "permanent"])


def program(net, topo: EmuTopo, timeout_s: float = 120.0) -> None:
    """After net.start(): push mltcp.p4's pipeline and the tables to every switch, in this
    process (each switch over its own P4Runtime connection)."""
    for sw in net.switches:
        if not hasattr(sw, "grpc_address"):   # a kernel bridge: nothing to program
            continue
        program_switch(switch_tables(net, topo, sw), sw.name, timeout_s)


def program_switch(spec: dict, name: str | None = None, timeout_s: float = 120.0) -> None:
    """Push the pipeline and install ``spec``'s routes and ECN thresholds (the dict
    :func:`switch_tables` makes); :class:`TopologyError` naming the switch if that fails."""
    # here, not at the top: the control plane's packages are only needed in link mode `switch`
    from mltcp.controlplane.client import ControlPlaneError, connect
    from mltcp.controlplane.topology import Route
    name = name or spec["grpc"]
    try:
        with connect(spec["grpc"], device_id=spec["device_id"], name=name, timeout=timeout_s,
                     retry_timeout=timeout_s) as conn:
            conn.push_pipeline()
            conn.install_routes([Route(p, int(port), mac) for p, port, mac in spec["routes"]])
            for port, k in spec["ecn"]:
                conn.set_ecn_threshold(int(port), int(k))
            from .bmv2 import apply_progress_policy
            apply_progress_policy(conn, spec)
    except ControlPlaneError as e:
        raise TopologyError(f"programming switch {name} failed: {e}") from e


def port_stats_from_log(path: str) -> dict[int, dict]:
    """The per-port statistics mltcp-switch logs when it stops ({} if absent)."""
    try:
        with open(path) as fh:
            lines = [l for l in fh if "port stats" in l]
    except OSError:
        return {}
    if not lines:
        return {}
    try:
        return ast.literal_eval(lines[-1].split("port stats", 1)[1].strip())
    except (ValueError, SyntaxError):
        return {}


def collect_stats(switches, bottleneck_ports: dict[str, set[int]]) -> tuple[int, int]:
    """(queue drops, ECN marks) on the bottleneck ports, from the stopped switches' logs; removes
    the log files."""
    drops = marks = 0
    for name, log in switches:
        st = port_stats_from_log(log)
        for port in bottleneck_ports.get(name, set()):
            drops += int(st.get(port, {}).get("dropped", 0))
            marks += int(st.get(port, {}).get("ecn_marked", 0))
        try:
            os.unlink(log)
        except OSError:
            pass
    return drops, marks


if __name__ == "__main__":  # python -m mltcp.emulation.softswitch '<json spec>' (bench_switch)
    program_switch(json.loads(sys.argv[1]))
