"""The simulator's compiled loop: one slot after another, each in the phases TCP stacks name.

:func:`_run` is the loop; per slot it calls, in order,

1. :func:`_start_iterations` -- jobs whose compute phase ended start sending (TX_START per flow);
2. :func:`_process_feedback` -- feedback due now (:func:`_on_feedback`: loss detection, RTT
   sample and the ACK ops, the congestion response; :func:`_end_iteration` when a job's last flow
   delivered its share), then DCQCN's timers (:func:`_rate_timers`);
3. :func:`_senders` -- retransmission timers (:func:`_retransmission_timer`), PFC pauses, and
   each flow's sends (:func:`_send_flow`);
4. :func:`_links` -- the links queue what was offered (:func:`_queue_slot`, or the band queues'
   :func:`mltcp.sim.queues._priority_queues`), and each send meets its path's drops, marks and
   delays (:func:`_deliver`); then the band queues serve (:func:`_serve_band_queues`);
5. :func:`_next_slot` -- the next slot in which something can happen (skipping the others).

State travels in the groups of :mod:`mltcp.sim.state`; the counters kept between chunks of a run
in ``ks`` and ``fs``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .. import tracker as trk
from ..cc import dispatch
from ..cc import mltcp as hook
from ..cc.base import CWND, RATE, SSTHRESH
from .queues import _flow_band, _pfc_paused, _priority_queues_into, _progress_hop, _push_feedback, _serve_bands
from .recovery import _arm_timer, _split_loss, _until_rto
from .state import (
    BandFifoOverflow,
    ARRIVE,
    BUF,
    CDT,
    CNP_INTERVAL,
    DONE,
    F_T,
    F_TOT_ACKED,
    F_TOT_DROP,
    F_TOT_MARK,
    F_TOT_PAUSE,
    F_TOT_REORDER,
    F_TOT_RTO,
    F_TOT_SENT,
    F_TOT_TLP,
    I_ACT,
    I_COMM,
    I_CREDIT_ZERO,
    I_DONE,
    I_HEAP,
    I_K,
    I_NREC,
    I_PE,
    I_RING,
    I_SEEDED,
    I_STATUS,
    I_STEPS,
    INV_RATE,
    L_K,
    L_KMAX,
    L_KMIN,
    L_MODE,
    L_PMAX,
    LR_BACKOFF,
    LR_FRTX,
    LR_HOLE,
    LR_LOSS_REC,
    LR_PROBE,
    LR_PROBED,
    LR_RTO_AT,
    LR_RTX,
    LR_RTX_SENT,
    NEVER,
    OVER_HORIZON,
    PAUSED,
    PC_JOB,
    PC_SEEN,
    PDROP,
    PE_DELIV,
    PE_EXTRA,
    PE_KENQ,
    PE_LOST,
    PE_LRTX,
    PE_MKD,
    PE_REM,
    PMARK,
    PP_WINDOW,
    PQ_ARR,
    PQ_Q,
    Q,
    QK,
    RUNNING,
    TRACE_FULL,
    _slot_at,
)


@njit(cache=True, _nrt=False)
def _gain(mltcp, mp, tr, f):
    return hook.gain(mp, trk.ratio(tr, f)) if mltcp and hook.active(mp, tr, f) else 1.0


@njit(cache=True, _nrt=False)
def _dscale(mltcp, mp, tr, f):
    return hook.dscale(mp, trk.ratio(tr, f)) if mltcp and hook.active(mp, tr, f) else 1.0


@njit(cache=True, _nrt=False)
def _before(ta, ja, tb, jb):
    return ta < tb or (ta == tb and ja < jb)


@njit(cache=True, _nrt=False)
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


@njit(cache=True, _nrt=False)
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


# ---- 1. compute phases that ended start communicating ------------------------------------------------


@njit(cache=True, _nrt=False, inline="always")
def _tx_start(cfg, cc, fl, f, t):
    """CA_EVENT_TX_START of flow f: MLTCP's tracker (a mark or the idle rule at TX_START), restart
    after idle, the algorithm's reaction, MLTCP's window restart."""
    mp, tr = cc.mp, cc.tr
    if cc.mltcp and mp[hook.BOUNDARY] == 1.0:  # explicit mark: the framework starts an iteration
        trk.iteration_start(tr, f)
    elif cc.mltcp and mp[hook.BOUNDARY] == 2.0:  # the idle rule at TX_START
        trk.tx_start(tr, f, t, mp[hook.IDLE_FRACTION], mp[hook.MIN_IDLE], mp[hook.GAP_MIN2] != 0.0)
    elif cc.mltcp:  # the idle rule at the next ACK; the gap is idle time unless that ACK starts an iteration
        trk.send_after_idle(tr, f, t)
    rto = max(cfg.min_rto, fl.srtt[f] + 4.0 * fl.rttvar[f])
    dispatch.tx_start(cc.kind, cc.p, cc.tcp, cc.ca, f, t, t - fl.last_tx[f], rto, cfg.mss, cfg.ssai)
    if cc.mltcp:
        hook.iteration_restart(mp, tr, cc.tcp, f, t - fl.last_tx[f], cfg.mss)


@njit(cache=True, _nrt=False, inline="always")
def _start_iterations(cfg, cc, topo, fl, jb, ks, k, t):
    """Jobs whose compute phase ended start their iteration: every flow sends its share."""
    while ks[I_HEAP] > 0 and jb.heap_t[0] <= t:
        j = jb.heap_j[0]
        ks[I_HEAP] = _heap_pop(jb.heap_t, jb.heap_j, ks[I_HEAP])
        jb.phase[j] = 1
        ks[I_COMM] += 1
        ks[I_CREDIT_ZERO] = 0
        jb.comm_start[j] = t
        jb.it_drops[j] = 0.0
        jb.it_marks[j] = 0.0
        jb.flows_left[j] = topo.job_ptr[j + 1] - topo.job_ptr[j]
        for f in range(topo.job_ptr[j], topo.job_ptr[j + 1]):
            _tx_start(cfg, cc, fl, f, t)
            fl.to_send[f] = topo.flow_bytes[f]
            fl.unacked[f] = topo.flow_bytes[f]
            fl.flow_done[f] = False
            fl.credit_k[f] = k - 1  # the NIC budget accrues from this slot on
            fl.wake[f] = k
            n_act = ks[I_ACT]
            fl.act[n_act] = f
            fl.act_pos[f] = n_act
            ks[I_ACT] = n_act + 1


# ---- 2. feedback from one round trip ago --------------------------------------------------------------


@njit(cache=True, _nrt=False, inline="always")
def _loss_detection(cfg, fl, f, k, t, a, lo, lo_rtx, rtt_s):
    """Lost bytes: the window-based flows' fast recovery repairs some (queued for retransmission),
    the others wait for the retransmission timer (armed here); DCQCN resends them. Returns
    (bytes fast recovery repairs, bytes held for the timer)."""
    lr = fl.lr
    if lo > 0.0 and fl.to_send[f] <= 0.0:  # sending again: the budget accrues from now
        fl.credit_k[f] = max(k, _slot_at(fl.paused_until[f], cfg.dt)) - 1
    hole, req = 0.0, 0.0
    if cfg.window:
        req, hole = _split_loss(
            lr, f, a, lo, lo_rtx, fl.inflight[f], fl.to_send[f], cfg.mss, cfg.rack, cfg.packet_losses
        )
        fl.to_send[f] += req
        lr[f, LR_RTX] += req
        if hole > 0.0:  # held until the retransmission timer fires
            lr[f, LR_HOLE] += hole
            if lr[f, LR_RTO_AT] == np.inf:
                _arm_timer(
                    lr,
                    f,
                    t,
                    rtt_s,
                    lo_rtx,
                    fl.srtt[f],
                    fl.rttvar[f],
                    cfg.min_rto,
                    fl.inflight[f],
                    cfg.mss,
                    cfg.rack,
                    t < lr[f, LR_LOSS_REC],
                )
        elif a > 0.0 and lo == 0.0:
            lr[f, LR_BACKOFF] = 0.0  # new data acknowledged: the RTO is computed afresh
            lr[f, LR_PROBED] = 0.0
    else:
        fl.to_send[f] += lo
    return req, hole


@njit(cache=True, _nrt=False, inline="always")
def _ack_sample(cfg, cc, fl, f, t, a, mk, rtt_s):
    """Newly acknowledged bytes: the RTT estimator, MLTCP's tracker, pkts_acked and in_ack_event."""
    err = rtt_s - fl.srtt[f]
    fl.rttvar[f] = 0.75 * fl.rttvar[f] + 0.25 * abs(err)
    fl.srtt[f] += 0.125 * err
    if cc.mltcp:
        trk.on_ack(cc.tr, f, a, t, cc.mp[hook.IDLE_FRACTION], cfg.ack_min_idle, cc.mp[hook.GAP_MIN2] != 0.0)
        trk.rtt_sample(cc.tr, f, rtt_s)
    dispatch.pkts_acked(cc.kind, cc.p, cc.tcp, cc.ca, f, a, rtt_s, t, cfg.mss)
    dispatch.in_ack_event(cc.kind, cc.p, cc.tcp, cc.ca, f, a, mk, rtt_s, t, cfg.mss)


