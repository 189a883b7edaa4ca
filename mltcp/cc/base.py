"""The congestion-control interface, shaped like Linux's ``struct tcp_congestion_ops`` and ns-3's
``TcpCongestionOps``.

Every method works on a :class:`FlowState` whose fields are numpy arrays with one entry per flow,
so the simulator advances thousands of flows in one call and a real sender uses arrays of length 1.
The ops objects hold parameters only; all per-flow state lives in the FlowState (as Linux keeps it
in ``struct tcp_sock`` / ``inet_csk_ca``).

Two hooks exist for MLTCP (:mod:`mltcp.cc.mltcp`): :meth:`increase_gain` multiplies every window or
rate increase, :meth:`decrease_factor` is the fraction of the window removed on congestion.
"""
from __future__ import annotations

from typing import Literal

import numpy as np

CongestionKind = Literal["loss", "ecn"]


class FlowState:
    """Per-flow state. ``cwnd``/``ssthresh`` in bytes; ``rate`` in bytes/s (rate-based algorithms)."""

    def __init__(self, n: int, mss: int, now: float):
        self.n = n
        self.mss = float(mss)
        self.cwnd = np.full(n, 10.0 * mss)          # RFC 6928 initial window
        self.ssthresh = np.full(n, np.inf)
        self.rate = np.zeros(n)
        self.tracker = None                          # set by MLTCP variants
        self.created = now


class CongestionOps:
    """Base class. Subclasses override the event methods they react to, as in tcp_congestion_ops."""

    name = "base"
    window_based = True

    def new_state(self, n: int = 1, mss: int = 1448, now: float = 0.0) -> FlowState:
        st = FlowState(n, mss, now)
        self.init(st, now)
        return st

    # -- lifecycle -------------------------------------------------------------------------
    def init(self, st: FlowState, now: float) -> None:  # .init
        pass

    # -- MLTCP hooks (identity for the plain algorithms) -------------------------------------
    def increase_gain(self, st: FlowState) -> np.ndarray | float:
        return 1.0

    def decrease_factor(self, st: FlowState, base: float) -> np.ndarray | float:
        return base

    def iteration_start(self, st: FlowState, mask: np.ndarray) -> None:
        pass

    # -- events ------------------------------------------------------------------------------
    def on_ack(self, st: FlowState, acked: np.ndarray, rtt: np.ndarray, now: float) -> None:
        """``acked`` bytes newly acknowledged per flow (0 = no ack); like .cong_avoid + .pkts_acked."""
        raise NotImplementedError

    def ssthresh(self, st: FlowState) -> np.ndarray:  # .ssthresh
        raise NotImplementedError

    def on_congestion(self, st: FlowState, mask: np.ndarray, kind: CongestionKind, now: float) -> None:
        """One window reduction for the flows in ``mask`` (loss or ECN echo). Callers apply it at
        most once per round trip, as TCP does in recovery/CWR."""
        m = np.asarray(mask, dtype=bool)
        new = np.maximum(self.ssthresh(st), 2.0 * st.mss)
        st.ssthresh = np.where(m, new, st.ssthresh)
        st.cwnd = np.where(m, new, st.cwnd)

    def on_timeout(self, st: FlowState, mask: np.ndarray, now: float) -> None:
        """Retransmission timeout: ssthresh as for loss, window back to one segment (RFC 5681)."""
        m = np.asarray(mask, dtype=bool)
        st.ssthresh = np.where(m, np.maximum(self.ssthresh(st), 2.0 * st.mss), st.ssthresh)
        st.cwnd = np.where(m, st.mss, st.cwnd)

    # Rate-based (DCQCN) events; window-based algorithms ignore them.
    def on_cnp(self, st: FlowState, mask: np.ndarray, now: float) -> None:
        pass

    def on_timer(self, st: FlowState, now: float) -> None:
        pass

    def on_sent(self, st: FlowState, sent: np.ndarray, now: float) -> None:
        pass


def slow_start(st: FlowState, acked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """RFC 5681 slow start, capped at ssthresh like Linux's tcp_slow_start.

    Returns (in_slow_start mask, bytes of ``acked`` left over for congestion avoidance)."""
    in_ss = st.cwnd < st.ssthresh
    grown = np.minimum(st.cwnd + acked, np.maximum(st.ssthresh, st.cwnd))
    left = np.where(in_ss, acked - (grown - st.cwnd), acked)
    st.cwnd = np.where(in_ss, grown, st.cwnd)
    return in_ss, np.maximum(left, 0.0)
