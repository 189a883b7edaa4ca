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

from .base import CWND, SSTHRESH, CaState, CongestionOps, Param, reduce_to, slow_start, timeout_to

C, BETA, FAST_CONVERGENCE, HYSTART, HYSTART_TRAIN, HYSTART_ROUNDS = range(6)     # parameter vector
# CubicState columns: W_MAX the current curve's plateau (Linux bic_origin_point), W_LAST_MAX the
# W_max of RFC 9438 (Linux last_max_cwnd: cwnd at the last reduction, lowered by fast convergence)
W_MAX, W_LAST_MAX, EPOCH, K, W_EST, RTT = range(6)
(DELAY_MIN, HS_FOUND, HS_ACKED, HS_END, HS_ROUND_T, HS_LAST_ACK, HS_CUR_RTT, HS_LAST_RTT,
 HS_SAMPLES, HS_CSS, HS_CSS_BASE) = range(6, 17)

HS_OFF, HS_LINUX, HS_PLUS = 0, 1, 2
HS_LOW_WINDOW = 16           # segments (Linux hystart_low_window, ns-3 HyStartLowWindow)
HS_MIN_SAMPLES = 8           # Linux HYSTART_MIN_SAMPLES, RFC 9406 N_RTT_SAMPLE
HS_ACK_DELTA = 2e-3          # ACKs closer than this form a train (Linux hystart_ack_delta_us)
HS_DELAY_LO, HS_DELAY_HI = 4e-3, 16e-3    # clamp of the delay threshold (RFC 9406 MIN/MAX_RTT_THRESH)
CSS_GROWTH_DIVISOR, CSS_ROUNDS = 4.0, 5   # RFC 9406 conservative slow start


class CubicState(CaState):
    fields = ("w_max", "w_last_max", "epoch", "k", "w_est", "rtt",
              "delay_min", "hs_found", "hs_acked", "hs_end", "hs_round_t", "hs_last_ack",
              "hs_cur_rtt", "hs_last_rtt", "hs_samples", "hs_css", "hs_css_base")


@njit(cache=True)
def hystart_reset(ca, i):
    """Forget the slow-start exit (connection start, retransmission timeout: Linux bictcp_reset)."""
    ca[i, DELAY_MIN] = 0.0
    ca[i, HS_FOUND] = 0.0
    ca[i, HS_ACKED] = 0.0
    ca[i, HS_END] = 0.0           # the first ACK starts a round
    ca[i, HS_CUR_RTT] = np.inf
    ca[i, HS_LAST_RTT] = np.inf
    ca[i, HS_SAMPLES] = 0.0
    ca[i, HS_CSS] = -1.0          # not in conservative slow start


@njit(cache=True)
def init(p, tcp, ca, i, now):
    ca[i, :] = 0.0
    ca[i, EPOCH] = np.nan        # no congestion-avoidance epoch yet
    hystart_reset(ca, i)


@njit(cache=True)
def pkts_acked(p, tcp, ca, i, acked, rtt, now, mss):
    ca[i, RTT] = rtt
    if rtt > 0.0 and (ca[i, DELAY_MIN] == 0.0 or rtt < ca[i, DELAY_MIN]):
        ca[i, DELAY_MIN] = rtt
    if tcp[i, CWND] < tcp[i, SSTHRESH]:     # HyStart sees every ACK in slow start, cwnd-limited or not
        hystart_update(p, tcp, ca, i, acked, now, mss)      # (Linux bictcp_acked, ns-3 TcpCubic::PktsAcked)


@njit(cache=True)
def _leave_slow_start(tcp, ca, i):
    ca[i, HS_FOUND] = 1.0
    ca[i, HS_CSS] = -1.0
    tcp[i, SSTHRESH] = tcp[i, CWND]