@njit(cache=True, _nrt=False, inline="always")
def _congestion_response(cfg, cc, fl, f, t, a, lo, lo_rtx, req, hole, marked):
    """Window growth (cong_avoid), one reduction per round trip on a loss or ECN echo, the
    recovery episode's extent; DCQCN: a CNP at most every CNP_INTERVAL."""
    lr = fl.lr
    in_rec = t < fl.recovery_until[f]
    if cfg.window:
        # growth only outside recovery and when the window limited the sender (Linux
        # tcp_is_cwnd_limited, RFC 7661): NIC-limited flows keep their window
        if a > 0.0 and not in_rec and fl.cwnd_limited[f]:
            g = _gain(cc.mltcp, cc.mp, cc.tr, f)
            g = hook.window_gain(cc.mp, g, cc.tcp[f, CWND], cfg.mss, cc.tr, f) if cc.mltcp else g
            dispatch.cong_avoid(cc.kind, cc.p, cc.tcp, cc.ca, f, a, g, t, cfg.mss)
        # a first loss fast recovery repairs: one reduction per round trip; a lost retransmission
        # RACK found extends the episode it belongs to (Linux: no second reduction)
        loss = req > 0.0 and lo > lo_rtx
        if req > 0.0 and lo_rtx > 0.0 and in_rec:
            fl.recovery_until[f] = max(fl.recovery_until[f], t + fl.srtt[f])
            lr[f, LR_LOSS_REC] = max(lr[f, LR_LOSS_REC], fl.recovery_until[f])
        if (loss or marked) and not in_rec:
            dispatch.on_congestion(
                cc.kind, cc.p, cc.tcp, cc.ca, f, not loss, t, _dscale(cc.mltcp, cc.mp, cc.tr, f), cfg.mss
            )
            fl.recovery_until[f] = t + fl.srtt[f]
            if loss:
                lr[f, LR_FRTX] = cfg.mss
                lr[f, LR_LOSS_REC] = fl.recovery_until[f]
        if hole > 0.0:  # recovery (no growth, no further reduction) lasts until the RTO
            fl.recovery_until[f] = max(fl.recovery_until[f], lr[f, LR_RTO_AT])
    elif (marked or lo > 0.0) and t - fl.last_cnp[f] >= CNP_INTERVAL:
        dispatch.on_cnp(cc.kind, cc.p, cc.tcp, cc.ca, f, t, _dscale(cc.mltcp, cc.mp, cc.tr, f))
        fl.last_cnp[f] = t


