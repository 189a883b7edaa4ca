"""DCTCP (RFC 8257; Linux tcp_dctcp.c): Reno's growth; on an ECN echo, a cut in proportion to the
fraction of marked bytes instead of a halving.

Per flow: ``alpha``, the moving average of the marked fraction, updated once per window of data
(Linux ``dctcp_update_alpha``: alpha <- (1 - g) alpha + g x CE bytes / acked bytes), fed by the
:meth:`~mltcp.cc.base.CongestionOps.in_ack_event` op with each ACK's acked and CE-marked bytes. An
ECN echo cuts the window to cwnd (1 - alpha / 2) once per round trip (``dctcp_ssthresh``); a loss
or a timeout halves it, as Linux's ``dctcp_react_to_loss`` and RFC 8257 section 3.4 say."""

from __future__ import annotations

from numba import njit

from .base import CWND, CaState, CongestionOps, Ops, Param, reduce_to, timeout_to
from .reno import cong_avoid as reno_cong_avoid


class DctcpState(CaState):
    fields = ("alpha", "acked", "ce", "window_end")


@njit(cache=True)
def init(p, tcp, ca, i, now):
    ca[i, :] = 0.0
    ca[i, S.alpha] = p[P.alpha_init]


@njit(cache=True)
def in_ack_event(p, tcp, ca, i, acked, ce, rtt, now, mss):
    """Count acked and CE-marked bytes; at the end of each window (one RTT after the last update)
    fold their ratio into alpha."""
    ca[i, S.acked] += acked
    ca[i, S.ce] += min(ce, acked)
    if ca[i, S.window_end] == 0.0:
        ca[i, S.window_end] = now + rtt
    elif now >= ca[i, S.window_end] and ca[i, S.acked] > 0.0:
        ca[i, S.alpha] = (1.0 - p[P.g]) * ca[i, S.alpha] + p[P.g] * ca[i, S.ce] / ca[i, S.acked]
        ca[i, S.acked] = 0.0
        ca[i, S.ce] = 0.0
        ca[i, S.window_end] = now + rtt


@njit(cache=True)
def ssthresh(p, tcp, ca, i, dscale):
    return tcp[i, CWND] * (1.0 - 0.5 * ca[i, S.alpha] * dscale)


@njit(cache=True)
def on_congestion(p, tcp, ca, i, ecn, now, dscale, mss):
    if ecn:
        reduce_to(tcp, i, ssthresh(p, tcp, ca, i, dscale), mss)
    else:
        reduce_to(tcp, i, tcp[i, CWND] * (1.0 - p[P.loss_beta] * dscale), mss)


@njit(cache=True)
def on_timeout(p, tcp, ca, i, now, dscale, mss):
    timeout_to(tcp, i, tcp[i, CWND] * (1.0 - p[P.loss_beta] * dscale), mss)


class Dctcp(CongestionOps):
    name = "dctcp"
    State = DctcpState
    g = Param(
        1.0 / 16.0,
        "1",
        "weight of the newest window's marked fraction in alpha (Linux dctcp_shift_g 4)",
        bounds="(0, 1]",
    )
    alpha_init = Param(1.0, "1", "alpha before the first window (Linux dctcp_alpha_on_init 1024/1024)", bounds="[0, 1]")
    loss_beta = Param(0.5, "1", "fraction of the window removed on a loss or timeout", bounds="(0, 1)")
    ops = Ops(
        init=init,
        in_ack_event=in_ack_event,
        cong_avoid=reno_cong_avoid,
        ssthresh=ssthresh,
        on_congestion=on_congestion,
        on_timeout=on_timeout,
    )


P, S = Dctcp.param_index(), DctcpState.columns()  # P.g: g's index in p; S.alpha: alpha's column in ca
