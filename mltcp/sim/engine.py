"""The fast simulator: a time-slotted, packet-quantised model of flows over drop-tail links.

Each slot of ``step_s`` seconds:
  1. jobs whose compute phase ended start sending their iteration's bytes: every flow of the job
     its share (``Job.flow_bytes()``), after the CC core's TX_START event (restart after idle);
  2. feedback sent one round trip earlier arrives: acked, lost and ECN-marked bytes and the RTT
     sample are handed to the congestion-control core (:mod:`mltcp.cc`, the same kernels the real
     senders run): ``pkts_acked`` always, ``cong_avoid`` only when the flow is cwnd-limited and not
     in recovery; one window reduction per round trip; the fast retransmission goes out at once,
     the other retransmissions before new data as the window allows; a loss that too few later
     segments reveal (``loss_recovery = "ns3"``: fewer than three duplicate ACKs, and every lost
     retransmission; ``"linux"``: none acknowledged after it) waits, in the pipe, for the RTO
     (exponential backoff, then cwnd 1 MSS) or Linux's tail-loss probe;
  3. each flow sends whole segments allowed by its window (or DCQCN rate) and its NIC rate;
  4. every link queues the bytes offered to it, serves ``rate x step``, drops what exceeds its
     buffer (drop-tail) and ECN-marks arrivals beyond a step threshold K or with RED probability;
     a flow's expected share of the dropped bytes (in proportion to what it offered) is rounded
     at random to whole packets (``loss_model = "packet"``, the default; ``"fluid"`` keeps the
     fractions), so a small overflow hits one flow rather than all of them; an ECN echo or CNP
     fires with the Poisson chance of at least one marked packet. The round trip of each flow is
     its propagation delay plus the queueing delay on its path, which sets when feedback returns.
A job's iteration ends when every one of its flows has delivered its share; records are per job.

Speed: the loop is compiled with numba (``cache=True``: compiled once per machine, then loaded),
and slots in which nothing can happen are skipped exactly: the next slot processed is the first
one with feedback due, a job starting, a DCQCN timer firing, a pause ending, or a flow whose NIC
(and rate) budget reaches a segment while its window has room; queues drain in closed form over
the skipped slots and budgets accrue in closed form. Deterministic for a given scenario seed.

Simplifications (docs/simulator.md): a flow's bytes are offered to every link of its path in the
same slot (no per-hop pipelining); which flow a slot's drops and marks hit is drawn in proportion
to what each flow offered (seeded), not from packet arrival order.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..cc import ALGORITHMS, BASE_OF, Linear, MLTCPHook, make_cc
from ..cc.base import CWND, SSTHRESH
from ..cc import mltcp as hook
from ..records import IterationRecord
from ..scenario import Scenario, ScenarioError, cc_kwargs
from .. import tracker as trk
from .loop import _heap_push, _run
from .queues import _priority_queues, _push_feedback, _serve_bands  # noqa: F401  (tests reach them here)
from .recovery import _arm_timer, _split_loss, _until_rto  # noqa: F401

# The API, and the loop's constants and kernels that tests and bench/studies reach through this module.
__all__ = [
    "SimResult", "build_cc", "simulate",
    "L_K", "LR_HOLE", "LR_LEN", "LR_PROBE", "LR_PROBED", "LR_RTO_AT", "LR_RTX", "PQ_ARR", "PQ_DROP", "PQ_MARK",
    "PQ_Q", "Q", "TLP_EXTRA", "_priority_queues", "_push_feedback", "_serve_bands", "_arm_timer", "_split_loss",
]  # fmt: skip
from .state import (
    BandFifoOverflow,
    BUF,
    Cc,
    CDT,
    Config,
    F_T,
    F_TOT_ACKED,
    F_TOT_DROP,
    F_TOT_MARK,
    F_TOT_PAUSE,
    F_TOT_REORDER,
    F_TOT_RTO,
    F_TOT_SENT,
    F_TOT_TLP,
    Feedback,
    Flows,
    FS_LEN,
    I_HEAP,
    I_K,
    I_NREC,
    I_STATUS,
    I_STEPS,
    INV_RATE,
    Jobs,
    KS_LEN,
    L_BUF,
    L_K,
    L_MODE,
    L_RATE,
    L_XOFF,
    Links,
    LR_HOLE,
    LR_LEN,
    LR_PROBE,
    LR_PROBED,
    LR_RTO_AT,
    LR_RTX,
    OVER_HORIZON,
    PAUSED,
    PC_SEEN,
    PQ_ARR,
    PQ_DROP,
    PQ_MARK,
    PQ_Q,
    Q,
    Records,
    TLP_EXTRA,
    Topology,
    TRACE_FULL,
)


@dataclass
class SimResult:
    scenario: str
    cc: str
    records: list[IterationRecord]
    drops: float  # packets
    ecn_marks: float  # packets
    sim_time: float
    wall_time: float
    steps: int  # slots processed (the others were skipped: nothing happened)
    trace_t: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    trace_rate: np.ndarray = field(repr=False, default_factory=lambda: np.zeros((0, 0)))  # bits/s per job
    job_names: list[str] = field(default_factory=list)
    bytes_sent: float = 0.0  # including retransmissions
    bytes_acked: float = 0.0
    bytes_in_flight: float = 0.0  # at the end (0 when every iteration completed)
    slots: int = 0  # slots of simulated time (processed or skipped)
    timeouts: int = 0  # retransmission timeouts (window-based flows)
    probes: int = 0  # tail-loss probes (loss_recovery = "linux")
    loop_time: float = 0.0  # wall seconds in the compiled loop (the rest of wall_time: setup, records)
    cwnd_trace: np.ndarray | None = field(repr=False, default=None)  # (samples, 1 + 3 F): t, cwnd, ssthresh, in flight
    pfc_pause_s: float = 0.0  # flow-seconds that lossless (pfc) links held senders paused
    reordered: float = 0.0  # packets a strict-priority link delivered after later ones of their flow


def build_cc(sc: Scenario, cc_name: str):
    base = BASE_OF.get(cc_name, cc_name)
    kw = cc_kwargs(sc, base)
    if "line_rate" in ALGORITHMS[base].params:  # a rate-based algorithm starts at the NIC's rate
        kw.setdefault("line_rate", max(sc.links[j.path[0]].rate_Bps for j in sc.jobs))
    if cc_name != base:  # [mltcp]: a key of another base's variant (dcqcn_f_*) does not apply
        known = ALGORITHMS[cc_name].params
        kw.update({k: v for k, v in sc.mltcp_params.items() if k in known})
    return make_cc(cc_name, **kw)


def _hook_vector(cc) -> tuple[bool, np.ndarray]:
    """MLTCP hook parameters for the compiled loop (:meth:`MLTCPHook.hook_vector`)."""
    if not isinstance(cc, MLTCPHook):
        return False, np.zeros(hook.HOOK_LEN)
    if not isinstance(cc.F, (Linear, hook.Shaped)):
        raise ValueError(
            "the simulator runs the hook's own F (shape linear, capped or convex); a custom "
            "aggressiveness function works with the real senders only"
        )
    return True, cc.hook_vector()


def _pfc_xoff(sc: Scenario, names: list[str], paths) -> np.ndarray:
    """Each link's PFC XOFF threshold (bytes; 0 for a lossy link): its buffer less the headroom for
    one slot of every sender that crosses it (each may send its NIC's slot budget plus two segments)."""
    xoff = np.zeros(len(names))
    for i, n in enumerate(names):
        lk = sc.links[n]
        if not lk.pfc:
            continue
        room = sum(sc.links[pth[0]].rate_Bps * sc.step_s + 2 * sc.mss for _, pth in paths if n in pth) + sc.mss
        if room >= lk.buffer_bytes:
            raise ScenarioError(
                sc.source,
                f"links.{n}.pfc",
                f"the buffer ({lk.buffer_bytes:g} B) does not exceed "
                f"PFC's headroom for its senders ({room:g} B): give it a deeper buffer",
            )
        xoff[i] = lk.buffer_bytes - room
    return xoff


def _policy_arrays(sc: Scenario, names: list[str]):
    """The scenario's switch policy for the compiled loop: code, parameters, which links, band queues."""
    pol = sc.switch
    pp = np.array(
        [
            float(pol.bands),
            16.0 - math.log2(pol.bands),
            pol.ecn_scale_lo,
            pol.ecn_scale_hi,
            float(pol.priority_ecn_code),
            1.0 if pol.priority_buffer == "shared" else 0.0,
            1.0 if pol.priority_pin else 0.0,
            pol.contest_window_us * 1e-6 if pol.code == 1 else 0.0,
        ]
    )
    on = set(pol.links) if pol.links else set(names)
    on_pol = np.array([n in on for n in names], dtype=np.bool_)
    pq = np.zeros((len(names), pol.bands if pol.code == 2 else 1, 4))
    if pol.code == 1:
        pq[:, 0, PC_SEEN] = -1e300  # no job change seen yet: not contested
    return int(pol.code), pp, on_pol, pq


FIFO_ROOMS = (1, 8, 64)  # band FIFO sizes simulate() tries, in multiples of _band_fifos' room


def _band_fifos(sc: Scenario, names: list[str], pol: int, on_pol: np.ndarray, flows: int, room: int = 1):
    """The band queues' FIFOs of sends (see PE_*): room for a full buffer of one-segment sends
    plus a slot's sends of every flow, per band of every priority link, times ``room``. A send is a
    slot's worth of a flow, less than a segment on a slow link, so a full buffer can hold more
    sends than segments: simulate() runs again with more room when a FIFO overflows."""
    if pol != 2:
        return np.zeros((1, 1, 1), dtype=np.int64), np.zeros((1, 1, 1, 7)), np.zeros((1, 1, 2), dtype=np.int64)
    cap = (int(max(sc.links[n].buffer_bytes for n, on in zip(names, on_pol) if on) / sc.mss) + 2 * flows + 8) * room
    L, B = len(names), sc.switch.bands
    return np.zeros((L, B, cap), dtype=np.int64), np.zeros((L, B, cap, 7)), np.zeros((L, B, 2), dtype=np.int64)


def _link_arrays(sc: Scenario, names: list[str], paths) -> tuple[np.ndarray, np.ndarray]:
    """Each link's parameters (lp: L_* columns) and state (ls: Q.. columns)."""
    links = [sc.links[n] for n in names]
    lp = np.zeros((len(links), 8))
    lp[:, :7] = [
        (
            lk.rate_Bps,
            lk.buffer_bytes,
            {"none": 0, "step": 1, "red": 2}[lk.ecn],
            lk.ecn_k_bytes,
            lk.red_kmin_bytes,
            lk.red_kmax_bytes,
            lk.red_pmax,
        )
        for lk in links
    ]
    lp[:, L_XOFF] = _pfc_xoff(sc, names, paths)
    ls = np.zeros((len(links), 8))
    ls[:, INV_RATE] = 1.0 / lp[:, L_RATE]
    ls[:, CDT] = lp[:, L_RATE] * float(sc.step_s)
    ls[:, BUF] = lp[:, L_BUF]
    return lp, ls


def _topology(sc: Scenario, paths, names: list[str]) -> Topology:
    """Flows (every job's, in job order), their paths and NIC rates, and the jobs' compute times."""
    jobs, J, F = sc.jobs, len(sc.jobs), len(paths)
    lidx = {n: i for i, n in enumerate(names)}
    flow_job = np.array([j for j, _ in paths], dtype=np.int64)
    job_ptr = np.zeros(J + 1, dtype=np.int64)
    job_ptr[1:] = np.cumsum(np.bincount(flow_job, minlength=J))
    path_ptr = np.zeros(F + 1, dtype=np.int64)
    path_ptr[1:] = np.cumsum([len(pth) for _, pth in paths])
    path_link = np.array([lidx[h] for _, pth in paths for h in pth], dtype=np.int64)
    base_rtt = np.array([2.0 * sum(sc.links[h].delay_s for h in pth) + sc.host_delay_s for _, pth in paths])
    access = np.array([sc.links[pth[0]].rate_Bps for _, pth in paths])
    flow_bytes = np.array([jobs[j].flow_bytes() for j, _ in paths], dtype=float)
    rng = np.random.default_rng(sc.seed)
    iters = np.array([j.iterations for j in jobs], dtype=np.int64)
    comp = np.zeros((J, int(iters.max())))
    for i, j in enumerate(jobs):
        comp[i, : j.iterations] = j.compute_times(rng, j.iterations)
    return Topology(flow_job, path_ptr, path_link, base_rtt, access, flow_bytes, job_ptr, iters, comp)


def _ring_slots(sc: Scenario, paths, names: list[str], base_rtt: np.ndarray) -> int:
    """Slots of the feedback ring: the longest round trip with every queue on the path full (under
    strict priority a packet can wait behind every band's queue, each as deep as the buffer)."""
    qmul = {
        n: (sc.switch.bands if sc.switch.code == 2 and (not sc.switch.links or n in sc.switch.links) else 1)
        for n in names
    }
    max_rtt = base_rtt + np.array(
        [sum(qmul[h] * sc.links[h].buffer_bytes / sc.links[h].rate_Bps for h in pth) for _, pth in paths]
    )
    return int(math.ceil(max_rtt.max() / float(sc.step_s))) + 3


def _flows(F: int, base_rtt: np.ndarray) -> Flows:
    to_send, unacked, inflight, credit, rcredit = (np.zeros(F) for _ in range(5))
    recovery_until, paused_until, last_cnp = (np.full(F, -np.inf) for _ in range(3))
    lr = np.zeros((F, LR_LEN))
    lr[:, LR_RTO_AT] = np.inf
    ints = lambda: np.zeros(F, dtype=np.int64)  # noqa: E731
    return Flows(
        to_send,
        unacked,
        inflight,
        credit,
        rcredit,
        recovery_until,
        paused_until,
        last_cnp,
        last_tx=np.zeros(F),
        cwnd_limited=np.zeros(F, dtype=np.bool_),
        srtt=base_rtt.copy(),
        rttvar=base_rtt / 2,
        flow_done=np.zeros(F, dtype=np.bool_),
        act=ints(),
        act_pos=np.full(F, -1, dtype=np.int64),
        wake=ints(),
        credit_k=ints(),
        lr=lr,
        fband=ints(),
        pin_n=ints(),
        pin_b=ints(),
        pe_last=np.full(F, -1.0),
        send=np.zeros(F),
        sending=np.empty(F, dtype=np.int64),
    )


def _jobs(sc: Scenario, comp: np.ndarray) -> tuple[Jobs, int]:
    """Every job computing its first iteration (the heap by compute end); returns (jobs, heap size)."""
    J = len(sc.jobs)
    jb = Jobs(
        np.zeros(J, dtype=np.int8),
        np.zeros(J, dtype=np.int64),
        np.array([j.start_offset_s for j in sc.jobs], dtype=float),
        np.zeros(J),
        np.zeros(J),
        np.zeros(J),
        np.zeros(J, dtype=np.int64),
        np.zeros(J),
        np.zeros(J, dtype=np.int64),
    )
    n_heap = 0
    for i, j in enumerate(sc.jobs):
        n_heap = _heap_push(jb.heap_t, jb.heap_j, n_heap, j.start_offset_s + comp[i, 0], i)
    return jb, n_heap


@dataclass
class _Run:
    """A simulation's compiled-loop state, between chunks."""

    cfg: Config
    cc: Cc
    topo: Topology
    links: Links
    fl: Flows
    jb: Jobs
    fb: Feedback
    rc: Records
    trace: np.ndarray
    fs: np.ndarray
    ks: np.ndarray


def _setup(
    sc: Scenario, cc_name: str, trace_interval: float, max_sim_time: float | None, skip: bool, fifo_room: int = 1
):
    """(the loop's state, the ops, its flow state) for ``sc`` run with ``cc_name``."""
    jobs = sc.jobs
    paths = [(j, path) for j, job in enumerate(jobs) for path in job.paths()]
    # links numbered in the order the flows' paths first name them (then the unused ones): the
    # links of one flow, and of flows that start together, sit side by side in memory, which a
    # slot's hops reach with fewer cache misses; link numbers are internal (a link's update does
    # not depend on the others'), so the run is the same
    names = list(dict.fromkeys([h for _, pth in paths for h in pth] + list(sc.links)))
    lp, ls = _link_arrays(sc, names, paths)
    topo = _topology(sc, paths, names)
    F, H = len(paths), _ring_slots(sc, paths, names, topo.base_rtt)
    cc = build_cc(sc, cc_name)
    st = cc.new_state(F, sc.mss, 0.0)
    mltcp, mp = _hook_vector(cc)
    pol, pp, on_pol, pq = _policy_arrays(sc, names)
    links = Links(
        lp,
        ls,
        on_pol,
        pp,
        pq,
        *_band_fifos(sc, names, pol, on_pol, F, fifo_room),
        np.empty(len(lp) + 1, dtype=np.int64),  # touched: one spare (a hop of a link already listed)
        np.empty(pq.shape[1]),
    )
    tr = st.tracker.a if mltcp else np.zeros((F, trk.HISTORY + 1))
    jb, n_heap = _jobs(sc, topo.comp)
    R = int(topo.iters.sum())
    rc = Records(np.zeros(R, dtype=np.int64), np.zeros(R, dtype=np.int64), *(np.zeros(R) for _ in range(5)))
    fb = Feedback(
        np.zeros((H, 2 * F), dtype=np.int64),
        np.empty((H, 2 * F, 5)),
        np.zeros(H, dtype=np.int64),
        np.full(F, -1, dtype=np.int64),
        np.zeros(F, dtype=np.int64),
    )
    ks = np.zeros(KS_LEN, dtype=np.int64)
    ks[I_HEAP] = n_heap
    horizon = max_sim_time or float(
        sum(j.start_offset_s for j in jobs) + 50 * max(j.iterations * sc.ideal_iter_s(j) for j in jobs) + 10
    )
    cfg = Config(
        float(horizon),
        float(sc.step_s),
        float(sc.mss),
        float(sc.min_rto_s),
        bool(sc.slow_start_after_idle),
        sc.loss_model == "packet",
        int(sc.seed),
        float(sc.nic_backlog_segments),
        sc.loss_recovery == "linux",
        bool(skip),
        pol,
        float(trace_interval),
        bool(cc.window_based),
        bool((lp[:, L_MODE] != 0.0).any()),
        bool((lp[:, L_XOFF] > 0.0).any()),
        float(mp[hook.MIN_IDLE] if mp[hook.BOUNDARY] == 0.0 else np.inf),
        sc.loss_recovery != "linux" and cc.ns3_flight_ssthresh,
        -1 if cc.window_based else cc.State.fields.index("next_timer"),
    )
    run = _Run(
        cfg,
        Cc(int(cc.kind), cc.p, mltcp, mp, st.tcp, st.ca.a, tr),
        topo,
        links,
        _flows(F, topo.base_rtt),
        jb,
        fb,
        rc,
        np.zeros((1024 if trace_interval else 0, len(jobs))),
        np.zeros(FS_LEN),
        ks,
    )
    return run, st


def _run_chunks(run: _Run, progress, cwnd_sample_s: float | None) -> tuple[float, list]:
    """The compiled loop until the run ends: one call, or chunks of simulated time for progress
    reports (sized to ~0.2 s of wall time) or cwnd samples. Returns (loop wall time, samples)."""
    chunk = 0.05 if progress is not None else np.inf
    chunked = progress is not None or bool(cwnd_sample_s)
    if cwnd_sample_s:
        chunk = float(cwnd_sample_s)
    samples = []
    t_stop = 0.0
    loop_time = 0.0
    fs, ks, tcp, fl = run.fs, run.ks, run.cc.tcp, run.fl
    while True:
        t_stop = min(t_stop + chunk, run.cfg.horizon + 1.0) if chunked else np.inf
        w = time.perf_counter()
        _run(t_stop, run.cfg, run.cc, run.topo, run.links, fl, run.jb, run.fb, run.rc, run.trace, fs, ks)
        loop_time += time.perf_counter() - w
        if ks[I_STATUS] == TRACE_FULL:
            bins = int(fs[F_T] / run.cfg.trace_interval) + 1
            run.trace = np.concatenate(
                (run.trace, np.zeros((max(run.trace.shape[0], bins - run.trace.shape[0]), run.trace.shape[1])))
            )
            continue
        if cwnd_sample_s:
            samples.append(np.concatenate(([fs[F_T]], tcp[:, CWND], tcp[:, SSTHRESH], fl.inflight + fl.lr[:, LR_HOLE])))
        if ks[I_STATUS] != PAUSED:
            break
        if progress is None:
            continue
        progress(float(fs[F_T]), float(np.mean(run.jb.it_idx / run.topo.iters)))
        spent = time.perf_counter() - w
        if not cwnd_sample_s:
            chunk = min(chunk * 4, max(chunk * 0.2 / max(spent, 1e-6), 1e-3))
    return loop_time, samples


def _rate_trace(trace: np.ndarray, trace_interval: float, J: int) -> tuple[np.ndarray, np.ndarray]:
    """(bin centres, bits/s per job) of the delivered-bytes trace, up to its last busy bin."""
    trace_t = np.zeros(0)
    trace_rate = np.zeros((0, J))
    if trace_interval:
        used = np.flatnonzero(trace.any(axis=1))
        if len(used):
            nb = int(used[-1]) + 1
            trace_rate = trace[:nb] * 8 / trace_interval
            trace_t = (np.arange(nb) + 0.5) * trace_interval
    return trace_t, trace_rate


def simulate(
    sc: Scenario,
    cc_name: str,
    progress: Callable[[float, float], None] | None = None,
    trace_interval: float | None = None,
    max_sim_time: float | None = None,
    skip: bool = True,
    cwnd_sample_s: float | None = None,
) -> SimResult:
    """Run ``sc`` with ``cc_name``. ``skip=False`` steps every slot (the same result, slower: tests
    compare the two). ``cwnd_sample_s``: also sample every flow's cwnd, ssthresh and bytes in flight
    that often (``SimResult.cwnd_trace``; the run is the same, in chunks)."""
    wall0 = time.perf_counter()
    jobs = sc.jobs
    trace_interval = float(trace_interval or 0.0)
    for fifo_room in FIFO_ROOMS:  # the same seed: a run with more room replays the same run
        run, _ = _setup(sc, cc_name, trace_interval, max_sim_time, skip, fifo_room)
        try:
            loop_time, samples = _run_chunks(run, progress, cwnd_sample_s)
            break
        except BandFifoOverflow:
            if fifo_room == FIFO_ROOMS[-1]:
                raise
    fs, ks, rc, mss = run.fs, run.ks, run.rc, run.cfg.mss
    t_end = float(fs[F_T])
    if ks[I_STATUS] == OVER_HORIZON:
        raise RuntimeError(f"{sc.source}: simulation did not finish within {run.cfg.horizon:.1f} simulated seconds")
    if progress is not None:
        progress(t_end, 1.0)
    nbytes = np.array([j.bytes_per_iter for j in jobs], dtype=float)
    records = [
        IterationRecord(
            jobs[rc.job[r]].name,
            int(rc.iteration[r]),
            float(rc.start[r]),
            float(rc.comm[r]),
            float(rc.end[r]),
            float(nbytes[rc.job[r]]),
            float(rc.drops[r]),
            float(rc.marks[r]),
        )
        for r in range(int(ks[I_NREC]))
    ]
    trace_t, trace_rate = _rate_trace(run.trace, trace_interval, len(jobs))
    return SimResult(
        sc.name,
        cc_name,
        records,
        fs[F_TOT_DROP] / mss,
        fs[F_TOT_MARK] / mss,
        t_end,
        time.perf_counter() - wall0,
        int(ks[I_STEPS]),
        trace_t,
        trace_rate,
        [j.name for j in jobs],
        float(fs[F_TOT_SENT]),
        float(fs[F_TOT_ACKED]),
        float(run.fl.inflight.sum()),
        int(ks[I_K]),
        int(fs[F_TOT_RTO]),
        int(fs[F_TOT_TLP]),
        loop_time,
        np.array(samples) if samples else None,
        float(fs[F_TOT_PAUSE]),
        float(fs[F_TOT_REORDER]) / mss,
    )
