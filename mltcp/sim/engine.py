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
from numba import njit

from ..cc import ALGORITHMS, BASE_OF, Linear, MLTCPHook, dispatch, make_cc
from ..cc.base import CWND, RATE, SSTHRESH
from ..cc.dcqcn import NEXT_TIMER
from ..cc import mltcp as hook
from ..records import IterationRecord
from ..scenario import Scenario, ScenarioError, cc_kwargs
from .. import tracker as trk

CNP_INTERVAL = 50e-6   # at most one CNP per flow per 50 us (DCQCN notification point)

# index of each scalar in the run's float / int state vectors (kept between chunks)
F_TOT_DROP, F_TOT_MARK, F_TOT_SENT, F_TOT_ACKED, F_T, F_TOT_RTO, F_TOT_TLP, F_TOT_PAUSE, F_TOT_REORDER = range(9)
I_K, I_STEPS, I_NREC, I_SEEDED, I_STATUS, I_HEAP, I_ACT, I_RING, I_COMM, I_DONE = range(10)
RUNNING, DONE, PAUSED, OVER_HORIZON = 0, 1, 2, 3
NEVER = 1 << 62                 # a slot that never comes
# links, one row each (a row per link keeps what a packet's hop needs in one cache line):
L_RATE, L_BUF, L_MODE, L_K, L_KMIN, L_KMAX, L_PMAX, L_XOFF = range(8)   # lp: rate B/s, buffer B, ECN, PFC (0: lossy)
# ls: all that a slot's hops read and write (one 64-byte line per link): queue, slot of its last
# update, bytes arriving this slot (> 0 marks the link touched), drop and mark fractions, 1 / rate,
# bytes served per slot (rate x step), buffer
Q, QK, ARRIVE, PDROP, PMARK, INV_RATE, CDT, BUF = range(8)
# loss recovery, one row per flow (lr): retransmissions queued (part of to_send, sent before new
# data), retransmissions sent this slot, bytes whose recovery waits for a timer, when it fires,
# RTO backoff, whether that timer is a tail-loss probe, whether a probe was sent since new data was
# acked, the fast retransmission still to send whatever the window (RFC 6675: on entering recovery),
# until when the flow is in a loss episode (Linux CA_Recovery / CA_Loss; an ECN reduction, CA_CWR,
# does not count)
LR_RTX, LR_RTX_SENT, LR_HOLE, LR_RTO_AT, LR_BACKOFF, LR_PROBE, LR_PROBED, LR_FRTX, LR_LOSS_REC = range(9)
LR_LEN = 9
TLP_EXTRA = 0.002       # Linux tail-loss probe timeout: 2 srtt + TCP_TIMEOUT_MIN (2 jiffies at HZ=1000)


@dataclass
class SimResult:
    scenario: str
    cc: str
    records: list[IterationRecord]
    drops: float                       # packets
    ecn_marks: float                   # packets
    sim_time: float
    wall_time: float
    steps: int                         # slots processed (the others were skipped: nothing happened)
    trace_t: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    trace_rate: np.ndarray = field(repr=False, default_factory=lambda: np.zeros((0, 0)))  # bits/s per job
    job_names: list[str] = field(default_factory=list)
    bytes_sent: float = 0.0            # including retransmissions
    bytes_acked: float = 0.0
    bytes_in_flight: float = 0.0       # at the end (0 when every iteration completed)
    slots: int = 0                     # slots of simulated time (processed or skipped)
    timeouts: int = 0                  # retransmission timeouts (window-based flows)
    probes: int = 0                    # tail-loss probes (loss_recovery = "linux")
    loop_time: float = 0.0             # wall seconds in the compiled loop (the rest of wall_time: setup, records)
    cwnd_trace: np.ndarray | None = field(repr=False, default=None)   # (samples, 1 + 3 F): t, cwnd, ssthresh, in flight
    pfc_pause_s: float = 0.0           # flow-seconds that lossless (pfc) links held senders paused
    reordered: float = 0.0             # packets a strict-priority link delivered after later ones of their flow


def build_cc(sc: Scenario, cc_name: str):
    base = BASE_OF.get(cc_name, cc_name)
    kw = cc_kwargs(sc, base)
    if base == "dcqcn":
        kw.setdefault("line_rate", max(sc.links[j.path[0]].rate_Bps for j in sc.jobs))
    if cc_name != base:            # [mltcp]: a key of another base's variant (dcqcn_f_*) does not apply
        known = ALGORITHMS[cc_name].params
        kw.update({k: v for k, v in sc.mltcp_params.items() if k in known})
    return make_cc(cc_name, **kw)


def _hook_vector(cc) -> tuple[bool, np.ndarray]:
    """MLTCP hook parameters for the compiled loop (:meth:`MLTCPHook.hook_vector`)."""
    if not isinstance(cc, MLTCPHook):
        return False, np.zeros(hook.HOOK_LEN)
    if not isinstance(cc.F, (Linear, hook.Shaped)):
        raise ValueError("the simulator runs the hook's own F (shape linear, capped or convex); a custom "
                         "aggressiveness function works with the real senders only")
    return True, cc.hook_vector()


@njit(cache=True)
def _slot_at(t, dt):
    """The first slot k with k * dt >= t (the loop's own test)."""
    k = max(int(math.floor(t / dt)) - 1, 0)
    while k * dt < t:
        k += 1
    return k


@njit(cache=True)
def _split_loss(lr, f, a, lo, lo_rtx, inflight_f, to_send_f, mss, rack, whole=True):
    """(bytes fast recovery repairs, bytes that wait for a timer) of ``lo`` bytes lost. The ACKs
    that can reveal a loss are those of segments sent after it: half of its own slot's, all sent
    in later slots, and, once one of those came back, the new data that limited transmit and SACK
    recovery then send.
    ``rack`` False (ns-3 3.44: SACK, no RACK or tail-loss probe): a first loss needs three
    duplicate ACKs (SACKs above it), a lost retransmission is found by the RTO only.
    ``rack`` True (Linux RACK-TLP): any loss, a retransmission's too, is found once a segment sent
    after it is acknowledged; with none, the tail-loss probe (or the RTO) finds it."""
    lrtx = min(lo_rtx, lo)
    fresh = lo - lrtx
    dup = 0.5 * a + inflight_f
    if rack:
        # segments, not bytes (``whole``: packet losses): any segment in flight was sent after the
        # loss, and so was a delivered partial segment (a flow's last, the end of its iteration)
        part = a - math.floor(a / mss + 1e-9) * mss if whole else 0.0
        seen = dup >= mss or (whole and (inflight_f > 1.0 or part > 1.0))
        return (lo, 0.0) if seen else (0.0, lo)
    new = max(to_send_f - lr[f, LR_RTX], 0.0)
    if fresh > 0.0 and (dup < mss or dup + new < 3.0 * mss):
        return 0.0, lo
    return fresh, lrtx


