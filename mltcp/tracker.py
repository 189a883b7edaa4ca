"""Iteration tracker: how far through its current training iteration each flow is.

bytes_ratio = bytes acked in the current iteration / learned bytes per iteration, in [0, 1].

Iteration boundaries are found without help from the training framework: an idle gap (no acked
data) longer than ``max(min_idle, idle_fraction x the previous compute gap)`` starts a new
iteration (the public MLTCP-Reno uses 0.9 x compute time); once twice the learned bytes per
iteration are acked (a boundary was missed), any idle gap longer than ``min_idle`` does, so one
long stall (a timeout seen at the ACK, a straggler) cannot raise the threshold above every later
compute gap for good. (Once is not enough: a stall that split an early iteration leaves a small
learned size, and every later stall past it would split again.) The rule is checked at the ACK that
ends the gap, or (``boundary = "tx_start"``, the kernel tracker's way) at the send that ends it,
where the sender has nothing in flight: then a stall waiting for a retransmission timeout, which
has data in flight, never counts as a compute gap (at the ACK it does, and the 200 ms gap it
records raises the threshold above every real compute gap that follows). Linux also raises
TX_START for the retransmission that ends such a stall, with every segment out marked lost; the
BPF tracker ignores it there, as segments are still out. Frameworks that know
their boundaries call :meth:`iteration_start`. Bytes per iteration are learned as the median of the last
``history`` completed iterations, so one mis-detected boundary or the first, partial iteration
does not throw the estimate, and a change of model size is followed after two iterations.
Before any iteration has completed, bytes_ratio is 0.

Like :mod:`mltcp.cc`, the rules are numba kernels over one flow ``i`` of a float array with one
row per flow (columns below); the simulator's compiled loop calls them directly, and
:class:`IterationTracker` calls them for the flows of a mask and shows the columns as attributes.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

# per flow: the iteration's bytes so far, the learned bytes per iteration, the last ACK's time, the
# boundary gaps, the iteration count, the iteration's first ACK, the last closed iteration's busy
# time (see close()), the best delivery rate seen and the smallest RTT sample (0: none yet); then the
# online switch's state (:mod:`mltcp.engage`); the idle time inside the current iteration and the
# gap a send after idle has yet to count; HISTORY..: bytes of the last iterations, newest first
(BYTES_CUR, BYTES_PER_ITER, LAST_ACTIVE, LAST_GAP, ITERATION, PREV_GAP, FIRST_ACK, LAST_COMM, BEST_RATE,
 MIN_RTT, ENGAGED, IN_MODE, CONTENDED, HOLD, SEEN, IDLE_IN, IDLE_PENDING, HISTORY) = range(18)  # fmt: skip
BOUNDARIES = (
    "idle",
    "mark",
    "tx_start",
)  # the idle rule at the ACK that ends a gap; marks only; the idle rule at TX_START
GAP_RULES = ("last", "min2")  # the idle threshold's reference gap: the last one, or the shorter of the last two


@njit(cache=True)
def _order_stat(a, i, r):
    """The r-th smallest (from 0) of flow i's recorded history (NaN: not yet recorded), found
    without sorting a copy (the simulator's loop allocates nothing)."""
    h = a.shape[1] - HISTORY
    for j in range(h):
        v = a[i, HISTORY + j]
        if math.isnan(v):
            continue
        below, upto = 0, 0
        for m in range(h):
            w = a[i, HISTORY + m]
            if not math.isnan(w):
                below += w < v
                upto += w <= v
        if below <= r < upto:
            return v
    return math.nan


@njit(cache=True)
def close(a, i):
    """End flow i's current iteration: push its bytes into the history, re-learn the median, and
    note its busy time (first to last ACK less the idle gaps inside, when the flow had nothing in
    flight: a framework's compute between its collectives) and the best delivery rate over it."""
    h = a.shape[1] - HISTORY
    for j in range(h - 1, 0, -1):
        a[i, HISTORY + j] = a[i, HISTORY + j - 1]
    a[i, HISTORY] = a[i, BYTES_CUR]
    comm = a[i, LAST_ACTIVE] - a[i, FIRST_ACK] - a[i, IDLE_IN]
    a[i, LAST_COMM] = comm
    a[i, IDLE_IN] = 0.0
    a[i, IDLE_PENDING] = 0.0
    if comm > 0.0:
        a[i, BEST_RATE] = max(a[i, BEST_RATE], a[i, BYTES_CUR] / comm)
    n = 0
    for j in range(h):
        n += not math.isnan(a[i, HISTORY + j])
    a[i, BYTES_PER_ITER] = (_order_stat(a, i, (n - 1) // 2) + _order_stat(a, i, n // 2)) / 2.0  # median
    a[i, BYTES_CUR] = 0.0
    a[i, ITERATION] += 1.0


@njit(cache=True)
def is_boundary(a, i, gap, idle_fraction, min_idle, min2=False):
    """Whether an idle ``gap`` (s) of flow i starts a new iteration: gap > max(min_idle, idle_fraction
    x the reference gap: the last boundary gap, or with ``min2`` the shorter of the last two), or
    gap > min_idle when the iteration already holds twice the learned bytes per iteration."""
    if math.isnan(gap) or not gap > min_idle:
        return False
    if 0.0 < 2.0 * a[i, BYTES_PER_ITER] <= a[i, BYTES_CUR]:  # two iterations' bytes: a boundary was missed
        return True
    ref = min(a[i, LAST_GAP], a[i, PREV_GAP]) if min2 and a[i, PREV_GAP] > 0.0 else a[i, LAST_GAP]
    return gap > idle_fraction * ref


@njit(cache=True)
def idle_gap(a, i, gap, idle_fraction, min_idle, min2):
    """An idle ``gap`` of flow i: if the rule counts it as a boundary, record it and close the
    iteration (one already closed by iteration_start() holds no bytes yet: nothing to close)."""
    if is_boundary(a, i, gap, idle_fraction, min_idle, min2):
        a[i, PREV_GAP] = a[i, LAST_GAP]
        a[i, LAST_GAP] = gap
        if a[i, BYTES_CUR] > 0.0:
            close(a, i)


@njit(cache=True)
def on_ack(a, i, acked, now, idle_fraction, min_idle, min2=False):
    """``min2``: the threshold is idle_fraction x the shorter of the last two boundary gaps, so one
    straggler's long gap does not hide the next ordinary boundary (with ``last`` it does whenever
    the ordinary gap < idle_fraction x the straggler's)."""
    if acked <= 0.0:
        return
    idle_gap(a, i, now - a[i, LAST_ACTIVE], idle_fraction, min_idle, min2)
    a[i, IDLE_IN] += a[i, IDLE_PENDING]  # the gap before a send inside the iteration (0 if it closed)
    a[i, IDLE_PENDING] = 0.0
    if a[i, BYTES_CUR] == 0.0:
        a[i, FIRST_ACK] = now
    a[i, BYTES_CUR] += acked
    a[i, LAST_ACTIVE] = now


@njit(cache=True)
def rtt_sample(a, i, rtt):
    """Flow i's smallest RTT sample (s), like Linux's tcp_min_rtt (without its 5-minute window)."""
    if rtt > 0.0 and (a[i, MIN_RTT] == 0.0 or rtt < a[i, MIN_RTT]):
        a[i, MIN_RTT] = rtt


@njit(cache=True)
def path_bdp(a, i):
    """Flow i's estimate of its path's bandwidth-delay product (bytes): the best delivery rate of a
    completed iteration times the smallest RTT; 0 before both are known."""
    return a[i, BEST_RATE] * a[i, MIN_RTT]


@njit(cache=True)
def send_after_idle(a, i, now):
    """Flow i sends with nothing in flight (Linux's CA_EVENT_TX_START): the gap since its last ACK
    was idle. Inside an iteration it is left out of the busy time, once the next ACK shows that it
    did not start a new iteration."""
    if a[i, BYTES_CUR] > 0.0 and now > a[i, LAST_ACTIVE]:
        a[i, IDLE_PENDING] = now - a[i, LAST_ACTIVE]


@njit(cache=True)
def tx_start(a, i, now, idle_fraction, min_idle, min2=False):
    """The idle rule checked when flow i starts sending with nothing in flight (Linux's
    CA_EVENT_TX_START, as the kernel tracker does), on the gap since its last ACK: a stall with data
    outstanding (a retransmission timeout) has no TX_START, so it is never taken for a boundary."""
    send_after_idle(a, i, now)
    idle_gap(a, i, now - a[i, LAST_ACTIVE], idle_fraction, min_idle, min2)


@njit(cache=True)
def iteration_start(a, i):
    if a[i, BYTES_CUR] > 0.0:
        close(a, i)


@njit(cache=True)
def ratio(a, i):
    if a[i, BYTES_PER_ITER] <= 0.0:
        return 0.0
    return min(max(a[i, BYTES_CUR] / a[i, BYTES_PER_ITER], 0.0), 1.0)


def _column(j):
    return property(lambda self: self.a[:, j], lambda self, v: self.a.__setitem__((slice(None), j), v))


class IterationTracker:
    def __init__(
        self,
        n: int = 1,
        idle_fraction: float = 0.9,
        min_idle: float = 1e-3,
        history: int = 3,
        gap_rule: str = "last",
        boundary: str = "idle",
    ):
        if gap_rule not in GAP_RULES:
            raise ValueError(f"gap_rule must be one of {GAP_RULES}")
        if boundary not in BOUNDARIES:
            raise ValueError(f"boundary must be one of {BOUNDARIES}")
        self.min2, self.at_tx = gap_rule == "min2", boundary == "tx_start"
        if not 0 < idle_fraction:
            raise ValueError("idle_fraction must be > 0")
        if history < 1:
            raise ValueError("history must be >= 1")
        self.idle_fraction, self.min_idle = float(idle_fraction), float(min_idle)
        self.a = np.zeros((n, HISTORY + history))
        self.a[:, LAST_ACTIVE] = np.nan
        self.a[:, ENGAGED] = 1.0
        self.a[:, HISTORY:] = np.nan

    bytes_cur = _column(BYTES_CUR)
    bytes_per_iter = _column(BYTES_PER_ITER)
    last_active = _column(LAST_ACTIVE)
    last_gap = _column(LAST_GAP)
    iteration = _column(ITERATION)

    @property
    def history(self) -> np.ndarray:
        """(n, history) bytes of the last completed iterations, newest first (NaN: not yet seen)."""
        return self.a[:, HISTORY:]

    def on_ack(self, acked, now: float) -> None:
        acked = np.broadcast_to(np.asarray(acked, dtype=float), (len(self.a),))
        min_idle = math.inf if self.at_tx else self.min_idle
        for i in np.flatnonzero(acked > 0):
            on_ack(self.a, i, acked[i], now, self.idle_fraction, min_idle, self.min2)

    def rtt_sample(self, rtt) -> None:
        rtt = np.broadcast_to(np.asarray(rtt, dtype=float), (len(self.a),))
        for i in range(len(self.a)):
            rtt_sample(self.a, i, rtt[i])

    def tx_start(self, now: float, mask=None) -> None:
        """The flows of ``mask`` send with nothing in flight: the gap was idle (:func:`send_after_idle`);
        with ``boundary = "tx_start"`` the idle rule is checked here (:func:`tx_start`) instead of at
        the next ACK."""
        for i in np.flatnonzero(np.ones(len(self.a), bool) if mask is None else mask):
            if self.at_tx:
                tx_start(self.a, i, now, self.idle_fraction, self.min_idle, self.min2)
            else:
                send_after_idle(self.a, i, now)

    def iteration_start(self, mask) -> None:
        """Explicit boundary from a framework that knows where its iterations start."""
        for i in np.flatnonzero(np.broadcast_to(mask, (len(self.a),))):
            iteration_start(self.a, i)

    @property
    def bytes_ratio(self) -> np.ndarray:
        return np.array([ratio(self.a, i) for i in range(len(self.a))])
