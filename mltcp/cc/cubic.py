"""CUBIC (RFC 9438): window W(t) = C (t - K)^3 + W_max, with the Reno-friendly region, and
hybrid slow start to leave slow start before the buffer overflows.

Windows are tracked in segments internally (as the RFC writes them) and exposed in bytes.

Slow-start exit (``hystart``): 1 = HyStart as Linux ``tcp_cubic`` and ns-3 ``TcpCubic`` run it
(default): from 16 segments on, slow start ends (ssthresh = cwnd) when a round's ACK train lasts
longer than ``hystart_train`` x the minimum RTT (Linux 0.5 without pacing, ns-3 1.0), or when the
round's minimum RTT (after 8 samples) exceeds the minimum RTT by clamp(min RTT / 8, 4 ms, 16 ms);
it runs once per connection and again after a retransmission timeout. Rounds (``hystart_rounds``):
0 as Linux (from 16 segments, each round reset before the checks), 1 as ns-3 3.44 (from the first
ACK, the checks before the next round starts). 2 = HyStart++ (RFC 9406):
the delay rule against the previous round's minimum, then conservative slow start (growth / 4)
for 5 rounds before avoidance, back to slow start if the RTT falls below the baseline. 0 = off.
A round ends when a window's worth of bytes (the cwnd at its start) has been acknowledged."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .base import CWND, SSTHRESH, CaState, CongestionOps, Ops, Param, reduce_to, slow_start, timeout_to


HS_OFF, HS_LINUX, HS_PLUS = 0, 1, 2
HS_LOW_WINDOW = 16  # segments (Linux hystart_low_window, ns-3 HyStartLowWindow)
HS_MIN_SAMPLES = 8  # Linux HYSTART_MIN_SAMPLES, RFC 9406 N_RTT_SAMPLE
HS_ACK_DELTA = 2e-3  # ACKs closer than this form a train (Linux hystart_ack_delta_us)
HS_DELAY_LO, HS_DELAY_HI = 4e-3, 16e-3  # clamp of the delay threshold (RFC 9406 MIN/MAX_RTT_THRESH)
CSS_GROWTH_DIVISOR, CSS_ROUNDS = 4.0, 5  # RFC 9406 conservative slow start


class CubicState(CaState):
    """w_max: the current curve's plateau (Linux bic_origin_point); w_last_max: the W_max of RFC 9438
    (Linux last_max_cwnd: cwnd at the last reduction, lowered by fast convergence); epoch, k, w_est:
    the avoidance epoch's start, K and the Reno-friendly estimate; rtt, delay_min; hs_*: HyStart."""

    fields = (
        "w_max",
        "w_last_max",
        "epoch",
        "k",
        "w_est",
        "rtt",
        "delay_min",
        "hs_found",
        "hs_acked",
        "hs_end",
        "hs_round_t",
        "hs_last_ack",
        "hs_cur_rtt",
        "hs_last_rtt",
        "hs_samples",
        "hs_css",
        "hs_css_base",
    )


@njit(cache=True)
def hystart_reset(ca, i):
    """Forget the slow-start exit (connection start, retransmission timeout: Linux bictcp_reset)."""
    ca[i, S.delay_min] = 0.0
    ca[i, S.hs_found] = 0.0
    ca[i, S.hs_acked] = 0.0
    ca[i, S.hs_end] = 0.0  # the first ACK starts a round
    ca[i, S.hs_cur_rtt] = np.inf
    ca[i, S.hs_last_rtt] = np.inf
    ca[i, S.hs_samples] = 0.0
    ca[i, S.hs_css] = -1.0  # not in conservative slow start


@njit(cache=True)
def init(p, tcp, ca, i, now):
    ca[i, :] = 0.0
    ca[i, S.epoch] = np.nan  # no congestion-avoidance epoch yet
    hystart_reset(ca, i)