@njit(cache=True)
def _new_round(ca, i, now, cwnd):
    """A HyStart round starts: it ends when a window's worth of bytes (cwnd now) is acknowledged."""
    ca[i, HS_END] = ca[i, HS_ACKED] + cwnd
    ca[i, HS_ROUND_T] = now
    ca[i, HS_LAST_ACK] = now
    ca[i, HS_LAST_RTT] = ca[i, HS_CUR_RTT]
    ca[i, HS_CUR_RTT] = np.inf
    ca[i, HS_SAMPLES] = 0.0


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
    mode = p[HYSTART]
    if mode == HS_OFF or ca[i, HS_FOUND] != 0.0:
        return
    cwnd = tcp[i, CWND]
    rtt = ca[i, RTT]
    ns3_rounds = mode == HS_LINUX and p[HYSTART_ROUNDS] != 0.0
    ca[i, HS_ACKED] += acked
    if mode == HS_LINUX and not ns3_rounds and cwnd < HS_LOW_WINDOW * mss:
        ca[i, HS_END] = ca[i, HS_ACKED]           # no round yet: the next ACK at 16 segments starts one
        return
    ended = ca[i, HS_ACKED] >= ca[i, HS_END]      # the round's window is acknowledged
    if ended and not ns3_rounds:
        _new_round(ca, i, now, cwnd)
        if ca[i, HS_CSS] >= 0.0:
            ca[i, HS_CSS] += 1.0
            if ca[i, HS_CSS] >= CSS_ROUNDS:       # RFC 9406: CSS_ROUNDS in CSS, then avoidance
                _leave_slow_start(tcp, ca, i)
                return
    if rtt > 0.0:
        ca[i, HS_CUR_RTT] = min(ca[i, HS_CUR_RTT], rtt)
        ca[i, HS_SAMPLES] += 1.0
    if cwnd >= HS_LOW_WINDOW * mss:
        if mode == HS_LINUX:
            if now - ca[i, HS_LAST_ACK] <= HS_ACK_DELTA:      # the ACK train goes on
                ca[i, HS_LAST_ACK] = now
                if now - ca[i, HS_ROUND_T] > p[HYSTART_TRAIN] * ca[i, DELAY_MIN]:
                    _leave_slow_start(tcp, ca, i)
                    return
            dmin = ca[i, DELAY_MIN]
            if ca[i, HS_SAMPLES] >= HS_MIN_SAMPLES and \
                    ca[i, HS_CUR_RTT] > dmin + min(max(dmin / 8.0, HS_DELAY_LO), HS_DELAY_HI):
                _leave_slow_start(tcp, ca, i)
                return
        elif ca[i, HS_CSS] >= 0.0:
            if ca[i, HS_CUR_RTT] < ca[i, HS_CSS_BASE]:        # the delay increase was spurious
                ca[i, HS_CSS] = -1.0
        else:
            last = ca[i, HS_LAST_RTT]
            if ca[i, HS_SAMPLES] >= HS_MIN_SAMPLES and ca[i, HS_CUR_RTT] < np.inf and last < np.inf and \
                    ca[i, HS_CUR_RTT] >= last + min(max(last / 8.0, HS_DELAY_LO), HS_DELAY_HI):
                ca[i, HS_CSS] = 0.0
                ca[i, HS_CSS_BASE] = ca[i, HS_CUR_RTT]
    if ended and ns3_rounds:
        _new_round(ca, i, now, cwnd)


@njit(cache=True)
def k_of(p, w_max, cwnd_seg):
    """K = cbrt((W_max - cwnd_epoch) / C), RFC 9438 eq. 2 (seconds)."""
    return np.cbrt(max(w_max - cwnd_seg, 0.0) / p[C])


@njit(cache=True)
def w_cubic(p, ca, i, t):
    return p[C] * (t - ca[i, K]) ** 3 + ca[i, W_MAX]


@njit(cache=True)
def cong_avoid(p, tcp, ca, i, acked, gain, now, mss):
    if tcp[i, CWND] < tcp[i, SSTHRESH]:
        f = 1.0 / CSS_GROWTH_DIVISOR if ca[i, HS_CSS] >= 0.0 else 1.0   # HyStart++ conservative slow start
        left = slow_start(tcp, i, acked * f) / f
    else:
        left = acked
    if left <= 0.0:
        return
    seg = tcp[i, CWND] / mss
    if math.isnan(ca[i, EPOCH]):     # a new epoch starts at the first avoidance ACK after a reduction:
        ca[i, W_MAX] = max(ca[i, W_LAST_MAX], seg)     # the curve's plateau (Linux bic_origin_point)
        ca[i, K] = k_of(p, ca[i, W_MAX], seg)
        ca[i, W_EST] = seg
        ca[i, EPOCH] = now
    t = now - ca[i, EPOCH] + (ca[i, DELAY_MIN] if ca[i, DELAY_MIN] > 0.0 else ca[i, RTT])  # Linux: + delay_min
    target = min(max(w_cubic(p, ca, i, t), seg), 1.5 * seg)
    acked_seg = left / mss
    rate = (target - seg) / seg                   # segments per acked segment (Linux 1 / ca->cnt)
    if ca[i, W_LAST_MAX] == 0.0:                  # no loss yet (or since an RTO): at least 5 % per RTT
        rate = max(rate, 0.05)                    # (Linux bictcp_update: cnt <= 20; ns-3 TcpCubic too)
    cubic_inc = gain * rate * acked_seg
    alpha = 3.0 * (1.0 - p[BETA]) / (1.0 + p[BETA])     # Reno-friendly additive increase
    ca[i, W_EST] += gain * alpha * acked_seg / seg
    tcp[i, CWND] = max(ca[i, W_EST], seg + cubic_inc) * mss


