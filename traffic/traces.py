"""Per-iteration trace files in the public measured shape
``iteration_number,iteration_duration_seconds,flow_size_bytes_in_iteration`` (header optional;
blank lines, ``#`` comments and a UTF-8 byte-order mark allowed), turned into a job profile and
written back from a run.

One row is one flow of one iteration: the rows of an iteration are grouped (they must be adjacent,
iterations in increasing order, as in the public captures where every iteration has 8 rows), and
an iteration's flows are counted. The file is read as a stream and kept as a few numbers per
iteration (numpy arrays), never as a list of row objects, so a 10 M-row trace fits in memory.

A profile's compute time per iteration is the iteration's duration minus the time its bytes take
at the line rate the trace was measured at: by default the flows ran in parallel, each at the line
rate (each worker of a ring all-reduce has its own NIC), so the largest flow sets the transfer
time; with ``shared_link`` they shared one link at that rate and the iteration's total does.
Iterations shorter than that transfer count as compute 0 (``clamped``); when every iteration is,
the line rate is wrong and :class:`TraceError` says which rate would fit.
"""

from __future__ import annotations

import csv
import math
import os
from array import array
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

COLUMNS = ["iteration_number", "iteration_duration_seconds", "flow_size_bytes_in_iteration"]
_BOM = "\ufeff"


class TraceError(ValueError):
    """A trace file that cannot be read or used; the message names the file (and line)."""


@dataclass(frozen=True)
class TraceRow:
    iteration: int
    duration_s: float
    flow_bytes: int


def _is_header(row: list[str]) -> bool:
    try:
        float(row[0])
        return False
    except (ValueError, IndexError):
        return True


def iter_rows(lines: Iterable[str], source: str = "<trace>") -> Iterator[tuple[int, int, float, int]]:
    """Validated data rows as ``(line number, iteration, duration s, flow bytes)``, streamed."""
    seen_data = False
    inf = math.inf
    for lineno, row in enumerate(csv.reader(lines), start=1):
        if len(row) == 3 and seen_data:  # fast path: a well-formed row (int/float ignore spaces)
            try:
                it, dur, fb = int(row[0]), float(row[1]), float(row[2])
            except ValueError:
                pass
            else:
                if it >= 0 and 0 < dur < inf and 0 <= fb < 2**53 and fb.is_integer():
                    yield lineno, it, dur, int(fb)
                    continue
        if lineno == 1 and row and row[0].startswith(_BOM):
            row[0] = row[0][1:]
        cells = [c.strip() for c in row]
        if not cells or cells[0].startswith("#") or all(c == "" for c in cells):
            continue
        if not seen_data and _is_header(cells):
            if [c.lower() for c in cells] != COLUMNS:
                raise TraceError(f"{source}:{lineno}: header {','.join(cells)!r} is not {','.join(COLUMNS)!r}")
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
        if not 0 < dur < inf:
            raise TraceError(f"{source}:{lineno}: iteration_duration_seconds must be > 0, got {cells[1]}")
        if not 0 <= fb < 2**53 or fb != int(fb):
            raise TraceError(
                f"{source}:{lineno}: flow_size_bytes_in_iteration must be a whole number >= 0, got {cells[2]}"
            )
        yield lineno, it, dur, int(fb)


def parse_trace(lines, source: str = "<trace>") -> list[TraceRow]:
    """Every data row as a :class:`TraceRow` (for small traces; :func:`read_iterations` streams)."""
    rows = [TraceRow(it, dur, fb) for _, it, dur, fb in iter_rows(lines, source)]
    if not rows:
        raise TraceError(f"{source}: no data rows")
    return rows


def _open(path: Path):
    # utf-8-sig: a byte-order mark (as spreadsheet programs write) is dropped, not taken for data
    return open(path, newline="", encoding="utf-8-sig")


def read_trace(path) -> list[TraceRow]:
    path = Path(path)
    try:
        with _open(path) as fh:
            return parse_trace(fh, str(path))
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not UTF-8 text (byte {e.start})") from None


@dataclass
class TraceIterations:
    """A trace grouped by iteration: one entry per iteration, in file order (numpy arrays)."""

    source: str
    iteration: np.ndarray  # iteration_number
    duration_s: np.ndarray  # the iteration's duration (the largest of its rows')
    flows: np.ndarray  # rows (flows) in the iteration
    bytes_total: np.ndarray  # bytes of all its flows
    bytes_max: np.ndarray  # bytes of its largest flow
    rows: int = 0

    def __len__(self) -> int:
        return len(self.iteration)


