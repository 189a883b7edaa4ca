"""One arm of an experiment: build the network, run every job's peers once with one congestion
control, collect the per-iteration records and the switches' drop/mark counters, tear down."""

from __future__ import annotations

import contextlib
import queue
import time
from dataclasses import dataclass, field
from typing import Callable

from mltcp.records import IterationRecord

from . import netns
from .network import build_network, resolve_link_mode
from .peers import Peer, kernel_cc_name, messages, peer_commands, sender_doc, set_kernel_min_rto, start_together
from .plan import KERNEL_BPF_CCS, EmulationError, Plan, assign_endpoints, expected_duration
from .topologies import EmuTopo, bottleneck_intfs, features, make_topology, qdisc_drops, run_checked


@dataclass
class ArmResult:
    cc: str
    records: list[IterationRecord]
    drops: int
    ecn_marks: int | None
    retrans: dict[str, int]
    link_mode: str
    wall_s: float
    peer_stats: dict = field(default_factory=dict)  # job -> the sender's per-flow counters (udp)
    stamp_stats: dict = field(default_factory=dict)  # job -> its host's stamper counters (kernel + policy)


def switch_stat_sources(net, topo: EmuTopo):
    """([(switch, stats file)], {switch: bottleneck ports}) to read drops/marks after the switches stop."""
    bn = {frozenset(b) for b in topo.bottlenecks}
    logs = [(sw.name, sw.stats_file) for sw in net.switches if hasattr(sw, "stats_file")]
    ports = {
        sw.name: {
            port
            for intf, port in sw.ports.items()
            if getattr(intf, "link", None) and frozenset((intf.link.intf1.node.name, intf.link.intf2.node.name)) in bn
        }
        for sw in net.switches
    }
    return logs, ports


def shim_ports(jobs, mode: str, transport: str, policy=None) -> None:
    """Link modes bmv2 and switch run mltcp.p4, which parses the MLTCP shim on UDP port 9199 only:
    every job is sent there (when no two share a receiver host), so the switch counts its packets
    per job and a ``switch_policy`` sees its bytes_ratio. A job on another port carries no band to
    the switch: an active policy over the userspace transport is then refused (EmulationError)."""
    if mode not in ("bmv2", "switch"):
        return
    from .bmv2 import use_shim_port

    if not use_shim_port(jobs) and transport == "udp" and policy is not None and policy.active:
        raise EmulationError(
            f"switch_policy {policy.name!r} needs every job on UDP port 9199, where "
            "mltcp.p4 parses the MLTCP shim, and two jobs share a receiver host here"
        )


PFC_HEADROOM = 64  # frames a lossless queue keeps free for what its senders send before they stop


def lossless(plan, mode: str, transport: str) -> bool:
    """Whether the run emulates the scenario's PFC links: mltcp-switch sends PFC frames, which the
    userspace senders obey (kernel TCP and BMv2 have no PFC here: their queues drop)."""
    sc = getattr(plan, "scenario_obj", None)
    return sc is not None and mode == "switch" and transport == "udp" and any(lk.pfc for lk in sc.links.values())


def lossless_doc(doc: dict, job, node) -> dict:
    """A userspace sender's document on a lossless link: obey PFC on its interface, and since such
    a fabric loses nothing (and priority queues without priority_pin reorder), find losses by the
    RTO only (RACK's reordering window = the minimum RTO)."""
    doc.update(pfc_ifname=node.defaultIntf().name, reo_wnd_s=job.min_rto_s)
    return doc


def needs_stamper(mode: str, transport: str) -> bool:
    """Kernel TCP carries no shim: through a P4 switch each sender host stamps the MLTCP IPv4
    option (traffic/kernel/stamp.bpf.c) instead, as the userspace transport always sends its
    shim. A ``switch_policy`` acts on it; with the policy off the switch still counts each job's
    packets and ECN marks (mltcp.p4's job_tx and job_ecn_marks, which BMv2 reports)."""
    return transport == "kernel" and mode in ("bmv2", "switch")


def stamp_kernel_senders(net, plan: Plan, policy=None) -> dict[str, tuple]:
    """The stamper on every job's sender host (its job_id; the idle rule's minimum gap half the
    job's compute time, at least the scenario's min_idle, so TCP's own pauses within an
    iteration never split it). The id is per host: where two jobs share a sender host nothing
    is stamped, and an active ``policy`` is refused. Returns job -> (namespace file, interface)
    for :func:`read_stamp_stats`."""
    from mltcp.traffic.kernel import stamp
    from mltcp.traffic.kernel.netns import netns_path

    hosts = [j.sender for j in plan.jobs]
    if len(set(hosts)) < len(hosts):
        if policy is not None and policy.active:
            raise EmulationError(
                f"switch_policy {policy.name!r} over kernel TCP stamps each sender host with "
                "its job's id, and two jobs share a sender host here"
            )
        return {}
    where = {}
    for j in plan.jobs:
        node = net[j.sender]
        cfg = stamp.StampConfig(
            job_id=j.spec.job_id,
            idle_fraction=j.hook.get("idle_fraction", 0.9),
            min_idle_s=max(j.hook.get("min_idle", 0.001), 0.5 * j.job.compute_s),
        )
        where[j.name] = (netns_path(node.pid), node.defaultIntf().name)
        stamp.install(*where[j.name], cfg)
    return where


