"""TCP Reno / NewReno window rules (RFC 5681): slow start, additive increase, halve on congestion."""

from __future__ import annotations

from numba import njit

from .base import CWND, CongestionOps, Ops, Param, reduce_to, slow_start, timeout_to


@njit(cache=True)
def cong_avoid(p, tcp, ca, i, acked, gain, now, mss):
    left = slow_start(tcp, i, acked)
    # Congestion avoidance: one MSS per window of acked bytes, times the MLTCP gain.
    tcp[i, CWND] += gain * mss * left / tcp[i, CWND]


@njit(cache=True)
def ssthresh(p, tcp, ca, i, dscale):
    return tcp[i, CWND] * (1.0 - p[P.beta] * dscale)


@njit(cache=True)
def on_congestion(p, tcp, ca, i, ecn, now, dscale, mss):
    reduce_to(tcp, i, ssthresh(p, tcp, ca, i, dscale), mss)


@njit(cache=True)
def on_timeout(p, tcp, ca, i, now, dscale, mss):
    timeout_to(tcp, i, ssthresh(p, tcp, ca, i, dscale), mss)


class Reno(CongestionOps):
    name = "reno"
    beta = Param(0.5, "1", "fraction of the window removed on congestion")
    ns3_flight_ssthresh = True  # ns-3 NewReno: at an RTO without RACK, ssthresh from the bytes in flight
    ops = Ops(cong_avoid=cong_avoid, ssthresh=ssthresh, on_congestion=on_congestion, on_timeout=on_timeout)


P = Reno.param_index()  # P.beta: beta's index in the parameter vector p