@njit(cache=True)
def _arm_timer(lr, f, t, rtt_s, lo_rtx, srtt, rttvar, min_rto, inflight_f, mss, rack, loss_rec):
    """Arm flow f's timer for the bytes just held (LR_HOLE), at the ACK (time t) that advanced last.
    The RTO, backed off (a lost retransmission's: from about when it was sent): ns-3's max(min_rto,
    srtt + 4 rttvar), or Linux's srtt + max(4 rttvar, min_rto) (tcp_rtt_estimator keeps rttvar at
    least rto_min). ``rack`` (Linux tcp_schedule_loss_probe, RFC 8985 7.2): a tail-loss probe instead, once per
    flight, only outside loss recovery (CA_Open or CA_CWR: not after a lost retransmission or within
    a loss episode), after 2 srtt + 2 ms, or 2 srtt + min_rto with one packet out (time for a delayed
    ACK), or at the RTO if that is earlier: a timer that is a probe even when it fires at the RTO's time."""
    rto = (srtt + max(4.0 * rttvar, min_rto) if rack else max(min_rto, srtt + 4.0 * rttvar)) * 2.0 ** lr[f, LR_BACKOFF]
    lr[f, LR_RTO_AT] = t + rto - (rtt_s if lo_rtx > 0.0 else 0.0)
    lr[f, LR_PROBE] = 0.0
    if rack and lr[f, LR_PROBED] == 0.0 and lo_rtx <= 0.0 and not loss_rec:
        pto = 2.0 * srtt + (TLP_EXTRA if lr[f, LR_HOLE] + inflight_f > mss else min_rto)
        lr[f, LR_RTO_AT] = t + min(pto, rto)
        lr[f, LR_PROBE] = 1.0


@njit(cache=True)
def _until_rto(lr, f, w, dt):
    """Slot ``w``, or the slot the flow's retransmission timer fires in if that is earlier."""
    at = lr[f, LR_RTO_AT]
    return w if at == np.inf else min(w, _slot_at(at, dt))


@njit(cache=True)
def _gain(mltcp, mp, tr, f):
    return hook.gain(mp, trk.ratio(tr, f)) if mltcp else 1.0


@njit(cache=True)
def _dscale(mltcp, mp, tr, f):
    return hook.dscale(mp, trk.ratio(tr, f)) if mltcp else 1.0


@njit(cache=True)
def _before(ta, ja, tb, jb):
    return ta < tb or (ta == tb and ja < jb)


@njit(cache=True)
def _heap_push(ht, hj, n, t, j):
    """Min-heap of (compute end, job) on arrays; returns the new size."""
    i = n
    ht[i], hj[i] = t, j
    while i > 0:
        up = (i - 1) // 2
        if not _before(ht[i], hj[i], ht[up], hj[up]):
            break
        ht[i], ht[up] = ht[up], ht[i]
        hj[i], hj[up] = hj[up], hj[i]
        i = up
    return n + 1


