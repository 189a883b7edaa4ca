"""MLTCP: the aggressiveness hook, and each variant as its base algorithm plus that hook.

F(bytes_ratio) multiplies the base algorithm's window (Reno, CUBIC) or rate (DCQCN) increase, so a
flow that is further through its iteration's bytes grabs bandwidth faster, finishes first, and the
competing jobs slide into an interleaved schedule. Optionally the decrease is scaled too: the
fraction removed goes linearly from ``decrease_at_start`` (r = 0) to ``decrease_at_end`` (r = 1),
divided by Reno's 0.5, times the base one (0.8..0.2 of the window for Reno by default).

Every variant of the design space is a named configuration of this one hook, set in a
scenario's ``[mltcp]`` table: F's ``shape`` (linear, capped, convex), the decrease's two ends, the
tracker's ``boundary`` (idle gap at the ACK, an explicit mark, or the idle gap at TX_START) and
``history``, for the window-based variants ``restart_window`` (the window restarts at each
iteration's first send), and, for DCQCN, where F applies (``dcqcn_f_*``). The hook's numbers
travel as one vector (:meth:`MLTCPHook.hook_vector`, columns below) into the two numba kernels
:func:`gain` and :func:`dscale`, which the simulator's compiled loop and the ops methods both
call; :mod:`mltcp.tracker` gives bytes_ratio.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

import numpy as np
from numba import njit

from .. import defaults, engage
from .. import tracker as trk
from ..tracker import BOUNDARIES, GAP_RULES, IterationTracker
from .base import CWND, REGISTRY, SSTHRESH, CongestionOps, Param, _vec
from .cubic import Cubic
from .dcqcn import Dcqcn
from .dctcp import Dctcp
from .reno import Reno

SHAPES = ("linear", "capped", "convex")
# the hook vector (columns)
(
    SLOPE,
    INTERCEPT,
    SCALE_DECREASE,
    IDLE_FRACTION,
    MIN_IDLE,
    SHAPE,
    CAP,
    EXPONENT,
    DEC_START,
    DEC_END,
    BOUNDARY,
    GAP_MIN2,
    RESTART,
    ADAPTIVE,
    TRIAL,
    CONTENDED_ABOVE,
    HOLD_MAX,
    MIN_WINDOW,
    ABOVE_BDP_GAIN,
) = range(19)
HOOK_LEN = 19


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
def floor_bytes(mp, tr, i, mss):
    """Flow i's window floor (bytes): ``min_window`` segments, but never more than its path's BDP
    (:func:`mltcp.tracker.path_bdp`, once known): a flow at one BDP fills the link alone, so a floor
    above it would keep the flow behind from yielding (few-segment BDPs, several flows per job)."""
    floor, bdp = mp[MIN_WINDOW] * mss, trk.path_bdp(tr, i)
    return min(floor, bdp) if bdp > 0.0 else floor


@njit(cache=True)
def window_floor(mp, g, cwnd, mss, tr, i):
    """The increase gain ``g`` of window-based flow i at ``cwnd`` bytes: at least 1 below its floor
    (:func:`floor_bytes`), where a flow that yields further loses packets only a timer repairs."""
    return 1.0 if g < 1.0 and cwnd < floor_bytes(mp, tr, i, mss) else g


@njit(cache=True)
def window_gain(mp, g, cwnd, mss, tr, i):
    """The increase gain of window-based flow i at ``cwnd`` bytes, given its hook gain ``g``: the
    floor's (:func:`window_floor`) while the hook acts; once the online switch has made the flow its
    base, 1, or ``above_bdp_gain`` while its window exceeds its path's BDP: beyond one BDP a larger
    window only queues, so growing it slower delays the next overflow without slowing the flow."""
    if active(mp, tr, i):
        return window_floor(mp, g, cwnd, mss, tr, i)
    bdp = trk.path_bdp(tr, i)
    return mp[ABOVE_BDP_GAIN] if 0.0 < bdp < cwnd else 1.0


@njit(cache=True)
def dscale(mp, r):
    """The decrease's multiplier: 1, or the removed fraction (start..end, linear in r) over 0.5."""
    if mp[SCALE_DECREASE] == 0.0:
        return 1.0
    return (mp[DEC_START] + (mp[DEC_END] - mp[DEC_START]) * r) / 0.5