@njit(cache=True, _nrt=False, inline="always")
def _on_feedback(cfg, cc, fl, fs, f, k, t, a, lo, mk, rtt_s, lo_rtx):
    """One feedback entry of flow f: ``a`` bytes acknowledged, ``lo`` lost (``lo_rtx`` of them
    retransmissions), ``mk`` CE-marked, with the RTT sample ``rtt_s``."""
    fl.inflight[f] -= a + lo
    fl.unacked[f] -= a
    fs[F_TOT_ACKED] += a
    req, hole = _loss_detection(cfg, fl, f, k, t, a, lo, lo_rtx, rtt_s)
    fl.wake[f] = k
    if a > 0.0:
        _ack_sample(cfg, cc, fl, f, t, a, mk, rtt_s)
    # ECN echo / CNP: the Poisson chance of at least one marked packet among mk bytes
    marked = mk > 0.0 and np.random.random() < -math.expm1(-mk / cfg.mss)
    _congestion_response(cfg, cc, fl, f, t, a, lo, lo_rtx, req, hole, marked)


@njit(cache=True, _nrt=False, inline="always")
def _end_iteration(cfg, topo, fl, jb, rc, ks, j, t):
    """Job j's iteration ended (every flow delivered its share): its record, its flows leave the
    active list, and it computes its next iteration (or is finished)."""
    r = ks[I_NREC]
    rc.job[r], rc.iteration[r], rc.start[r] = j, jb.it_idx[j], jb.it_start[j]
    rc.comm[r], rc.end[r] = jb.comm_start[j], t
    rc.drops[r], rc.marks[r] = jb.it_drops[j] / cfg.mss, jb.it_marks[j] / cfg.mss
    ks[I_NREC] = r + 1
    jb.it_idx[j] += 1
    ks[I_COMM] -= 1
    for g in range(topo.job_ptr[j], topo.job_ptr[j + 1]):
        fl.to_send[g] = 0.0
        fl.unacked[g] = 0.0
        fl.lr[g, LR_RTX] = 0.0
        fl.lr[g, LR_HOLE] = 0.0
        fl.lr[g, LR_RTO_AT] = np.inf
        fl.lr[g, LR_FRTX] = 0.0
        n_act = ks[I_ACT]
        last = fl.act[n_act - 1]  # swap-remove from the active flows
        fl.act[fl.act_pos[g]] = last
        fl.act_pos[last] = fl.act_pos[g]
        fl.act_pos[g] = -1
        ks[I_ACT] = n_act - 1
    if jb.it_idx[j] >= topo.iters[j]:
        jb.phase[j] = 2
        ks[I_DONE] += 1
    else:
        jb.phase[j] = 0
        jb.it_start[j] = t
        ks[I_HEAP] = _heap_push(jb.heap_t, jb.heap_j, ks[I_HEAP], t + topo.comp[j, jb.it_idx[j]], j)


