"""A toy congestion control in one file, as a new algorithm is added: AIMD with its own constants
(``increase`` segments per round trip, ``decrease`` of the window removed per congestion event).
tests/test_toy_algorithm.py loads it through MLTCP_CC_PATH and simulates it end to end."""

from numba import njit

from mltcp.cc.base import CWND, CongestionOps, Ops, Param, reduce_to, slow_start, timeout_to


@njit(cache=True)
def cong_avoid(p, tcp, ca, i, acked, gain, now, mss):
    left = slow_start(tcp, i, acked)
    tcp[i, CWND] += gain * p[P.increase] * mss * left / tcp[i, CWND]


@njit(cache=True)
def ssthresh(p, tcp, ca, i, dscale):
    return tcp[i, CWND] * (1.0 - p[P.decrease] * dscale)


@njit(cache=True)
def on_congestion(p, tcp, ca, i, ecn, now, dscale, mss):
    reduce_to(tcp, i, ssthresh(p, tcp, ca, i, dscale), mss)


@njit(cache=True)
def on_timeout(p, tcp, ca, i, now, dscale, mss):
    timeout_to(tcp, i, ssthresh(p, tcp, ca, i, dscale), mss)


class Aimd(CongestionOps):
    name = "aimd"
    increase = Param(2.0, "segments", "window growth per round trip", bounds="(0, 100]")
    decrease = Param(0.25, "1", "fraction of the window removed on congestion", bounds="(0, 1)")
    ops = Ops(cong_avoid=cong_avoid, ssthresh=ssthresh, on_congestion=on_congestion, on_timeout=on_timeout)


P = Aimd.param_index()