@njit(cache=True)
def active(mp, tr, i):
    """Whether the hook acts on flow i: always, or with ``adaptive`` while the online switch
    (:mod:`mltcp.engage`) has it engaged; otherwise the flow is its base algorithm exactly."""
    return mp[ADAPTIVE] == 0.0 or engage.engaged(tr, i, mp[TRIAL], mp[CONTENDED_ABOVE], mp[HOLD_MAX])


@njit(cache=True)
def iteration_restart(mp, tr, tcp, i, idle, mss):
    """``restart_window``: the first send of a new iteration (an idle gap the tracker's rule counts
    as a boundary, or an iteration a mark has just started) restarts the window as Linux does after
    an idle RTO: cwnd = min(cwnd, restart_window), ssthresh >= 3/4 of the old cwnd. The starting job
    then ramps up instead of landing its whole carried-over window on the finishing one's tail."""
    if mp[RESTART] <= 0.0 or not active(mp, tr, i):
        return False
    if mp[BOUNDARY] == 0.0:
        start = trk.is_boundary(tr, i, idle, mp[IDLE_FRACTION], mp[MIN_IDLE], mp[GAP_MIN2] != 0.0)
    else:  # a mark, or the TX_START rule, has just closed the last iteration: nothing acked in this one
        start = tr[i, trk.BYTES_CUR] == 0.0
    w = mp[RESTART] * mss
    if not start or tcp[i, CWND] <= w:
        return False
    tcp[i, SSTHRESH] = max(tcp[i, SSTHRESH], 0.75 * tcp[i, CWND])
    tcp[i, CWND] = w
    return True


class Linear:
    """F(r) = slope * r + intercept (defaults: the shipped default's, :mod:`mltcp.defaults`)."""

    def __init__(self, slope: float = defaults.SLOPE, intercept: float = defaults.INTERCEPT):
        self.slope, self.intercept = slope, intercept

    def __call__(self, r):
        return linear(float(self.slope), float(self.intercept), np.asarray(r, dtype=float))


class Shaped:
    """F(r) of a hook vector (what the simulator runs); the linear shape as :class:`Linear` does it."""

    def __init__(self, mp: np.ndarray):
        self.mp = mp

    def __call__(self, r):
        r = np.asarray(r, dtype=float)
        if self.mp[SHAPE] == 0.0:
            return linear(float(self.mp[SLOPE]), float(self.mp[INTERCEPT]), r)
        out = np.array([gain(self.mp, float(x)) for x in r.ravel()])
        return out.reshape(r.shape) if r.ndim else float(out[0])


# The hook stays as dense as the source work counts it (tests/test_mltcp_variant_size.py).
# fmt: off
class IterationTracking:
    """Where bytes_ratio comes from: the iteration tracker's settings and its per-ACK feed."""
    idle_fraction = Param(0.9, "1", "an idle gap > this x the last compute gap starts an iteration", bounds="(0, 1]")
    min_idle = Param(1e-3, "s", "shortest idle gap that starts an iteration", key="min_idle_ms", scale=1e-3,
                     key_unit="ms", bounds="(0, inf]")
    boundary = Param("idle", "", "iteration boundary: idle (at the ACK), mark, tx_start", choices=BOUNDARIES)
    history = Param(3, "1", "bytes per iteration = median of the last `history` iterations", bounds="[1, 64]")
    idle_gap = Param("last", "", "idle rule's reference gap: last, or min2 (shorter of last two)", choices=GAP_RULES)

    def idle_rule_min(self) -> float:
        """The idle rule's shortest gap; with explicit marks the idle rule is off (never fires)."""
        return math.inf if self.boundary == "mark" else self.min_idle

    def new_state(self, n=1, mss=1448, now=0.0):
        st, s = super().new_state(n, mss, now), self
        st.tracker = IterationTracker(n, s.idle_fraction, s.idle_rule_min(), s.history, s.idle_gap, s.boundary)
        return st

    def cwnd_event(self, st, event, now, idle=0.0, rto=np.inf, restart=True, mask=None):
        st.tracker.tx_start(now, mask)
        return super().cwnd_event(st, event, now, idle, rto, restart, mask)

    def pkts_acked(self, st, acked, rtt, now):
        st.tracker.on_ack(acked, now)
        super().pkts_acked(st, acked, rtt, now)

    def iteration_start(self, st, mask):
        st.tracker.iteration_start(mask)