@njit(cache=True, _nrt=False, inline="always")
def _process_feedback(cfg, cc, topo, fl, jb, fb, rc, fs, ks, k, t):
    """The feedback due in slot k, entry by entry; a job's iteration ends when every one of its
    flows has delivered its share. Returns True when every job has finished."""
    H = len(fb.ring_n)
    s = k % H
    cnt = fb.ring_n[s]
    if cnt == 0:
        return False
    fb.ring_n[s] = 0
    ks[I_RING] -= cnt
    for x in range(cnt):
        f = fb.ring[s, x]
        v = fb.ring_v
        _on_feedback(cfg, cc, fl, fs, f, k, t, v[s, x, 0], v[s, x, 1], v[s, x, 2], v[s, x, 3], v[s, x, 4])
        j = topo.flow_job[f]
        if jb.phase[j] == 1 and not fl.flow_done[f] and fl.unacked[f] <= 0.5:
            fl.flow_done[f] = True
            jb.flows_left[j] -= 1
            if jb.flows_left[j] == 0:
                _end_iteration(cfg, topo, fl, jb, rc, ks, j, t)
    return ks[I_DONE] == len(topo.iters)


@njit(cache=True, _nrt=False, inline="always")
def _rate_timers(cc, t):
    """DCQCN's rate-increase timers (every flow, every processed slot)."""
    for f in range(cc.tcp.shape[0]):
        dispatch.on_timer(cc.kind, cc.p, cc.tcp, cc.ca, f, t, _gain(cc.mltcp, cc.mp, cc.tr, f))


# ---- 3. senders ---------------------------------------------------------------------------------------


@njit(cache=True, _nrt=False, inline="always")
def _retransmission_timer(cfg, cc, fl, fs, f, k, t):
    """Flow f's timer fired: a tail-loss probe (its ACK reveals the loss: fast recovery, one
    reduction) or a retransmission timeout (window 1 MSS, backoff); the held bytes go again."""
    lr = fl.lr
    if lr[f, LR_PROBE] != 0.0:
        if t >= fl.recovery_until[f]:
            dispatch.on_congestion(
                cc.kind, cc.p, cc.tcp, cc.ca, f, False, t, _dscale(cc.mltcp, cc.mp, cc.tr, f), cfg.mss
            )
        fl.recovery_until[f] = t + fl.srtt[f]
        lr[f, LR_PROBED] = 1.0
        fs[F_TOT_TLP] += 1.0
    else:
        # retransmission timeout: the held bytes go again first, window 1 MSS, slow start
        # to the new ssthresh; the next timeout for them waits twice as long
        if cfg.flight_ssthresh:
            # ns-3 3.44's TcpNewReno takes ssthresh from the bytes in flight (RFC 5681
            # eq. 4: max(FlightSize / 2, 2 MSS); its pipe keeps the held bytes), not
            # from cwnd as Linux: after a tail loss that is 2 MSS
            cc.tcp[f, CWND] = fl.inflight[f] + lr[f, LR_HOLE]
        dispatch.on_timeout(cc.kind, cc.p, cc.tcp, cc.ca, f, t, _dscale(cc.mltcp, cc.mp, cc.tr, f), cfg.mss)
        lr[f, LR_BACKOFF] += 1.0
        fl.recovery_until[f] = t
        lr[f, LR_LOSS_REC] = t + fl.srtt[f]  # CA_Loss: until what was out is acknowledged
        fs[F_TOT_RTO] += 1.0
    if fl.to_send[f] <= 0.0:
        fl.credit_k[f] = k - 1
    fl.to_send[f] += lr[f, LR_HOLE]
    lr[f, LR_RTX] += lr[f, LR_HOLE]
    lr[f, LR_HOLE] = 0.0
    lr[f, LR_RTO_AT] = np.inf
    lr[f, LR_PROBE] = 0.0
    fl.wake[f] = k


@njit(cache=True, _nrt=False, inline="always")
def _pfc_holds(cfg, cc, topo, links, fl, fs, f, k):
    """Is flow f paused by PFC in slot k (then it waits for the next slot)?"""
    pol = cfg.pol
    band = (
        _flow_band(pol, links.pp, cc.tr, cc.mltcp, fl.unacked, topo.flow_bytes, fl.pin_n, fl.pin_b, f)
        if pol == 2
        else 0
    )
    if _pfc_paused(links.lp, links.ls, links.pq, pol, links.on_pol, topo.path_ptr, topo.path_link, f, band, k):
        fs[F_TOT_PAUSE] += cfg.dt
        fl.wake[f] = _until_rto(fl.lr, f, k + 1, cfg.dt)
        return True
    return False


