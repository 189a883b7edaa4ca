"""What the job peers inside emulated hosts share: JSON lines to the runner, the run's start epoch."""
from __future__ import annotations

import json
import sys
import time


def emit(rec: dict) -> None:
    """One JSON record per line on stdout, flushed (the runner reads it as it comes)."""
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()


def sync_t0(t0: float) -> float:
    """t0 < 0: announce readiness and take the run's start epoch from stdin (the runner sends it
    once every sender is set up, so slow start-ups cannot skew the jobs' offsets); t0 == 0: now."""
    if t0 >= 0:
        return t0 or time.time()
    emit({"type": "ready"})
    line = sys.stdin.readline()
    if not line.strip():
        raise SystemExit("peer: no start time on stdin")
    return float(line)
