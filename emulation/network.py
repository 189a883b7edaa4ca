"""Which switches a run uses and how a topology becomes a running Mininet network.

:mod:`mltcp.emulation.topologies` holds the topologies and link shaping and imports nothing else
of the emulation; the software switch (:mod:`mltcp.emulation.softswitch`) and BMv2
(:mod:`mltcp.emulation.bmv2`) build on it; this module sits above all three (no import cycle).
"""

from __future__ import annotations

from mininet.net import Mininet

from .topologies import (
    LINK_MODES,
    EmuTopo,
    ShapedLink,
    TopologyError,
    configure_routing,
    disable_offloads,
    qdisc_available,
    steer_flows,
)


def software_switch_class():
    """The project's P4 software switch as a Mininet Switch class, or None if not importable."""
    from .softswitch import switch_class

    return switch_class()


def switch_class_for(mode: str, log_dir=None, pcap: bool = False):
    """The Mininet switch class of a link mode: mltcp-switch (``switch``), BMv2 (``bmv2``, with
    its log folder), else None (the topology's kernel bridges or routers)."""
    if mode == "switch":
        return software_switch_class()
    if mode == "bmv2":
        from . import bmv2

        return bmv2.switch_class(log_dir, pcap)
    return None


def _controlplane_available() -> bool:
    """The control plane's client imports (its gRPC/protobuf packages are there); any other
    error while importing it is a bug and is raised."""
    try:
        import mltcp.controlplane.client  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_link_mode(mode: str, topology: str | None = None, ecn: bool = False) -> str:
    """The link mode to run: ``auto`` is ``switch`` on the dumbbell (one mltcp-switch on the
    path), and on the routed topologies only when the links must mark ECN (``ecn``), which htb
    cannot: there every router is an mltcp-switch process, and on a 2-core machine three of them
    add about 8 ms to every round trip, more than the kernel routers of ``htb`` (docs/design.md:
    Emulation, link modes)."""
    if mode not in LINK_MODES:
        raise TopologyError(f"unknown link mode {mode!r}; choose from {', '.join(LINK_MODES)}")
    if mode == "auto":
        if (
            (topology in (None, "dumbbell") or ecn)
            and software_switch_class() is not None
            and _controlplane_available()
        ):
            return "switch"
        return "htb"
    if mode == "switch" and (software_switch_class() is None or not _controlplane_available()):
        raise TopologyError(
            "link mode 'switch' needs the software switch (mltcp.emulation.switch) "
            "and the control plane (mltcp.controlplane), which are not importable"
        )
    if mode == "bmv2":
        from mltcp import tools

        why = tools.why_missing("p4c-bm2-ss", "simple_switch_grpc", "simple_switch_CLI")
        if why or not _controlplane_available():
            raise TopologyError(f"link mode 'bmv2' needs p4c and BMv2: {why or 'mltcp.controlplane not importable'}")
    if mode == "linux-tc":
        missing = [k for k in ("netem", "red") if not qdisc_available(k)]
        if missing:
            raise TopologyError(
                f"link mode 'linux-tc' needs qdisc(s) {', '.join(missing)}, which this "
                "kernel lacks; use --link-mode htb (rate + buffer only) or switch"
            )
    return mode


def build_network(topo: EmuTopo, mode: str, cleanup) -> Mininet:
    """Build and start ``topo`` in Mininet; registers the net with ``cleanup`` before building so
    that a failure halfway still removes everything. The links carry their options to
    :class:`~mltcp.emulation.topologies.ShapedIntf`, which shapes them per ``mode`` (tc in
    ``htb``/``linux-tc``); in ``switch``/``bmv2`` each P4 switch shapes its ports and programs
    itself in its ``start()``."""
    if mode not in LINK_MODES[1:]:
        raise TopologyError(f"build_network: link mode must be one of {', '.join(LINK_MODES[1:])}, got {mode!r}")
    topo.set_shaper(mode)
    net = Mininet(topo=None, controller=None, link=ShapedLink, build=False, autoSetMacs=False, waitConnected=False)
    cleanup.net = net
    net.topo = topo
    net.build()
    net.start()
    disable_offloads(net)
    steer_flows(net)
    if mode in ("switch", "bmv2"):  # the switches route (mltcp.p4 LPM); their ports in the root namespace get no IPs
        from .softswitch import set_host_arp

        set_host_arp(net, topo)
        return net
    configure_routing(net, topo)
    if topo.layer2:
        net.staticArp()
    return net
