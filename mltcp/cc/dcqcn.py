"""DCQCN reaction point (Zhu et al., SIGCOMM'15), Mellanox variant as in the HPCC ns-3 simulator.

Rates in bytes/s. Per flow: current rate Rc, target rate Rt, alpha, and two increase-event sources
(a timer and a byte counter) whose counts select fast recovery, additive or hyper increase."""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .base import CWND, RATE, CaState, CongestionOps, Param, _vec

MBPS = 1e6 / 8  # bytes/s per Mb/s

LINE_RATE, G, RAI, RHAI, MIN_RATE, TIMER, BYTE_COUNTER, F_STEPS, ALPHA_INTERVAL = range(9)
# where MLTCP's gain applies (mltcp.cc.mltcp.MLTCPDcqcn's dcqcn_f_* flags; the plain algorithm's gain is 1)
F_ON_RAI, F_ON_RHAI, F_ON_RECOVERY, F_ON_STEPS, F_ON_TIMER = range(9, 14)
TARGET, ALPHA, T_COUNT, B_COUNT, BYTES_ACC, NEXT_TIMER, LAST_ALPHA = range(7)


class DcqcnState(CaState):
    fields = ("target", "alpha", "t_count", "b_count", "bytes_acc", "next_timer", "last_alpha")


@njit(cache=True)
def init(p, tcp, ca, i, now):
    tcp[i, RATE] = p[LINE_RATE]            # Rc: start at line rate
    ca[i, :] = 0.0
    ca[i, TARGET] = p[LINE_RATE]           # Rt
    ca[i, ALPHA] = 1.0
    ca[i, NEXT_TIMER] = now + p[TIMER]
    ca[i, LAST_ALPHA] = now


@njit(cache=True)
def pkts_acked(p, tcp, ca, i, acked, rtt, now, mss):
    pass    # rate-based: reacts to CNPs, timers and bytes sent


@njit(cache=True)
def cong_avoid(p, tcp, ca, i, acked, gain, now, mss):
    pass


@njit(cache=True)
def ssthresh(p, tcp, ca, i, dscale):
    return tcp[i, CWND]


@njit(cache=True)
def decay_alpha(p, ca, i, now):
    """alpha <- (1-g) alpha once per alpha_interval without a CNP (applied in bulk)."""
    k = math.floor((now - ca[i, LAST_ALPHA]) / p[ALPHA_INTERVAL])
    if k > 0:
        ca[i, ALPHA] *= (1.0 - p[G]) ** k
        ca[i, LAST_ALPHA] += k * p[ALPHA_INTERVAL]


@njit(cache=True)
def on_cnp(p, tcp, ca, i, now, dscale):
    decay_alpha(p, ca, i, now)
    ca[i, ALPHA] = (1.0 - p[G]) * ca[i, ALPHA] + p[G]
    ca[i, LAST_ALPHA] = now
    cut = tcp[i, RATE] * (1.0 - ca[i, ALPHA] / 2.0 * dscale)
    ca[i, TARGET] = tcp[i, RATE]
    tcp[i, RATE] = max(p[MIN_RATE], cut)
    ca[i, T_COUNT] = 0.0
    ca[i, B_COUNT] = 0.0
    ca[i, BYTES_ACC] = 0.0
    ca[i, NEXT_TIMER] = now + p[TIMER]


@njit(cache=True)
def on_congestion(p, tcp, ca, i, ecn, now, dscale, mss):
    on_cnp(p, tcp, ca, i, now, dscale)   # a loss, where it happens, is treated as a notification


@njit(cache=True)
def on_timeout(p, tcp, ca, i, now, dscale, mss):
    on_cnp(p, tcp, ca, i, now, dscale)


@njit(cache=True)
def increase(p, tcp, ca, i, gain):
    hi, lo = max(ca[i, T_COUNT], ca[i, B_COUNT]), min(ca[i, T_COUNT], ca[i, B_COUNT])
    steps = max(1.0, round(p[F_STEPS] / gain)) if p[F_ON_STEPS] != 0.0 else p[F_STEPS]
    step = 0.0
    if hi >= steps:
        if lo >= steps:
            step = p[RHAI] * (gain if p[F_ON_RHAI] != 0.0 else 1.0)
        else:
            step = p[RAI] * (gain if p[F_ON_RAI] != 0.0 else 1.0)
    ca[i, TARGET] = min(ca[i, TARGET] + step, p[LINE_RATE])
    if p[F_ON_RECOVERY] != 0.0:
        rate = tcp[i, RATE] + (ca[i, TARGET] - tcp[i, RATE]) * min(1.0, gain / 2.0)
    else:
        rate = (tcp[i, RATE] + ca[i, TARGET]) / 2.0
    tcp[i, RATE] = min(rate, p[LINE_RATE])