def group_iterations(lines: Iterable[str], source: str = "<trace>", progress=None) -> TraceIterations:
    """Stream rows into per-iteration aggregates. Rows of one iteration must be adjacent and
    iterations increase, as in the public captures (a repeated iteration is an error)."""
    return _group(iter_rows(lines, source), source, progress)


def _group(rows, source: str, progress=None) -> TraceIterations:
    its, durs, flows, tot, mx = array("q"), array("d"), array("q"), array("q"), array("q")
    cur = None  # [iteration, duration, flows, total, max]
    nrows = 0
    for lineno, it, dur, fb in rows:
        nrows += 1
        if cur is not None and it == cur[0]:
            cur[1] = max(cur[1], dur)
            cur[2] += 1
            cur[3] += fb
            cur[4] = max(cur[4], fb)
            continue
        if cur is not None:
            if it < cur[0]:
                raise TraceError(
                    f"{source}:{lineno}: iteration_number {it} after {cur[0]}: the rows of an "
                    "iteration must be adjacent and iterations in increasing order"
                )
            its.append(cur[0])
            durs.append(cur[1])
            flows.append(cur[2])
            tot.append(cur[3])
            mx.append(cur[4])
            if progress is not None and len(its) % 100_000 == 0:
                progress(nrows)
        cur = [it, dur, 1, fb, fb]
    if cur is None:
        raise TraceError(f"{source}: no data rows")
    its.append(cur[0])
    durs.append(cur[1])
    flows.append(cur[2])
    tot.append(cur[3])
    mx.append(cur[4])
    return TraceIterations(
        source,
        np.frombuffer(its, dtype=np.int64),
        np.frombuffer(durs, dtype=np.float64),
        np.frombuffer(flows, dtype=np.int64),
        np.frombuffer(tot, dtype=np.int64),
        np.frombuffer(mx, dtype=np.int64),
        nrows,
    )


def read_iterations(path, progress=None) -> TraceIterations:
    path = Path(path)
    try:
        with _open(path) as fh:
            return group_iterations(fh, str(path), progress)
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not UTF-8 text (byte {e.start})") from None


@dataclass
class TraceProfile:
    name: str
    compute_s: float  # median compute time per iteration
    bytes_per_flow: int  # median bytes per flow per iteration
    jitter: float  # std-dev / mean of the compute times
    line_rate_bps: float
    compute_times: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per iteration, in trace order
    clamped: int = 0  # iterations shorter than their transfer time (compute taken as 0)
    flows: int = 1  # flows per iteration (the most common count)
    flows_min: int = 1
    flows_max: int = 1
    bytes_per_iter: int = 0  # median bytes of all the iteration's flows
    rows: int = 0
    shared_link: bool = False

    @property
    def iterations(self) -> int:
        return len(self.compute_times)

    def job_spec(self, job_id: int, peers=(), **kw):
        """A sender for one flow per peer, each sending one flow's bytes per iteration."""
        from .driver import JobSpec

        return JobSpec.of(
            job_id=job_id,
            compute_s=self.compute_s,
            bytes_per_iter=self.bytes_per_flow,
            peers=list(peers),
            jitter=self.jitter,
            name=kw.pop("name", self.name),
            **kw,
        )

    def summary(self) -> dict:
        return dict(
            name=self.name,
            iterations=self.iterations,
            rows=self.rows,
            flows=self.flows,
            flows_min=self.flows_min,
            flows_max=self.flows_max,
            compute_s=self.compute_s,
            bytes_per_flow=self.bytes_per_flow,
            bytes_per_iter=self.bytes_per_iter,
            jitter=self.jitter,
            clamped=self.clamped,
            line_rate_bps=self.line_rate_bps,
            shared_link=self.shared_link,
        )


def check_line_rate(line_rate_bps) -> float:
    if (
        isinstance(line_rate_bps, bool)
        or not isinstance(line_rate_bps, (int, float))
        or not 0 < line_rate_bps < math.inf
    ):
        raise TraceError(f"line rate must be a number of bits/s > 0, got {line_rate_bps!r}")
    return float(line_rate_bps)


