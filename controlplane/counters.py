"""Per-job counter snapshots of mltcp.p4 and their rendering (rich table, JSON). No network."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from rich.table import Table

Q16_ONE = 0xFFFF


def bitstring_to_int(raw: bytes, bitwidth: int) -> int:
    """A P4Runtime bitstring as an unsigned int. Both encodings are accepted: the padded one
    (ceil(bitwidth/8) bytes, what mltcp-switch sends) and the canonical minimal-width one (no
    leading zero bytes, b"" for 0: what BMv2's PI sends). Too long or too wide is an error."""
    raw = bytes(raw)
    if len(raw) > (bitwidth + 7) // 8:
        raise ValueError(f"bitstring of {len(raw)} bytes for a bit<{bitwidth}> value")
    v = int.from_bytes(raw, "big") if raw else 0
    if v >> bitwidth:
        raise ValueError(f"value {v:#x} does not fit bit<{bitwidth}>")
    return v


@dataclass
class JobStats:
    job_id: int
    tx_packets: int = 0
    tx_bytes: int = 0
    ecn_marks: int = 0
    bytes_ratio_q16: int = 0

    @property
    def bytes_ratio(self) -> float:
        return self.bytes_ratio_q16 / Q16_ONE

    @property
    def mark_fraction(self) -> float:
        return self.ecn_marks / self.tx_packets if self.tx_packets else 0.0

    def is_zero(self) -> bool:
        return not (self.tx_packets or self.tx_bytes or self.ecn_marks or self.bytes_ratio_q16)


@dataclass
class CounterSnapshot:
    """Counters of one switch at one time (``time`` is a Unix timestamp)."""

    switch: str
    grpc: str
    time: float
    parse_errors: int = 0
    jobs: dict[int, JobStats] = field(default_factory=dict)

    def job(self, job_id: int) -> JobStats:
        if job_id not in self.jobs:
            self.jobs[job_id] = JobStats(job_id)
        return self.jobs[job_id]

    def active_jobs(self, only: set[int] | None = None) -> list[JobStats]:
        """Jobs with any non-zero value (or exactly `only`, if given), by job id."""
        if only is not None:
            return [self.jobs.get(j, JobStats(j)) for j in sorted(only)]
        return [s for _, s in sorted(self.jobs.items()) if not s.is_zero()]

    def to_dict(self, only: set[int] | None = None) -> dict:
        jobs = []
        for s in self.active_jobs(only):
            d = asdict(s)
            d["bytes_ratio"] = round(s.bytes_ratio, 6)
            jobs.append(d)
        return {
            "switch": self.switch,
            "grpc": self.grpc,
            "time": self.time,
            "parse_errors": self.parse_errors,
            "jobs": jobs,
        }


def to_json(snapshots: list[CounterSnapshot], only: set[int] | None = None) -> str:
    """One JSON document: {"switches": [snapshot, ...]}."""
    return json.dumps({"switches": [s.to_dict(only) for s in snapshots]}, sort_keys=True)


def to_table(snapshots: list[CounterSnapshot], only: set[int] | None = None) -> Table:
    t = Table(title="MLTCP per-job counters", show_lines=False)
    for col, just in (
        ("switch", "left"),
        ("job", "right"),
        ("tx pkts", "right"),
        ("tx bytes", "right"),
        ("ECN marks", "right"),
        ("marked", "right"),
        ("bytes_ratio", "right"),
    ):
        t.add_column(col, justify=just)
    for snap in snapshots:
        jobs = snap.active_jobs(only)
        if not jobs:
            t.add_row(snap.switch, "-", "0", "0", "0", "-", "-")
        for s in jobs:
            t.add_row(
                snap.switch,
                str(s.job_id),
                f"{s.tx_packets:,}",
                f"{s.tx_bytes:,}",
                f"{s.ecn_marks:,}",
                f"{100 * s.mark_fraction:.1f}%",
                f"{s.bytes_ratio:.4f}",
            )
    errs = ", ".join(f"{s.switch}: {s.parse_errors}" for s in snapshots)
    t.caption = f"parse errors (dropped): {errs}"
    return t