@njit(cache=True, _nrt=False, inline="always")
def _send_flow(cfg, cc, topo, fl, f, k, t):
    """Flow f sends the whole segments its window (or DCQCN rate) and its NIC budget allow,
    retransmissions first; returns the bytes sent."""
    mss, dt, lr, tcp = cfg.mss, cfg.dt, fl.lr, cc.tcp
    nic = topo.access[f] * dt
    if cfg.window:
        # NIC budget of every slot since the last one counted (window-based flows are
        # looked at only when they may send: after feedback, or when the budget suffices)
        fl.credit[f] = min(fl.credit[f] + (k - fl.credit_k[f]) * nic, nic + 2.0 * mss)
        fl.credit_k[f] = k
        # bytes held for the RTO stay in the pipe (RFC 6675; ns-3 never marks a lost
        # retransmission or a tail segment lost): they take window until the timer fires
        pipe = fl.inflight[f] + lr[f, LR_HOLE]
        room = max(tcp[f, CWND] - pipe, min(lr[f, LR_FRTX], lr[f, LR_RTX]))
        allow = min(room, fl.credit[f])
    else:
        fl.credit[f] = min(fl.credit[f] + nic, nic + 2.0 * mss)
        rd = tcp[f, RATE] * dt
        fl.rcredit[f] = min(fl.rcredit[f] + rd, rd + 2.0 * mss)
        allow = min(fl.rcredit[f], fl.credit[f])
    allow = math.floor(allow / mss) * mss
    snd = min(allow, fl.to_send[f])
    if fl.to_send[f] < mss and allow >= mss:  # a final partial segment goes out once a whole one would fit
        snd = fl.to_send[f]
    lr[f, LR_RTX_SENT] = min(snd, lr[f, LR_RTX])  # retransmissions go out before new data
    lr[f, LR_RTX] -= lr[f, LR_RTX_SENT]
    if snd > 0.0:
        lr[f, LR_FRTX] = 0.0
    fl.credit[f] -= snd
    fl.to_send[f] -= snd
    fl.inflight[f] += snd
    if cfg.window:
        cw = tcp[f, CWND]
        pipe = fl.inflight[f] + lr[f, LR_HOLE]
        # avoidance: the window is the limit unless more than nic_backlog whole segments it
        # allows wait for the NIC ([network] nic_backlog_segments; 0: the window is full)
        fl.cwnd_limited[f] = cw < 2.0 * pipe if cw < tcp[f, SSTHRESH] else pipe >= cw - (cfg.nic_backlog + 1.0) * mss
        if fl.to_send[f] <= 0.0 or max(cw - pipe, min(lr[f, LR_FRTX], lr[f, LR_RTX])) < mss:
            fl.wake[f] = _until_rto(lr, f, NEVER, dt)  # until feedback opens the window (or the RTO)
        else:  # the slot its budget reaches a segment (one early)
            fl.wake[f] = _until_rto(lr, f, k + max(int(math.ceil((mss - fl.credit[f]) / nic)) - 1, 1), dt)
    else:
        fl.rcredit[f] -= snd
    if snd > 0.0:
        if not cfg.window:
            dispatch.on_sent(cc.kind, cc.p, tcp, cc.ca, f, snd, t, _gain(cc.mltcp, cc.mp, cc.tr, f))
        fl.last_tx[f] = t
    return snd


@njit(cache=True, _nrt=False, inline="always")
def _senders(cfg, cc, topo, links, fl, fs, ks, k, t):
    """Every active flow that may send in slot k does; returns how many sent (fl.sending)."""
    ns_ = 0
    for x in range(ks[I_ACT]):
        f = fl.act[x]
        if cfg.window and fl.lr[f, LR_RTO_AT] <= t:
            _retransmission_timer(cfg, cc, fl, fs, f, k, t)
        if cfg.window and fl.wake[f] > k:
            continue
        if fl.to_send[f] <= 0.0 or t < fl.paused_until[f]:
            fl.wake[f] = _until_rto(
                fl.lr, f, _slot_at(fl.paused_until[f], cfg.dt) if fl.to_send[f] > 0.0 else NEVER, cfg.dt
            )
            continue
        if cfg.pfc and _pfc_holds(cfg, cc, topo, links, fl, fs, f, k):
            continue
        snd = _send_flow(cfg, cc, topo, fl, f, k, t)
        if snd > 0.0:
            fl.send[f] = snd
            fl.sending[ns_] = f
            ns_ += 1
    return ns_


# ---- 4. links -----------------------------------------------------------------------------------------


@njit(cache=True, _nrt=False, inline="always")
def _offer(cfg, cc, topo, links, fl, ns_, t):
    """The slot's sends are offered to every link of their paths; returns how many links were
    touched (links.touched)."""
    pol, pp, pq, ls = cfg.pol, links.pp, links.pq, links.ls
    nt = 0
    for x in range(ns_):
        f = fl.sending[x]
        if pol != 0:
            fl.fband[f] = _flow_band(pol, pp, cc.tr, cc.mltcp, fl.unacked, topo.flow_bytes, fl.pin_n, fl.pin_b, f)
        snd = fl.send[f]
        for h in range(topo.path_ptr[f], topo.path_ptr[f + 1]):
            lk = topo.path_link[h]
            if pol == 1 and links.on_pol[lk] and pp[PP_WINDOW] > 0.0:  # contest: another job than the last
                jj = topo.flow_job[f] + 1.0
                if pq[lk, 0, PC_JOB] != 0.0 and pq[lk, 0, PC_JOB] != jj:
                    pq[lk, 0, PC_SEEN] = t
                pq[lk, 0, PC_JOB] = jj
            a0 = ls[lk, ARRIVE]
            ls[lk, ARRIVE] = a0 + snd
            if pol == 2 and links.on_pol[lk]:
                pq[lk, fl.fband[f], PQ_ARR] += snd
            links.touched[nt] = lk  # kept when first touched (no branch to mispredict)
            nt += 1 if a0 == 0.0 else 0
    return nt


