"""CUBIC (RFC 9438): window W(t) = C (t - K)^3 + W_max, with the Reno-friendly region.

Windows are tracked in segments internally (as the RFC writes them) and exposed in bytes."""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .base import CWND, CaState, CongestionOps, Param, reduce_to, slow_start, timeout_to

C, BETA, FAST_CONVERGENCE = 0, 1, 2                   # parameter vector
W_MAX, W_LAST_MAX, EPOCH, K, W_EST, RTT = range(6)    # CubicState columns


class CubicState(CaState):
    fields = ("w_max", "w_last_max", "epoch", "k", "w_est", "rtt")


@njit(cache=True)
def init(p, tcp, ca, i, now):
    ca[i, :] = 0.0
    ca[i, EPOCH] = np.nan        # no congestion-avoidance epoch yet


@njit(cache=True)
def pkts_acked(p, tcp, ca, i, acked, rtt, now):
    ca[i, RTT] = rtt


@njit(cache=True)
def k_of(p, w_max, cwnd_seg):
    """K = cbrt((W_max - cwnd_epoch) / C), RFC 9438 eq. 2 (seconds)."""
    return np.cbrt(max(w_max - cwnd_seg, 0.0) / p[C])


@njit(cache=True)
def w_cubic(p, ca, i, t):
    return p[C] * (t - ca[i, K]) ** 3 + ca[i, W_MAX]


@njit(cache=True)
def cong_avoid(p, tcp, ca, i, acked, gain, now, mss):
    left = slow_start(tcp, i, acked)
    if left <= 0.0:
        return
    seg = tcp[i, CWND] / mss
    if math.isnan(ca[i, EPOCH]):     # a new epoch starts at the first avoidance ACK after a reduction
        if ca[i, W_MAX] < seg:
            ca[i, W_MAX] = seg
        ca[i, K] = k_of(p, ca[i, W_MAX], seg)
        ca[i, W_EST] = seg
        ca[i, EPOCH] = now
    t = now - ca[i, EPOCH] + ca[i, RTT]
    target = min(max(w_cubic(p, ca, i, t), seg), 1.5 * seg)
    acked_seg = left / mss
    cubic_inc = gain * (target - seg) / seg * acked_seg
    alpha = 3.0 * (1.0 - p[BETA]) / (1.0 + p[BETA])     # Reno-friendly additive increase
    ca[i, W_EST] += gain * alpha * acked_seg / seg
    tcp[i, CWND] = max(ca[i, W_EST], seg + cubic_inc) * mss


@njit(cache=True)
def ssthresh(p, tcp, ca, i, dscale):
    return tcp[i, CWND] * (1.0 - (1.0 - p[BETA]) * dscale)


@njit(cache=True)
def on_congestion(p, tcp, ca, i, ecn, now, dscale, mss):
    seg = tcp[i, CWND] / mss
    w_max = seg
    if p[FAST_CONVERGENCE] != 0.0 and seg < ca[i, W_LAST_MAX]:   # RFC 9438 4.7: release bandwidth faster
        w_max = seg * (1.0 + p[BETA]) / 2.0
    ca[i, W_LAST_MAX] = seg
    ca[i, W_MAX] = w_max
    ca[i, EPOCH] = np.nan
    reduce_to(tcp, i, ssthresh(p, tcp, ca, i, dscale), mss)


@njit(cache=True)
def on_timeout(p, tcp, ca, i, now, dscale, mss):
    ca[i, EPOCH] = np.nan
    ca[i, W_MAX] = tcp[i, CWND] / mss
    timeout_to(tcp, i, ssthresh(p, tcp, ca, i, dscale), mss)


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

    k_init, k_pkts_acked, k_cong_avoid = staticmethod(init), staticmethod(pkts_acked), staticmethod(cong_avoid)
    k_ssthresh, k_on_congestion, k_on_timeout = staticmethod(ssthresh), staticmethod(on_congestion), staticmethod(on_timeout)
    k_cwnd_event = staticmethod(cwnd_event)

    def kernel_params(self):
        return [self.c, self.beta, float(self.fast_convergence)]

    @property
    def alpha(self) -> float:
        return 3.0 * (1.0 - self.beta) / (1.0 + self.beta)

    def k_of(self, w_max, cwnd_seg):
        return np.cbrt(np.maximum(np.asarray(w_max) - cwnd_seg, 0.0) / self.c)

    def w_cubic(self, st, t):
        """W(t) in segments for every flow of ``st``."""
        return self.c * (np.asarray(t) - st.ca.k) ** 3 + st.ca.w_max
