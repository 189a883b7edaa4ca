"""MLTCP: the aggressiveness hook, and each variant as its base algorithm plus that hook.

F(bytes_ratio) multiplies the base algorithm's window (Reno, CUBIC) or rate (DCQCN) increase, so a
flow that is further through its iteration's bytes grabs bandwidth faster, finishes first, and the
competing jobs slide into an interleaved schedule. Optionally the decrease is scaled too: the
fraction removed goes linearly from ``decrease_at_start`` (r = 0) to ``decrease_at_end`` (r = 1),
divided by Reno's 0.5, times the base one (0.8..0.2 of the window for Reno by default).

Every variant of the design space is a named configuration of this one hook (issue 10), set in a
scenario's ``[mltcp]`` table: F's ``shape`` (linear, capped, convex), the decrease's two ends, the
tracker's ``boundary`` (idle gap or an explicit mark) and ``history``, and, for DCQCN, where F
applies (``dcqcn_f_*``). The hook's numbers travel as one vector (:meth:`MLTCPHook.hook_vector`,
columns below) into the two numba kernels :func:`gain` and :func:`dscale`, which the simulator's
compiled loop and the ops methods both call; :mod:`mltcp.tracker` gives bytes_ratio.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
from numba import njit

from ..tracker import GAP_RULES, IterationTracker
from .base import Param
from .cubic import Cubic
from .dcqcn import Dcqcn
from .reno import Reno

SHAPES = ("linear", "capped", "convex")
BOUNDARIES = ("idle", "mark")
# the hook vector (columns)
SLOPE, INTERCEPT, SCALE_DECREASE, IDLE_FRACTION, MIN_IDLE, SHAPE, CAP, EXPONENT, DEC_START, DEC_END, BOUNDARY, GAP_MIN2 = range(12)
HOOK_LEN = 12


@njit(cache=True)
def linear(slope, intercept, r):
    return slope * r + intercept


@njit(cache=True)
def scaled_decrease(r):
    return (0.8 - 0.6 * r) / 0.5


@njit(cache=True)
def gain(mp, r):
    """F(r): linear slope r + intercept; capped min(cap, linear); convex slope r^exponent + intercept."""
    if mp[SHAPE] == 2.0:
        return mp[SLOPE] * r ** mp[EXPONENT] + mp[INTERCEPT]
    f = mp[SLOPE] * r + mp[INTERCEPT]
    return min(f, mp[CAP]) if mp[SHAPE] == 1.0 else f


@njit(cache=True)
def dscale(mp, r):
    """The decrease's multiplier: 1, or the removed fraction (start..end, linear in r) over 0.5."""
    if mp[SCALE_DECREASE] == 0.0:
        return 1.0
    return (mp[DEC_START] + (mp[DEC_END] - mp[DEC_START]) * r) / 0.5


class Linear:
    """F(r) = slope * r + intercept (defaults from the public MLTCP-Reno: 4.0 and 0.25)."""

    def __init__(self, slope: float = 4.0, intercept: float = 0.25):
        self.slope, self.intercept = slope, intercept

    def __call__(self, r):
        return linear(float(self.slope), float(self.intercept), np.asarray(r, dtype=float))


class Shaped:
    """F(r) of a hook vector (what the simulator runs); Linear when the shape is linear."""

    def __init__(self, mp: np.ndarray):
        self.mp = mp

    def __call__(self, r):
        r = np.asarray(r, dtype=float)
        out = np.array([gain(self.mp, float(x)) for x in r.ravel()])
        return out.reshape(r.shape) if r.ndim else float(out[0])


