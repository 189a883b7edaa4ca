"""Egress link model (pure, no I/O): line-rate queue, drop-tail buffer, delay, impairments.

Each egress port is a FIFO served at ``rate_bps`` (clock based: a frame of L bytes occupies the
line for 8L/rate seconds; frame length as seen on the interface, without preamble/FCS, like
tc's htb/tbf). ``enq_qdepth`` is the number of frames waiting in the queue when a frame arrives,
not counting the one being transmitted (as BMv2's egress queue). A frame that finds ``buffer``
frames waiting is dropped (drop-tail). It is delivered ``delay`` seconds after its last bit left.

Impairments act on the wire, after the queue, with a seeded RNG: ``loss`` (percent) drops the
frame, ``duplicate`` (percent) delivers it twice, ``reorder`` (percent) holds it back by
``reorder_gap`` seconds so later frames overtake it.

Strict priority (``admit_priority`` / ``push`` / ``next_frame``; in-network MLTCP's
priority-by-progress): one FIFO per priority 0-7 in front of the same line, each as deep as the
buffer (BMv2's priority queues under one ``set_queue_depth``), the highest non-empty one served
whenever the line is free. Such a frame's departure is decided when it leaves its queue, not
when it arrives. Its ``enq_qdepth`` is every priority's waiting frames together, as v1model's
on BMv2 with --priority-queues.
"""

from __future__ import annotations

import random
import re
from collections import deque
from dataclasses import dataclass, replace

_RATE_UNITS = {
    "bit": 1,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "tbit": 1e12,
    "bps": 8,
    "kbps": 8e3,
    "mbps": 8e6,
    "gbps": 8e9,
}
_TIME_UNITS = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "msec": 1e-3, "us": 1e-6, "usec": 1e-6, "ns": 1e-9}


def parse_rate(text: str) -> float | None:
    """'100mbit' -> 1e8 bits/s (tc units: bit, kbit, mbit, gbit; bps, kbps... are bytes/s).
    'unlimited', 'inf' or '0' -> None (no shaping)."""
    t = text.strip().lower()
    if t in ("unlimited", "inf", "none", "0"):
        return None
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)", t)
    if not m or m.group(2) not in _RATE_UNITS and m.group(2) != "":
        raise ValueError(f"bad rate {text!r} (use e.g. 100mbit, 1gbit, 500kbit, unlimited)")
    v = float(m.group(1)) * _RATE_UNITS.get(m.group(2), 1)
    if v <= 0:
        raise ValueError(f"bad rate {text!r}: must be positive")
    return v


def parse_time(text: str) -> float:
    """'1ms' -> 0.001 s; a bare number is seconds."""
    t = text.strip().lower()
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*([a-z]*)", t)
    if not m or (m.group(2) and m.group(2) not in _TIME_UNITS):
        raise ValueError(f"bad time {text!r} (use e.g. 1ms, 200us, 0)")
    return float(m.group(1)) * _TIME_UNITS.get(m.group(2) or "s", 1.0)


@dataclass(frozen=True)
class LinkConfig:
    """One egress port's link. ``rate_bps`` None = not shaped."""

    rate_bps: float | None = None
    delay_s: float = 0.0
    buffer_pkts: int = 100
    loss_pct: float = 0.0
    reorder_pct: float = 0.0
    duplicate_pct: float = 0.0
    reorder_gap_s: float = 0.001
    seed: int = 1
    pfc_headroom: int = 0  # > 0: lossless strict-priority queues (PFC): a priority queue that
    #                            reaches buffer - pfc_headroom frames pauses the ports feeding it
    priority_pin: bool = True  # a job's frames go to the priority queue still holding frames of it

    def __post_init__(self) -> None:
        for name in ("loss_pct", "reorder_pct", "duplicate_pct"):
            v = getattr(self, name)
            if not 0.0 <= v <= 100.0:
                raise ValueError(f"{name} = {v} not in 0..100")
        if self.buffer_pkts < 1:
            raise ValueError(f"buffer_pkts = {self.buffer_pkts} must be >= 1")
        if self.delay_s < 0 or self.reorder_gap_s < 0:
            raise ValueError("delay and reorder gap must be >= 0")
        if self.rate_bps is not None and self.rate_bps <= 0:
            raise ValueError(f"rate_bps = {self.rate_bps} must be positive or None")
        if not 0 <= self.pfc_headroom < self.buffer_pkts:
            raise ValueError(f"pfc_headroom = {self.pfc_headroom} must be in 0..buffer_pkts - 1")

    def with_(self, **kw) -> "LinkConfig":
        return replace(self, **kw)