class OnlineSwitch:
    """``adaptive``: the hook acts on a flow only while that makes its iterations interleave
    (:mod:`mltcp.engage`); elsewhere the flow is its base algorithm."""
    adaptive = Param(defaults.ADAPTIVE, "bool", "online switch: act only while it makes iterations interleave")
    trial = Param(defaults.TRIAL, "iterations", "adaptive: engaged, judge every this many iterations",
                  bounds="[1, 1000]")
    contended_above = Param(defaults.CONTENDED_ABOVE, "1", "adaptive: contended = comm > this x bytes at the best rate",
                            bounds="(1, 100]")
    hold_max = Param(defaults.HOLD_MAX, "iterations", "adaptive: longest wait before engaging again",
                     bounds="[1, 1e6]")

    def with_switch(self, mp):
        mp[[ADAPTIVE, TRIAL, CONTENDED_ABOVE, HOLD_MAX]] = (self.adaptive, self.trial, self.contended_above,
                                                        self.hold_max)
        return mp

    def where_engaged(self, st, values):
        """``values`` (one per flow) where the hook acts, 1 (the base's own step) elsewhere."""
        mp = self.hook_vector()
        return np.where([active(mp, st.tracker.a, i) for i in range(st.n)], values, 1.0)


class MLTCPHook(OnlineSwitch, IterationTracking):
    """Mixed in before a base algorithm: F(bytes_ratio) scales its increase (and optionally its
    decrease); everything else is the base algorithm unchanged."""
    slope = Param(defaults.SLOPE, "1", "F(r) = slope * r + intercept", bounds="[0, 1000]")
    intercept = Param(defaults.INTERCEPT, "1", "F(0): the gain at the start of an iteration", bounds="(0, 1000]")
    shape = Param("linear", "", "F: linear, capped (min(cap, linear)), convex (slope r^exp + b)", choices=SHAPES)
    cap = Param(math.inf, "1", "the capped shape's ceiling", bounds="(0, inf]")
    exponent = Param(2.0, "1", "the convex shape's power", bounds="(0, 1000]")
    scale_decrease = Param(False, "bool", "also scale the decrease (decrease_at_start .. decrease_at_end)")
    decrease_at_start = Param(0.8, "1", "fraction of the window removed at r = 0 (Reno terms)", bounds="(0, 1)")
    decrease_at_end = Param(0.2, "1", "fraction of the window removed at r = 1 (Reno terms)", bounds="(0, 1)")

    def __init__(self, aggressiveness: Callable | None = None, **kwargs):
        super().__init__(**kwargs)
        self.F = aggressiveness or Shaped(self.hook_vector())

    def hook_vector(self) -> np.ndarray:
        """The hook's numbers for the kernels (the columns at the top of this module)."""
        mp = np.zeros(HOOK_LEN)
        mp[[SLOPE, INTERCEPT, CAP, EXPONENT, DEC_START, DEC_END, IDLE_FRACTION, MIN_IDLE, RESTART]] = (
            self.slope, self.intercept, self.cap, self.exponent, self.decrease_at_start, self.decrease_at_end,
            self.idle_fraction, self.idle_rule_min(), getattr(self, "restart_window", 0.0))
        mp[[SCALE_DECREASE, SHAPE, BOUNDARY, GAP_MIN2]] = (
            self.scale_decrease, SHAPES.index(self.shape), BOUNDARIES.index(self.boundary), self.idle_gap == "min2")
        return self.with_switch(mp)

    def increase_gain(self, st):
        return self.where_engaged(st, self.F(st.tracker.bytes_ratio))

    def decrease_scale(self, st):                   # dscale is 1 without scale_decrease
        return self.where_engaged(st, [dscale(self.hook_vector(), float(r)) for r in st.tracker.bytes_ratio])


class AboveBdpGain:
    """Window-based variants: ``above_bdp_gain`` (:func:`window_gain`), once the online switch has
    made a flow its base, its increase while its window is above the path's BDP; the default is
    the base's own (:func:`mltcp.defaults.above_bdp_gain`)."""
    above_bdp_gain = Param(1.0, "1", "disengaged, a window above the path BDP grows x this (default: per base)",
                           bounds="(0, 1]")

    def __init_subclass__(cls, **kw):
        prm = replace(AboveBdpGain.above_bdp_gain, default=defaults.above_bdp_gain(cls.base_algorithm().name))
        cls.above_bdp_gain = prm
        super().__init_subclass__(**kw)

    def hook_vector(self):
        mp = super().hook_vector()
        mp[ABOVE_BDP_GAIN] = self.above_bdp_gain
        return mp


