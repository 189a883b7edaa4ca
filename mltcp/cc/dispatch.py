"""Compiled entry points for the simulator: one switch over the algorithms, per flow ``i``.

The simulator's numba loop (:mod:`mltcp.sim.engine`) calls these; each branch is the algorithm's
own kernel, the same one :class:`mltcp.cc.base.CongestionOps` calls for a real sender. ``kind`` is
the algorithm class's ``kind``; MLTCP variants share their base algorithm's kind (the hook's gain,
decrease scale and tracker are applied by the caller through :mod:`mltcp.cc.mltcp` and
:mod:`mltcp.tracker`, as the ops classes do).
"""
from __future__ import annotations

from numba import njit

from . import cubic, dcqcn, dctcp, reno
from .base import cwnd_restart

RENO, CUBIC, DCQCN, DCTCP = reno.Reno.kind, cubic.Cubic.kind, dcqcn.Dcqcn.kind, dctcp.Dctcp.kind


@njit(cache=True)
def init(kind, p, tcp, ca, i, now):
    if kind == RENO:
        reno.init(p, tcp, ca, i, now)
    elif kind == CUBIC:
        cubic.init(p, tcp, ca, i, now)
    elif kind == DCTCP:
        dctcp.init(p, tcp, ca, i, now)
    else:
        dcqcn.init(p, tcp, ca, i, now)


@njit(cache=True)
def pkts_acked(kind, p, tcp, ca, i, acked, rtt, now, mss):
    if kind == CUBIC:
        cubic.pkts_acked(p, tcp, ca, i, acked, rtt, now, mss)


@njit(cache=True)
def in_ack_event(kind, p, tcp, ca, i, acked, ce, rtt, now, mss):
    if kind == DCTCP:
        dctcp.in_ack_event(p, tcp, ca, i, acked, ce, rtt, now, mss)


@njit(cache=True)
def cong_avoid(kind, p, tcp, ca, i, acked, gain, now, mss):
    if kind == RENO or kind == DCTCP:
        reno.cong_avoid(p, tcp, ca, i, acked, gain, now, mss)
    elif kind == CUBIC:
        cubic.cong_avoid(p, tcp, ca, i, acked, gain, now, mss)


@njit(cache=True)
def on_congestion(kind, p, tcp, ca, i, ecn, now, dscale, mss):
    if kind == RENO:
        reno.on_congestion(p, tcp, ca, i, ecn, now, dscale, mss)
    elif kind == CUBIC:
        cubic.on_congestion(p, tcp, ca, i, ecn, now, dscale, mss)
    elif kind == DCTCP:
        dctcp.on_congestion(p, tcp, ca, i, ecn, now, dscale, mss)
    else:
        dcqcn.on_congestion(p, tcp, ca, i, ecn, now, dscale, mss)


@njit(cache=True)
def on_timeout(kind, p, tcp, ca, i, now, dscale, mss):
    if kind == RENO:
        reno.on_timeout(p, tcp, ca, i, now, dscale, mss)
    elif kind == CUBIC:
        cubic.on_timeout(p, tcp, ca, i, now, dscale, mss)
    elif kind == DCTCP:
        dctcp.on_timeout(p, tcp, ca, i, now, dscale, mss)
    else:
        dcqcn.on_timeout(p, tcp, ca, i, now, dscale, mss)


@njit(cache=True)
def tx_start(kind, p, tcp, ca, i, now, idle, rto, mss, restart):
    """CA_EVENT_TX_START (CongestionOps.cwnd_event): restart after idle, then the algorithm's part."""
    if restart and kind != DCQCN:
        cwnd_restart(tcp, i, idle, rto, mss)
    if kind == CUBIC:
        cubic.cwnd_event(p, tcp, ca, i, now, idle)


@njit(cache=True)
def on_cnp(kind, p, tcp, ca, i, now, dscale):
    if kind == DCQCN:
        dcqcn.on_cnp(p, tcp, ca, i, now, dscale)


@njit(cache=True)
def on_timer(kind, p, tcp, ca, i, now, gain):
    if kind == DCQCN:
        dcqcn.on_timer(p, tcp, ca, i, now, gain)


@njit(cache=True)
def on_sent(kind, p, tcp, ca, i, sent, now, gain):
    if kind == DCQCN:
        dcqcn.on_sent(p, tcp, ca, i, sent, now, gain)