@njit(cache=True)
def _period(p, gain):
    return 1.0 / gain if p[F_ON_TIMER] != 0.0 else 1.0


@njit(cache=True)
def on_timer(p, tcp, ca, i, now, gain):
    decay_alpha(p, ca, i, now)
    if now >= ca[i, NEXT_TIMER]:
        ca[i, T_COUNT] += 1.0
        ca[i, NEXT_TIMER] = now + p[TIMER] * _period(p, gain)
        increase(p, tcp, ca, i, gain)


@njit(cache=True)
def on_sent(p, tcp, ca, i, sent, now, gain):
    ca[i, BYTES_ACC] += sent
    bc = p[BYTE_COUNTER] * _period(p, gain)
    if ca[i, BYTES_ACC] >= bc:
        ca[i, BYTES_ACC] -= bc
        ca[i, B_COUNT] += 1.0
        increase(p, tcp, ca, i, gain)


class Dcqcn(CongestionOps):
    name = "dcqcn"
    kind = 2
    window_based = False
    State = DcqcnState
    line_rate = Param(25e9 / 8, "B/s", "NIC line rate, the start and maximum rate", in_scenario=False)
    g = Param(1 / 256, "1", "alpha gain")
    rai = Param(50 * MBPS, "B/s", "additive increase step R_AI", key="rai_mbps", scale=MBPS, key_unit="Mb/s")
    rhai = Param(100 * MBPS, "B/s", "hyper increase step R_HAI", key="rhai_mbps", scale=MBPS, key_unit="Mb/s")
    min_rate = Param(100 * MBPS, "B/s", "rate floor", key="min_rate_mbps", scale=MBPS, key_unit="Mb/s")
    timer = Param(900e-6, "s", "rate-increase timer", key="timer_us", scale=1e-6, key_unit="us")
    byte_counter = Param(10e6, "B", "rate-increase byte counter", key="byte_counter_kb", scale=1e3, key_unit="kB")
    fast_recovery_steps = Param(5, "1", "increase events spent in fast recovery (F)")
    alpha_interval = Param(1e-6, "s", "alpha decay interval", key="alpha_interval_us", scale=1e-6, key_unit="us")

    k_init, k_pkts_acked, k_cong_avoid = staticmethod(init), staticmethod(pkts_acked), staticmethod(cong_avoid)
    k_ssthresh, k_on_congestion, k_on_timeout = staticmethod(ssthresh), staticmethod(on_congestion), staticmethod(on_timeout)

    def kernel_params(self):
        return [self.line_rate, self.g, self.rai, self.rhai, self.min_rate, self.timer, self.byte_counter,
                float(self.fast_recovery_steps), self.alpha_interval] + self.hook_flags()

    def hook_flags(self) -> list[float]:
        """F_ON_* (MLTCP's DCQCN variant sets them; here the gain is 1, so they change nothing)."""
        return [1.0, 1.0, 0.0, 0.0, 0.0]

    @property
    def f(self) -> int:
        return self.fast_recovery_steps

    def on_cnp(self, st, mask, now):
        d = _vec(self.decrease_scale(st), st.n)
        for i in np.flatnonzero(np.broadcast_to(mask, (st.n,))):
            on_cnp(self.p, st.tcp, st.ca.a, i, now, d[i])

    def on_timer(self, st, now):
        gain = _vec(self.increase_gain(st), st.n)
        for i in range(st.n):
            on_timer(self.p, st.tcp, st.ca.a, i, now, gain[i])

    def on_sent(self, st, sent, now):
        sent = _vec(sent, st.n)
        gain = _vec(self.increase_gain(st), st.n)
        for i in np.flatnonzero(sent > 0):
            on_sent(self.p, st.tcp, st.ca.a, i, sent[i], now, gain[i])