@njit(cache=True)
def pkts_acked(p, tcp, ca, i, acked, rtt, now, mss):
    ca[i, S.rtt] = rtt
    if rtt > 0.0 and (ca[i, S.delay_min] == 0.0 or rtt < ca[i, S.delay_min]):
        ca[i, S.delay_min] = rtt
    if tcp[i, CWND] < tcp[i, SSTHRESH]:  # HyStart sees every ACK in slow start, cwnd-limited or not
        hystart_update(p, tcp, ca, i, acked, now, mss)  # (Linux bictcp_acked, ns-3 TcpCubic::PktsAcked)


@njit(cache=True)
def _leave_slow_start(tcp, ca, i):
    ca[i, S.hs_found] = 1.0
    ca[i, S.hs_css] = -1.0
    tcp[i, SSTHRESH] = tcp[i, CWND]


@njit(cache=True)
def _new_round(ca, i, now, cwnd):
    """A HyStart round starts: it ends when a window's worth of bytes (cwnd now) is acknowledged."""
    ca[i, S.hs_end] = ca[i, S.hs_acked] + cwnd
    ca[i, S.hs_round_t] = now
    ca[i, S.hs_last_ack] = now
    ca[i, S.hs_last_rtt] = ca[i, S.hs_cur_rtt]
    ca[i, S.hs_cur_rtt] = np.inf
    ca[i, S.hs_samples] = 0.0


@njit(cache=True)
def hystart_update(p, tcp, ca, i, acked, now, mss):
    """One ACK (batch) in slow start, whether or not the window limits the sender: round
    bookkeeping and the exit rules (HyStart++'s conservative slow start: ``HS_CSS`` >= 0, which
    :func:`cong_avoid` reads to grow by 1/4).

    HyStart's rounds (``hystart_rounds``): 0 = Linux (``hystart_update``, called from the low window
    on: no rounds below 16 segments, so the first one starts mid-burst; a round that ends starts the
    next before the checks); 1 = ns-3 3.44's ``TcpCubic`` (rounds from the first ACK; the checks
    run against the round this ACK ends, then the next starts). At sub-millisecond RTTs both put the
    idle gap between two bursts inside an ACK train (ACKs < 2 ms apart), so slow start ends at the
    second burst after 16 segments (traced against ns-3: docs/ns3.md)."""
    mode = p[P.hystart]
    if mode == HS_OFF or ca[i, S.hs_found] != 0.0:
        return
    cwnd = tcp[i, CWND]
    rtt = ca[i, S.rtt]
    ns3_rounds = mode == HS_LINUX and p[P.hystart_rounds] != 0.0
    ca[i, S.hs_acked] += acked
    if mode == HS_LINUX and not ns3_rounds and cwnd < HS_LOW_WINDOW * mss:
        ca[i, S.hs_end] = ca[i, S.hs_acked]  # no round yet: the next ACK at 16 segments starts one
        return
    ended = ca[i, S.hs_acked] >= ca[i, S.hs_end]  # the round's window is acknowledged
    if ended and not ns3_rounds:
        _new_round(ca, i, now, cwnd)
        if ca[i, S.hs_css] >= 0.0:
            ca[i, S.hs_css] += 1.0
            if ca[i, S.hs_css] >= CSS_ROUNDS:  # RFC 9406: CSS_ROUNDS in CSS, then avoidance
                _leave_slow_start(tcp, ca, i)
                return
    if rtt > 0.0:
        ca[i, S.hs_cur_rtt] = min(ca[i, S.hs_cur_rtt], rtt)
        ca[i, S.hs_samples] += 1.0
    if cwnd >= HS_LOW_WINDOW * mss:
        if mode == HS_LINUX:
            if now - ca[i, S.hs_last_ack] <= HS_ACK_DELTA:  # the ACK train goes on
                ca[i, S.hs_last_ack] = now
                if now - ca[i, S.hs_round_t] > p[P.hystart_train] * ca[i, S.delay_min]:
                    _leave_slow_start(tcp, ca, i)
                    return
            dmin = ca[i, S.delay_min]
            if ca[i, S.hs_samples] >= HS_MIN_SAMPLES and ca[i, S.hs_cur_rtt] > dmin + min(
                max(dmin / 8.0, HS_DELAY_LO), HS_DELAY_HI
            ):
                _leave_slow_start(tcp, ca, i)
                return
        elif ca[i, S.hs_css] >= 0.0:
            if ca[i, S.hs_cur_rtt] < ca[i, S.hs_css_base]:  # the delay increase was spurious
                ca[i, S.hs_css] = -1.0
        else:
            last = ca[i, S.hs_last_rtt]
            if (
                ca[i, S.hs_samples] >= HS_MIN_SAMPLES
                and ca[i, S.hs_cur_rtt] < np.inf
                and last < np.inf
                and ca[i, S.hs_cur_rtt] >= last + min(max(last / 8.0, HS_DELAY_LO), HS_DELAY_HI)
            ):
                ca[i, S.hs_css] = 0.0
                ca[i, S.hs_css_base] = ca[i, S.hs_cur_rtt]
    if ended and ns3_rounds:
        _new_round(ca, i, now, cwnd)