class WindowFloor:
    """Window-based variants: ``min_window`` (:func:`window_floor`), F never slows a window below it,
    or below the path's BDP if that is smaller (:func:`floor_bytes`); the increase of every
    window-based variant goes through :func:`window_gain`."""
    min_window = Param(defaults.MIN_WINDOW, "segments", "F never slows the increase below min(this, path BDP)",
                       bounds="[0, 1e6]")

    def hook_vector(self):
        mp = super().hook_vector()
        mp[MIN_WINDOW] = self.min_window
        return mp

    def pkts_acked(self, st, acked, rtt, now):  # the floor's path BDP needs the smallest RTT
        st.tracker.rtt_sample(rtt)
        super().pkts_acked(st, acked, rtt, now)

    def increase_gain(self, st):
        g, mp, a = _vec(super().increase_gain(st), st.n), self.hook_vector(), st.tracker.a
        return np.array([window_gain(mp, g[i], st.tcp[i, CWND], st.mss, a, i) for i in range(st.n)])


class IterationRestart:
    """Window-based variants: ``restart_window`` (:func:`iteration_restart`) at each iteration's
    first send, after the base's own TX_START reaction."""
    restart_window = Param(0.0, "segments", "at an iteration's first send, cwnd <= this (0 = off)", bounds="[0, 1e6]")

    def cwnd_event(self, st, event, now, idle=0.0, rto=np.inf, restart=True, mask=None):
        done = super().cwnd_event(st, event, now, idle, rto, restart, mask)
        mp, idle = self.hook_vector(), _vec(idle, st.n)
        for i in np.flatnonzero(np.ones(st.n, bool) if mask is None else mask):
            done[i] |= iteration_restart(mp, st.tracker.a, st.tcp, i, idle[i], st.mss)
        return done
# fmt: on


class MLTCPReno(IterationRestart, AboveBdpGain, WindowFloor, MLTCPHook, Reno):
    name = "mltcp-reno"


class MLTCPCubic(IterationRestart, AboveBdpGain, WindowFloor, MLTCPHook, Cubic):
    name = "mltcp-cubic"


class MLTCPDctcp(IterationRestart, AboveBdpGain, WindowFloor, MLTCPHook, Dctcp):
    """F scales Reno's additive increase; with ``scale_decrease`` also the ECN cut alpha / 2 and the halving."""

    name = "mltcp-dctcp"


class MLTCPDcqcn(MLTCPHook, Dcqcn):
    """Where F applies in DCQCN: each flag below (defaults: F on R_AI and R_HAI, as before)."""

    name = "mltcp-dcqcn"
    dcqcn_f_rai = Param(True, "bool", "additive-increase step R_AI x F(r)")
    dcqcn_f_rhai = Param(True, "bool", "hyper-increase step R_HAI x F(r)")
    dcqcn_f_recovery = Param(False, "bool", "each increase event: Rc += (Rt - Rc) min(1, F/2) instead of (Rc+Rt)/2")
    dcqcn_f_steps = Param(False, "bool", "stage threshold max(1, round(fast_recovery_steps / F)) increase events")
    dcqcn_f_timer = Param(False, "bool", "timer and byte counter fire every timer / F, byte_counter / F")


def variant_of(base: type[CongestionOps]) -> type[CongestionOps]:
    """The MLTCP variant of a base algorithm: the one declared here, or its base plus the hook
    (window-based: with the iteration restart), named ``mltcp-<base>``."""
    name = f"mltcp-{base.name}"
    if name in REGISTRY and REGISTRY[name].base_algorithm() is base:
        return REGISTRY[name]
    mixins = (IterationRestart, AboveBdpGain, WindowFloor, MLTCPHook) if base.window_based else (MLTCPHook,)
    return type(f"MLTCP{base.__name__}", (*mixins, base), {"name": name, "__module__": base.__module__})


def hook_fields() -> dict[str, Param]:
    """Every ``[mltcp]`` key (scenario spelling -> Param) over the MLTCP variants."""
    out = {}
    for cls in REGISTRY.values():
        if not issubclass(cls, MLTCPHook):
            continue
        for name, prm in cls.params.items():
            hook_classes = (MLTCPHook, OnlineSwitch, IterationTracking, IterationRestart, WindowFloor, AboveBdpGain)
            if name in cls.__dict__ or any(name in vars(k) for k in hook_classes):
                out[prm.key] = prm
    return out
