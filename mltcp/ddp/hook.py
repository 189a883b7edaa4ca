"""A DDP communication hook that records each iteration's collectives and marks its first bucket.

The hook all-reduces each gradient bucket as DDP's default does (divide by the world size, then
sum with ``all_reduce``), and around it notes when the iteration's first collective started and
its last one finished. On an iteration's first bucket it calls ``mark`` (e.g. the kernel MLTCP's
mark map for each of gloo's local ports: an iteration boundary from the framework instead of the
kernel's idle-gap rule). :class:`IterationTimes` is the per-iteration result: the iteration start
(set by the training loop), first and last collective, the optimizer step.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch.distributed as dist


@dataclass
class IterationTimes:
    iteration: int
    start: float
    first_collective: float | None = None
    last_collective_done: float | None = None
    step_done: float | None = None
    buckets: int = 0
    bytes: int = 0


class IterationHook:
    """State of the hook; ``clock`` gives the times recorded (default: time.time)."""

    def __init__(self, mark: Callable[[], None] | None = None, clock: Callable[[], float] = time.time, group=None):
        self.mark = mark
        self.clock = clock
        self.group = group
        self.lock = threading.Lock()
        self.current: IterationTimes | None = None
        self.iteration = 0
        self.mark_errors = 0

    def begin(self) -> IterationTimes:
        """Call at the start of each iteration (before forward)."""
        self.current = IterationTimes(self.iteration, self.clock())
        self.iteration += 1
        return self.current

    def end(self) -> IterationTimes:
        """Call after the optimizer step; returns the iteration's times."""
        cur = self.current
        cur.step_done = self.clock()
        self.current = None
        return cur

    def _on_bucket(self, nbytes: int) -> IterationTimes | None:
        cur = self.current
        if cur is None:
            return None
        first = False
        with self.lock:
            if cur.first_collective is None:
                cur.first_collective = self.clock()
                first = True
            cur.buckets += 1
            cur.bytes += nbytes
        if first and self.mark is not None:
            try:
                self.mark()
            except OSError:
                self.mark_errors += 1
        return cur

    def _on_done(self, cur: IterationTimes | None) -> None:
        if cur is not None:
            with self.lock:
                cur.last_collective_done = self.clock()


def allreduce_hook(state: IterationHook, bucket):
    """DDP comm hook: the default mean all-reduce, timed and (first bucket) marked."""
    buf = bucket.buffer()
    cur = state._on_bucket(buf.numel() * buf.element_size())
    world = dist.get_world_size(state.group)
    buf.div_(world)
    fut = dist.all_reduce(buf, group=state.group, async_op=True).get_future()

    def done(f):
        state._on_done(cur)
        return f.value()[0]

    return fut.then(done)


def register(ddp_model, state: IterationHook) -> IterationHook:
    ddp_model.register_comm_hook(state, allreduce_hook)
    return state
