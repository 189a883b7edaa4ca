"""Per-iteration trace files in the public measured shape
``iteration_number,iteration_duration_seconds,flow_size_bytes_in_iteration`` (header optional;
blank lines and ``#`` comments allowed), turned into a job profile and written back from a run.

A profile's compute time is the iteration duration minus the time its bytes take at a given line
rate (durations shorter than that give compute 0 and are counted in ``clamped``).
"""
from __future__ import annotations

import csv
import os
import statistics
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

COLUMNS = ["iteration_number", "iteration_duration_seconds", "flow_size_bytes_in_iteration"]


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class TraceRow:
    iteration: int
    duration_s: float
    flow_bytes: int


@dataclass
class TraceProfile:
    name: str
    compute_s: float           # median compute time
    bytes_per_iter: int        # median bytes per flow per iteration
    jitter: float              # std-dev / mean of the compute times
    line_rate_bps: float
    compute_times: list = field(default_factory=list)
    flow_bytes: list = field(default_factory=list)
    clamped: int = 0

    def job_spec(self, job_id: int, peers=(), **kw):
        from .driver import JobSpec
        return JobSpec(job_id=job_id, compute_s=self.compute_s, bytes_per_iter=self.bytes_per_iter,
                       peers=list(peers), jitter=self.jitter, name=kw.pop("name", self.name), **kw)


def _is_header(row: list[str]) -> bool:
    try:
        float(row[0])
        return False
    except (ValueError, IndexError):
        return True


def parse_trace(lines, source: str = "<trace>") -> list[TraceRow]:
    rows, seen_data = [], False
    for lineno, row in enumerate(csv.reader(lines), start=1):
        cells = [c.strip() for c in row]
        if not cells or all(c == "" for c in cells) or cells[0].startswith("#"):
            continue
        if not seen_data and _is_header(cells):
            if [c.lower() for c in cells] != COLUMNS:
                raise TraceError(f"{source}:{lineno}: header {','.join(cells)!r} is not "
                                 f"{','.join(COLUMNS)!r}")
            seen_data = True
            continue
        seen_data = True
        if len(cells) != 3:
            raise TraceError(f"{source}:{lineno}: expected 3 fields ({','.join(COLUMNS)}), got {len(cells)}")
        try:
            it = int(cells[0])
        except ValueError:
            raise TraceError(f"{source}:{lineno}: iteration_number {cells[0]!r} is not an integer") from None
        try:
            dur = float(cells[1])
        except ValueError:
            raise TraceError(f"{source}:{lineno}: iteration_duration_seconds {cells[1]!r} is not a number") from None
        try:
            fb = float(cells[2])
        except ValueError:
            raise TraceError(f"{source}:{lineno}: flow_size_bytes_in_iteration {cells[2]!r} is not a number") from None
        if it < 0:
            raise TraceError(f"{source}:{lineno}: iteration_number must be >= 0, got {it}")
        if not (dur > 0 and dur < float("inf")):
            raise TraceError(f"{source}:{lineno}: iteration_duration_seconds must be > 0, got {cells[1]}")
        if not (fb >= 0 and fb < float("inf")) or fb != int(fb):
            raise TraceError(f"{source}:{lineno}: flow_size_bytes_in_iteration must be a whole number >= 0, got {cells[2]}")
        rows.append(TraceRow(it, dur, int(fb)))
    if not rows:
        raise TraceError(f"{source}: no data rows")
    return rows


def read_trace(path) -> list[TraceRow]:
    path = Path(path)
    try:
        with open(path, newline="") as fh:
            return parse_trace(fh, str(path))
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not a text file") from None


def profile(rows: list[TraceRow], line_rate_bps: float, name: str = "trace") -> TraceProfile:
    """Job profile from trace rows: compute = duration - flow bytes x 8 / line rate."""
    if not line_rate_bps > 0:
        raise ValueError(f"line rate must be > 0, got {line_rate_bps}")
    computes, clamped = [], 0
    for r in rows:
        c = r.duration_s - r.flow_bytes * 8 / line_rate_bps
        if c < 0:
            clamped += 1
            c = 0.0
        computes.append(c)
    mean = statistics.fmean(computes)
    jitter = statistics.pstdev(computes) / mean if mean > 0 and len(computes) > 1 else 0.0
    return TraceProfile(name, statistics.median(computes), int(statistics.median(r.flow_bytes for r in rows)),
                        jitter, line_rate_bps, computes, [r.flow_bytes for r in rows], clamped)


def load_profile(path, line_rate_bps: float, name: str | None = None) -> TraceProfile:
    return profile(read_trace(path), line_rate_bps, name or Path(path).stem)


def rows_from_records(records, job: str | None = None) -> list[TraceRow]:
    """Trace rows (duration = end - start, bytes) from IterationRecords of one job."""
    jobs = {r.job for r in records}
    if job is None:
        if len(jobs) > 1:
            raise ValueError(f"records hold several jobs ({', '.join(sorted(map(str, jobs)))}): pick one")
    else:
        records = [r for r in records if r.job == job]
    return [TraceRow(int(r.iteration), float(r.end - r.start), int(r.bytes)) for r in records]


def write_trace(rows: list[TraceRow], path, header: bool = True, comment: str | None = None) -> None:
    """Write rows in the public shape; atomically (a temporary file renamed into place)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", newline="") as fh:
            if comment:
                for line in comment.splitlines():
                    fh.write(f"# {line}\n")
            w = csv.writer(fh)
            if header:
                w.writerow(COLUMNS)
            for r in rows:
                w.writerow([r.iteration, repr(float(r.duration_s)), r.flow_bytes])
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def example_trace() -> Path:
    """The bundled synthetic DenseNet121-like trace."""
    return Path(str(resources.files("mltcp.traffic").joinpath("traces/densenet121_synthetic.csv")))
