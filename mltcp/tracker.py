"""Iteration tracker: how far through its current training iteration each flow is.

bytes_ratio = bytes acked in the current iteration / learned bytes per iteration, in [0, 1].

Iteration boundaries are found without help from the training framework: an idle gap (no acked
data) longer than ``max(min_idle, idle_fraction x the previous compute gap)`` starts a new
iteration (the public MLTCP-Reno uses 0.9 x compute time). Frameworks that know their boundaries
call :meth:`iteration_start`. Bytes per iteration are learned as the median of the last
``history`` completed iterations, so one mis-detected boundary or the first, partial iteration
does not throw the estimate, and a change of model size is followed after two iterations.
Before any iteration has completed, bytes_ratio is 0.

Vectorised over flows like :mod:`mltcp.cc`: all fields are arrays of shape (n,).
"""
from __future__ import annotations

import numpy as np


class IterationTracker:
    def __init__(self, n: int = 1, idle_fraction: float = 0.9, min_idle: float = 1e-3, history: int = 3):
        if not 0 < idle_fraction:
            raise ValueError("idle_fraction must be > 0")
        self.idle_fraction, self.min_idle = idle_fraction, min_idle
        self.bytes_cur = np.zeros(n)
        self.history = np.full((n, history), np.nan)
        self.bytes_per_iter = np.zeros(n)
        self.last_active = np.full(n, np.nan)
        self.last_gap = np.zeros(n)
        self.iteration = np.zeros(n, dtype=np.int64)

    def on_ack(self, acked, now: float) -> None:
        acked = np.asarray(acked, dtype=float)
        active = acked > 0
        gap = now - self.last_active
        threshold = np.maximum(self.min_idle, self.idle_fraction * self.last_gap)
        boundary = active & ~np.isnan(gap) & (gap > threshold)
        if boundary.any():
            self.last_gap = np.where(boundary, gap, self.last_gap)
            # an iteration already closed by iteration_start() holds no bytes yet: nothing to close
            self._close(boundary & (self.bytes_cur > 0))
        self.bytes_cur += acked
        self.last_active = np.where(active, now, self.last_active)

    def iteration_start(self, mask) -> None:
        """Explicit boundary from a framework that knows where its iterations start."""
        self._close(np.asarray(mask, dtype=bool) & (self.bytes_cur > 0))

    def _close(self, mask) -> None:
        rows = np.flatnonzero(mask)
        if not len(rows):
            return
        h = self.history[rows]
        h[:, 1:] = h[:, :-1].copy()
        h[:, 0] = self.bytes_cur[rows]
        self.history[rows] = h
        s = np.sort(h, axis=1)                        # NaN (not yet seen) sorts last
        n = (~np.isnan(h)).sum(axis=1)                # >= 1: we just added one
        i = np.arange(len(rows))
        self.bytes_per_iter[rows] = (s[i, (n - 1) // 2] + s[i, n // 2]) / 2.0   # median
        self.bytes_cur[rows] = 0.0
        self.iteration[rows] += 1

    @property
    def bytes_ratio(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(self.bytes_per_iter > 0, self.bytes_cur / self.bytes_per_iter, 0.0)
        return np.clip(r, 0.0, 1.0)
