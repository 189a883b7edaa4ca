"""Links and queues: ECN marks, the in-network policy's bands and strict-priority band queues
(mltcp.progress_policy), PFC pauses, and the ring the feedback of a slot's sends is filed in."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .. import tracker as trk
from .state import (
    ARRIVE,
    CDT,
    INV_RATE,
    L_BUF,
    L_K,
    L_KMAX,
    L_KMIN,
    L_MODE,
    L_PMAX,
    L_RATE,
    L_XOFF,
    PC_SEEN,
    PDROP,
    PE_DELIV,
    PE_EXTRA,
    PE_KENQ,
    PE_LOST,
    PE_LRTX,
    PE_MKD,
    PE_REM,
    PP_BANDS,
    PP_HI,
    PP_LO,
    PP_PECN,
    PP_PIN,
    PP_SHARED,
    PP_SHIFT,
    PP_WINDOW,
    PQ_ARR,
    PQ_DROP,
    PQ_MARK,
    PQ_Q,
    Q,
    QK,
)


@njit(cache=True, _nrt=False)
def _band(pp, ratio):
    """The bytes_ratio band of a packet: the Q0.16 value the host stamps, cut by its top bits."""
    q = min(max(int(round(ratio * 65535.0)), 0), 65535)
    return q >> int(pp[PP_SHIFT])


@njit(cache=True, _nrt=False)
def _flow_band(pol, pp, tr, mltcp, unacked, flow_bytes, pin_n, pin_b, f):
    """The band flow f's next packets take: the bytes_ratio its host stamps (MLTCP's tracker, or
    a plain host's own count), or under priority_pin the band queue where packets of it still wait."""
    if pol == 2 and pin_n[f] > 0 and pp[PP_PIN] != 0.0:
        return pin_b[f]
    return _band(pp, trk.ratio(tr, f) if mltcp else 1.0 - unacked[f] / max(flow_bytes[f], 1.0))


@njit(cache=True, _nrt=False)
def _ecn_mark(lp, lk, qn, ap, scale):
    """Fraction of ``ap`` arriving bytes marked at queue ``qn`` by link lk's ECN, thresholds x scale."""
    mode = lp[lk, L_MODE]
    if mode == 1.0:
        return min(max((qn - lp[lk, L_K] * scale) / ap, 0.0), 1.0)
    if mode == 2.0:
        kmin, kmax = lp[lk, L_KMIN] * scale, lp[lk, L_KMAX] * scale
        return 1.0 if qn >= kmax else min(max(lp[lk, L_PMAX] * (qn - kmin) / max(kmax - kmin, 1e-300), 0.0), 1.0)
    return 0.0


@njit(cache=True, _nrt=False)
def _priority_queues_into(lp, pp, pq, lk, dt, q_end):
    """Strict priority at link lk, this slot's drop and mark fractions per band: one queue per band
    (priority_buffer per-band: each as deep as the link's buffer, like BMv2's priority queues under
    one set_queue_depth; shared: all of them in the link's buffer, the lowest band's arrivals dropped
    first), the highest band served first; marks by the policy's priority_ecn (the link's total
    queue, the band's own queue, or none). Returns each band's queue and their total after the slot
    as that fluid account has them (into ``q_end``; returns the total); the queues themselves are
    the FIFOs' (_serve_bands), served every slot while they hold bytes, so no idle slot passes with
    a backlog. ``q_end``: room for one queue per band (filled)."""
    nb = pq.shape[1]
    cdt = lp[lk, L_RATE] * dt
    total = 0.0
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
    mode = int(pp[PP_PECN])  # priority_ecn: 0 the link's total queue, 1 the band's own, 2 none
    for b in range(nb):
        ap = max(pq[lk, b, PQ_ARR], 1e-300)
        pq[lk, b, PQ_MARK] = 0.0 if mode == 2 else _ecn_mark(lp, lk, total if mode == 0 else q_end[b], ap, 1.0)
    return total


@njit(cache=True)
def _priority_queues(lp, pp, pq, lk, dt):
    """(each band's queue, their total): :func:`_priority_queues_into` with its own room."""
    q_end = np.empty(pq.shape[1])
    total = _priority_queues_into(lp, pp, pq, lk, dt, q_end)
    return q_end, total