def profile_iterations(
    tr: TraceIterations, line_rate_bps: float, name: str = "trace", shared_link: bool = False
) -> TraceProfile:
    """Job profile from grouped iterations: compute = duration - transfer time at the line rate."""
    rate = check_line_rate(line_rate_bps)
    moved = (tr.bytes_total if shared_link else tr.bytes_max).astype(np.float64)
    comp = tr.duration_s - moved * 8.0 / rate
    neg = comp < 0
    clamped = int(neg.sum())
    if clamped == len(comp):
        fits = float(np.max(moved * 8.0 / tr.duration_s))
        raise TraceError(
            f"{tr.source}: every iteration ({len(comp)}) is shorter than its bytes take at the line "
            f"rate {rate:.4g} bit/s, so no compute time is left: was the trace measured at a higher "
            f"line rate? (above {fits:.4g} bit/s every iteration keeps some compute time)"
        )
    comp = np.where(neg, 0.0, comp)
    mean = float(comp.mean())
    jitter = float(comp.std()) / mean if mean > 0 and len(comp) > 1 else 0.0
    counts = np.bincount(tr.flows)
    per_flow = tr.bytes_total / tr.flows
    return TraceProfile(
        name,
        float(np.median(comp)),
        int(round(float(np.median(per_flow)))),
        jitter,
        rate,
        comp,
        clamped,
        int(counts.argmax()),
        int(tr.flows.min()),
        int(tr.flows.max()),
        int(round(float(np.median(tr.bytes_total)))),
        tr.rows,
        shared_link,
    )


def profile(rows: list[TraceRow], line_rate_bps: float, name: str = "trace", shared_link: bool = False) -> TraceProfile:
    """Job profile from trace rows (grouped by iteration like a file)."""
    grouped = _group(((i, r.iteration, r.duration_s, r.flow_bytes) for i, r in enumerate(rows, 1)), name)
    return profile_iterations(grouped, line_rate_bps, name, shared_link)


def load_profile(
    path, line_rate_bps: float, name: str | None = None, shared_link: bool = False, progress=None
) -> TraceProfile:
    check_line_rate(line_rate_bps)  # before reading a large file
    return profile_iterations(read_iterations(path, progress), line_rate_bps, name or Path(path).stem, shared_link)


def rows_from_records(records, job: str | None = None, flows: int = 1) -> list[TraceRow]:
    """Trace rows from IterationRecords of one job: duration = end - start, and the iteration's
    bytes split over ``flows`` rows (the public shape has one row per flow). A record whose end is
    not after its start cannot be a trace row (trace durations are > 0): ValueError naming it."""
    if not (isinstance(flows, int) and flows >= 1):
        raise ValueError(f"flows must be an integer >= 1, got {flows!r}")
    jobs = {r.job for r in records}
    if job is None:
        if len(jobs) > 1:
            raise ValueError(f"records hold several jobs ({', '.join(sorted(map(str, jobs)))}): pick one")
    else:
        records = [r for r in records if r.job == job]
    out = []
    for r in records:
        d = float(r.end) - float(r.start)
        if not 0 < d < math.inf:
            raise ValueError(
                f"record job {r.job} iteration {r.iteration}: end {r.end} is not after start "
                f"{r.start} (a trace iteration needs a duration > 0)"
            )
        b = float(r.bytes)
        if not 0 <= b < 2**53:
            raise ValueError(f"record job {r.job} iteration {r.iteration}: bytes {r.bytes} is not >= 0")
        total = int(round(b))
        share, extra = divmod(total, flows)
        out.extend(TraceRow(int(r.iteration), d, share + (1 if f < extra else 0)) for f in range(flows))
    return out


def write_trace(rows: list[TraceRow], path, header: bool = True, comment: str | None = None) -> None:
    """Write rows in the public shape; atomically (a temporary file renamed into place).
    Rows that :func:`read_trace` would reject raise ValueError before anything is written."""
    for r in rows:
        if not 0 < r.duration_s < math.inf or not 0 <= r.flow_bytes or r.iteration < 0:
            raise ValueError(
                f"iteration {r.iteration}: not a valid trace row (duration {r.duration_s} s, {r.flow_bytes} bytes)"
            )
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
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


def traces_dir() -> Path:
    return Path(str(resources.files("mltcp.traffic").joinpath("traces")))


def example_trace() -> Path:
    """The bundled synthetic DenseNet121-like trace (one row per iteration)."""
    return traces_dir() / "densenet121_synthetic.csv"


def resnet50_trace() -> Path:
    """The bundled synthetic ResNet50 ring all-reduce trace (8 flows per iteration)."""
    return traces_dir() / "resnet50_ring8_synthetic.csv"