@njit(cache=True, _nrt=False, inline="always")
def _queue_slot(cfg, links, lk, k):
    """Link lk's drop-tail queue over the idle slots since its last update and this one: what it
    drops (PDROP) and marks (PMARK, step or RED ECN) of this slot's arrivals."""
    lp, ls = links.lp, links.ls
    cdt = ls[lk, CDT]
    arr = ls[lk, ARRIVE]
    drained = max(ls[lk, Q] - cdt * (k - 1 - ls[lk, QK]), 0.0)  # idle slots since the last update
    qn = max(drained + arr - cdt, 0.0)
    over = max(qn - ls[lk, BUF], 0.0)
    qn -= over
    ls[lk, Q] = qn
    ls[lk, QK] = k
    if cfg.pol == 0:
        ls[lk, ARRIVE] = 0.0  # (a policy's hops read it below: cleared at the end)
    ap = max(arr, 1e-300)
    ls[lk, PDROP] = min(over / ap, 1.0) if over > 0.0 else 0.0
    pm = 0.0
    mode = lp[lk, L_MODE] if cfg.ecn else 0.0
    if mode == 1.0:
        pm = min(max((qn - lp[lk, L_K]) / ap, 0.0), 1.0)
    elif mode == 2.0:
        kmin, kmax = lp[lk, L_KMIN], lp[lk, L_KMAX]
        pm = 1.0 if qn >= kmax else min(max(lp[lk, L_PMAX] * (qn - kmin) / max(kmax - kmin, 1e-300), 0.0), 1.0)
    ls[lk, PMARK] = pm


@njit(cache=True, _nrt=False, inline="always")
def _path_fractions(cfg, topo, links, fl, f, t):
    """(kept fraction, unmarked fraction, queueing delay, first strict-priority hop or -1) of
    flow f's send over its path."""
    pol, ls = cfg.pol, links.ls
    keep, clean, qdelay = 1.0, 1.0, 0.0
    pql = -1  # the first strict-priority hop: its wait is timed at dequeue
    for h in range(topo.path_ptr[f], topo.path_ptr[f + 1]):
        lk = topo.path_link[h]
        if pol != 0 and links.on_pol[lk]:
            pd, pm, qd = _progress_hop(pol, links.pp, links.lp, ls, links.pq, lk, fl.fband[f], t)
            if pol == 2 and pql < 0:
                pql = lk
                qd = 0.0
        else:
            pd, pm, qd = ls[lk, PDROP], ls[lk, PMARK], ls[lk, Q] * ls[lk, INV_RATE]
        if pd != 0.0 or pm != 0.0:
            keep *= 1.0 - pd
            clean *= 1.0 - pm
        qdelay += qd
    return keep, clean, qdelay, pql


@njit(cache=True, _nrt=False, inline="always")
def _losses(cfg, fl, f, snd, keep):
    """(bytes lost, of them retransmissions) of flow f's ``snd`` bytes, ``keep`` of which survive."""
    mss, lr = cfg.mss, fl.lr
    lost = snd * (1.0 - keep)
    if cfg.packet_losses and lost > 0.0:
        # whole packets: each flow loses floor(x) or ceil(x) of its expected x dropped
        # packets (random rounding), so a small overflow hits one flow, not all
        xl = lost / mss
        whole = math.floor(xl)
        lost = min((whole + (1.0 if np.random.random() < xl - whole else 0.0)) * mss, snd)
    lost_rtx = 0.0  # of them retransmissions (binomial share of the packets)
    if lost > 0.0 and lr[f, LR_RTX_SENT] > 0.0:
        q = lr[f, LR_RTX_SENT] / snd
        if cfg.packet_losses:
            lost_rtx = min(np.random.binomial(int(math.ceil(lost / mss - 1e-9)), q) * mss, lost)
        else:
            lost_rtx = lost * q
        lost_rtx = min(lost_rtx, lr[f, LR_RTX_SENT])
    lr[f, LR_RTX_SENT] = 0.0
    return lost, lost_rtx


@njit(cache=True, _nrt=False, inline="always")
def _enqueue_band(links, fl, ks, pql, f, k, deliv, lost, mkd, lost_rtx, rtt_now):
    """Flow f's send waits in its band's FIFO at link pql; its feedback is filed when it leaves."""
    pe_hn, pe_v, pe_cap = links.pe_hn, links.pe_v, links.pe_f.shape[2]
    b = fl.fband[f]
    fl.pin_b[f] = b
    fl.pin_n[f] += 1
    if pe_hn[pql, b, 1] == pe_cap:
        raise BandFifoOverflow("band FIFO overflow")
    e = (pe_hn[pql, b, 0] + pe_hn[pql, b, 1]) % pe_cap
    pe_hn[pql, b, 1] += 1
    ks[I_PE] += 1
    links.pe_f[pql, b, e] = f
    pe_v[pql, b, e, PE_REM] = deliv
    pe_v[pql, b, e, PE_DELIV] = deliv
    pe_v[pql, b, e, PE_LOST] = lost
    pe_v[pql, b, e, PE_MKD] = mkd
    pe_v[pql, b, e, PE_LRTX] = lost_rtx
    pe_v[pql, b, e, PE_EXTRA] = rtt_now
    pe_v[pql, b, e, PE_KENQ] = k
    links.pq[pql, b, PQ_Q] += deliv


