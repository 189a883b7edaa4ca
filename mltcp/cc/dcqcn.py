"""DCQCN reaction point (Zhu et al., SIGCOMM'15), Mellanox variant as in the HPCC ns-3 simulator.

Rates in bytes/s. Per flow: current rate Rc, target rate Rt, alpha, and two increase-event sources
(a timer and a byte counter) whose counts select fast recovery, additive or hyper increase."""
from __future__ import annotations

import numpy as np

from .base import CongestionOps, FlowState

MBPS = 1e6 / 8  # bytes/s per Mb/s


class Dcqcn(CongestionOps):
    name = "dcqcn"
    window_based = False

    def __init__(self, line_rate: float = 25e9 / 8, g: float = 1 / 256, rai: float = 50 * MBPS,
                 rhai: float = 100 * MBPS, min_rate: float = 100 * MBPS, timer: float = 900e-6,
                 byte_counter: float = 10e6, fast_recovery_steps: int = 5, alpha_interval: float = 1e-6):
        self.line_rate, self.g, self.rai, self.rhai, self.min_rate = line_rate, g, rai, rhai, min_rate
        self.timer, self.byte_counter, self.f = timer, byte_counter, fast_recovery_steps
        self.alpha_interval = alpha_interval

    def init(self, st: FlowState, now: float) -> None:
        st.rate = np.full(st.n, float(self.line_rate))   # Rc: start at line rate
        st.target = st.rate.copy()                        # Rt
        st.alpha = np.ones(st.n)
        st.t_count = np.zeros(st.n)                       # timer expiries since the last CNP
        st.b_count = np.zeros(st.n)                       # byte-counter expiries since the last CNP
        st.bytes_acc = np.zeros(st.n)
        st.next_timer = np.full(st.n, now + self.timer)
        st.last_alpha = np.full(st.n, now)

    def on_ack(self, st, acked, rtt, now):
        pass  # rate-based: reacts to CNPs, timers and bytes sent

    def on_cnp(self, st: FlowState, mask, now: float) -> None:
        m = np.asarray(mask, dtype=bool)
        self._decay_alpha(st, now, np.ones(st.n, dtype=bool))
        st.alpha = np.where(m, (1 - self.g) * st.alpha + self.g, st.alpha)
        st.last_alpha = np.where(m, now, st.last_alpha)
        cut = st.rate * (1.0 - self.decrease_factor(st, st.alpha / 2.0))
        st.target = np.where(m, st.rate, st.target)
        st.rate = np.where(m, np.maximum(self.min_rate, cut), st.rate)
        for a in ("t_count", "b_count", "bytes_acc"):
            setattr(st, a, np.where(m, 0.0, getattr(st, a)))
        st.next_timer = np.where(m, now + self.timer, st.next_timer)

    def on_congestion(self, st, mask, kind, now):
        self.on_cnp(st, mask, now)   # a loss, where it happens, is treated as a congestion notification

    def on_timeout(self, st, mask, now):
        self.on_cnp(st, mask, now)

    def _decay_alpha(self, st, now, mask):
        """alpha <- (1-g) alpha once per alpha_interval without a CNP (applied in bulk)."""
        k = np.floor((now - st.last_alpha) / self.alpha_interval)
        upd = np.asarray(mask, dtype=bool) & (k > 0)
        st.alpha = np.where(upd, st.alpha * (1 - self.g) ** np.maximum(k, 0), st.alpha)
        st.last_alpha = np.where(upd, st.last_alpha + k * self.alpha_interval, st.last_alpha)

    def on_timer(self, st: FlowState, now: float) -> None:
        self._decay_alpha(st, now, np.ones(st.n, dtype=bool))
        fired = now >= st.next_timer
        st.t_count = st.t_count + fired
        st.next_timer = np.where(fired, now + self.timer, st.next_timer)
        self._increase(st, fired)

    def on_sent(self, st: FlowState, sent, now: float) -> None:
        st.bytes_acc = st.bytes_acc + np.asarray(sent, dtype=float)
        fired = st.bytes_acc >= self.byte_counter
        st.bytes_acc = np.where(fired, st.bytes_acc - self.byte_counter, st.bytes_acc)
        st.b_count = st.b_count + fired
        self._increase(st, fired)

    def _increase(self, st: FlowState, fired) -> None:
        if not np.any(fired):
            return
        gain = self.increase_gain(st)
        hi, lo = np.maximum(st.t_count, st.b_count), np.minimum(st.t_count, st.b_count)
        step = np.where(hi < self.f, 0.0, np.where(lo >= self.f, self.rhai, self.rai)) * gain
        st.target = np.where(fired, np.minimum(st.target + step, self.line_rate), st.target)
        st.rate = np.where(fired, np.minimum((st.rate + st.target) / 2.0, self.line_rate), st.rate)
