"""TCP Reno / NewReno window rules (RFC 5681): slow start, additive increase, halve on congestion."""
from __future__ import annotations

import numpy as np

from .base import CongestionOps, FlowState, slow_start


class Reno(CongestionOps):
    name = "reno"

    def __init__(self, beta: float = 0.5):
        self.beta = beta  # fraction of the window removed on congestion

    def on_ack(self, st: FlowState, acked, rtt, now):
        _, left = slow_start(st, np.asarray(acked, dtype=float))
        # Congestion avoidance: one MSS per window of acked bytes, times the MLTCP gain.
        st.cwnd = st.cwnd + self.increase_gain(st) * st.mss * left / st.cwnd

    def ssthresh(self, st: FlowState):
        return st.cwnd * (1.0 - self.decrease_factor(st, self.beta))
