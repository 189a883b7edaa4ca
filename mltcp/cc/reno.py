"""TCP Reno / NewReno window rules (RFC 5681): slow start, additive increase, halve on congestion."""
from __future__ import annotations

from numba import njit

from .base import CWND, CaState, CongestionOps, Param, reduce_to, slow_start, timeout_to

BETA = 0          # index in the parameter vector


@njit(cache=True)
def init(p, tcp, ca, i, now):
    pass


@njit(cache=True)
def pkts_acked(p, tcp, ca, i, acked, rtt, now, mss):
    pass


@njit(cache=True)
def cong_avoid(p, tcp, ca, i, acked, gain, now, mss):
    left = slow_start(tcp, i, acked)
    # Congestion avoidance: one MSS per window of acked bytes, times the MLTCP gain.
    tcp[i, CWND] += gain * mss * left / tcp[i, CWND]


@njit(cache=True)
def ssthresh(p, tcp, ca, i, dscale):
    return tcp[i, CWND] * (1.0 - p[BETA] * dscale)


@njit(cache=True)
def on_congestion(p, tcp, ca, i, ecn, now, dscale, mss):
    reduce_to(tcp, i, ssthresh(p, tcp, ca, i, dscale), mss)


@njit(cache=True)
def on_timeout(p, tcp, ca, i, now, dscale, mss):
    timeout_to(tcp, i, ssthresh(p, tcp, ca, i, dscale), mss)


class Reno(CongestionOps):
    name = "reno"
    kind = 0
    beta = Param(0.5, "1", "fraction of the window removed on congestion")

    k_init, k_pkts_acked, k_cong_avoid = staticmethod(init), staticmethod(pkts_acked), staticmethod(cong_avoid)
    k_ssthresh, k_on_congestion, k_on_timeout = staticmethod(ssthresh), staticmethod(on_congestion), staticmethod(on_timeout)

    def kernel_params(self):
        return [self.beta]
