"""Baseline peer: Linux kernel TCP (reno, cubic via TCP_CONGESTION) on the emulated dumbbell.

1. Fairness/throughput: N long-lived flows share the bottleneck for D seconds; per-flow goodput
   (measured at the receivers), Jain's fairness index, retransmissions; kernel reno vs cubic, and
   kernel reno vs the userspace Reno of ``mltcp.traffic`` when that transport is available.
2. Iterations: the scenario's jobs with kernel CC, to show whether kernel CC interleaves.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass

from . import netns
from .arm import run_arm, switch_stat_sources
from .network import build_network, resolve_link_mode
from .peers import Peer, messages, start_together, udp_available
from .plan import EmulationError, Plan
from .report import arm_summary
from .topologies import LinkParams, bottleneck_intfs, make_topology, qdisc_drops


def jain_index(xs: list[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 = equal shares, 1/n = one flow takes all."""
    if not xs:
        raise ValueError("jain_index of no flows")
    s2 = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * s2) if s2 > 0 else 1.0


@dataclass
class BulkResult:
    label: str
    flows_mbps: list[float]
    retrans: int
    drops: int

    @property
    def total_mbps(self) -> float:
        return sum(self.flows_mbps)

    def as_dict(self) -> dict:
        return {
            "label": self.label,
            "flows_mbps": [round(x, 2) for x in self.flows_mbps],
            "total_mbps": round(self.total_mbps, 2),
            "jain": round(jain_index(self.flows_mbps), 4),
            "retransmissions": self.retrans,
            "drops": self.drops,
        }


def bulk_commands(
    transport: str, cc: str, dst_ip: str, port: int, seconds: float, t0: float, job: str, run: str = ""
) -> tuple[list[str], list[str], dict]:
    """(receiver argv, sender argv, sender's job document) of one long-lived flow."""
    import sys

    from mltcp.traffic.driver import JobSpec

    if transport not in ("kernel", "udp"):
        raise EmulationError(f"unknown transport {transport!r}")
    if transport == "udp" and not udp_available():
        raise EmulationError("userspace transport (mltcp.traffic.transport) not available")
    m = [sys.executable, "-m", f"mltcp.emulation.{transport}_peer"]
    doc = {
        "spec": JobSpec.of(0, 0.0, 0, name=job, iterations=0).to_dict(),
        "host": dst_ip,
        "port": port,
        "cc": cc,
        "t0": t0,
        "bulk_s": seconds,
    }
    return (
        [*m, "recv", "--run", run, "--port", str(port), "--bulk", "--t0", "0.0"],
        [*m, "send", "--run", run, "--spec", "-"],
        doc,
    )


def run_bulk(
    bottleneck: LinkParams,
    transport: str,
    cc: str,
    flows: int = 2,
    seconds: float = 10.0,
    link_mode: str = "auto",
    label: str | None = None,
) -> BulkResult:
    """``flows`` long-lived flows a_i -> b_i through the dumbbell for ``seconds``."""
    mode = resolve_link_mode(link_mode, "dumbbell")
    prefix = netns.run_prefix()
    with netns.Cleanup(prefix) as cl:
        cl.remove_switch_logs = mode != "switch"  # collect_stats reads and removes them
        from .network import software_switch_class

        topo = make_topology(
            "dumbbell",
            prefix,
            bottleneck,
            n_jobs=flows,
            switch_cls=software_switch_class() if mode == "switch" else None,
        )
        net = build_network(topo, mode, cl)
        q: queue.Queue = queue.Queue()
        recvs, sends = [], []
        for i, (a, b) in enumerate(topo.job_pairs):
            r_argv, s_argv, doc = bulk_commands(
                transport, cc, topo.ip_of(b), 5001 + i, seconds, -1.0, f"flow{i}", prefix
            )  # receivers time against the epoch
            recvs.append(Peer(net[b], r_argv, f"recv:flow{i}", q, cl))
            sends.append(Peer(net[a], s_argv, f"send:flow{i}", q, cl, doc=doc))
        start_together({p.tag: p for p in sends}, q, timeout_s=60)
        got: dict[str, tuple[int, float, float]] = {}  # flow -> (bytes, first, last)
        retrans = 0
        eofs = 0
        for tag, msg in messages(q, seconds + 30, lambda: f"bulk run ({label or cc}) did not finish in time"):
            if msg["type"] == "bulk" and msg.get("first") is not None:
                got[tag.split(":", 1)[1]] = (int(msg["bytes"]), float(msg["first"]), float(msg["last"]))
            elif msg["type"] == "summary":
                retrans += int(msg.get("retrans", 0))
            elif msg["type"] == "eof":
                eofs += 1
                if eofs == 2 * flows:
                    break
        for p in recvs + sends:
            p.proc.wait(timeout=5)
            if p.proc.returncode != 0:
                raise EmulationError(f"{p.tag} exited {p.proc.returncode}: {' | '.join(p.err[-3:])}")
        if mode == "switch":
            sources = switch_stat_sources(net, topo)
        else:
            drops = sum(qdisc_drops(i) for i in bottleneck_intfs(net, topo))
    if mode == "switch":
        from .softswitch import collect_stats

        drops, _ = collect_stats(*sources)
    # every flow's bytes over the common window (first byte of any flow .. last byte of any flow)
    window = (max(v[2] for v in got.values()) - min(v[1] for v in got.values())) if got else 0.0
    mbps = [got[f"flow{i}"][0] * 8 / window / 1e6 if window > 0 and f"flow{i}" in got else 0.0 for i in range(flows)]
    return BulkResult(label or f"{transport} {cc}", mbps, retrans, drops)


def baseline_peer(
    bottleneck: LinkParams,
    plan: Plan | None,
    seconds: float = 10.0,
    flows: int = 2,
    link_mode: str = "auto",
    progress=None,
) -> dict:
    """The whole baseline-peer report as a JSON-able dict."""
    say = progress or (lambda msg: None)
    out: dict = {
        "bottleneck": {"rate_mbps": bottleneck.rate_mbps, "buffer_bytes": bottleneck.buffer_bytes},
        "seconds": seconds,
        "fairness": [],
        "iterations": {},
    }
    for cc in ("reno", "cubic"):
        say(f"bulk: kernel {cc}, {flows} flows, {seconds:g} s")
        out["fairness"].append(run_bulk(bottleneck, "kernel", cc, flows, seconds, link_mode, f"kernel {cc}").as_dict())
    if udp_available():
        say(f"bulk: userspace reno, {flows} flows, {seconds:g} s")
        try:
            ur = run_bulk(bottleneck, "udp", "reno", flows, seconds, link_mode, "userspace reno").as_dict()
            out["fairness"].append(ur)
            kr = out["fairness"][0]
            out["userspace_vs_kernel_reno_throughput"] = round(ur["total_mbps"] / kr["total_mbps"], 3)
        except EmulationError as e:
            out["userspace_reno_error"] = str(e)
    else:
        out["userspace_reno_error"] = "userspace transport not available in this checkout"
    if plan is not None:
        for cc in ("reno", "cubic"):
            say(f"iterations: kernel {cc}, {len(plan.jobs)} jobs")
            arm = run_arm(plan, cc, "kernel", link_mode=link_mode)
            out["iterations"][cc] = arm_summary(arm, plan.scenario_obj)
    return out
