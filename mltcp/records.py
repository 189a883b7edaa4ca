"""Per-iteration records: what the simulator, the emulator and the real senders all produce."""
from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path


@dataclass
class IterationRecord:
    job: str
    iteration: int
    start: float        # compute phase begins (s)
    comm_start: float   # communication phase begins (s)
    end: float          # last byte of the iteration acknowledged (s)
    bytes: float
    drops: float = 0.0  # packets dropped in this iteration's communication
    marks: float = 0.0  # packets ECN-marked

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def comm_duration(self) -> float:
        return self.end - self.comm_start


FIELDS = [f.name for f in fields(IterationRecord)]


def write_csv(records: list[IterationRecord], path: Path) -> None:
    tmp = Path(path).with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(FIELDS)
        for r in records:
            w.writerow([getattr(r, f) for f in FIELDS])
    tmp.replace(path)


def read_csv(path: Path) -> list[IterationRecord]:
    out = []
    with open(path, newline="") as fh:
        for lineno, row in enumerate(csv.DictReader(fh), start=2):
            try:
                out.append(IterationRecord(row["job"], int(row["iteration"]), *(float(row[f]) for f in FIELDS[2:])))
            except (KeyError, ValueError, TypeError) as e:
                raise ValueError(f"{path}:{lineno}: bad iteration record ({e})") from None
    return out


def to_json(records: list[IterationRecord]) -> str:
    return json.dumps([asdict(r) for r in records])
