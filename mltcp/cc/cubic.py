"""CUBIC (RFC 9438): window W(t) = C (t - K)^3 + W_max, with the Reno-friendly region.

Windows are tracked in segments internally (as the RFC writes them) and exposed in bytes."""
from __future__ import annotations

import numpy as np

from .base import CongestionOps, FlowState, slow_start


class Cubic(CongestionOps):
    name = "cubic"

    def __init__(self, c: float = 0.4, beta: float = 0.7, fast_convergence: bool = True):
        self.c = c
        self.beta = beta                                   # window kept after a reduction
        self.alpha = 3.0 * (1.0 - beta) / (1.0 + beta)     # Reno-friendly additive increase
        self.fast_convergence = fast_convergence

    def init(self, st: FlowState, now: float) -> None:
        st.w_max = np.zeros(st.n)          # segments
        st.w_last_max = np.zeros(st.n)
        st.epoch = np.full(st.n, np.nan)   # start of the current congestion-avoidance epoch
        st.k = np.zeros(st.n)              # seconds
        st.w_est = np.zeros(st.n)          # Reno-friendly estimate, segments

    def k_of(self, w_max, cwnd_seg):
        """K = cbrt((W_max - cwnd_epoch) / C), RFC 9438 eq. 2."""
        return np.cbrt(np.maximum(w_max - cwnd_seg, 0.0) / self.c)

    def w_cubic(self, st: FlowState, t):
        return self.c * (t - st.k) ** 3 + st.w_max

    def on_ack(self, st: FlowState, acked, rtt, now):
        acked = np.asarray(acked, dtype=float)
        _, left = slow_start(st, acked)
        ca = left > 0          # bytes left for congestion avoidance after slow start
        seg = st.cwnd / st.mss
        # A new epoch starts at the first congestion-avoidance ack after a reduction.
        fresh = ca & np.isnan(st.epoch)
        st.w_max = np.where(fresh & (st.w_max < seg), seg, st.w_max)
        st.k = np.where(fresh, self.k_of(st.w_max, seg), st.k)
        st.w_est = np.where(fresh, seg, st.w_est)
        st.epoch = np.where(fresh, now, st.epoch)
        t = now - np.nan_to_num(st.epoch, nan=now) + np.asarray(rtt, dtype=float)
        target = np.clip(self.w_cubic(st, t), seg, 1.5 * seg)
        gain = self.increase_gain(st)
        acked_seg = left / st.mss
        cubic_inc = gain * (target - seg) / seg * acked_seg
        st.w_est = st.w_est + gain * self.alpha * acked_seg / seg
        new_seg = np.where(st.w_est > seg + cubic_inc, st.w_est, seg + cubic_inc)
        st.cwnd = np.where(ca, new_seg * st.mss, st.cwnd)

    def ssthresh(self, st: FlowState):
        return st.cwnd * (1.0 - self.decrease_factor(st, 1.0 - self.beta))

    def on_congestion(self, st, mask, kind, now):
        m = np.asarray(mask, dtype=bool)
        seg = st.cwnd / st.mss
        w_max = seg
        if self.fast_convergence:   # RFC 9438 4.7: release bandwidth faster to newer flows
            w_max = np.where(seg < st.w_last_max, seg * (1.0 + self.beta) / 2.0, seg)
        st.w_last_max = np.where(m, seg, st.w_last_max)
        st.w_max = np.where(m, w_max, st.w_max)
        st.epoch = np.where(m, np.nan, st.epoch)
        super().on_congestion(st, m, kind, now)

    def on_timeout(self, st, mask, now):
        m = np.asarray(mask, dtype=bool)
        st.epoch = np.where(m, np.nan, st.epoch)
        st.w_max = np.where(m, st.cwnd / st.mss, st.w_max)
        super().on_timeout(st, m, now)