def parse_link_overrides(text: str, base: LinkConfig) -> LinkConfig:
    """'rate=10mbit,delay=5ms,buffer=50,loss=1,reorder=0,duplicate=0,seed=3' over ``base``;
    'pfc=N' makes its strict-priority queues lossless with N frames of headroom, 'pin=0' lets a
    job's frames change priority queue while frames of it wait (they may overtake them)."""
    kw = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        if "=" not in item:
            raise ValueError(f"bad link setting {item!r} (expected key=value)")
        k, v = (s.strip() for s in item.split("=", 1))
        if k == "rate":
            kw["rate_bps"] = parse_rate(v)
        elif k == "delay":
            kw["delay_s"] = parse_time(v)
        elif k == "reorder-gap":
            kw["reorder_gap_s"] = parse_time(v)
        elif k == "buffer":
            kw["buffer_pkts"] = int(v)
        elif k in ("loss", "reorder", "duplicate"):
            kw[f"{k}_pct"] = float(v)
        elif k == "seed":
            kw["seed"] = int(v)
        elif k == "pfc":
            kw["pfc_headroom"] = int(v)
        elif k == "pin":
            if v not in ("0", "1"):
                raise ValueError(f"bad link setting pin={v!r} (0 or 1)")
            kw["priority_pin"] = v == "1"
        else:
            raise ValueError(
                f"unknown link setting {k!r} (rate, delay, buffer, loss, reorder, "
                "duplicate, reorder-gap, seed, pfc, pin)"
            )
    return replace(base, **kw)


PRIORITIES = 8  # v1model's standard_metadata.priority is bit<3>


class EgressQueue:
    """Admission and timing for one egress port; times are seconds on any monotonic clock."""

    def __init__(self, cfg: LinkConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self._waiting: deque[float] = deque()  # start-of-transmission times still in the future
        self._prio: list[deque] = [deque() for _ in range(PRIORITIES)]  # strict priority: (bytes, arrival, item)
        self._free_at = 0.0
        self.enqueued = 0
        self.dropped = 0  # drop-tail
        self.lost = 0  # impairment loss
        self.duplicated = 0
        self.reordered = 0

    def depth(self, now: float) -> int:
        w = self._waiting
        while w and w[0] <= now:
            w.popleft()
        return len(w)

    def admit(self, now: float, nbytes: int) -> int | None:
        """Queue depth seen by this frame, or None if the buffer is full (frame dropped)."""
        d = self.depth(now)
        if d >= self.cfg.buffer_pkts:
            self.dropped += 1
            return None
        self.enqueued += 1
        return d

    def schedule(self, now: float, nbytes: int) -> list[float]:
        """Delivery times for an admitted frame: [] lost, 1 normally, 2 when duplicated."""
        cfg = self.cfg
        if cfg.rate_bps is None:
            done = now
        else:
            start = now if self._free_at <= now else self._free_at
            if start > now:
                self._waiting.append(start)
            done = start + nbytes * 8.0 / cfg.rate_bps
            self._free_at = done
        return self._wire(done)

    # -- strict priority -------------------------------------------------------------------
    def admit_priority(self, now: float, priority: int) -> int | None:
        """Queue depth seen by a frame of ``priority`` (every priority's waiting frames), or None
        if its own queue is full (frame dropped)."""
        if len(self._prio[priority]) >= self.cfg.buffer_pkts:
            self.dropped += 1
            return None
        self.enqueued += 1
        return self.depth(now) + self.waiting()

    def push(self, priority: int, nbytes: int, item, now: float) -> None:
        self._prio[priority].append((nbytes, now, item))

    def prio_depth(self, priority: int) -> int:
        """Frames waiting in one priority's queue."""
        return len(self._prio[priority])

    def waiting(self) -> int:
        """Frames in the priority queues."""
        return sum(len(q) for q in self._prio)

    def line_free_at(self) -> float:
        return self._free_at

    def next_frame(self, now: float):
        """If the line is free at ``now``: the head of the highest non-empty priority starts, when
        the line became free or when it arrived, whichever is later (a late caller loses no line
        time); returns (end of its transmission, its delivery times as :meth:`schedule`, the
        item). None if the line is busy at ``now`` or nothing waits."""
        if self._free_at > now:
            return None
        for q in reversed(self._prio):
            if q:
                nbytes, arrived, item = q.popleft()
                start = max(self._free_at, arrived)
                rate = self.cfg.rate_bps
                done = start if rate is None else start + nbytes * 8.0 / rate
                self._free_at = done
                return done, self._wire(done), item
        return None

    def _wire(self, done: float) -> list[float]:
        """Delay and impairments after the last bit left at ``done``."""
        cfg = self.cfg
        t = done + cfg.delay_s
        rng = self.rng
        if cfg.loss_pct and rng.random() * 100.0 < cfg.loss_pct:
            self.lost += 1
            return []
        if cfg.reorder_pct and rng.random() * 100.0 < cfg.reorder_pct:
            self.reordered += 1
            t += cfg.reorder_gap_s
        if cfg.duplicate_pct and rng.random() * 100.0 < cfg.duplicate_pct:
            self.duplicated += 1
            return [t, t]
        return [t]