@njit(cache=True, _nrt=False, inline="always")
def _deliver(cfg, topo, links, fl, jb, fb, fs, ks, f, k, t, trace):
    """Flow f's send meets its path: drops, marks and queueing delay; its feedback is filed for
    the slot it returns in (or it waits in a band queue); adds it to the rate trace."""
    snd = fl.send[f]
    keep, clean, qdelay, pql = _path_fractions(cfg, topo, links, fl, f, t)
    lost, lost_rtx = _losses(cfg, fl, f, snd, keep)
    deliv = snd - lost
    mkd = deliv * (1.0 - clean)
    rtt_now = topo.base_rtt[f] + qdelay
    if pql >= 0:  # waits in its band's FIFO; feedback when it leaves
        _enqueue_band(links, fl, ks, pql, f, k, deliv, lost, mkd, lost_rtx, rtt_now)
    else:
        due = k + max(1, int(math.ceil(rtt_now / cfg.dt - 1e-9)))
        ks[I_RING] += _push_feedback(
            fb.ring, fb.ring_v, fb.ring_n, fb.last_slot, fb.last_entry, f, due, deliv, lost, mkd, lost_rtx, rtt_now
        )
    j = topo.flow_job[f]
    jb.it_drops[j] += lost
    jb.it_marks[j] += mkd
    fs[F_TOT_DROP] += lost
    fs[F_TOT_SENT] += snd
    fs[F_TOT_MARK] += mkd
    if cfg.trace_interval > 0.0:  # bytes delivered, counted when sent (before a band queue)
        trace[int(t / cfg.trace_interval), j] += deliv
    fl.send[f] = 0.0


@njit(cache=True, _nrt=False, inline="always")
def _links(cfg, cc, topo, links, fl, jb, fb, fs, ks, ns_, k, t, trace):
    """The slot's sends cross the links: queues, drops, marks, delays."""
    nt = _offer(cfg, cc, topo, links, fl, ns_, t)
    for y in range(nt):
        lk = links.touched[y]
        if cfg.pol == 2 and links.on_pol[lk]:
            _priority_queues_into(links.lp, links.pp, links.pq, lk, cfg.dt, links.q_end)
            continue
        _queue_slot(cfg, links, lk, k)
    for x in range(ns_):
        _deliver(cfg, topo, links, fl, jb, fb, fs, ks, fl.sending[x], k, t, trace)
    for y in range(nt if cfg.pol != 0 else 0):
        lk = links.touched[y]
        links.ls[lk, ARRIVE] = 0.0
        if cfg.pol == 2 and links.on_pol[lk]:
            links.pq[lk, :, PQ_ARR] = 0.0


@njit(cache=True, _nrt=False, inline="always")
def _serve_band_queues(cfg, links, fl, fb, fs, ks, k):
    """Strict-priority band queues serve what waits in them (priority-by-progress)."""
    for lk in range(len(links.lp)):
        if links.on_pol[lk] and links.pe_hn[lk, :, 1].sum() > 0:
            added, done, reord = _serve_bands(
                links.lp,
                links.ls,
                links.pq,
                links.pe_f,
                links.pe_v,
                links.pe_hn,
                lk,
                k,
                cfg.dt,
                fb.ring,
                fb.ring_v,
                fb.ring_n,
                fb.last_slot,
                fb.last_entry,
                fl.pe_last,
                fl.pin_n,
            )
            ks[I_RING] += added
            ks[I_PE] -= done
            fs[F_TOT_REORDER] += reord


# ---- 5. the next slot in which something can happen ---------------------------------------------------


@njit(cache=True, _nrt=False, inline="always")
def _next_send_slot(cfg, cc, topo, fl, ks, k, kn):
    """The earliest of ``kn`` and the slots in which an active flow may send (window-based: its
    wake slot; DCQCN: its NIC and rate budgets reach a segment). Stops early at k."""
    dt, mss = cfg.dt, cfg.mss
    if cfg.window:  # each flow knows the next slot it may send in
        for x in range(ks[I_ACT]):
            kn = min(kn, fl.wake[fl.act[x]])
            if kn <= k:
                break
        return kn
    for x in range(ks[I_ACT]):
        f = fl.act[x]
        if fl.to_send[f] <= 0.0:
            continue
        if k * dt < fl.paused_until[f]:
            kn = min(kn, _slot_at(fl.paused_until[f], dt))
            continue
        # slots of NIC and rate budget until a whole segment may go out
        rd = cc.tcp[f, RATE] * dt
        m = max(
            math.ceil((mss - fl.credit[f]) / (topo.access[f] * dt)), math.ceil((mss - fl.rcredit[f]) / max(rd, 1e-300))
        )
        kn = min(kn, k + max(int(m) - 2, 0))  # one slot early: safe against rounding
        if kn <= k:
            break
    return kn


