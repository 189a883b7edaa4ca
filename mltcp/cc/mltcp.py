"""MLTCP: the aggressiveness hook, and each variant as its base algorithm plus that hook.

F(bytes_ratio) multiplies the base algorithm's window (Reno, CUBIC) or rate (DCQCN) increase, so a
flow that is further through its iteration's bytes grabs bandwidth faster, finishes first, and the
competing jobs slide into an interleaved schedule. Optionally the decrease is scaled too: the
fraction removed becomes (0.8 - 0.6 r) / 0.5 times the base one (0.2..0.8 of the window for Reno).

The two rules are numba kernels (:func:`linear`, :func:`scaled_decrease`), so the simulator's
compiled loop applies exactly these lines; :mod:`mltcp.tracker` gives bytes_ratio.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from numba import njit

from ..tracker import IterationTracker
from .base import Param
from .cubic import Cubic
from .dcqcn import Dcqcn
from .reno import Reno


@njit(cache=True)
def linear(slope, intercept, r):
    return slope * r + intercept


@njit(cache=True)
def scaled_decrease(r):
    return (0.8 - 0.6 * r) / 0.5


class Linear:
    """F(r) = slope * r + intercept (defaults from the public MLTCP-Reno: 4.0 and 0.25)."""

    def __init__(self, slope: float = 4.0, intercept: float = 0.25):
        self.slope, self.intercept = slope, intercept

    def __call__(self, r):
        return linear(float(self.slope), float(self.intercept), np.asarray(r, dtype=float))


class MLTCPHook:
    """Mixed in before a base algorithm; everything else is the base algorithm unchanged."""
    slope = Param(4.0, "1", "F(r) = slope * r + intercept")
    intercept = Param(0.25, "1", "F(0): the gain at the start of an iteration")
    scale_decrease = Param(False, "bool", "also scale the decrease by (0.8 - 0.6 r) / 0.5")
    idle_fraction = Param(0.9, "1", "an idle gap over this x the last compute gap starts an iteration")
    min_idle = Param(1e-3, "s", "shortest idle gap that starts an iteration", key="min_idle_ms", scale=1e-3, key_unit="ms")

    def __init__(self, aggressiveness: Callable | None = None, **kwargs):
        super().__init__(**kwargs)
        self.F = aggressiveness or Linear(self.slope, self.intercept)

    def new_state(self, n=1, mss=1448, now=0.0):
        st = super().new_state(n, mss, now)
        st.tracker = IterationTracker(n, self.idle_fraction, self.min_idle)
        return st

    def pkts_acked(self, st, acked, rtt, now):
        st.tracker.on_ack(acked, now)
        super().pkts_acked(st, acked, rtt, now)

    def iteration_start(self, st, mask):
        st.tracker.iteration_start(mask)

    def increase_gain(self, st):
        return self.F(st.tracker.bytes_ratio)

    def decrease_scale(self, st):
        return scaled_decrease(st.tracker.bytes_ratio) if self.scale_decrease else 1.0


class MLTCPReno(MLTCPHook, Reno):
    name = "mltcp-reno"


class MLTCPCubic(MLTCPHook, Cubic):
    name = "mltcp-cubic"


class MLTCPDcqcn(MLTCPHook, Dcqcn):
    name = "mltcp-dcqcn"