@njit(cache=True, _nrt=False)
def _push_feedback(ring, ring_v, ring_n, last_slot, last_entry, f, due, deliv, lost, mkd, lost_rtx, rtt):
    """File flow f's feedback (acked, lost, marked bytes, RTT, lost retransmissions) for slot
    ``due``; returns the number of ring entries it added (0 or 1).

    A row holds 2 entries per flow. A flow whose feedback alternates between slots can hold more
    than two in one row; when that fills the row and the flow has no entry there, its feedback is
    filed one slot later (``due + 1``; the ring is 3 slots taller than the longest round trip)."""
    H = ring.shape[0]
    sl = due % H
    added = 0
    if last_slot[f] == due:  # adds to this flow's entry for that slot
        e = last_entry[f]
    else:
        while True:
            # a new entry (on a multi-hop path whose queues drain fast a flow can have two
            # in one slot: then it gets two feedback events there)
            sl = due % H
            e = ring_n[sl]
            if e < ring.shape[1]:
                ring_n[sl] = e + 1
                ring[sl, e] = f
                ring_v[sl, e, 0] = 0.0
                ring_v[sl, e, 1] = 0.0
                ring_v[sl, e, 2] = 0.0
                ring_v[sl, e, 4] = 0.0
                added = 1
                break
            e = -1  # row full: add to an entry of this flow
            for y in range(ring_n[sl]):
                if ring[sl, y] == f:
                    e = y
                    break
            if e >= 0:
                break
            due += 1
        last_slot[f] = due
        last_entry[f] = e
    ring_v[sl, e, 0] += deliv
    ring_v[sl, e, 1] += lost
    ring_v[sl, e, 2] += mkd
    ring_v[sl, e, 4] += lost_rtx
    ring_v[sl, e, 3] = rtt
    return added


@njit(cache=True, _nrt=False)
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
            added += _push_feedback(
                ring,
                ring_v,
                ring_n,
                last_slot,
                last_entry,
                f,
                due,
                pe_v[lk, b, e, PE_DELIV],
                pe_v[lk, b, e, PE_LOST],
                pe_v[lk, b, e, PE_MKD],
                pe_v[lk, b, e, PE_LRTX],
                extra + (k - pe_v[lk, b, e, PE_KENQ]) * dt,
            )
            pe_hn[lk, b, 0] = (e + 1) % cap
            pe_hn[lk, b, 1] -= 1
            done += 1
        if pe_hn[lk, b, 1] == 0:
            pq[lk, b, PQ_Q] = 0.0  # no rounding left behind
        total += pq[lk, b, PQ_Q]
    ls[lk, Q] = total
    ls[lk, QK] = k
    return added, done, reordered


@njit(cache=True, _nrt=False)
def _progress_hop(pol, pp, lp, ls, pq, lk, band, t):
    """(drop fraction, mark fraction, queueing delay) that a packet of ``band`` meets at link lk
    under the policy: ecn-by-progress scales the link's thresholds by the band (with a contest
    window, only while another job sent there within it); priority-by-progress waits behind its
    own band and the bands above it."""
    if pol == 1:
        scale = pp[PP_LO] + (pp[PP_HI] - pp[PP_LO]) * band / (pp[PP_BANDS] - 1.0)
        if pp[PP_WINDOW] > 0.0 and t - pq[lk, 0, PC_SEEN] >= pp[PP_WINDOW]:
            scale = 1.0  # a job alone at the link: the link's own thresholds
        return (
            ls[lk, PDROP],
            _ecn_mark(lp, lk, ls[lk, Q], max(ls[lk, ARRIVE], 1e-300), scale),
            ls[lk, Q] * ls[lk, INV_RATE],
        )
    ahead = 0.0
    for b in range(band, pq.shape[1]):
        ahead += pq[lk, b, PQ_Q]
    return pq[lk, band, PQ_DROP], pq[lk, band, PQ_MARK], ahead * ls[lk, INV_RATE]


@njit(cache=True, _nrt=False)
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
            for b in range(pq.shape[1] - 1, band - 1, -1):  # the bands above drain first
                d = min(idle, pq[lk, b, PQ_Q])
                idle -= d
                q = pq[lk, b, PQ_Q] - d
        else:
            q = ls[lk, Q] - idle
        if q >= xoff:
            return True
    return False