def read_stamp_stats(where: dict[str, tuple]) -> dict[str, dict]:
    """job -> the counters of its host's stamper (stamped, no_room, failed, iterations, retrans)."""
    if not where:
        return {}
    from mltcp.traffic.kernel import stamp

    return {job: stamp.stats(ns, dev) for job, (ns, dev) in where.items()}


@contextlib.contextmanager
def kernel_base_cc(cc: str, transport: str):
    """A base algorithm the kernel lacks (dctcp: bpf_dctcp) registered for one arm, and
    unregistered after it when the arm was the one that registered it."""
    if transport != "kernel" or cc not in KERNEL_BPF_CCS:
        yield
        return
    from mltcp.traffic.kernel import base_cc

    mine = base_cc.ensure(cc)
    try:
        yield
    finally:
        if mine:
            base_cc.remove(cc)


def run_arm(
    plan: Plan,
    cc: str,
    transport: str = "kernel",
    mltcp: bool = False,
    link_mode: str = "auto",
    on_record: Callable[[IterationRecord], None] | None = None,
    fail_after_records: int | None = None,
    timeout_s: float | None = None,
    switch_logs=None,
    pcap: bool = False,
) -> ArmResult:
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
    with kernel_base_cc(cc, transport), netns.Cleanup(prefix) as cl:
        cl.remove_switch_logs = mode != "switch"  # collect_stats reads and removes them
        from .network import switch_class_for

        topo = make_topology(
            plan.topology,
            prefix,
            plan.bottleneck,
            n_jobs=len(plan.jobs),
            switch_cls=switch_class_for(mode, switch_logs, pcap),
        )
        topo.switch_policy = getattr(plan.scenario_obj, "switch", None)  # in-network MLTCP
        topo.pfc_headroom = PFC_HEADROOM if lossless(plan, mode, transport) else 0
        assign_endpoints(plan, topo)
        shim_ports(plan.jobs, mode, transport, topo.switch_policy)
        net = build_network(topo, mode, cl)
        stamped = stamp_kernel_senders(net, plan, topo.switch_policy) if needs_stamper(mode, transport) else {}
        if transport == "kernel":  # the scenario's RTO (stretched by --dilate), as the model's
            set_kernel_min_rto(net.hosts, min(j.min_rto_s for j in plan.jobs))
        if transport == "kernel" and features(mode)["ecn"]:
            for h in net.hosts:  # ECN-capable kernel TCP where the links can mark
                h.cmd("sysctl -qw net.ipv4.tcp_ecn=1")
        if transport == "kernel" and cc in KERNEL_BPF_CCS:  # receivers' sockets run it too
            for h in net.hosts:
                run_checked(h, ["sysctl", "-qw", f"net.ipv4.tcp_congestion_control={wire_cc}"])
        q: queue.Queue = queue.Queue()
        receivers, senders = {}, {}
        for job in plan.jobs:
            r_argv, _ = peer_commands(job, transport, prefix)
            receivers[job.name] = Peer(net[job.receiver], r_argv, f"recv:{job.name}", q, cl)
        for job in plan.jobs:
            _, s_argv = peer_commands(job, transport, prefix)
            doc = sender_doc(job, transport, wire_cc)
            if topo.pfc_headroom:
                doc = lossless_doc(doc, job, net[job.sender])
            senders[job.name] = Peer(net[job.sender], s_argv, f"send:{job.name}", q, cl, doc=doc)
        start_together(senders, q, timeout_s=60 + 2 * len(plan.jobs))
        records: list[IterationRecord] = []
        retrans: dict[str, int] = {}
        peer_stats: dict[str, list] = {}
        done: set[str] = set()
        limit = timeout_s or (3 * expected_duration(plan, None) + 30)
        for tag, msg in messages(
            q, limit, lambda: f"emulation did not finish within {limit:.0f} s ({len(records)} records collected)"
        ):
            kind, name = tag.split(":", 1)
            if msg["type"] == "iter":
                rec = IterationRecord.from_dict(msg)
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
                    raise EmulationError(
                        f"sender of {name} exited {p.returncode}: {' | '.join(senders[name].err[-3:])}"
                    )
                done.add(name)
                if len(done) == len(senders):
                    break
            elif msg["type"] == "eof" and kind == "recv":
                p = receivers[name].proc
                p.wait(timeout=5)
                if p.returncode not in (0, None) and name not in done:
                    raise EmulationError(
                        f"receiver of {name} exited {p.returncode}: {' | '.join(receivers[name].err[-3:])}"
                    )
        stamp_stats = read_stamp_stats(stamped)
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
        drops = estimated_drops(records, peer_stats)  # BMv2 has no readable queue-drop counter
    return ArmResult(
        wire_cc,
        sorted(records, key=lambda r: (r.job, r.iteration)),
        drops,
        marks,
        retrans,
        mode,
        time.monotonic() - wall0,
        peer_stats,
        stamp_stats,
    )
