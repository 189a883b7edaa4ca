"""Parsing of human-friendly sizes, durations and rates for the traffic CLI."""

from __future__ import annotations

import math
import re

_SIZE = {
    "": 1,
    "b": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "k": 1e3,
    "m": 1e6,
    "g": 1e9,
}
_TIME = {"": 1, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "m": 60, "min": 60}
_RATE = {
    "": 1,
    "bit": 1,
    "bps": 1,
    "kbit": 1e3,
    "kbps": 1e3,
    "mbit": 1e6,
    "mbps": 1e6,
    "gbit": 1e9,
    "gbps": 1e9,
    "k": 1e3,
    "m": 1e6,
    "g": 1e9,
}
_NUM = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Zµ]*)\s*$")


def _parse(text: str, table: dict, what: str) -> float:
    m = _NUM.match(str(text))
    if not m or m.group(2).lower() not in table:
        units = ", ".join(k for k in table if k)
        raise ValueError(f"bad {what} {text!r} (a number with an optional unit: {units})")
    v = float(m.group(1)) * table[m.group(2).lower()]
    if not math.isfinite(v):
        raise ValueError(f"bad {what} {text!r} (too large)")
    return v


def parse_size(text: str) -> int:
    """'2MB' -> 2000000, '64KiB' -> 65536 (bytes)."""
    return int(round(_parse(text, _SIZE, "size")))


def parse_duration(text: str) -> float:
    """'20ms' -> 0.02 (seconds); a bare number is seconds."""
    return _parse(text, _TIME, "duration")


def parse_rate(text: str) -> float:
    """'100mbit' -> 1e8 (bits/s)."""
    return _parse(text, _RATE, "rate")
