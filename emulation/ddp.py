"""torch-ddp jobs in the emulation: real DDP ranks (mltcp.ddp.worker), one per Mininet host.

A scenario whose jobs have ``workload = "torch-ddp"`` (mltcp.ddp.catalog) runs here instead of
through the sender/receiver peers: the emulation's dumbbell (htb rate + bfifo buffer on the
bottleneck, both directions), each job's ranks on the hosts it names (default: rank 0 on a<k>,
rank 1 on b<k>, alternating sides, so every gloo connection crosses the bottleneck), gloo's
sockets on the arm's algorithm: each rank sets it on its own gloo sockets right after
``init_process_group`` (:func:`mltcp.torch.set_connections_cc`), before DDP's first broadcast, and
the hosts' default (``net.ipv4.tcp_congestion_control``) is set too where the kernel allows it: a
network namespace other than the first may only default to an algorithm in
``tcp_allowed_congestion_control`` (here reno and bbr; cubic and the BPF variants get EPERM).
With ``boundary = "mark"`` the ranks mark each iteration's first bucket in
the kernel MLTCP's map; with ``"idle"`` the kernel's idle-gap rule finds the iterations.

A job's iteration records are its rank 0's (start before forward, first collective, optimizer
step); every rank's per-step losses are reported, so the arms can be compared step by step.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mltcp import compare
from mltcp.records import IterationRecord, write_csv

from . import netns
from .arm import ArmResult
from .capture import capture
from .network import build_network
from .peers import Peer, kernel_cc_name, messages, start_together
from mltcp.ddp import netstat
from mltcp.ddp.catalog import BOUNDARIES
from mltcp.traffic.kernel.transport import pacing_rate_for_link

from .plan import EmulationError, link_params_of
from .topologies import bottleneck_intfs, make_topology, qdisc_counters

MASTER_PORT = 29500


def is_ddp(sc) -> bool:
    return any("ddp" in j.extra for j in sc.jobs)


def check_ddp_scenario(sc) -> None:
    """Every job torch-ddp, all on one link (the dumbbell's bottleneck), an [mltcp] table the kernel
    variants model (:func:`kernel_config`)."""
    kernel_config(sc)
    if not all("ddp" in j.extra for j in sc.jobs):
        raise EmulationError(f"{sc.source}: torch-ddp jobs cannot be mixed with synthetic ones in one emulation")
    paths = {tuple(j.path) for j in sc.jobs}
    if len(paths) != 1 or len(next(iter(paths))) != 1:
        raise EmulationError(
            f"{sc.source}: jobs[].path: torch-ddp jobs share one fabric (the dumbbell's bottleneck, or "
            "with --topology leafspine every leaf-spine link): every job's path must be the same single link"
        )


SIDES = {"dumbbell": ("a", "b", 50), "leafspine": ("h1", "h2", 20)}  # host name prefixes, hosts per side


def rank_hosts(jobs, topology: str = "dumbbell") -> dict[str, list[str]]:
    """job -> the host (short name) of each rank: the job's ``hosts``, or alternating sides on
    hosts no other job uses, so every gloo connection crosses the fabric. Dumbbell: a<i> and b<i>;
    leaf-spine: h1<i> under leaf 1 and h2<i> under leaf 2."""
    sides = SIDES[topology]
    taken = {h for j in jobs if j.extra["ddp"].hosts for h in j.extra["ddp"].hosts}
    nxt = {side: 1 for side in sides[:2]}
    out = {}
    for j in jobs:
        d = j.extra["ddp"]
        if d.hosts:
            out[j.name] = list(d.hosts)
            continue
        hosts = []
        for r in range(d.ranks):
            side = sides[r % 2]
            while f"{side}{nxt[side]}" in taken:
                nxt[side] += 1
            hosts.append(f"{side}{nxt[side]}")
            taken.add(hosts[-1])
        out[j.name] = hosts
    for name, hosts in out.items():
        for h in hosts:
            if host_index(h, topology) is None:
                a, b, n = sides
                raise EmulationError(f"job {name}: host {h!r} is not a {topology} host ({a}1..{a}{n}, {b}1..{b}{n})")
    all_hosts = [h for hs in out.values() for h in hs]
    if len(set(all_hosts)) != len(all_hosts):
        raise EmulationError("two ranks on one host: give each rank its own host")
    return out


def host_index(host: str, topology: str) -> int | None:
    """The number of a host on its side (b7 -> 7, h23 -> 3), or None if it is no host of the topology."""
    a, b, n = SIDES[topology]
    for side in (a, b):
        rest = host[len(side) :]
        if host.startswith(side) and rest.isdigit() and 1 <= int(rest) <= n:
            return int(rest)
    return None


def worker_argv(
    job,
    rank: int,
    hosts: list[str],
    ips: dict[str, str],
    ifname: str,
    port: int,
    seed: int,
    mark: bool,
    prefix: str,
    cc: str,
    pacing_mbit: float = 0.0,
    nic_cap: bool = False,
) -> list[str]:
    d = job.extra["ddp"]
    extra = (["--pacing-mbit", repr(pacing_mbit)] if pacing_mbit else []) + (["--nic-cap"] if nic_cap else [])
    return [
        sys.executable,
        "-m",
        "mltcp.ddp.worker",
        "--job",
        job.name,
        "--rank",
        str(rank),
        "--world",
        str(d.ranks),
        "--master",
        f"{ips[hosts[0]]}:{port}",
        "--model",
        d.model,
        "--iterations",
        str(job.iterations),
        "--gpu-ms",
        repr(d.gpu_ms),
        "--seed",
        str(seed),
        "--bucket-mb",
        repr(d.bucket_mb),
        "--ifname",
        ifname,
        "--wait",
        "--start-offset",
        repr(job.start_offset_s),
        "--mark" if mark else "--no-mark",
        "--run",
        prefix,
        "--cc",
        cc,
        *extra,
    ]


def kernel_config(sc):
    """The scenario's ``[mltcp]`` table as the kernel variants' configuration (the shipped default
    where it is silent); EmulationError naming the key the BPF variants do not model."""
    from mltcp.traffic.kernel import maps

    try:
        return maps.config_from_hook(sc.mltcp_params)
    except ValueError as e:
        raise EmulationError(f"{sc.source}: [mltcp]: {e}") from None


@contextlib.contextmanager
def registered_variant(wire_cc: str | None, config=None):
    """The kernel MLTCP variant registered for an arm with ``config`` (a maps.Config; None: the
    shipped default), and unregistered after if this arm registered it. A variant registered
    already (``mltcp kernel load``) keeps that load's configuration: a ``config`` other than the
    default is refused then, as it could not apply."""
    name = (wire_cc or "").removeprefix("bpf_")
    if not name.startswith("mltcp_"):
        yield
        return
    from mltcp.traffic.kernel import loader, maps

    config = config or maps.Config()
    mine = name not in loader.registered()
    if not mine and config != maps.Config():
        raise EmulationError(
            f"{name} is registered already (mltcp kernel load) with that load's configuration, so the "
            "scenario's [mltcp] table cannot apply: unload it first (mltcp kernel unload)"
        )
    if mine:
        loader.load([name], config=config)
    try:
        yield
    finally:
        if mine:
            loader.unload([name])


def base_cc_name(cc: str, mltcp: bool) -> str:
    """The kernel name an arm runs: the base algorithm, or its MLTCP variant (mltcp_reno, ...)."""
    if not mltcp:
        return kernel_cc_name(cc, False)
    if cc not in ("reno", "cubic"):
        raise EmulationError(f"kernel TCP has MLTCP variants of reno and cubic only, not of {cc}")
    return f"mltcp_{cc}"


@dataclass
class DdpArm:
    arm: ArmResult
    ranks: dict[str, dict]  # job -> per rank: loss, cpu_s, gpu_s, buckets, retrans (so far) per step
    epoch: float = 0.0  # Unix time the records count from
    rank0_ip: dict[str, str] | None = None  # job -> the address its rank 0 sends from
    capture: dict | None = None  # with a pcap: its file, interface and the packets tcpdump lost
    links: dict | None = None  # fabric link direction -> bytes and drops while iterating


def run_ddp_arm(
    sc,
    cc: str,
    mltcp: bool,
    boundary: str | None = None,
    on_record: Callable[[IterationRecord], None] | None = None,
    timeout_s: float | None = None,
    prefix: str | None = None,
    fail_after_records: int | None = None,
    pcap: Path | None = None,
    topology: str = "dumbbell",
) -> DdpArm:
    """Build the dumbbell, run every job's ranks once on kernel ``cc`` (or its MLTCP variant), tear down.
    ``boundary`` overrides every job's (``idle`` or ``mark``); ``fail_after_records`` raises after
    that many records (tests check the cleanup with it); ``pcap``: capture the bottleneck there
    (headers, TCP, from before the ranks start until they exit)."""
    if boundary is not None and boundary not in BOUNDARIES:
        raise EmulationError(f"boundary must be one of {', '.join(BOUNDARIES)}, got {boundary!r}")
    check_ddp_scenario(sc)
    if pcap and topology != "dumbbell":
        raise EmulationError("a torch-ddp run captures the dumbbell's bottleneck only (--pcap without --topology)")
    hosts = rank_hosts(sc.jobs, topology)
    n_side = max(host_index(h, topology) for hs in hosts.values() for h in hs)
    bottleneck = link_params_of(sc.links[sc.jobs[0].path[0]], sc.mss)
    prefix = prefix or netns.run_prefix()
    name = base_cc_name(cc, mltcp)
    config = kernel_config(sc) if mltcp else None
    wall0 = time.monotonic()
    with registered_variant(name, config), netns.Cleanup(prefix) as cl:
        wire_cc = kernel_cc_name(cc, mltcp)
        topo = make_topology(topology, prefix, bottleneck, n_jobs=n_side)
        net = build_network(topo, "htb", cl)
        if topology == "leafspine":
            same_spines_every_run(net)
        # Not the namespaces' default: the ranks set it on their sockets. (Setting an algorithm that
        # is not in tcp_allowed_congestion_control as a namespace's default fails with EPERM, and on
        # this kernel the failed call keeps a reference: the variant's struct_ops outlives unload.)
        ips = {h: topo.ip_of(prefix + h) for hs in hosts.values() for h in hs}
        q: queue.Queue = queue.Queue()
        peers: dict[str, Peer] = {}
        for k, job in enumerate(sc.jobs):
            d = job.extra["ddp"]
            mark = mltcp and (boundary or d.boundary) == "mark"
            pace = pacing_rate_for_link(bottleneck.rate_mbps) if d.pacing and bottleneck.rate_mbps else 0.0
            for r, h in enumerate(hosts[job.name]):
                node = net[prefix + h]
                argv = worker_argv(
                    job,
                    r,
                    hosts[job.name],
                    ips,
                    node.defaultIntf().name,
                    MASTER_PORT + k,
                    sc.seed + k,
                    mark,
                    prefix,
                    wire_cc,
                    pace,
                    mltcp and d.nic_cap,
                )
                peers[f"{job.name}:{r}"] = Peer(node, argv, f"rank:{job.name}:{r}", q, cl)
        fabric = bottleneck_intfs(net, topo)
        with capture(fabric[0].name, pcap, cl) if pcap else contextlib.nullcontext() as cap:
            epoch = start_together(peers, q, timeout_s=120 + 10 * len(peers), lead_s=0.5)
            setup = link_counters(fabric, prefix)  # DDP's first broadcast
            records, retrans, stats = collect(peers, q, sc, on_record, timeout_s, fail_after_records)
            links = {k: {f: v[f] - setup[k][f] for f in v} for k, v in link_counters(fabric, prefix).items()}
            drops = sum(v["drops"] for v in links.values())
    return DdpArm(
        ArmResult(
            wire_cc,
            sorted(records, key=lambda r: (r.job, r.iteration)),
            drops,
            None,
            retrans,
            "htb",
            time.monotonic() - wall0,
        ),
        stats,
        epoch,
        {job: ips[hs[0]] for job, hs in hosts.items()},
        cap,
        links,
    )


def same_spines_every_run(net) -> None:
    """The leaves hash flows onto spines by addresses only (fib_multipath_hash_policy 0): gloo's
    ports are ephemeral, so with the layer-4 hash the two arms of a comparison would place the
    jobs on different spines; by addresses, every run places each job's connection alike."""
    for sw in net.switches:
        sw.cmd("sysctl -qw net.ipv4.fib_multipath_hash_policy=0")


def link_counters(intfs, prefix: str) -> dict[str, dict[str, int]]:
    """Per fabric link direction (the egress interface, named without the run's prefix): bytes
    sent and packets dropped so far."""
    return {i.name.removeprefix(prefix): qdisc_counters(i) for i in intfs}


def collect(
    peers: dict[str, Peer],
    q: queue.Queue,
    sc,
    on_record,
    timeout_s: float | None,
    fail_after_records: int | None = None,
):
    """Read the ranks' lines until every rank has exited: (rank-0 records, retransmissions per job,
    per-job rank statistics: losses and CPU/GPU seconds per step)."""
    records: list[IterationRecord] = []
    retrans: dict[str, int] = {j.name: 0 for j in sc.jobs}
    stats: dict[str, dict] = {
        j.name: {"loss": {}, "cpu_s": {}, "gpu_s": {}, "buckets": {}, "retrans": {}} for j in sc.jobs
    }
    limit = timeout_s or 600 + 5 * sum(j.iterations * (j.compute_s + 1) for j in sc.jobs)
    done: set[str] = set()
    for tag, msg in messages(
        q, limit, lambda: f"DDP emulation did not finish within {limit:.0f} s ({len(records)} records collected)"
    ):
        _, job, rank = tag.split(":")
        if msg["type"] == "iter":
            st = stats[job]
            for key in ("loss", "cpu_s", "gpu_s", "buckets", "retrans"):
                st[key].setdefault(rank, []).append(msg[key])
            if rank == "0":
                if msg.get("last_collective") is not None:
                    st.setdefault("last_collective", {})[int(msg["iteration"])] = float(msg["last_collective"])
                rec = IterationRecord.from_dict(msg)
                records.append(rec)
                if on_record:
                    on_record(rec)
                if fail_after_records is not None and len(records) >= fail_after_records:
                    raise EmulationError(f"injected failure after {len(records)} records")
        elif msg["type"] == "start":
            stats[job].setdefault("retrans_at_start", {})[rank] = int(msg.get("retrans", 0))
            stats[job].setdefault("tcp_at_start", {})[rank] = msg.get("tcp") or {}
        elif msg["type"] == "summary":  # retransmissions while iterating (not in DDP's setup)
            retrans[job] += int(msg["retrans"]) - stats[job].get("retrans_at_start", {}).get(rank, 0)
            before = stats[job].get("tcp_at_start", {}).get(rank, {})
            stats[job].setdefault("tcp", {})[rank] = netstat.between(before, msg.get("tcp") or {})
            stats[job].setdefault("kernel_sockets", {})[rank] = msg.get("kernel_sockets")
        elif msg["type"] == "eof":
            p = peers[f"{job}:{rank}"].proc
            p.wait(timeout=30)
            if p.returncode != 0:
                raise EmulationError(f"rank {rank} of {job} exited {p.returncode}: {peers[f'{job}:{rank}'].why()}")
            done.add(tag)
            if len(done) == len(peers):
                break
    return records, retrans, stats


def losses(run: DdpArm) -> dict[str, dict[str, list[float]]]:
    """job -> rank -> the loss at every step."""
    return {job: st["loss"] for job, st in run.ranks.items()}


def _completed(socks: dict | None) -> dict | None:
    """rank -> the kernel tracker's closed iterations per connection (-1 where it has no state)."""
    if socks is None:
        return None
    return {rank: None if ss is None else [s["completed"] if s else -1 for s in ss] for rank, ss in socks.items()}


def run_ddp_experiment(
    sc,
    cc: str = "reno",
    compare_mltcp: bool = False,
    boundary: str | None = None,
    on_record: Callable[[str, IterationRecord], None] | None = None,
    prefix: str | None = None,
    records_dir=None,
    pcap: bool = False,
    topology: str = "dumbbell",
    with_sim: bool = True,
) -> dict:
    """Both arms of a torch-ddp scenario: the usual report (mltcp.compare.report) plus each job's
    per-step losses per arm and whether they are identical, and a ``ddp`` section. With
    ``records_dir`` each arm's rank-0 iteration records go to ``<dir>/<arm>.csv``; with ``pcap``
    too, the bottleneck's capture to ``<dir>/<arm>.pcap``, and a ``pcap`` section says how
    pcap-records' reading of it agrees with the ranks' records. With ``with_sim`` the simulator
    runs the same scenario (a job's compute is its ``sim_compute_ms`` where measured, else its GPU
    time) and ``sim_vs_emu`` gives each job's emulated / simulated average iteration per arm."""
    from .report import arm_summary, sim_vs_emu_arms

    if cc not in ("reno", "cubic", "dctcp"):
        raise EmulationError(f"torch-ddp jobs run on kernel TCP: --cc reno, cubic or dctcp, not {cc}")
    if pcap and records_dir is None:
        raise EmulationError("a capture needs a folder to go in (--records DIR)")
    check_ddp_scenario(sc)  # before the first arm, not after it
    if records_dir is not None:
        Path(records_dir).mkdir(parents=True, exist_ok=True)
    cb = (lambda arm: lambda r: on_record(arm, r)) if on_record else (lambda arm: None)

    def arm_run(arm: str, mltcp: bool) -> DdpArm:
        cap = Path(records_dir) / f"{arm}.pcap" if pcap else None
        return run_ddp_arm(sc, cc, mltcp, boundary, cb(arm), prefix=prefix, pcap=cap, topology=topology)

    base = arm_run("baseline", False)
    ml = arm_run("mltcp", True) if compare_mltcp else None
    if records_dir is not None:
        for arm, run in (("baseline", base), ("mltcp", ml)):
            if run is not None:
                write_csv(run.arm.records, Path(records_dir) / f"{arm}.csv")
    out = compare.report(sc, arm_summary(base.arm, sc), arm_summary(ml.arm, sc) if ml else None)
    out["losses"] = {"baseline": losses(base), **({"mltcp": losses(ml)} if ml else {})}
    out["losses_identical"] = (losses(base) == losses(ml)) if ml else None
    out["kernel_sockets"] = {
        arm: {job: st.get("kernel_sockets") for job, st in a.ranks.items()}
        for arm, a in (("baseline", base), ("mltcp", ml))
        if a is not None
    }
    out["kernel_iterations"] = {  # the iterations the tracker closed, per connection (-1: no state)
        arm: {job: _completed(socks) for job, socks in jobs.items()} for arm, jobs in out["kernel_sockets"].items()
    }
    out["tcp_counters"] = {
        arm: {job: netstat.summed(list(st.get("tcp", {}).values())) for job, st in a.ranks.items()}
        for arm, a in (("baseline", base), ("mltcp", ml))
        if a is not None
    }
    out["retransmits_by_step"] = {
        arm: {job: st["retrans"] for job, st in a.ranks.items()}
        for arm, a in (("baseline", base), ("mltcp", ml))
        if a is not None
    }
    out["ddp"] = {
        "jobs": {
            j.name: {
                "model": j.extra["ddp"].model,
                "boundary": boundary or j.extra["ddp"].boundary,
                "pacing": j.extra["ddp"].pacing,
                "nic_cap": j.extra["ddp"].nic_cap,
                "ranks": j.extra["ddp"].ranks,
                "gpu_ms": j.extra["ddp"].gpu_ms,
                "bucket_mb": j.extra["ddp"].bucket_mb,
                "gradient_bytes": j.extra["ddp"].gradient_bytes(),
            }
            for j in sc.jobs
        },
        "cpu_gpu_s_per_step": {
            arm: {job: _cpu_gpu(st) for job, st in a.ranks.items()}
            for arm, a in (("baseline", base), ("mltcp", ml))
            if a is not None
        },
    }
    out["links"] = {arm: a.links for arm, a in (("baseline", base), ("mltcp", ml)) if a is not None}
    out["emulation"] = {
        "topology": topology,
        "transport": "kernel",
        "link_mode": "htb",
        "bottleneck": link_params_of(sc.links[sc.jobs[0].path[0]], sc.mss).__dict__,
        "jobs": len(sc.jobs),
        "iterations": max(j.iterations for j in sc.jobs),
    }
    out["sim_vs_emu"] = None
    if with_sim:
        out["sim_vs_emu"] = sim_vs_emu_arms(sc, cc, base.arm.records, ml.arm.records if ml is not None else None)
    if pcap:
        out["pcap"] = {arm: wire_report(sc, a) for arm, a in (("baseline", base), ("mltcp", ml)) if a is not None}
    return out


def wire_idle_gap(sc) -> float:
    """The idle gap that cuts a DDP job's traffic into iterations on the wire: half the shortest
    forward pass (a third of the GPU time), as a rank sends nothing from its last collective until
    backward reaches its first bucket; at least 5 ms."""
    return max(0.005, min(j.extra["ddp"].gpu_ms for j in sc.jobs) / 1e3 / 3 / 2)


def wire_report(sc, run: DdpArm) -> dict:
    """How `mltcp traffic pcap-records` reads an arm's capture against the ranks' records: per job,
    the bursts on rank 0's connections matched to its records (traffic.wire_check), with the command that reads it."""
    from mltcp.traffic.pcap import read_records
    from mltcp.traffic.wire_check import agreement, of_host

    gap = wire_idle_gap(sc)
    wire = read_records(run.capture["file"], epoch=run.epoch, idle_gap=gap)
    per_job = {}
    for k, job in enumerate(sc.jobs):
        recs = [r for r in run.arm.records if r.job == job.name]
        bursts = of_host(wire, run.rank0_ip[job.name], skip_ports=[MASTER_PORT + k])
        last = run.ranks[job.name].get("last_collective", {})
        per_job[job.name] = agreement(recs, last, bursts, run.rank0_ip[job.name]).as_dict()
    return {
        **run.capture,
        "epoch": run.epoch,
        "idle_gap_s": gap,
        "command": f"mltcp traffic pcap-records {run.capture['file']} --epoch {run.epoch:.6f} --idle-gap {gap:.6g}",
        "agreement": per_job,
    }


def _cpu_gpu(st: dict) -> dict:
    cpu = [x for v in st["cpu_s"].values() for x in v[1:]]
    gpu = [x for v in st["gpu_s"].values() for x in v[1:]]
    return {
        "cpu_s": round(sum(cpu) / len(cpu), 4) if cpu else None,
        "gpu_s": round(sum(gpu) / len(gpu), 4) if gpu else None,
    }
