"""Loss recovery of the window-based flows: which lost bytes fast recovery repairs and which wait
for a timer (the retransmission timeout, or Linux's tail-loss probe), and when that timer fires."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .state import LR_BACKOFF, LR_HOLE, LR_PROBE, LR_PROBED, LR_RTO_AT, LR_RTX, TLP_EXTRA, _slot_at


@njit(cache=True, _nrt=False)
def _split_loss(lr, f, a, lo, lo_rtx, inflight_f, to_send_f, mss, rack, whole=True):
    """(bytes fast recovery repairs, bytes that wait for a timer) of ``lo`` bytes lost. The ACKs
    that can reveal a loss are those of segments sent after it: half of its own slot's, all sent
    in later slots, and, once one of those came back, the new data that limited transmit and SACK
    recovery then send.
    ``rack`` False (ns-3 3.44: SACK, no RACK or tail-loss probe): a first loss needs three
    duplicate ACKs (SACKs above it), a lost retransmission is found by the RTO only.
    ``rack`` True (Linux RACK-TLP): any loss, a retransmission's too, is found once a segment sent
    after it is acknowledged; with none, the tail-loss probe (or the RTO) finds it."""
    lrtx = min(lo_rtx, lo)
    fresh = lo - lrtx
    dup = 0.5 * a + inflight_f
    if rack:
        # segments, not bytes (``whole``: packet losses): any segment in flight was sent after the
        # loss, and so was a delivered partial segment (a flow's last, the end of its iteration)
        part = a - math.floor(a / mss + 1e-9) * mss if whole else 0.0
        seen = dup >= mss or (whole and (inflight_f > 1.0 or part > 1.0))
        return (lo, 0.0) if seen else (0.0, lo)
    new = max(to_send_f - lr[f, LR_RTX], 0.0)
    if fresh > 0.0 and (dup < mss or dup + new < 3.0 * mss):
        return 0.0, lo
    return fresh, lrtx


@njit(cache=True, _nrt=False)
def _arm_timer(lr, f, t, rtt_s, lo_rtx, srtt, rttvar, min_rto, inflight_f, mss, rack, loss_rec):
    """Arm flow f's timer for the bytes just held (LR_HOLE), at the ACK (time t) that advanced last.
    The RTO, backed off (a lost retransmission's: from about when it was sent): ns-3's max(min_rto,
    srtt + 4 rttvar), or Linux's srtt + max(4 rttvar, min_rto) (tcp_rtt_estimator keeps rttvar at
    least rto_min). ``rack`` (Linux tcp_schedule_loss_probe, RFC 8985 7.2): a tail-loss probe instead, once per
    flight, only outside loss recovery (CA_Open or CA_CWR: not after a lost retransmission or within
    a loss episode), after 2 srtt + 2 ms, or 2 srtt + min_rto with one packet out (time for a delayed
    ACK), or at the RTO if that is earlier: a timer that is a probe even when it fires at the RTO's time."""
    rto = (srtt + max(4.0 * rttvar, min_rto) if rack else max(min_rto, srtt + 4.0 * rttvar)) * 2.0 ** lr[f, LR_BACKOFF]
    lr[f, LR_RTO_AT] = t + rto - (rtt_s if lo_rtx > 0.0 else 0.0)
    lr[f, LR_PROBE] = 0.0
    if rack and lr[f, LR_PROBED] == 0.0 and lo_rtx <= 0.0 and not loss_rec:
        pto = 2.0 * srtt + (TLP_EXTRA if lr[f, LR_HOLE] + inflight_f > mss else min_rto)
        lr[f, LR_RTO_AT] = t + min(pto, rto)
        lr[f, LR_PROBE] = 1.0


@njit(cache=True, _nrt=False)
def _until_rto(lr, f, w, dt):
    """Slot ``w``, or the slot the flow's retransmission timer fires in if that is earlier."""
    at = lr[f, LR_RTO_AT]
    return w if at == np.inf else min(w, _slot_at(at, dt))
