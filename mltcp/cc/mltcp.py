"""MLTCP: the aggressiveness hook, and each variant as its base algorithm plus that hook.

F(bytes_ratio) multiplies the base algorithm's window (Reno, CUBIC) or rate (DCQCN) increase, so a
flow that is further through its iteration's bytes grabs bandwidth faster, finishes first, and the
competing jobs slide into an interleaved schedule. Optionally the decrease is scaled too: the
fraction removed becomes (0.8 - 0.6 r) / 0.5 times the base one (0.2..0.8 of the window for Reno).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..tracker import IterationTracker
from .cubic import Cubic
from .dcqcn import Dcqcn
from .reno import Reno


class Linear:
    """F(r) = slope * r + intercept (defaults from the public MLTCP-Reno: 4.0 and 0.25)."""

    def __init__(self, slope: float = 4.0, intercept: float = 0.25):
        self.slope, self.intercept = slope, intercept

    def __call__(self, r):
        return self.slope * np.asarray(r) + self.intercept


class MLTCPHook:
    """Mixed in before a base algorithm; everything else is the base algorithm unchanged."""

    def __init__(self, *args, slope: float = 4.0, intercept: float = 0.25,
                 aggressiveness: Callable | None = None, scale_decrease: bool = False,
                 idle_fraction: float = 0.9, min_idle: float = 1e-3, **kwargs):
        super().__init__(*args, **kwargs)
        self.F = aggressiveness or Linear(slope, intercept)
        self.scale_decrease = scale_decrease
        self.tracker_args = dict(idle_fraction=idle_fraction, min_idle=min_idle)

    def init(self, st, now):
        super().init(st, now)
        st.tracker = IterationTracker(st.n, **self.tracker_args)

    def on_ack(self, st, acked, rtt, now):
        st.tracker.on_ack(acked, now)
        super().on_ack(st, acked, rtt, now)

    def iteration_start(self, st, mask):
        st.tracker.iteration_start(mask)

    def increase_gain(self, st):
        return self.F(st.tracker.bytes_ratio)

    def decrease_factor(self, st, base):
        if not self.scale_decrease:
            return base
        return base * (0.8 - 0.6 * st.tracker.bytes_ratio) / 0.5


class MLTCPReno(MLTCPHook, Reno):
    name = "mltcp-reno"


class MLTCPCubic(MLTCPHook, Cubic):
    name = "mltcp-cubic"


class MLTCPDcqcn(MLTCPHook, Dcqcn):
    name = "mltcp-dcqcn"