@njit(cache=True, _nrt=False, inline="always")
def _accrue_skipped(cfg, cc, topo, fl, ks, k, kn):
    """DCQCN flows' NIC and rate budgets over the slots k .. kn - 1 skipped, in closed form."""
    n = kn - k
    dt, mss = cfg.dt, cfg.mss
    for x in range(ks[I_ACT]):
        f = fl.act[x]
        if fl.to_send[f] <= 0.0 or k * dt < fl.paused_until[f]:
            continue
        nic = topo.access[f] * dt
        fl.credit[f] = min(fl.credit[f] + n * nic, nic + 2.0 * mss)
        rd = cc.tcp[f, RATE] * dt
        fl.rcredit[f] = min(fl.rcredit[f] + n * rd, rd + 2.0 * mss)


@njit(cache=True, _nrt=False, inline="always")
def _next_slot(cfg, cc, topo, fl, jb, fb, ks, k, t_stop):
    """The next slot to process, from slot k on: the first with feedback due, a job starting, a
    DCQCN timer, a pause ending, or a flow whose budget reaches a segment while its window has room."""
    dt = cfg.dt
    if ks[I_PE] > 0:  # a band queue holds bytes: its next slot serves them
        return k
    kn = _slot_at(jb.heap_t[0], dt) if ks[I_HEAP] > 0 else NEVER
    if kn <= k:
        return k
    if ks[I_RING] > 0:
        H = len(fb.ring_n)
        for d in range(H):  # feedback due
            if fb.ring_n[(k + d) % H] > 0:
                kn = min(kn, k + d)
                break
        if kn <= k:
            return k
    busy = ks[I_COMM] > 0 or ks[I_RING] > 0
    if not busy:
        if ks[I_CREDIT_ZERO] == 0:  # every job computing (or done), nothing in flight:
            fl.credit[:] = 0.0  # NIC budgets do not carry over the compute phase
            ks[I_CREDIT_ZERO] = 1
    elif not cfg.window and ks[I_COMM] > 0:  # DCQCN timers (collapsed while every job computes)
        for f in range(cc.tcp.shape[0]):
            kn = min(kn, _slot_at(cc.ca[f, cfg.timer_col], dt))
    kn = _next_send_slot(cfg, cc, topo, fl, ks, k, kn)
    if kn <= k or not cfg.skip:
        return k
    if t_stop < np.inf:
        kn = min(kn, _slot_at(t_stop, dt))
    kn = min(kn, _slot_at(cfg.horizon, dt) + 1)
    if kn > k and not cfg.window:
        _accrue_skipped(cfg, cc, topo, fl, ks, k, kn)
    return max(k, kn)


# ---- the loop -----------------------------------------------------------------------------------------


@njit(cache=True, _nrt=False)
def _run(t_stop, cfg, cc, topo, links, fl, jb, fb, rc, trace, fs, ks):
    """Slots from ks[I_K] until every job finished (ks[I_STATUS] = DONE), ``t_stop`` (PAUSED: the
    caller continues with the same state), the end of the rate trace (TRACE_FULL: the caller grows it
    and continues) or the horizon (OVER_HORIZON).

    Compiled without numba's reference counting (``_nrt=False``, here and in the functions it
    calls that take the state groups): each array a function receives would otherwise be
    incremented and decremented atomically at every call, which costs more than the phase itself;
    nothing here allocates (scratch space comes with the groups), the caller owns every array."""
    if ks[I_SEEDED] == 0:
        np.random.seed(cfg.seed)
        ks[I_SEEDED] = 1
    ks[I_PE] = links.pe_hn[:, :, 1].sum() if cfg.pol == 2 else 0  # sends waiting in band FIFOs
    ks[I_CREDIT_ZERO] = 0
    k = ks[I_K]
    status = RUNNING
    t = k * cfg.dt
    while True:
        t = k * cfg.dt
        if t >= t_stop:
            status = PAUSED
            break
        if t > cfg.horizon:
            status = OVER_HORIZON
            break
        if cfg.trace_interval > 0.0 and int(t / cfg.trace_interval) >= trace.shape[0]:
            status = TRACE_FULL  # the caller grows the trace and calls again
            break
        _start_iterations(cfg, cc, topo, fl, jb, ks, k, t)  # 1. compute phases end
        if _process_feedback(cfg, cc, topo, fl, jb, fb, rc, fs, ks, k, t):  # 2. feedback
            status = DONE
            break
        if not cfg.window:
            _rate_timers(cc, t)
        ns_ = _senders(cfg, cc, topo, links, fl, fs, ks, k, t)  # 3. senders
        if ns_ > 0:  # 4. links
            _links(cfg, cc, topo, links, fl, jb, fb, fs, ks, ns_, k, t, trace)
        if ks[I_PE] > 0:
            _serve_band_queues(cfg, links, fl, fb, fs, ks, k)
        ks[I_STEPS] += 1
        k = _next_slot(cfg, cc, topo, fl, jb, fb, ks, k + 1, t_stop)  # 5. the next slot
    ks[I_K] = k
    ks[I_STATUS] = status
    fs[F_T] = t