@njit(cache=True)
def k_of(p, w_max, cwnd_seg):
    """K = cbrt((W_max - cwnd_epoch) / C), RFC 9438 eq. 2 (seconds)."""
    return np.cbrt(max(w_max - cwnd_seg, 0.0) / p[P.c])


@njit(cache=True)
def w_cubic(p, ca, i, t):
    return p[P.c] * (t - ca[i, S.k]) ** 3 + ca[i, S.w_max]


@njit(cache=True)
def cong_avoid(p, tcp, ca, i, acked, gain, now, mss):
    if tcp[i, CWND] < tcp[i, SSTHRESH]:
        f = 1.0 / CSS_GROWTH_DIVISOR if ca[i, S.hs_css] >= 0.0 else 1.0  # HyStart++ conservative slow start
        left = slow_start(tcp, i, acked * f) / f
    else:
        left = acked
    if left <= 0.0:
        return
    seg = tcp[i, CWND] / mss
    if math.isnan(ca[i, S.epoch]):  # a new epoch starts at the first avoidance ACK after a reduction:
        ca[i, S.w_max] = max(ca[i, S.w_last_max], seg)  # the curve's plateau (Linux bic_origin_point)
        ca[i, S.k] = k_of(p, ca[i, S.w_max], seg)
        ca[i, S.w_est] = seg
        ca[i, S.epoch] = now
    t = now - ca[i, S.epoch] + (ca[i, S.delay_min] if ca[i, S.delay_min] > 0.0 else ca[i, S.rtt])  # Linux: + delay_min
    target = min(max(w_cubic(p, ca, i, t), seg), 1.5 * seg)
    acked_seg = left / mss
    rate = (target - seg) / seg  # segments per acked segment (Linux 1 / ca->cnt)
    if ca[i, S.w_last_max] == 0.0:  # no loss yet (or since an RTO): at least 5 % per RTT
        rate = max(rate, 0.05)  # (Linux bictcp_update: cnt <= 20; ns-3 TcpCubic too)
    cubic_inc = gain * rate * acked_seg
    alpha = 3.0 * (1.0 - p[P.beta]) / (1.0 + p[P.beta])  # Reno-friendly additive increase
    ca[i, S.w_est] += gain * alpha * acked_seg / seg
    tcp[i, CWND] = max(ca[i, S.w_est], seg + cubic_inc) * mss


@njit(cache=True)
def ssthresh(p, tcp, ca, i, dscale):
    return tcp[i, CWND] * (1.0 - (1.0 - p[P.beta]) * dscale)


