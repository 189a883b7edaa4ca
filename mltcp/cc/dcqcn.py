"""DCQCN reaction point (Zhu et al., SIGCOMM'15), Mellanox variant as in the HPCC ns-3 simulator.

Rates in bytes/s. Per flow: current rate Rc, target rate Rt, alpha, and two increase-event sources
(a timer and a byte counter) whose counts select fast recovery, additive or hyper increase."""

from __future__ import annotations

import math

from numba import njit

from .base import CWND, RATE, CaState, CongestionOps, Ops, Param

MBPS = 1e6 / 8  # bytes/s per Mb/s


class DcqcnState(CaState):
    fields = ("target", "alpha", "t_count", "b_count", "bytes_acc", "next_timer", "last_alpha")


@njit(cache=True)
def init(p, tcp, ca, i, now):
    tcp[i, RATE] = p[P.line_rate]  # Rc: start at line rate
    ca[i, :] = 0.0
    ca[i, S.target] = p[P.line_rate]  # Rt
    ca[i, S.alpha] = 1.0
    ca[i, S.next_timer] = now + p[P.timer]
    ca[i, S.last_alpha] = now


@njit(cache=True)
def ssthresh(p, tcp, ca, i, dscale):
    return tcp[i, CWND]


@njit(cache=True)
def decay_alpha(p, ca, i, now):
    """alpha <- (1-g) alpha once per alpha_interval without a CNP (applied in bulk)."""
    k = math.floor((now - ca[i, S.last_alpha]) / p[P.alpha_interval])
    if k > 0:
        ca[i, S.alpha] *= (1.0 - p[P.g]) ** k
        ca[i, S.last_alpha] += k * p[P.alpha_interval]


@njit(cache=True)
def on_cnp(p, tcp, ca, i, now, dscale):
    decay_alpha(p, ca, i, now)
    ca[i, S.alpha] = (1.0 - p[P.g]) * ca[i, S.alpha] + p[P.g]
    ca[i, S.last_alpha] = now
    cut = tcp[i, RATE] * (1.0 - ca[i, S.alpha] / 2.0 * dscale)
    ca[i, S.target] = tcp[i, RATE]
    tcp[i, RATE] = max(p[P.min_rate], cut)
    ca[i, S.t_count] = 0.0
    ca[i, S.b_count] = 0.0
    ca[i, S.bytes_acc] = 0.0
    ca[i, S.next_timer] = now + p[P.timer]


@njit(cache=True)
def on_congestion(p, tcp, ca, i, ecn, now, dscale, mss):
    on_cnp(p, tcp, ca, i, now, dscale)  # a loss, where it happens, is treated as a notification


@njit(cache=True)
def on_timeout(p, tcp, ca, i, now, dscale, mss):
    on_cnp(p, tcp, ca, i, now, dscale)


@njit(cache=True)
def increase(p, tcp, ca, i, gain):
    hi, lo = max(ca[i, S.t_count], ca[i, S.b_count]), min(ca[i, S.t_count], ca[i, S.b_count])
    steps = max(1.0, round(p[P.fast_recovery_steps] / gain)) if p[P.dcqcn_f_steps] != 0.0 else p[P.fast_recovery_steps]
    step = 0.0
    if hi >= steps:
        if lo >= steps:
            step = p[P.rhai] * (gain if p[P.dcqcn_f_rhai] != 0.0 else 1.0)
        else:
            step = p[P.rai] * (gain if p[P.dcqcn_f_rai] != 0.0 else 1.0)
    ca[i, S.target] = min(ca[i, S.target] + step, p[P.line_rate])
    if p[P.dcqcn_f_recovery] != 0.0:
        rate = tcp[i, RATE] + (ca[i, S.target] - tcp[i, RATE]) * min(1.0, gain / 2.0)
    else:
        rate = (tcp[i, RATE] + ca[i, S.target]) / 2.0
    tcp[i, RATE] = min(rate, p[P.line_rate])


@njit(cache=True)
def _period(p, gain):
    return 1.0 / gain if p[P.dcqcn_f_timer] != 0.0 else 1.0


@njit(cache=True)
def on_timer(p, tcp, ca, i, now, gain):
    decay_alpha(p, ca, i, now)
    if now >= ca[i, S.next_timer]:
        ca[i, S.t_count] += 1.0
        ca[i, S.next_timer] = now + p[P.timer] * _period(p, gain)
        increase(p, tcp, ca, i, gain)


@njit(cache=True)
def on_sent(p, tcp, ca, i, sent, now, gain):
    ca[i, S.bytes_acc] += sent
    bc = p[P.byte_counter] * _period(p, gain)
    if ca[i, S.bytes_acc] >= bc:
        ca[i, S.bytes_acc] -= bc
        ca[i, S.b_count] += 1.0
        increase(p, tcp, ca, i, gain)


class Dcqcn(CongestionOps):
    name = "dcqcn"
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

    # where MLTCP's gain applies (mltcp.cc.mltcp.MLTCPDcqcn sets them; the plain algorithm's gain is 1)
    dcqcn_f_rai = Param(True, "bool", "additive-increase step R_AI x F(r)", in_scenario=False)
    dcqcn_f_rhai = Param(True, "bool", "hyper-increase step R_HAI x F(r)", in_scenario=False)
    dcqcn_f_recovery = Param(
        False, "bool", "each increase event: Rc += (Rt - Rc) min(1, F/2) instead of (Rc+Rt)/2", in_scenario=False
    )
    dcqcn_f_steps = Param(
        False, "bool", "stage threshold max(1, round(fast_recovery_steps / F)) increase events", in_scenario=False
    )
    dcqcn_f_timer = Param(
        False, "bool", "timer and byte counter fire every timer / F, byte_counter / F", in_scenario=False
    )
    ops = Ops(
        init=init,
        ssthresh=ssthresh,
        on_congestion=on_congestion,
        on_timeout=on_timeout,
        on_cnp=on_cnp,
        on_timer=on_timer,
        on_sent=on_sent,
    )

    @property
    def f(self) -> int:
        return self.fast_recovery_steps


P, S = Dcqcn.param_index(), DcqcnState.columns()  # P.g: g's index in p; S.alpha: alpha's column in ca
