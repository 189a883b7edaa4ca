"""Two training jobs through one kernel bottleneck: Linux reno vs the BPF MLTCP variant.

Topology: the emulation's dumbbell in Mininet (:class:`.net.KernelNet`): two senders -> s1 (htb
rate + bfifo drop-tail buffer on its port towards the receivers) -> [delay line] -> s2 -> two
receivers. No netem on this kernel: the delay, when asked for, is the delay line's; without it
the round trip is the veth/stack time plus the queue. Each job loops compute (sleep) then
send its iteration's bytes over its own TCP connection (mltcp.traffic.driver.run_job with
:class:`~.transport.KernelTransport`); the records give per-iteration times, avg/p99, the
iteration from which the communication phases stop overlapping, and the retransmissions.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field

from mltcp import metrics
from mltcp.records import IterationRecord
from mltcp.traffic.driver import JobSpec, run_job

from . import loader
from .maps import Config, VariantMaps
from .net import KernelNet
from .transport import WIRE_PER_PAYLOAD, KernelTransport, Receiver, pacing_rate_for_link, tcp_info

BASELINES = {"mltcp_reno": "reno", "mltcp_cubic": "cubic"}


@dataclass
class Case:
    rate_mbit: float = 100.0
    payload_rate: bool = True  # rate_mbit counts payload (as the simulator): htb runs at rate x 1514/1448
    buffer_bytes: int = 150_000
    nbytes: int = 1_000_000
    compute_s: float | None = None  # default: the iteration's transfer time alone
    iterations: int = 60
    warmup: int = 10
    offset_s: float = 0.005  # job B starts this much after job A
    delay_ms: float = 0.0  # one-way propagation delay (delayline.c between router and receiver)
    min_rto_ms: float = 0.0  # > 0: senders' route rto_min (0: Linux's 200 ms)
    idle_restart: bool = True  # senders' tcp_slow_start_after_idle: window restart after an idle RTO
    ecn_k_pkts: int = 0  # > 0: step ECN at the bottleneck, CE at >= K frames queued (tcp_ecn=1)
    variant: str = "mltcp_reno"
    mark: bool = False  # MLTCP runs: explicit iteration marks instead of idle detection
    pacing: bool = True  # senders paced at the bottleneck's rate (a NIC of that rate)
    config: Config = field(default_factory=Config)

    def __post_init__(self):
        checks = {
            "rate_mbit": self.rate_mbit > 0,
            "buffer_bytes": self.buffer_bytes >= 3000,
            "nbytes": self.nbytes > 0,
            "iterations": self.iterations >= 2,
            "warmup": 0 <= self.warmup < self.iterations,
            "offset_s": self.offset_s >= 0,
            "delay_ms": 0 <= self.delay_ms <= 1000,
            "min_rto_ms": 0 <= self.min_rto_ms <= 60_000,
            "ecn_k_pkts": 0 <= self.ecn_k_pkts and self.ecn_k_pkts * 1514 < self.buffer_bytes,
            "compute_s": self.compute_s is None or self.compute_s >= 0,
            "variant": self.variant in BASELINES,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"bad experiment parameter(s): {', '.join(f'{k}={getattr(self, k)!r}' for k in bad)}")

    @property
    def link_mbit(self) -> float:
        """The htb rate (frames): the payload rate times the frame overhead when ``payload_rate``."""
        return self.rate_mbit * WIRE_PER_PAYLOAD if self.payload_rate else self.rate_mbit

    @property
    def payload_mbit(self) -> float:
        return self.rate_mbit if self.payload_rate else self.rate_mbit / WIRE_PER_PAYLOAD

    @property
    def compute(self) -> float:
        return self.nbytes * 8 / (self.payload_mbit * 1e6) if self.compute_s is None else self.compute_s


def run_once(d: KernelNet, case: Case, cc: str, progress=None) -> dict:
    """Both jobs with congestion control ``cc`` (job i from sender i to receiver i); returns
    records and per-job figures."""
    receivers: list[Receiver] = []
    transports: list[KernelTransport] = []
    records: dict[str, list[IterationRecord]] = {}
    errors: list[str] = []
    try:
        for i in range(2):
            b = d.receivers[i]
            receivers.append(rx := Receiver("0.0.0.0", 0, ns=d.ns(b)))
            transports.append(
                KernelTransport(
                    d.ip(b),
                    rx.port,
                    cc=cc,
                    ns=d.ns(d.senders[i]),
                    mark=case.mark and cc.startswith("mltcp_"),
                    pacing_mbit=pacing_rate_for_link(case.link_mbit) if case.pacing else None,
                )
            )
        jobs = [
            JobSpec.of(
                job_id=i,
                compute_s=case.compute,
                bytes_per_iter=case.nbytes,
                start_offset_s=case.offset_s * i,
                name="AB"[i],
            )
            for i in range(2)
        ]
        epoch = time.monotonic()

        def worker(job: JobSpec, tr: KernelTransport) -> None:
            try:
                records[job.label] = run_job(job, tr, case.iterations, epoch=epoch, on_record=progress)
            except Exception as e:  # reported below, never swallowed
                errors.append(f"job {job.label}: {e}")

        threads = [threading.Thread(target=worker, args=(j, t)) for j, t in zip(jobs, transports)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        retrans = {j.label: tcp_info(t.sock)["total_retrans"] for j, t in zip(jobs, transports)}
        detected = {}
        if cc in BASELINES:  # what the BPF tracker made of the run
            with VariantMaps(cc) as vm:
                for j, t in zip(jobs, transports):
                    st = vm.socket_state(t.sock)
                    detected[j.label] = (
                        {
                            "iterations_completed": st.completed,
                            "learned_bytes": st.learned,
                            "last_gap_ms": st.last_gap_ns / 1e6,
                        }
                        if st
                        else None
                    )
    finally:
        for t in transports:
            t.close()
        for rx in receivers:
            rx.close()
    if errors:
        raise RuntimeError("; ".join(errors))
    allrec = [r for j in "AB" for r in records[j]]
    per_job = {}
    for j in "AB":
        s = metrics.summary(records[j], case.warmup)
        per_job[j] = {**s, "retransmits": retrans[j]}
        if detected.get(j):
            per_job[j]["bpf_tracker"] = detected[j]
    both = metrics.summary(allrec, case.warmup)
    ov = metrics.overlap_fractions(allrec)
    steady = [f for (_, i), f in ov.items() if i >= case.warmup]
    return {
        "cc": cc,
        "jobs": per_job,
        "avg_iter_s": both["avg_iter_s"],
        "p99_iter_s": both["p99_iter_s"],
        "interleaved_at": metrics.converged_at(allrec),
        # as `mltcp emulate` reports it: below the loose overlap threshold from here on, one hiccup allowed
        "interleaved_at_loose": metrics.interleaved_at(allrec),
        "steady_overlap": sum(steady) / len(steady) if steady else float("nan"),
        "retransmits": sum(retrans.values()),
        "records": [asdict(r) for r in allrec],
    }


def simulate_case(case: Case, ccs: list[str]) -> dict | None:
    """The same case in `mltcp simulate` (mltcp.sim), if available: avg/p99 and interleave."""
    try:
        from mltcp.scenario import from_dict
        from mltcp.sim.engine import simulate
    except ImportError:
        return None
    d = {
        "name": "kernel-experiment",
        "iterations": case.iterations,
        "warmup_iterations": case.warmup,
        "network": {
            "mss": 1448,
            "min_rto_ms": case.min_rto_ms or 200,
            "step_us": 100,
            "slow_start_after_idle": case.idle_restart,
        },
        "links": [
            {
                "name": "bottleneck",
                "rate_mbps": case.payload_mbit,
                "delay_us": case.delay_ms * 1e3 or 50,
                "buffer_kb": case.buffer_bytes / 1e3,
            }
        ],
        "jobs": [
            {
                "name": n,
                "compute_ms": case.compute * 1e3,
                "bytes": case.nbytes,
                "start_offset_ms": case.offset_s * 1e3 * k,
                "path": ["bottleneck"],
            }
            for k, n in enumerate("AB")
        ],
        "mltcp": {
            "slope": case.config.slope,
            "intercept": case.config.intercept,
            "idle_fraction": case.config.idle_fraction,
            "min_idle_ms": case.config.min_idle * 1e3,
            "scale_decrease": case.config.scale_decrease,
            **({"restart_window": case.config.restart_window} if case.config.restart_window else {}),
        },
    }
    sc = from_dict(d, "<kernel experiment>")
    out = {}
    for cc in ccs:
        res = simulate(sc, cc.replace("_", "-"))
        s = metrics.summary(res.records, case.warmup)
        out[cc] = {
            "avg_iter_s": s["avg_iter_s"],
            "p99_iter_s": s["p99_iter_s"],
            "interleaved_at": metrics.converged_at(res.records),
            "drops": res.drops,
            "wall_s": res.wall_time,
        }
    return out


def run(case: Case, with_sim: bool = True, progress=None, prefix: str | None = None) -> dict:
    """Baseline then MLTCP on the same network (node names start with ``prefix``, default the
    run prefix of mltcp.emulation.netns). Loads the variant if it is not registered
    (and unloads it again afterwards)."""
    base = BASELINES[case.variant]
    we_loaded = False
    if case.variant not in loader.registered():
        loader.load([case.variant], config=case.config)
        we_loaded = True
    else:  # already registered: this case's MLTCP settings still apply (new sockets read them at init)
        with VariantMaps(case.variant) as vm:
            vm.write_config(case.config)
    t0 = time.monotonic()
    d = KernelNet(
        n=2,
        rate_mbit=case.link_mbit,
        buffer_bytes=case.buffer_bytes,
        delay_us=round(case.delay_ms * 1e3),
        min_rto_ms=round(case.min_rto_ms),
        idle_restart=case.idle_restart,
        ecn_k_pkts=case.ecn_k_pkts,
        **({"prefix": prefix} if prefix else {}),
    )
    try:
        d.build()
        results = {}
        for cc in (base, case.variant):
            before = d.ecn_stats()
            results[cc] = run_once(d, case, cc, progress)
            if before is not None:
                after = d.ecn_stats()
                results[cc]["ecn_marks"] = after["marked"] - before["marked"]
    finally:
        d.destroy()
        if we_loaded:
            loader.unload([case.variant])
    doc = {
        "case": {
            **{k: v for k, v in asdict(case).items() if k != "config"},
            "compute_s": case.compute,
            "config": asdict(case.config),
        },
        "ideal_iter_s": case.compute + case.nbytes * 8 / (case.payload_mbit * 1e6),
        "link_mbit": case.link_mbit,
        "results": results,
        "wall_s": time.monotonic() - t0,
        "delay_line": d.wire.stats if d.wire else None,
    }
    base_r, ml = results[base], results[case.variant]
    doc["speedup_avg"] = metrics.speedup(base_r["avg_iter_s"], ml["avg_iter_s"])
    doc["speedup_p99"] = metrics.speedup(base_r["p99_iter_s"], ml["p99_iter_s"])
    if with_sim:
        doc["simulation"] = simulate_case(case, [base, case.variant])
    return doc