@njit(cache=True)
def on_congestion(p, tcp, ca, i, ecn, now, dscale, mss):
    seg = tcp[i, CWND] / mss
    # RFC 9438 4.7 / Linux bictcp_recalc_ssthresh: one W_max, compared and lowered in place (not
    # RFC 8312's W_last_max, which keeps the unlowered value: fast convergence would fire more often).
    # Compared in whole segments, as Linux's integer windows are: a window that crept up to the
    # plateau (W(t) approaches W_max from below) is at W_max, not below it
    if p[P.fast_convergence] != 0.0 and math.floor(seg) < math.floor(ca[i, S.w_last_max]):
        ca[i, S.w_last_max] = seg * (1.0 + p[P.beta]) / 2.0
    else:
        ca[i, S.w_last_max] = seg
    ca[i, S.w_max] = ca[i, S.w_last_max]
    ca[i, S.epoch] = np.nan
    reduce_to(tcp, i, ssthresh(p, tcp, ca, i, dscale), mss)


@njit(cache=True)
def on_timeout(p, tcp, ca, i, now, dscale, mss):
    timeout_to(tcp, i, ssthresh(p, tcp, ca, i, dscale), mss)
    # Linux: CA_Loss resets CUBIC (bictcp_reset: W_max, last_max_cwnd = 0) and HyStart
    hystart_reset(ca, i)
    ca[i, S.epoch] = np.nan
    ca[i, S.w_max] = 0.0
    ca[i, S.w_last_max] = 0.0


@njit(cache=True)
def cwnd_event(p, tcp, ca, i, now, idle):
    """TX_START after ``idle`` s without sending: the epoch moves by the idle time, so the curve
    does not count time the flow was not sending (Linux bictcp_cwnd_event)."""
    if not math.isnan(ca[i, S.epoch]) and idle > 0.0:
        ca[i, S.epoch] = min(ca[i, S.epoch] + idle, now)


class Cubic(CongestionOps):
    name = "cubic"
    State = CubicState
    c = Param(0.4, "segments/s^3", "cubic growth constant C")
    beta = Param(0.7, "1", "window kept after a reduction (beta_cubic)")
    fast_convergence = Param(True, "bool", "lower W_max when a flow loses before regaining it (RFC 9438 4.7)")
    hystart = Param(1, "mode", "slow-start exit: 0 off, 1 HyStart (Linux, ns-3), 2 HyStart++ (RFC 9406)")
    hystart_train = Param(0.5, "min RTT", "HyStart ACK-train length that ends slow start (Linux 0.5, ns-3 1.0)")
    hystart_rounds = Param(
        0,
        "mode",
        "HyStart rounds: 0 Linux (from 16 segments, reset before the checks), "
        "1 ns-3 3.44 (from the first ACK, checked before the reset)",
    )
    ops = Ops(
        init=init,
        pkts_acked=pkts_acked,
        cong_avoid=cong_avoid,
        ssthresh=ssthresh,
        on_congestion=on_congestion,
        on_timeout=on_timeout,
        cwnd_event=cwnd_event,
    )

    def check(self):
        if self.hystart not in (HS_OFF, HS_LINUX, HS_PLUS):
            raise ValueError(f"cubic: hystart must be 0 (off), 1 (HyStart) or 2 (HyStart++), got {self.hystart!r}")
        if self.hystart_rounds not in (0, 1):
            raise ValueError(f"cubic: hystart_rounds must be 0 (Linux) or 1 (ns-3), got {self.hystart_rounds!r}")

    @property
    def alpha(self) -> float:
        return 3.0 * (1.0 - self.beta) / (1.0 + self.beta)

    def k_of(self, w_max, cwnd_seg):
        return np.cbrt(np.maximum(np.asarray(w_max) - cwnd_seg, 0.0) / self.c)

    def w_cubic(self, st, t):
        """W(t) in segments for every flow of ``st``."""
        return self.c * (np.asarray(t) - st.ca.k) ** 3 + st.ca.w_max


P, S = Cubic.param_index(), CubicState.columns()  # P.beta: beta's index in p; S.w_max: w_max's column in ca