class MLTCPHook:
    """Mixed in before a base algorithm; everything else is the base algorithm unchanged."""
    slope = Param(4.0, "1", "F(r) = slope * r + intercept")
    intercept = Param(0.25, "1", "F(0): the gain at the start of an iteration")
    shape = Param("linear", "", "F's shape: linear, capped (min(cap, linear)), convex (slope r^exponent + intercept)",
                  choices=SHAPES)
    cap = Param(math.inf, "1", "the capped shape's ceiling")
    exponent = Param(2.0, "1", "the convex shape's power")
    scale_decrease = Param(False, "bool", "also scale the decrease (decrease_at_start .. decrease_at_end)")
    decrease_at_start = Param(0.8, "1", "fraction of the window removed at r = 0 (Reno terms)")
    decrease_at_end = Param(0.2, "1", "fraction of the window removed at r = 1 (Reno terms)")
    idle_fraction = Param(0.9, "1", "an idle gap over this x the last compute gap starts an iteration")
    min_idle = Param(1e-3, "s", "shortest idle gap that starts an iteration", key="min_idle_ms", scale=1e-3, key_unit="ms")
    boundary = Param("idle", "", "iteration boundary: idle (gap rule) or mark (the framework marks each start)",
                     choices=BOUNDARIES)
    history = Param(3, "1", "bytes per iteration = median of the last `history` iterations")
    idle_gap = Param("last", "", "the idle rule's reference gap: last (the last boundary gap) or min2 (the shorter "
                     "of the last two: a straggler's long gap does not hide the next boundary)", choices=GAP_RULES)

    def __init__(self, aggressiveness: Callable | None = None, **kwargs):
        super().__init__(**kwargs)
        for name, v in self.hook_values().items():
            msg = self.check(name, v)
            if msg:
                raise ValueError(f"{self.name}: {name} {msg}")
        self.F = aggressiveness or (Linear(self.slope, self.intercept) if self.shape == "linear"
                                    else Shaped(self.hook_vector()))

    def hook_values(self) -> dict:
        return {k: getattr(self, k) for k in vars(MLTCPHook) if isinstance(vars(MLTCPHook)[k], Param)}

    @staticmethod
    def check(name: str, v) -> str:
        """Why a hook value is refused ('' = fine); the scenario loader uses it too."""
        if name in ("slope",) and not 0 <= v <= 1000:
            return "must be in [0, 1000]"
        if name in ("intercept", "exponent") and not 0 < v <= 1000:
            return "must be in (0, 1000]"
        if name == "cap" and not v > 0:
            return "must be > 0"
        if name in ("decrease_at_start", "decrease_at_end") and not 0 < v < 1:
            return "must be in (0, 1)"
        if name == "idle_fraction" and not 0 < v <= 1:
            return "must be in (0, 1]"
        if name == "history" and not 1 <= v <= 64:
            return "must be in [1, 64]"
        return ""

    def hook_vector(self) -> np.ndarray:
        mp = np.zeros(HOOK_LEN)
        mp[[SLOPE, INTERCEPT, CAP, EXPONENT, DEC_START, DEC_END]] = (
            self.slope, self.intercept, self.cap, self.exponent, self.decrease_at_start, self.decrease_at_end)
        mp[SCALE_DECREASE] = float(self.scale_decrease)
        mp[IDLE_FRACTION], mp[MIN_IDLE] = self.idle_fraction, self.idle_rule_min()
        mp[SHAPE] = float(SHAPES.index(self.shape))
        mp[BOUNDARY] = float(BOUNDARIES.index(self.boundary))
        mp[GAP_MIN2] = float(self.idle_gap == "min2")
        return mp

    def idle_rule_min(self) -> float:
        """The idle rule's shortest gap; with explicit marks the idle rule is off (never fires)."""
        return math.inf if self.boundary == "mark" else self.min_idle

    def new_state(self, n=1, mss=1448, now=0.0):
        st = super().new_state(n, mss, now)
        st.tracker = IterationTracker(n, self.idle_fraction, self.idle_rule_min(), self.history, self.idle_gap)
        return st

    def pkts_acked(self, st, acked, rtt, now):
        st.tracker.on_ack(acked, now)
        super().pkts_acked(st, acked, rtt, now)

    def iteration_start(self, st, mask):
        st.tracker.iteration_start(mask)

    def increase_gain(self, st):
        return self.F(st.tracker.bytes_ratio)

    def decrease_scale(self, st):
        if not self.scale_decrease:
            return 1.0
        mp = self.hook_vector()
        return np.array([dscale(mp, float(r)) for r in st.tracker.bytes_ratio])


class MLTCPReno(MLTCPHook, Reno):
    name = "mltcp-reno"


class MLTCPCubic(MLTCPHook, Cubic):
    name = "mltcp-cubic"


class MLTCPDcqcn(MLTCPHook, Dcqcn):
    """Where F applies in DCQCN: each flag below (defaults: F on R_AI and R_HAI, as before)."""
    name = "mltcp-dcqcn"
    dcqcn_f_rai = Param(True, "bool", "additive-increase step R_AI x F(r)")
    dcqcn_f_rhai = Param(True, "bool", "hyper-increase step R_HAI x F(r)")
    dcqcn_f_recovery = Param(False, "bool", "each increase event: Rc += (Rt - Rc) min(1, F/2) instead of (Rc+Rt)/2")
    dcqcn_f_steps = Param(False, "bool", "stage threshold max(1, round(fast_recovery_steps / F)) increase events")
    dcqcn_f_timer = Param(False, "bool", "timer and byte counter fire every timer / F, byte_counter / F")

    def hook_flags(self):
        return [float(self.dcqcn_f_rai), float(self.dcqcn_f_rhai), float(self.dcqcn_f_recovery),
                float(self.dcqcn_f_steps), float(self.dcqcn_f_timer)]


def hook_fields() -> dict[str, Param]:
    """Every ``[mltcp]`` key (scenario spelling -> Param) over the MLTCP variants."""
    out = {}
    for cls in (MLTCPReno, MLTCPCubic, MLTCPDcqcn):
        for name, prm in cls.params.items():
            if name in cls.__dict__ or name in vars(MLTCPHook):
                out[prm.key] = prm
    return out