@njit(cache=True)
def ssthresh(p, tcp, ca, i, dscale):
    return tcp[i, CWND] * (1.0 - (1.0 - p[BETA]) * dscale)


@njit(cache=True)
def on_congestion(p, tcp, ca, i, ecn, now, dscale, mss):
    seg = tcp[i, CWND] / mss
    # RFC 9438 4.7 / Linux bictcp_recalc_ssthresh: one W_max, compared and lowered in place (not
    # RFC 8312's W_last_max, which keeps the unlowered value: fast convergence would fire more often).
    # Compared in whole segments, as Linux's integer windows are: a window that crept up to the
    # plateau (W(t) approaches W_max from below) is at W_max, not below it
    if p[FAST_CONVERGENCE] != 0.0 and math.floor(seg) < math.floor(ca[i, W_LAST_MAX]):
        ca[i, W_LAST_MAX] = seg * (1.0 + p[BETA]) / 2.0
    else:
        ca[i, W_LAST_MAX] = seg
    ca[i, W_MAX] = ca[i, W_LAST_MAX]
    ca[i, EPOCH] = np.nan
    reduce_to(tcp, i, ssthresh(p, tcp, ca, i, dscale), mss)


@njit(cache=True)
def on_timeout(p, tcp, ca, i, now, dscale, mss):
    timeout_to(tcp, i, ssthresh(p, tcp, ca, i, dscale), mss)
    # Linux: CA_Loss resets CUBIC (bictcp_reset: W_max, last_max_cwnd = 0) and HyStart
    hystart_reset(ca, i)
    ca[i, EPOCH] = np.nan
    ca[i, W_MAX] = 0.0
    ca[i, W_LAST_MAX] = 0.0


@njit(cache=True)
def cwnd_event(p, tcp, ca, i, now, idle):
    """TX_START after ``idle`` s without sending: the epoch moves by the idle time, so the curve
    does not count time the flow was not sending (Linux bictcp_cwnd_event)."""
    if not math.isnan(ca[i, EPOCH]) and idle > 0.0:
        ca[i, EPOCH] = min(ca[i, EPOCH] + idle, now)


class Cubic(CongestionOps):
    name = "cubic"
    kind = 1
    State = CubicState
    c = Param(0.4, "segments/s^3", "cubic growth constant C")
    beta = Param(0.7, "1", "window kept after a reduction (beta_cubic)")
    fast_convergence = Param(True, "bool", "lower W_max when a flow loses before regaining it (RFC 9438 4.7)")
    hystart = Param(1, "mode", "slow-start exit: 0 off, 1 HyStart (Linux, ns-3), 2 HyStart++ (RFC 9406)")
    hystart_train = Param(0.5, "min RTT", "HyStart ACK-train length that ends slow start (Linux 0.5, ns-3 1.0)")
    hystart_rounds = Param(0, "mode", "HyStart rounds: 0 Linux (from 16 segments, reset before the checks), "
                                      "1 ns-3 3.44 (from the first ACK, checked before the reset)")

    k_init, k_pkts_acked, k_cong_avoid = staticmethod(init), staticmethod(pkts_acked), staticmethod(cong_avoid)
    k_ssthresh, k_on_congestion, k_on_timeout = staticmethod(ssthresh), staticmethod(on_congestion), staticmethod(on_timeout)
    k_cwnd_event = staticmethod(cwnd_event)

    def kernel_params(self):
        if self.hystart not in (HS_OFF, HS_LINUX, HS_PLUS):
            raise ValueError(f"cubic: hystart must be 0 (off), 1 (HyStart) or 2 (HyStart++), got {self.hystart!r}")
        if self.hystart_rounds not in (0, 1):
            raise ValueError(f"cubic: hystart_rounds must be 0 (Linux) or 1 (ns-3), got {self.hystart_rounds!r}")
        return [self.c, self.beta, float(self.fast_convergence), float(self.hystart), float(self.hystart_train),
                float(self.hystart_rounds)]

    @property
    def alpha(self) -> float:
        return 3.0 * (1.0 - self.beta) / (1.0 + self.beta)

    def k_of(self, w_max, cwnd_seg):
        return np.cbrt(np.maximum(np.asarray(w_max) - cwnd_seg, 0.0) / self.c)

    def w_cubic(self, st, t):
        """W(t) in segments for every flow of ``st``."""
        return self.c * (np.asarray(t) - st.ca.k) ** 3 + st.ca.w_max