@njit(cache=True)
def _heap_pop(ht, hj, n):
    """Remove the root; returns the new size."""
    n -= 1
    ht[0], hj[0] = ht[n], hj[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _before(ht[c + 1], hj[c + 1], ht[c], hj[c]):
            c += 1
        if not _before(ht[c], hj[c], ht[i], hj[i]):
            break
        ht[i], ht[c] = ht[c], ht[i]
        hj[i], hj[c] = hj[c], hj[i]
        i = c
    return n


# ---- in-network policy (mltcp.progress_policy): the switch acts on each packet's bytes_ratio --------
PP_BANDS, PP_SHIFT, PP_LO, PP_HI, PP_PECN, PP_SHARED, PP_PIN, PP_WINDOW = range(8)   # pp: the policy's parameters
#     (priority_ecn code, priority_buffer shared 1 / per-band 0, contest window in seconds, 0: none)
PQ_Q, PQ_ARR, PQ_DROP, PQ_MARK = range(4)          # pq[link, band]: strict-priority band queues
PC_JOB, PC_SEEN = range(2)    # pq[link, 0] under ecn-by-progress: the last job at the link + 1, when it last changed (s)
# what waits in a band queue, per (link, band) a FIFO of sends (pe_f: the flow; pe_v: the columns
# below; pe_hn[link, band] = head, count): a band queue serves its packets when the bands above leave
# it room, so their feedback is timed at dequeue (a departure fixed at enqueue would let a band
# below send while a band above holds the link)
PE_REM, PE_DELIV, PE_LOST, PE_MKD, PE_LRTX, PE_EXTRA, PE_KENQ = range(7)


@njit(cache=True)
def _band(pp, ratio):
    """The bytes_ratio band of a packet: the Q0.16 value the host stamps, cut by its top bits."""
    q = min(max(int(round(ratio * 65535.0)), 0), 65535)
    return q >> int(pp[PP_SHIFT])


@njit(cache=True)
def _flow_band(pol, pp, tr, mltcp, unacked, flow_bytes, pin_n, pin_b, f):
    """The band flow f's next packets take: the bytes_ratio its host stamps (MLTCP's tracker, or
    a plain host's own count), or under priority_pin the band queue where packets of it still wait."""
    if pol == 2 and pin_n[f] > 0 and pp[PP_PIN] != 0.0:
        return pin_b[f]
    return _band(pp, trk.ratio(tr, f) if mltcp else 1.0 - unacked[f] / max(flow_bytes[f], 1.0))


@njit(cache=True)
def _ecn_mark(lp, lk, qn, ap, scale):
    """Fraction of ``ap`` arriving bytes marked at queue ``qn`` by link lk's ECN, thresholds x scale."""
    mode = lp[lk, L_MODE]
    if mode == 1.0:
        return min(max((qn - lp[lk, L_K] * scale) / ap, 0.0), 1.0)
    if mode == 2.0:
        kmin, kmax = lp[lk, L_KMIN] * scale, lp[lk, L_KMAX] * scale
        return 1.0 if qn >= kmax else min(max(lp[lk, L_PMAX] * (qn - kmin) / max(kmax - kmin, 1e-300), 0.0), 1.0)
    return 0.0


@njit(cache=True)
def _priority_queues(lp, pp, pq, lk, dt):
    """Strict priority at link lk, this slot's drop and mark fractions per band: one queue per band
    (priority_buffer per-band: each as deep as the link's buffer, like BMv2's priority queues under
    one set_queue_depth; shared: all of them in the link's buffer, the lowest band's arrivals dropped
    first), the highest band served first; marks by the policy's priority_ecn (the link's total
    queue, the band's own queue, or none). Returns each band's queue and their total after the slot
    as that fluid account has them; the queues themselves are the FIFOs' (_serve_bands), served
    every slot while they hold bytes, so no idle slot passes with a backlog."""
    nb = pq.shape[1]
    cdt = lp[lk, L_RATE] * dt
    total = 0.0
    q_end = np.empty(nb)
    budget = cdt
    for b in range(nb - 1, -1, -1):
        q = pq[lk, b, PQ_Q] + pq[lk, b, PQ_ARR]
        d = min(budget, q)
        q -= d
        budget -= d
        over = max(q - lp[lk, L_BUF], 0.0)
        q -= over
        q_end[b] = q
        pq[lk, b, PQ_DROP] = min(over / max(pq[lk, b, PQ_ARR], 1e-300), 1.0)
        total += q
    if pp[PP_SHARED] != 0.0 and total > lp[lk, L_BUF]:
        # one buffer shared by the bands (the plain link's): the excess is dropped from this slot's
        # arrivals, the lowest band's first (a priority-aware admission)
        excess = total - lp[lk, L_BUF]
        for b in range(nb):
            arr = pq[lk, b, PQ_ARR]
            cut = min(excess, arr * (1.0 - pq[lk, b, PQ_DROP]), q_end[b])
            if cut > 0.0:
                q_end[b] -= cut
                pq[lk, b, PQ_DROP] = min(pq[lk, b, PQ_DROP] + cut / arr, 1.0)
                excess -= cut
                total -= cut
            if excess <= 0.0:
                break
    mode = int(pp[PP_PECN])          # priority_ecn: 0 the link's total queue, 1 the band's own, 2 none
    for b in range(nb):
        ap = max(pq[lk, b, PQ_ARR], 1e-300)
        pq[lk, b, PQ_MARK] = 0.0 if mode == 2 else _ecn_mark(lp, lk, total if mode == 0 else q_end[b], ap, 1.0)
    return q_end, total


@njit(cache=True)
def _push_feedback(ring, ring_v, ring_n, last_slot, last_entry, f, due, deliv, lost, mkd, lost_rtx, rtt):
    """File flow f's feedback (acked, lost, marked bytes, RTT, lost retransmissions) for slot
    ``due``; returns the number of ring entries it added (0 or 1)."""
    H = ring.shape[0]
    sl = due % H
    added = 0
    if last_slot[f] == due:          # adds to this flow's entry for that slot
        e = last_entry[f]
    else:
        # a new entry (on a multi-hop path whose queues drain fast a flow can have two
        # in one slot: then it gets two feedback events there)
        e = ring_n[sl]
        if e == ring.shape[1]:       # row full: add to an entry of this flow
            e = -1
            for y in range(ring_n[sl]):
                if ring[sl, y] == f:
                    e = y
                    break
            if e < 0:
                raise RuntimeError("feedback ring row overflow")
        else:
            ring_n[sl] = e + 1
            ring[sl, e] = f
            ring_v[sl, e, 0] = 0.0
            ring_v[sl, e, 1] = 0.0
            ring_v[sl, e, 2] = 0.0
            ring_v[sl, e, 4] = 0.0
            added = 1
        last_slot[f] = due
        last_entry[f] = e
    ring_v[sl, e, 0] += deliv
    ring_v[sl, e, 1] += lost
    ring_v[sl, e, 2] += mkd
    ring_v[sl, e, 4] += lost_rtx
    ring_v[sl, e, 3] = rtt
    return added


@njit(cache=True)
def _serve_bands(lp, ls, pq, pe_f, pe_v, pe_hn, lk, k, dt, ring, ring_v, ring_n, last_slot, last_entry, pe_last, pin_n):
    """One slot of link lk's strict-priority service over what waits in its band FIFOs, the highest
    band first; each send whose last byte leaves files its feedback, timed from now. A send that
    leaves after a later send of its flow (the flow moved up a band while it had bytes waiting
    below) is reordered: the model acknowledges it as delivered, a real receiver sees it out of
    order. Returns (ring entries added, FIFO entries finished, reordered bytes)."""
    nb = pq.shape[1]
    cap = pe_f.shape[2]
    budget = lp[lk, L_RATE] * dt
    added, done = 0, 0
    reordered = 0.0
    total = 0.0
    for b in range(nb - 1, -1, -1):
        while budget > 0.0 and pe_hn[lk, b, 1] > 0:
            e = pe_hn[lk, b, 0]
            take = min(pe_v[lk, b, e, PE_REM], budget)
            pe_v[lk, b, e, PE_REM] -= take
            pq[lk, b, PQ_Q] -= take
            budget -= take
            if pe_v[lk, b, e, PE_REM] > 1e-9:
                break
            f = pe_f[lk, b, e]
            if pe_v[lk, b, e, PE_KENQ] < pe_last[f]:
                reordered += pe_v[lk, b, e, PE_DELIV]
            pe_last[f] = max(pe_last[f], pe_v[lk, b, e, PE_KENQ])
            pin_n[f] -= 1
            extra = pe_v[lk, b, e, PE_EXTRA]
            due = k + max(1, int(math.ceil(extra / dt - 1e-9)))
            added += _push_feedback(ring, ring_v, ring_n, last_slot, last_entry, f, due, pe_v[lk, b, e, PE_DELIV],
                                    pe_v[lk, b, e, PE_LOST], pe_v[lk, b, e, PE_MKD], pe_v[lk, b, e, PE_LRTX],
                                    extra + (k - pe_v[lk, b, e, PE_KENQ]) * dt)
            pe_hn[lk, b, 0] = (e + 1) % cap
            pe_hn[lk, b, 1] -= 1
            done += 1
        if pe_hn[lk, b, 1] == 0:
            pq[lk, b, PQ_Q] = 0.0            # no rounding left behind
        total += pq[lk, b, PQ_Q]
    ls[lk, Q] = total
    ls[lk, QK] = k
    return added, done, reordered


@njit(cache=True)
def _progress_hop(pol, pp, lp, ls, pq, lk, band, t):
    """(drop fraction, mark fraction, queueing delay) that a packet of ``band`` meets at link lk
    under the policy: ecn-by-progress scales the link's thresholds by the band (with a contest
    window, only while another job sent there within it); priority-by-progress waits behind its
    own band and the bands above it."""
    if pol == 1:
        scale = pp[PP_LO] + (pp[PP_HI] - pp[PP_LO]) * band / (pp[PP_BANDS] - 1.0)
        if pp[PP_WINDOW] > 0.0 and t - pq[lk, 0, PC_SEEN] >= pp[PP_WINDOW]:
            scale = 1.0                  # a job alone at the link: the link's own thresholds
        return ls[lk, PDROP], _ecn_mark(lp, lk, ls[lk, Q], max(ls[lk, ARRIVE], 1e-300), scale), ls[lk, Q] * ls[lk, INV_RATE]
    ahead = 0.0
    for b in range(band, pq.shape[1]):
        ahead += pq[lk, b, PQ_Q]
    return pq[lk, band, PQ_DROP], pq[lk, band, PQ_MARK], ahead * ls[lk, INV_RATE]


@njit(cache=True)
def _pfc_paused(lp, ls, pq, pol, on_pol, path_ptr, path_link, f, band, k):
    """PFC (IEEE 802.1Qbb) on lossless links: is flow f paused in slot k? A queue at or above its
    link's XOFF threshold, as its last update left it and drained over the idle slots since, pauses
    the senders that feed it: the link's one queue, or under priority-by-progress the flow's band
    queue (one PFC priority class per band), so only the bands at their limit stop. The pause acts
    within a slot (no pause-frame delay), the XOFF headroom covers one slot of every sender."""
    for h in range(path_ptr[f], path_ptr[f + 1]):
        lk = path_link[h]
        xoff = lp[lk, L_XOFF]
        if xoff <= 0.0:
            continue
        idle = ls[lk, CDT] * (k - 1 - ls[lk, QK])
        if pol == 2 and on_pol[lk]:
            q = 0.0
            for b in range(pq.shape[1] - 1, band - 1, -1):   # the bands above drain first
                d = min(idle, pq[lk, b, PQ_Q])
                idle -= d
                q = pq[lk, b, PQ_Q] - d
        else:
            q = ls[lk, Q] - idle
        if q >= xoff:
            return True
    return False


@njit(cache=True)
def _run(t_stop, horizon, dt, mss, min_rto, ssai, packet_losses, seed, nic_backlog,
         kind, p, mltcp, mp, tcp, ca, tr,
         flow_job, path_ptr, path_link, base_rtt, access, flow_bytes,
         job_ptr, iters, comp,
         lp, ls,
         to_send, unacked, inflight, credit, rcredit, recovery_until, paused_until, last_cnp, last_tx,
         cwnd_limited, srtt, rttvar, flow_done, act, act_pos, wake, credit_k,
         phase, it_idx, it_start, comm_start, it_drops, it_marks, flows_left, heap_t, heap_j,
         ring, ring_v, ring_n, last_slot, last_entry,
         rec_job, rec_iter, rec_start, rec_comm, rec_end, rec_drops, rec_marks,
         trace, trace_interval, fs, ks, skip, pol, pp, on_pol, pq, fband, lr, rack, pe_f, pe_v, pe_hn, pe_last, pin_n, pin_b):
    F, J, L, H = len(flow_job), len(iters), len(lp), len(ring_n)
    window = kind != dispatch.DCQCN
    ecn = False                          # any link marking (otherwise no link reads lp in a slot)
    pfc = False                          # any lossless link
    for lk in range(L):
        ecn = ecn or lp[lk, L_MODE] != 0.0
        pfc = pfc or lp[lk, L_XOFF] > 0.0
    if ks[I_SEEDED] == 0:
        np.random.seed(seed)
        ks[I_SEEDED] = 1
    k = ks[I_K]
    n_heap, n_act, n_ring, n_comm, n_done = ks[I_HEAP], ks[I_ACT], ks[I_RING], ks[I_COMM], ks[I_DONE]
    n_pe = 0                             # sends waiting in band FIFOs (priority-by-progress)
    if pol == 2:
        n_pe = pe_hn[:, :, 1].sum()
    pe_cap = pe_f.shape[2]
    send = np.zeros(F)
    sending = np.empty(F, dtype=np.int64)
    touched = np.empty(L + 1, dtype=np.int64)      # one spare: a hop of a link already listed writes past the end
    credit_zero = False
    status = RUNNING
    ack_min_idle = mp[hook.MIN_IDLE] if mp[hook.BOUNDARY] == 0.0 else np.inf   # the idle rule at the ACK, or off
    t = k * dt
    while True:
        t = k * dt
        if t >= t_stop:
            status = PAUSED
            break
        if t > horizon:
            status = OVER_HORIZON
            break
        # 1. compute phases that ended start communicating
        while n_heap > 0 and heap_t[0] <= t:
            j = heap_j[0]
            n_heap = _heap_pop(heap_t, heap_j, n_heap)
            phase[j] = 1
            n_comm += 1
            credit_zero = False
            comm_start[j] = t
            it_drops[j] = 0.0
            it_marks[j] = 0.0
            flows_left[j] = job_ptr[j + 1] - job_ptr[j]
            for f in range(job_ptr[j], job_ptr[j + 1]):
                if mltcp and mp[hook.BOUNDARY] == 1.0:   # explicit mark: the framework starts an iteration
                    trk.iteration_start(tr, f)
                elif mltcp and mp[hook.BOUNDARY] == 2.0:   # the idle rule at TX_START
                    trk.tx_start(tr, f, t, mp[hook.IDLE_FRACTION], mp[hook.MIN_IDLE], mp[hook.GAP_MIN2] != 0.0)
                rto = max(min_rto, srtt[f] + 4.0 * rttvar[f])
                dispatch.tx_start(kind, p, tcp, ca, f, t, t - last_tx[f], rto, mss, ssai)
                if mltcp:
                    hook.iteration_restart(mp, tr, tcp, f, t - last_tx[f], mss)
                to_send[f] = flow_bytes[f]
                unacked[f] = flow_bytes[f]
                flow_done[f] = False
                credit_k[f] = k - 1          # the NIC budget accrues from this slot on
                wake[f] = k
                act[n_act] = f
                act_pos[f] = n_act
                n_act += 1
        # 2. feedback from one round trip ago
        s = k % H
        if ring_n[s] > 0:
            cnt = ring_n[s]
            ring_n[s] = 0
            n_ring -= cnt
            for x in range(cnt):
                f = ring[s, x]
                a, lo, mk, rtt_s, lo_rtx = ring_v[s, x, 0], ring_v[s, x, 1], ring_v[s, x, 2], ring_v[s, x, 3], ring_v[s, x, 4]
                inflight[f] -= a + lo
                unacked[f] -= a
                fs[F_TOT_ACKED] += a
                if lo > 0.0 and to_send[f] <= 0.0:   # sending again: the budget accrues from now
                    credit_k[f] = max(k, _slot_at(paused_until[f], dt)) - 1
                hole, req = 0.0, 0.0
                if window:
                    req, hole = _split_loss(lr, f, a, lo, lo_rtx, inflight[f], to_send[f], mss, rack, packet_losses)
                    to_send[f] += req
                    lr[f, LR_RTX] += req
                    if hole > 0.0:               # held until the retransmission timer fires
                        lr[f, LR_HOLE] += hole
                        if lr[f, LR_RTO_AT] == np.inf:
                            _arm_timer(lr, f, t, rtt_s, lo_rtx, srtt[f], rttvar[f], min_rto, inflight[f], mss,
                                       rack, t < lr[f, LR_LOSS_REC])
                    elif a > 0.0 and lo == 0.0:
                        lr[f, LR_BACKOFF] = 0.0      # new data acknowledged: the RTO is computed afresh
                        lr[f, LR_PROBED] = 0.0
                else:
                    to_send[f] += lo
                wake[f] = k
                if a > 0.0:
                    err = rtt_s - srtt[f]
                    rttvar[f] = 0.75 * rttvar[f] + 0.25 * abs(err)
                    srtt[f] += 0.125 * err
                    if mltcp:
                        trk.on_ack(tr, f, a, t, mp[hook.IDLE_FRACTION], ack_min_idle, mp[hook.GAP_MIN2] != 0.0)
                    dispatch.pkts_acked(kind, p, tcp, ca, f, a, rtt_s, t, mss)
                    dispatch.in_ack_event(kind, p, tcp, ca, f, a, mk, rtt_s, t, mss)
                in_rec = t < recovery_until[f]
                # ECN echo / CNP: the Poisson chance of at least one marked packet among mk bytes
                marked = mk > 0.0 and np.random.random() < -math.expm1(-mk / mss)
                if window:
                    # growth only outside recovery and when the window limited the sender (Linux
                    # tcp_is_cwnd_limited, RFC 7661): NIC-limited flows keep their window
                    if a > 0.0 and not in_rec and cwnd_limited[f]:
                        dispatch.cong_avoid(kind, p, tcp, ca, f, a, _gain(mltcp, mp, tr, f), t, mss)
                    # a first loss fast recovery repairs: one reduction per round trip; a lost retransmission
                    # RACK found extends the episode it belongs to (Linux: no second reduction)
                    loss = req > 0.0 and lo > lo_rtx
                    if req > 0.0 and lo_rtx > 0.0 and in_rec:
                        recovery_until[f] = max(recovery_until[f], t + srtt[f])
                        lr[f, LR_LOSS_REC] = max(lr[f, LR_LOSS_REC], recovery_until[f])
                    if (loss or marked) and not in_rec:
                        dispatch.on_congestion(kind, p, tcp, ca, f, not loss, t, _dscale(mltcp, mp, tr, f), mss)
                        recovery_until[f] = t + srtt[f]
                        if loss:
                            lr[f, LR_FRTX] = mss
                            lr[f, LR_LOSS_REC] = recovery_until[f]
                    if hole > 0.0:               # recovery (no growth, no further reduction) lasts until the RTO
                        recovery_until[f] = max(recovery_until[f], lr[f, LR_RTO_AT])
                elif (marked or lo > 0.0) and t - last_cnp[f] >= CNP_INTERVAL:
                    dispatch.on_cnp(kind, p, tcp, ca, f, t, _dscale(mltcp, mp, tr, f))
                    last_cnp[f] = t
                # a job's iteration ends when every one of its flows has delivered its share
                j = flow_job[f]
                if phase[j] == 1 and not flow_done[f] and unacked[f] <= 0.5:
                    flow_done[f] = True
                    flows_left[j] -= 1
                    if flows_left[j] == 0:
                        r = ks[I_NREC]
                        rec_job[r], rec_iter[r], rec_start[r] = j, it_idx[j], it_start[j]
                        rec_comm[r], rec_end[r] = comm_start[j], t
                        rec_drops[r], rec_marks[r] = it_drops[j] / mss, it_marks[j] / mss
                        ks[I_NREC] = r + 1
                        it_idx[j] += 1
                        n_comm -= 1
                        for g in range(job_ptr[j], job_ptr[j + 1]):
                            to_send[g] = 0.0
                            unacked[g] = 0.0
                            lr[g, LR_RTX] = 0.0
                            lr[g, LR_HOLE] = 0.0
                            lr[g, LR_RTO_AT] = np.inf
                            lr[g, LR_FRTX] = 0.0
                            last = act[n_act - 1]          # swap-remove from the active flows
                            act[act_pos[g]] = last
                            act_pos[last] = act_pos[g]
                            act_pos[g] = -1
                            n_act -= 1
                        if it_idx[j] >= iters[j]:
                            phase[j] = 2
                            n_done += 1
                        else:
                            phase[j] = 0
                            it_start[j] = t
                            n_heap = _heap_push(heap_t, heap_j, n_heap, t + comp[j, it_idx[j]], j)
            if n_done == J:
                status = DONE
                break
        if not window:
            for f in range(F):
                dispatch.on_timer(kind, p, tcp, ca, f, t, _gain(mltcp, mp, tr, f))
        # 3. senders
        ns_ = 0
        for x in range(n_act):
            f = act[x]
            if window and lr[f, LR_RTO_AT] <= t:
                if lr[f, LR_PROBE] != 0.0:
                    # tail-loss probe: its ACK reveals the loss, fast recovery (one reduction)
                    if t >= recovery_until[f]:
                        dispatch.on_congestion(kind, p, tcp, ca, f, False, t, _dscale(mltcp, mp, tr, f), mss)
                    recovery_until[f] = t + srtt[f]
                    lr[f, LR_PROBED] = 1.0
                    fs[F_TOT_TLP] += 1.0
                else:
                    # retransmission timeout: the held bytes go again first, window 1 MSS, slow start
                    # to the new ssthresh; the next timeout for them waits twice as long
                    if not rack and kind == dispatch.RENO:
                        # ns-3 3.44's TcpNewReno takes ssthresh from the bytes in flight (RFC 5681
                        # eq. 4: max(FlightSize / 2, 2 MSS); its pipe keeps the held bytes), not
                        # from cwnd as Linux: after a tail loss that is 2 MSS
                        tcp[f, CWND] = inflight[f] + lr[f, LR_HOLE]
                    dispatch.on_timeout(kind, p, tcp, ca, f, t, _dscale(mltcp, mp, tr, f), mss)
                    lr[f, LR_BACKOFF] += 1.0
                    recovery_until[f] = t
                    lr[f, LR_LOSS_REC] = t + srtt[f]      # CA_Loss: until what was out is acknowledged
                    fs[F_TOT_RTO] += 1.0
                if to_send[f] <= 0.0:
                    credit_k[f] = k - 1
                to_send[f] += lr[f, LR_HOLE]
                lr[f, LR_RTX] += lr[f, LR_HOLE]
                lr[f, LR_HOLE] = 0.0
                lr[f, LR_RTO_AT] = np.inf
                lr[f, LR_PROBE] = 0.0
                wake[f] = k
            if window and wake[f] > k:
                continue
            if to_send[f] <= 0.0 or t < paused_until[f]:
                wake[f] = _until_rto(lr, f, _slot_at(paused_until[f], dt) if to_send[f] > 0.0 else NEVER, dt)
                continue
            if pfc:
                band = _flow_band(pol, pp, tr, mltcp, unacked, flow_bytes, pin_n, pin_b, f) if pol == 2 else 0
                if _pfc_paused(lp, ls, pq, pol, on_pol, path_ptr, path_link, f, band, k):
                    fs[F_TOT_PAUSE] += dt
                    wake[f] = _until_rto(lr, f, k + 1, dt)
                    continue
            nic = access[f] * dt
            if window:
                # NIC budget of every slot since the last one counted (window-based flows are
                # looked at only when they may send: after feedback, or when the budget suffices)
                credit[f] = min(credit[f] + (k - credit_k[f]) * nic, nic + 2.0 * mss)
                credit_k[f] = k
                # bytes held for the RTO stay in the pipe (RFC 6675; ns-3 never marks a lost
                # retransmission or a tail segment lost): they take window until the timer fires
                pipe = inflight[f] + lr[f, LR_HOLE]
                room = max(tcp[f, CWND] - pipe, min(lr[f, LR_FRTX], lr[f, LR_RTX]))
                allow = min(room, credit[f])
            else:
                credit[f] = min(credit[f] + nic, nic + 2.0 * mss)
                rd = tcp[f, RATE] * dt
                rcredit[f] = min(rcredit[f] + rd, rd + 2.0 * mss)
                allow = min(rcredit[f], credit[f])
            allow = math.floor(allow / mss) * mss
            snd = min(allow, to_send[f])
            if to_send[f] < mss and allow >= mss:   # a final partial segment goes out once a whole one would fit
                snd = to_send[f]
            lr[f, LR_RTX_SENT] = min(snd, lr[f, LR_RTX])   # retransmissions go out before new data
            lr[f, LR_RTX] -= lr[f, LR_RTX_SENT]
            if snd > 0.0:
                lr[f, LR_FRTX] = 0.0
            credit[f] -= snd
            to_send[f] -= snd
            inflight[f] += snd
            if window:
                cw = tcp[f, CWND]
                pipe = inflight[f] + lr[f, LR_HOLE]
                # avoidance: the window is the limit unless more than nic_backlog whole segments it
                # allows wait for the NIC ([network] nic_backlog_segments; 0: the window is full)
                cwnd_limited[f] = cw < 2.0 * pipe if cw < tcp[f, SSTHRESH] else pipe >= cw - (nic_backlog + 1.0) * mss
                if to_send[f] <= 0.0 or max(cw - pipe, min(lr[f, LR_FRTX], lr[f, LR_RTX])) < mss:
                    wake[f] = _until_rto(lr, f, NEVER, dt)   # until feedback opens the window (or the RTO)
                else:                                # the slot its budget reaches a segment (one early)
                    wake[f] = _until_rto(lr, f, k + max(int(math.ceil((mss - credit[f]) / nic)) - 1, 1), dt)
            else:
                rcredit[f] -= snd
            if snd > 0.0:
                if not window:
                    dispatch.on_sent(kind, p, tcp, ca, f, snd, t, _gain(mltcp, mp, tr, f))
                last_tx[f] = t
                send[f] = snd
                sending[ns_] = f
                ns_ += 1
        # 4. links
        if ns_ > 0:
            nt = 0
            for x in range(ns_):
                f = sending[x]
                if pol != 0:
                    fband[f] = _flow_band(pol, pp, tr, mltcp, unacked, flow_bytes, pin_n, pin_b, f)
                snd = send[f]
                for h in range(path_ptr[f], path_ptr[f + 1]):
                    lk = path_link[h]
                    if pol == 1 and on_pol[lk] and pp[PP_WINDOW] > 0.0:   # contest: another job than the last
                        jj = flow_job[f] + 1.0
                        if pq[lk, 0, PC_JOB] != 0.0 and pq[lk, 0, PC_JOB] != jj:
                            pq[lk, 0, PC_SEEN] = t
                        pq[lk, 0, PC_JOB] = jj
                    a0 = ls[lk, ARRIVE]
                    ls[lk, ARRIVE] = a0 + snd
                    if pol == 2 and on_pol[lk]:
                        pq[lk, fband[f], PQ_ARR] += snd
                    touched[nt] = lk             # kept when first touched (no branch to mispredict)
                    nt += 1 if a0 == 0.0 else 0
            for y in range(nt):
                lk = touched[y]
                if pol == 2 and on_pol[lk]:
                    _priority_queues(lp, pp, pq, lk, dt)
                    continue
                cdt = ls[lk, CDT]
                arr = ls[lk, ARRIVE]
                drained = max(ls[lk, Q] - cdt * (k - 1 - ls[lk, QK]), 0.0)   # idle slots since the last update
                qn = max(drained + arr - cdt, 0.0)
                over = max(qn - ls[lk, BUF], 0.0)
                qn -= over
                ls[lk, Q] = qn
                ls[lk, QK] = k
                if pol == 0:
                    ls[lk, ARRIVE] = 0.0         # (a policy's hops read it below: cleared at the end)
                ap = max(arr, 1e-300)
                ls[lk, PDROP] = min(over / ap, 1.0) if over > 0.0 else 0.0
                pm = 0.0
                mode = lp[lk, L_MODE] if ecn else 0.0
                if mode == 1.0:
                    pm = min(max((qn - lp[lk, L_K]) / ap, 0.0), 1.0)
                elif mode == 2.0:
                    kmin, kmax = lp[lk, L_KMIN], lp[lk, L_KMAX]
                    pm = 1.0 if qn >= kmax else min(max(lp[lk, L_PMAX] * (qn - kmin) / max(kmax - kmin, 1e-300), 0.0), 1.0)
                ls[lk, PMARK] = pm
            for x in range(ns_):
                f = sending[x]
                snd = send[f]
                keep, clean, qdelay = 1.0, 1.0, 0.0
                pql = -1                         # the first strict-priority hop: its wait is timed at dequeue
                for h in range(path_ptr[f], path_ptr[f + 1]):
                    lk = path_link[h]
                    if pol != 0 and on_pol[lk]:
                        pd, pm, qd = _progress_hop(pol, pp, lp, ls, pq, lk, fband[f], t)
                        if pol == 2 and pql < 0:
                            pql = lk
                            qd = 0.0
                    else:
                        pd, pm, qd = ls[lk, PDROP], ls[lk, PMARK], ls[lk, Q] * ls[lk, INV_RATE]
                    if pd != 0.0 or pm != 0.0:
                        keep *= 1.0 - pd
                        clean *= 1.0 - pm
                    qdelay += qd
                lost = snd * (1.0 - keep)
                if packet_losses and lost > 0.0:
                    # whole packets: each flow loses floor(x) or ceil(x) of its expected x dropped
                    # packets (random rounding), so a small overflow hits one flow, not all
                    xl = lost / mss
                    fl = math.floor(xl)
                    lost = min((fl + (1.0 if np.random.random() < xl - fl else 0.0)) * mss, snd)
                lost_rtx = 0.0                   # of them retransmissions (binomial share of the packets)
                if lost > 0.0 and lr[f, LR_RTX_SENT] > 0.0:
                    q = lr[f, LR_RTX_SENT] / snd
                    if packet_losses:
                        lost_rtx = min(np.random.binomial(int(math.ceil(lost / mss - 1e-9)), q) * mss, lost)
                    else:
                        lost_rtx = lost * q
                    lost_rtx = min(lost_rtx, lr[f, LR_RTX_SENT])
                lr[f, LR_RTX_SENT] = 0.0
                deliv = snd - lost
                mkd = deliv * (1.0 - clean)
                rtt_now = base_rtt[f] + qdelay
                if pql >= 0:                     # waits in its band's FIFO; feedback when it leaves
                    b = fband[f]
                    pin_b[f] = b
                    pin_n[f] += 1
                    if pe_hn[pql, b, 1] == pe_cap:
                        raise RuntimeError("band FIFO overflow")
                    e = (pe_hn[pql, b, 0] + pe_hn[pql, b, 1]) % pe_cap
                    pe_hn[pql, b, 1] += 1
                    n_pe += 1
                    pe_f[pql, b, e] = f
                    pe_v[pql, b, e, PE_REM] = deliv
                    pe_v[pql, b, e, PE_DELIV] = deliv
                    pe_v[pql, b, e, PE_LOST] = lost
                    pe_v[pql, b, e, PE_MKD] = mkd
                    pe_v[pql, b, e, PE_LRTX] = lost_rtx
                    pe_v[pql, b, e, PE_EXTRA] = rtt_now
                    pe_v[pql, b, e, PE_KENQ] = k
                    pq[pql, b, PQ_Q] += deliv
                else:
                    due = k + max(1, int(math.ceil(rtt_now / dt - 1e-9)))
                    n_ring += _push_feedback(ring, ring_v, ring_n, last_slot, last_entry, f, due, deliv, lost, mkd,
                                             lost_rtx, rtt_now)
                j = flow_job[f]
                it_drops[j] += lost
                it_marks[j] += mkd
                fs[F_TOT_DROP] += lost
                fs[F_TOT_SENT] += snd
                fs[F_TOT_MARK] += mkd
                if trace_interval > 0.0:         # bytes delivered, counted when sent (before a band queue)
                    b = int(t / trace_interval)
                    if b >= trace.shape[0]:
                        grown = np.zeros((max(2 * trace.shape[0], b + 1), J))
                        grown[:trace.shape[0]] = trace
                        trace = grown
                    trace[b, j] += deliv
                send[f] = 0.0
            for y in range(nt if pol != 0 else 0):
                lk = touched[y]
                ls[lk, ARRIVE] = 0.0
                if pol == 2 and on_pol[lk]:
                    pq[lk, :, PQ_ARR] = 0.0
        if n_pe > 0:                             # strict-priority band queues serve what waits
            for lk in range(L):
                if on_pol[lk] and pe_hn[lk, :, 1].sum() > 0:
                    added, done, reord = _serve_bands(lp, ls, pq, pe_f, pe_v, pe_hn, lk, k, dt, ring, ring_v, ring_n,
                                                      last_slot, last_entry, pe_last, pin_n)
                    n_ring += added
                    n_pe -= done
                    fs[F_TOT_REORDER] += reord
        ks[I_STEPS] += 1
        # 5. the next slot in which something can happen
        k += 1
        if n_pe > 0:                             # a band queue holds bytes: its next slot serves them
            continue
        kn = _slot_at(heap_t[0], dt) if n_heap > 0 else 1 << 62
        if kn <= k:
            continue
        if n_ring > 0:
            for d in range(H):                   # feedback due
                if ring_n[(k + d) % H] > 0:
                    kn = min(kn, k + d)
                    break
            if kn <= k:
                continue
        busy = n_comm > 0 or n_ring > 0
        if not busy:
            if not credit_zero:              # every job computing (or done), nothing in flight:
                credit[:] = 0.0              # NIC budgets do not carry over the compute phase
                credit_zero = True
        elif not window and n_comm > 0:      # DCQCN timers (collapsed while every job computes)
            for f in range(F):
                kn = min(kn, _slot_at(ca[f, NEXT_TIMER], dt))
        if window:                               # each flow knows the next slot it may send in
            for x in range(n_act):
                kn = min(kn, wake[act[x]])
                if kn <= k:
                    break
        else:
            for x in range(n_act):
                f = act[x]
                if to_send[f] <= 0.0:
                    continue
                if k * dt < paused_until[f]:
                    kn = min(kn, _slot_at(paused_until[f], dt))
                    continue
                # slots of NIC and rate budget until a whole segment may go out
                rd = tcp[f, RATE] * dt
                m = max(math.ceil((mss - credit[f]) / (access[f] * dt)), math.ceil((mss - rcredit[f]) / max(rd, 1e-300)))
                kn = min(kn, k + max(int(m) - 2, 0))   # one slot early: safe against rounding
                if kn <= k:
                    break
        if kn <= k or not skip:
            continue
        if t_stop < np.inf:
            kn = min(kn, _slot_at(t_stop, dt))
        kn = min(kn, _slot_at(horizon, dt) + 1)
        if kn > k and not window:
            n = kn - k
            for x in range(n_act):               # budgets of the slots skipped, in closed form
                f = act[x]
                if to_send[f] <= 0.0 or k * dt < paused_until[f]:
                    continue
                nic = access[f] * dt
                credit[f] = min(credit[f] + n * nic, nic + 2.0 * mss)
                if not window:
                    rd = tcp[f, RATE] * dt
                    rcredit[f] = min(rcredit[f] + n * rd, rd + 2.0 * mss)
        k = max(k, kn)
    ks[I_K] = k
    ks[I_STATUS] = status
    ks[I_HEAP], ks[I_ACT], ks[I_RING], ks[I_COMM], ks[I_DONE] = n_heap, n_act, n_ring, n_comm, n_done
    fs[F_T] = t
    return trace


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
            raise ScenarioError(sc.source, f"links.{n}.pfc", f"the buffer ({lk.buffer_bytes:g} B) does not exceed "
                                f"PFC's headroom for its senders ({room:g} B): give it a deeper buffer")
        xoff[i] = lk.buffer_bytes - room
    return xoff


def _policy_arrays(sc: Scenario, names: list[str]):
    """The scenario's switch policy for the compiled loop: code, parameters, which links, band queues."""
    pol = sc.switch
    pp = np.array([float(pol.bands), 16.0 - math.log2(pol.bands), pol.ecn_scale_lo, pol.ecn_scale_hi,
                   float(pol.priority_ecn_code), 1.0 if pol.priority_buffer == "shared" else 0.0,
                   1.0 if pol.priority_pin else 0.0, pol.contest_window_us * 1e-6 if pol.code == 1 else 0.0])
    on = set(pol.links) if pol.links else set(names)
    on_pol = np.array([n in on for n in names], dtype=np.bool_)
    pq = np.zeros((len(names), pol.bands if pol.code == 2 else 1, 4))
    if pol.code == 1:
        pq[:, 0, PC_SEEN] = -1e300       # no job change seen yet: not contested
    return int(pol.code), pp, on_pol, pq


def _band_fifos(sc: Scenario, names: list[str], pol: int, on_pol: np.ndarray, flows: int):
    """The band queues' FIFOs of sends (see PE_*): room for a full buffer of one-segment sends
    plus a slot's sends of every flow, per band of every priority link."""
    if pol != 2:
        return np.zeros((1, 1, 1), dtype=np.int64), np.zeros((1, 1, 1, 7)), np.zeros((1, 1, 2), dtype=np.int64)
    cap = int(max(sc.links[n].buffer_bytes for n, on in zip(names, on_pol) if on) / sc.mss) + 2 * flows + 8
    L, B = len(names), sc.switch.bands
    return np.zeros((L, B, cap), dtype=np.int64), np.zeros((L, B, cap, 7)), np.zeros((L, B, 2), dtype=np.int64)


def simulate(sc: Scenario, cc_name: str, progress: Callable[[float, float], None] | None = None,
             trace_interval: float | None = None, max_sim_time: float | None = None,
             skip: bool = True, cwnd_sample_s: float | None = None) -> SimResult:
    """Run ``sc`` with ``cc_name``. ``skip=False`` steps every slot (the same result, slower: tests
    compare the two). ``cwnd_sample_s``: also sample every flow's cwnd, ssthresh and bytes in flight
    that often (``SimResult.cwnd_trace``; the run is the same, in chunks)."""
    wall0 = time.perf_counter()
    rng = np.random.default_rng(sc.seed)
    jobs = sc.jobs
    J = len(jobs)
    # flows: every job's, in job order (job j owns flows job_ptr[j] .. job_ptr[j+1]-1)
    paths = [(j, path) for j, job in enumerate(jobs) for path in job.paths()]
    # links numbered in the order the flows' paths first name them (then the unused ones): the
    # links of one flow, and of flows that start together, sit side by side in memory, which a
    # slot's hops reach with fewer cache misses; link numbers are internal (a link's update does
    # not depend on the others'), so the run is the same
    names = list(dict.fromkeys([h for _, pth in paths for h in pth] + list(sc.links)))
    lidx = {n: i for i, n in enumerate(names)}
    links = [sc.links[n] for n in names]
    lp = np.zeros((len(links), 8))
    lp[:, :7] = [(lk.rate_Bps, lk.buffer_bytes, {"none": 0, "step": 1, "red": 2}[lk.ecn], lk.ecn_k_bytes,
                  lk.red_kmin_bytes, lk.red_kmax_bytes, lk.red_pmax) for lk in links]
    lp[:, L_XOFF] = _pfc_xoff(sc, names, paths)
    ls = np.zeros((len(links), 8))
    ls[:, INV_RATE] = 1.0 / lp[:, L_RATE]
    ls[:, CDT] = lp[:, L_RATE] * float(sc.step_s)
    ls[:, BUF] = lp[:, L_BUF]
    dt, mss = float(sc.step_s), float(sc.mss)

    F = len(paths)
    flow_job = np.array([j for j, _ in paths], dtype=np.int64)
    job_ptr = np.zeros(J + 1, dtype=np.int64)
    job_ptr[1:] = np.cumsum(np.bincount(flow_job, minlength=J))
    path_ptr = np.zeros(F + 1, dtype=np.int64)
    path_ptr[1:] = np.cumsum([len(pth) for _, pth in paths])
    path_link = np.array([lidx[h] for _, pth in paths for h in pth], dtype=np.int64)
    base_rtt = np.array([2.0 * sum(sc.links[h].delay_s for h in pth) + sc.host_delay_s for _, pth in paths])
    access = np.array([sc.links[pth[0]].rate_Bps for _, pth in paths])
    flow_bytes = np.array([jobs[j].flow_bytes() for j, _ in paths], dtype=float)
    # strict priority: a packet can wait behind every band's queue (each as deep as the buffer)
    qmul = {n: (sc.switch.bands if sc.switch.code == 2 and (not sc.switch.links or n in sc.switch.links) else 1)
            for n in names}
    max_rtt = base_rtt + np.array([sum(qmul[h] * sc.links[h].buffer_bytes / sc.links[h].rate_Bps for h in pth)
                                   for _, pth in paths])
    H = int(math.ceil(max_rtt.max() / dt)) + 3

    cc = build_cc(sc, cc_name)
    st = cc.new_state(F, sc.mss, 0.0)
    mltcp, mp = _hook_vector(cc)
    pol, pp, on_pol, pq = _policy_arrays(sc, names)
    pe_f, pe_v, pe_hn = _band_fifos(sc, names, pol, on_pol, len(paths))
    pe_last = np.full(len(paths), -1.0)      # each flow's latest send (slot) a band queue delivered
    pin_n = np.zeros(len(paths), dtype=np.int64)   # sends of each flow waiting in its band queue ...
    pin_b = np.zeros(len(paths), dtype=np.int64)   # ... and that band (priority_pin)
    tr = st.tracker.a if mltcp else np.zeros((F, trk.HISTORY + 1))
    iters = np.array([j.iterations for j in jobs], dtype=np.int64)
    comp = np.zeros((J, int(iters.max())))
    for i, j in enumerate(jobs):
        comp[i, :j.iterations] = j.compute_times(rng, j.iterations)
    nbytes = np.array([j.bytes_per_iter for j in jobs], dtype=float)

    phase = np.zeros(J, dtype=np.int8)               # 0 compute, 1 communicate, 2 finished
    heap_t, heap_j = np.zeros(J), np.zeros(J, dtype=np.int64)   # jobs computing, by compute end
    n_heap = 0
    for i, j in enumerate(jobs):
        n_heap = _heap_push(heap_t, heap_j, n_heap, j.start_offset_s + comp[i, 0], i)
    it_idx = np.zeros(J, dtype=np.int64)
    it_start = np.array([j.start_offset_s for j in jobs], dtype=float)
    comm_start, it_drops, it_marks = np.zeros(J), np.zeros(J), np.zeros(J)
    flows_left = np.zeros(J, dtype=np.int64)
    to_send, unacked, inflight, credit, rcredit = (np.zeros(F) for _ in range(5))
    recovery_until, paused_until, last_cnp = (np.full(F, -np.inf) for _ in range(3))
    last_tx = np.zeros(F)
    cwnd_limited = np.zeros(F, dtype=np.bool_)
    flow_done = np.zeros(F, dtype=np.bool_)
    act, act_pos = np.zeros(F, dtype=np.int64), np.full(F, -1, dtype=np.int64)   # flows of communicating jobs
    wake, credit_k = np.zeros(F, dtype=np.int64), np.zeros(F, dtype=np.int64)     # next slot to look at; budget counted to
    srtt, rttvar = base_rtt.copy(), base_rtt / 2
    # feedback ring, slot s: entries ring[s, :ring_n[s]] (flow) with ring_v[s, e] = (acked, lost,
    # marked bytes, RTT, lost retransmitted bytes), contiguous per slot; a flow's latest entry: its slot and index
    ring = np.zeros((H, 2 * F), dtype=np.int64)
    ring_v = np.empty((H, 2 * F, 5))
    ring_n = np.zeros(H, dtype=np.int64)
    last_slot, last_entry = np.full(F, -1, dtype=np.int64), np.zeros(F, dtype=np.int64)
    R = int(iters.sum())
    rec_job, rec_iter = np.zeros(R, dtype=np.int64), np.zeros(R, dtype=np.int64)
    rec_start, rec_comm, rec_end, rec_drops, rec_marks = (np.zeros(R) for _ in range(5))
    trace_interval = float(trace_interval or 0.0)
    trace = np.zeros((1024 if trace_interval else 0, J))
    fs = np.zeros(9)
    lr = np.zeros((F, LR_LEN))
    lr[:, LR_RTO_AT] = np.inf
    fband = np.zeros(F, dtype=np.int64)
    ks = np.zeros(10, dtype=np.int64)
    ks[I_HEAP] = n_heap

    horizon = max_sim_time or float(sum(j.start_offset_s for j in jobs) + 50 * max(
        j.iterations * sc.ideal_iter_s(j) for j in jobs) + 10)
    args = (dt, mss, float(sc.min_rto_s), bool(sc.slow_start_after_idle), sc.loss_model == "packet", int(sc.seed),
            float(sc.nic_backlog_segments),
            int(cc.kind), cc.p, mltcp, mp, st.tcp, st.ca.a, tr,
            flow_job, path_ptr, path_link, base_rtt, access, flow_bytes,
            job_ptr, iters, comp,
            lp, ls,
            to_send, unacked, inflight, credit, rcredit, recovery_until, paused_until, last_cnp, last_tx,
            cwnd_limited, srtt, rttvar, flow_done, act, act_pos, wake, credit_k,
            phase, it_idx, it_start, comm_start, it_drops, it_marks, flows_left, heap_t, heap_j,
            ring, ring_v, ring_n, last_slot, last_entry,
            rec_job, rec_iter, rec_start, rec_comm, rec_end, rec_drops, rec_marks)
    # without progress reports: one call; with them, chunks of simulated time sized to ~0.2 s of wall time
    chunk = 0.05 if progress is not None else np.inf
    chunked = progress is not None or bool(cwnd_sample_s)
    if cwnd_sample_s:
        chunk = float(cwnd_sample_s)
    samples = []
    t_stop = 0.0
    loop_time = 0.0
    while True:
        t_stop = min(t_stop + chunk, horizon + 1.0) if chunked else np.inf
        w = time.perf_counter()
        trace = _run(t_stop, horizon, *args, trace, trace_interval, fs, ks, skip, pol, pp, on_pol, pq, fband, lr,
                     sc.loss_recovery == "linux", pe_f, pe_v, pe_hn, pe_last, pin_n, pin_b)
        loop_time += time.perf_counter() - w
        if cwnd_sample_s:
            samples.append(np.concatenate(([fs[F_T]], st.tcp[:, CWND], st.tcp[:, SSTHRESH], inflight + lr[:, LR_HOLE])))
        if ks[I_STATUS] != PAUSED:
            break
        if progress is None:
            continue
        progress(float(fs[F_T]), float(np.mean(it_idx / iters)))
        spent = time.perf_counter() - w
        if not cwnd_sample_s:
            chunk = min(chunk * 4, max(chunk * 0.2 / max(spent, 1e-6), 1e-3))
    t_end = float(fs[F_T])
    if ks[I_STATUS] == OVER_HORIZON:
        raise RuntimeError(f"{sc.source}: simulation did not finish within {horizon:.1f} simulated seconds")
    if progress is not None:
        progress(t_end, 1.0)
    n = int(ks[I_NREC])
    records = [IterationRecord(jobs[rec_job[r]].name, int(rec_iter[r]), float(rec_start[r]), float(rec_comm[r]),
                               float(rec_end[r]), float(nbytes[rec_job[r]]), float(rec_drops[r]), float(rec_marks[r]))
               for r in range(n)]
    trace_t = np.zeros(0)
    trace_rate = np.zeros((0, J))
    if trace_interval:
        used = np.flatnonzero(trace.any(axis=1))
        if len(used):
            nb = int(used[-1]) + 1
            trace_rate = trace[:nb] * 8 / trace_interval
            trace_t = (np.arange(nb) + 0.5) * trace_interval
    return SimResult(sc.name, cc_name, records, fs[F_TOT_DROP] / mss, fs[F_TOT_MARK] / mss, t_end,
                     time.perf_counter() - wall0, int(ks[I_STEPS]), trace_t, trace_rate, [j.name for j in jobs],
                     float(fs[F_TOT_SENT]), float(fs[F_TOT_ACKED]), float(inflight.sum()), int(ks[I_K]),
                     int(fs[F_TOT_RTO]), int(fs[F_TOT_TLP]), loop_time, np.array(samples) if samples else None,
                     float(fs[F_TOT_PAUSE]), float(fs[F_TOT_REORDER]) / mss)
