"""The fast simulator: a time-slotted, packet-quantised model of flows over drop-tail links.

Each slot of ``step_s`` seconds:
  1. jobs whose compute phase ended start sending their iteration's bytes;
  2. feedback sent one round trip earlier arrives: acked, lost and ECN-marked bytes and the RTT
     sample are handed to the congestion-control core (:mod:`mltcp.cc`, the same code the real
     senders run); losses are retransmitted; one window reduction per round trip; a loss when the
     window is under 4 segments (too few duplicate ACKs for fast retransmit) waits for the RTO;
  3. each flow sends whole segments allowed by its window (or DCQCN rate) and its NIC rate;
  4. every link queues the bytes offered to it, serves ``rate x step``, drops what exceeds its
     buffer (drop-tail) and ECN-marks arrivals beyond a step threshold K or with RED probability;
     a flow's expected share of the dropped bytes (in proportion to what it offered) is rounded
     at random to whole packets (``loss_model = "packet"``, the default; ``"fluid"`` keeps the
     fractions), so a small overflow hits one flow rather than all of them; an ECN echo or CNP
     fires with the Poisson chance of at least one marked packet. The round trip of each flow is
     its propagation delay plus the queueing delay on its path, which sets when feedback returns.
All flows advance together as numpy arrays, so 1,000 jobs cost little more than 2. Idle time
(every job computing, nothing in flight) is skipped. Deterministic for a given scenario seed.

Simplifications (stated in the README): a flow's bytes are offered to every link of its path in
the same slot (no per-hop pipelining); which flow a slot's drops and marks hit is drawn in
proportion to what each flow offered (seeded), not from packet arrival order; one flow per job.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..cc import BASE_OF, TX_START, make_cc
from ..records import IterationRecord
from ..scenario import Scenario, cc_kwargs

CNP_INTERVAL = 50e-6   # at most one CNP per flow per 50 us (DCQCN notification point)


@dataclass
class SimResult:
    scenario: str
    cc: str
    records: list[IterationRecord]
    drops: float                       # packets
    ecn_marks: float                   # packets
    sim_time: float
    wall_time: float
    steps: int
    trace_t: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    trace_rate: np.ndarray = field(repr=False, default_factory=lambda: np.zeros((0, 0)))  # bits/s per job
    job_names: list[str] = field(default_factory=list)
    bytes_sent: float = 0.0            # including retransmissions
    bytes_acked: float = 0.0
    bytes_in_flight: float = 0.0       # at the end (0 when every iteration completed)


def build_cc(sc: Scenario, cc_name: str):
    base = BASE_OF.get(cc_name, cc_name)
    kw = cc_kwargs(sc, base)
    if base == "dcqcn":
        kw.setdefault("line_rate", max(sc.links[j.path[0]].rate_Bps for j in sc.jobs))
    if cc_name != base:
        kw.update(sc.mltcp_params)
    return make_cc(cc_name, **kw)


def simulate(sc: Scenario, cc_name: str, progress: Callable[[float, float], None] | None = None,
             trace_interval: float | None = None, max_sim_time: float | None = None) -> SimResult:
    wall0 = time.perf_counter()
    rng = np.random.default_rng(sc.seed)
    jobs = sc.jobs
    J, names = len(jobs), list(sc.links)
    L = len(names)
    lidx = {n: i for i, n in enumerate(names)}
    flow_of = np.array([j for j, job in enumerate(jobs) for _ in job.path])
    link_of = np.array([lidx[h] for job in jobs for h in job.path])
    links = [sc.links[n] for n in names]
    C = np.array([lk.rate_Bps for lk in links])
    B = np.array([lk.buffer_bytes for lk in links])
    mode = np.array([{"none": 0, "step": 1, "red": 2}[lk.ecn] for lk in links])
    K = np.array([lk.ecn_k_bytes for lk in links])
    kmin = np.array([lk.red_kmin_bytes for lk in links])
    kmax = np.array([lk.red_kmax_bytes for lk in links])
    pmax = np.array([lk.red_pmax for lk in links])
    dt, mss = sc.step_s, float(sc.mss)
    base_rtt = np.array([sc.base_rtt(j) for j in jobs])
    access = np.array([sc.links[j.path[0]].rate_Bps for j in jobs])
    max_rtt = base_rtt + np.bincount(flow_of, weights=(B / C)[link_of], minlength=J)
    H = int(math.ceil(max_rtt.max() / dt)) + 3
    has_step, has_red = bool((mode == 1).any()), bool((mode == 2).any())
    red_span = np.where(kmax > kmin, kmax - kmin, 1.0)
    single_hop = all(len(j.path) == 1 for j in jobs)    # flow j crosses link link_of[j] only

    cc = build_cc(sc, cc_name)
    st = cc.new_state(J, sc.mss, 0.0)
    window = cc.window_based
    iters = np.array([j.iterations for j in jobs])
    comp = [j.compute_times(rng, j.iterations) for j in jobs]
    nbytes = np.array([j.bytes_per_iter for j in jobs], dtype=float)

    phase = np.zeros(J, dtype=np.int8)               # 0 compute, 1 communicate, 2 finished
    phase_end = np.array([j.start_offset_s + comp[i][0] for i, j in enumerate(jobs)])
    it_idx = np.zeros(J, dtype=np.int64)
    it_start = np.array([j.start_offset_s for j in jobs])
    comm_start = np.zeros(J)
    to_send, unacked, inflight = np.zeros(J), np.zeros(J), np.zeros(J)
    credit = np.zeros(J)                             # NIC line-rate budget
    rcredit = np.zeros(J)                            # DCQCN pacing budget
    recovery_until = np.full(J, -np.inf)
    paused_until = np.full(J, -np.inf)
    last_cnp = np.full(J, -np.inf)
    last_tx = np.zeros(J)                            # last time each flow sent
    cwnd_limited = np.zeros(J, dtype=bool)
    srtt, rttvar = base_rtt.copy(), base_rtt / 2
    it_drops, it_marks = np.zeros(J), np.zeros(J)
    ack_r, lost_r, mark_r, rtt_r = (np.zeros((H, J)) for _ in range(4))
    q = np.zeros(L)
    tot_drop = tot_mark = tot_sent = tot_acked = 0.0
    records: list[IterationRecord] = []

    horizon = max_sim_time or float(sum(j.start_offset_s for j in jobs) + 50 * max(
        j.iterations * sc.ideal_iter_s(j) for j in jobs) + 10)
    trace_interval = trace_interval or 0.0
    tr_bins: dict[int, np.ndarray] = {}
    last_progress = 0.0
    k, steps = 0, 0
    t = 0.0
    next_start = float(phase_end.min())
    mark_rng = np.random.default_rng([sc.seed, 1])
    loss_rng = np.random.default_rng([sc.seed, 2])
    packet_losses = sc.loss_model == "packet"

    def marked_event(mk):
        """Did at least one ECN-marked packet come back? Marks are fluid (a fraction of the bytes);
        with m expected marked packets the chance of one or more is 1 - exp(-m) (Poisson)."""
        return (mk > 0) & (mark_rng.random(J) < -np.expm1(-mk / mss))
    pending = np.zeros(H, dtype=bool)                # does a feedback slot hold anything?
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            t = k * dt
            # 1. compute phases that ended start communicating
            if t >= next_start:
                start = (phase == 0) & (phase_end <= t)
                rest = phase_end[(phase == 0) & ~start]
                next_start = rest.min() if len(rest) else np.inf
                cc.cwnd_event(st, TX_START, t, idle=t - last_tx, rto=np.maximum(sc.min_rto_s, srtt + 4 * rttvar),
                              restart=sc.slow_start_after_idle, mask=start)
                phase[start] = 1
                comm_start[start] = t
                to_send[start] = nbytes[start]
                unacked[start] = nbytes[start]
                it_drops[start] = 0.0
                it_marks[start] = 0.0
            # 2. feedback from one round trip ago
            s = k % H
            a, lo, mk = ack_r[s], lost_r[s], mark_r[s]
            if pending[s]:
                pending[s] = False
                rtt_s = rtt_r[s]
                inflight -= a + lo
                unacked -= a
                tot_acked += a.sum()
                to_send += lo
                got = a > 0
                err = rtt_s - srtt
                rttvar = np.where(got, 0.75 * rttvar + 0.25 * np.abs(err), rttvar)
                srtt = np.where(got, srtt + 0.125 * err, srtt)
                before = st.cwnd.copy()
                cc.pkts_acked(st, a, np.where(got, rtt_s, srtt), t)
                in_rec = t < recovery_until
                if window:
                    # growth only outside recovery and when the window limited the sender (Linux
                    # tcp_is_cwnd_limited, RFC 7661): NIC-limited flows keep their window
                    cc.cong_avoid(st, np.where(in_rec | ~cwnd_limited, 0.0, a), t)
                    loss, ecn = lo > 0, marked_event(mk)
                    react = (loss | ecn) & ~in_rec
                    if react.any():
                        tmo = react & loss & (before < 4 * mss)
                        rto = np.maximum(sc.min_rto_s, srtt + 4 * rttvar)
                        if tmo.any():
                            cc.on_timeout(st, tmo, t)
                            paused_until = np.where(tmo, t + rto, paused_until)
                        cong = react & ~tmo
                        if (cong & loss).any():
                            cc.on_congestion(st, cong & loss, "loss", t)
                        if (cong & ~loss).any():
                            cc.on_congestion(st, cong & ~loss, "ecn", t)
                        recovery_until = np.where(tmo, t + rto, np.where(cong, t + srtt, recovery_until))
                else:
                    cnp = (marked_event(mk) | (lo > 0)) & (t - last_cnp >= CNP_INTERVAL)
                    if cnp.any():
                        cc.on_cnp(st, cnp, t)
                        last_cnp = np.where(cnp, t, last_cnp)
                ack_r[s] = 0.0
                lost_r[s] = 0.0
                mark_r[s] = 0.0
                # iterations whose last byte was acknowledged
                done = (phase == 1) & (unacked <= 0.5)
                if done.any():
                    for j in np.flatnonzero(done):
                        records.append(IterationRecord(jobs[j].name, int(it_idx[j]), float(it_start[j]),
                                                       float(comm_start[j]), t, float(nbytes[j]),
                                                       float(it_drops[j] / mss), float(it_marks[j] / mss)))
                        it_idx[j] += 1
                        if it_idx[j] >= iters[j]:
                            phase[j] = 2
                        else:
                            phase[j] = 0
                            phase_end[j] = t + comp[j][it_idx[j]]
                            it_start[j] = t
                            next_start = min(next_start, phase_end[j])
                    to_send[done] = 0.0
                    unacked[done] = 0.0
                    if (phase == 2).all():
                        break
            if not window:
                cc.on_timer(st, t)
            # 3. senders
            active = (phase == 1) & (to_send > 0) & (t >= paused_until)
            send = np.zeros(J)
            if active.any():
                nic = access * dt
                credit = np.where(active, np.minimum(credit + nic, nic + 2 * mss), credit)
                if window:
                    allow = np.minimum(np.maximum(st.cwnd - inflight, 0.0), credit)
                else:
                    rcredit = np.where(active, np.minimum(rcredit + st.rate * dt, st.rate * dt + 2 * mss), rcredit)
                    allow = np.minimum(rcredit, credit)
                allow = np.floor(allow / mss) * mss
                send = np.where(active, np.minimum(allow, to_send), 0.0)
                # a final partial segment goes out once a whole one would fit
                send = np.where(active & (to_send < mss) & (allow >= mss), to_send, send)
                credit -= send
                to_send -= send
                inflight += send
                last_tx = np.where(send > 0, t, last_tx)
                if window:
                    ss = st.cwnd < st.ssthresh
                    cwnd_limited = np.where(active, np.where(ss, st.cwnd < 2 * inflight, inflight >= st.cwnd - mss),
                                            cwnd_limited)
                else:
                    rcredit -= send
                    cc.on_sent(st, send, t)
            # 4. links
            A = np.bincount(link_of, weights=send[flow_of], minlength=L)
            qn = np.maximum(q + A - C * dt, 0.0)
            over = np.maximum(qn - B, 0.0)
            qn -= over
            q = qn
            idx = np.flatnonzero(send)
            if len(idx):
                Ap = np.maximum(A, 1e-300)
                pdrop = np.minimum(over / Ap, 1.0)
                if has_step:
                    pmark = np.where(mode == 1, np.minimum(np.maximum((qn - K) / Ap, 0.0), 1.0), 0.0)
                else:
                    pmark = np.zeros(L)
                if has_red:
                    red = np.minimum(np.maximum(pmax * (qn - kmin) / red_span, 0.0), 1.0)
                    pmark = np.where(mode == 2, np.where(qn >= kmax, 1.0, red), pmark)
                if single_hop:
                    keep = 1.0 - pdrop[link_of]
                    clean = 1.0 - pmark[link_of]
                else:
                    keep = np.exp(np.bincount(flow_of, weights=np.log1p(-pdrop)[link_of], minlength=J))
                    clean = np.exp(np.bincount(flow_of, weights=np.log1p(-np.minimum(pmark, 1.0))[link_of], minlength=J))
                lost = send * (1.0 - keep)
                if packet_losses and lost.any():
                    # drop whole packets: each flow loses floor(x) or ceil(x) of its expected x
                    # dropped packets (random rounding), so a small overflow hits one flow, not all
                    x = lost / mss
                    lost = np.minimum((np.floor(x) + (loss_rng.random(J) < x - np.floor(x))) * mss, send)
                deliv = send - lost
                marked = deliv * (1.0 - clean)
                qdelay = (q / C)[link_of] if single_hop else np.bincount(flow_of, weights=(q / C)[link_of], minlength=J)
                rtt_now = base_rtt + qdelay
                slot = (k + np.maximum(1, np.ceil(rtt_now / dt - 1e-9)).astype(np.int64)) % H
                si = slot[idx]
                pending[si] = True
                ack_r[si, idx] += deliv[idx]
                lost_r[si, idx] += lost[idx]
                mark_r[si, idx] += marked[idx]
                rtt_r[si, idx] = rtt_now[idx]
                it_drops += lost
                it_marks += marked
                tot_drop += lost.sum()
                tot_sent += send.sum()
                tot_mark += marked.sum()
                if trace_interval:
                    b = int(t / trace_interval)
                    if b not in tr_bins:
                        tr_bins[b] = np.zeros(J)
                    tr_bins[b] += deliv
            steps += 1
            k += 1
            # skip idle time: every job computing (or done) and nothing in flight
            if not (phase == 1).any() and inflight.sum() <= 0.5:
                if (phase == 2).all():
                    break
                nxt = phase_end[phase == 0].min()
                kn = int(math.floor(nxt / dt))
                if kn > k:
                    q = np.maximum(q - C * (kn - k) * dt, 0.0)
                    credit[:] = 0.0
                    k = kn
            if t > horizon:
                raise RuntimeError(f"{sc.source}: simulation did not finish within {horizon:.1f} simulated seconds")
            if progress is not None and t - last_progress >= 0.05:
                progress(t, float(np.mean(it_idx / iters)))
                last_progress = t
    if progress is not None:
        progress(t, 1.0)
    trace_t = np.zeros(0)
    trace_rate = np.zeros((0, J))
    if trace_interval and tr_bins:
        nb = max(tr_bins) + 1
        trace_rate = np.zeros((nb, J))
        for b, v in tr_bins.items():
            trace_rate[b] = v * 8 / trace_interval
        trace_t = (np.arange(nb) + 0.5) * trace_interval
    return SimResult(sc.name, cc_name, records, tot_drop / mss, tot_mark / mss, t,
                     time.perf_counter() - wall0, steps, trace_t, trace_rate, [j.name for j in jobs],
                     tot_sent, tot_acked, float(inflight.sum()))
