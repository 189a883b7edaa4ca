"""Per-iteration records: what the simulator, the emulator and the real senders all produce."""

from __future__ import annotations

import contextlib
import csv
import math
import os
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path


@dataclass
class IterationRecord:
    job: str
    iteration: int
    start: float  # compute phase begins (s)
    comm_start: float  # communication phase begins (s)
    end: float  # last byte of the iteration acknowledged (s)
    bytes: float
    drops: float = 0.0  # packets dropped in this iteration's communication
    marks: float = 0.0  # packets ECN-marked

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def comm_duration(self) -> float:
        return self.end - self.comm_start

    @classmethod
    def from_dict(cls, d: dict) -> "IterationRecord":
        """A record from its fields in a dict (``dataclasses.asdict`` of one, other keys ignored)."""
        return cls(
            str(d["job"]),
            int(d["iteration"]),
            *(float(d[f]) for f in ("start", "comm_start", "end", "bytes")),
            float(d.get("drops", 0.0)),
            float(d.get("marks", 0.0)),
        )


FIELDS = [f.name for f in fields(IterationRecord)]


def output_problem(path: Path | str, is_dir: bool = False) -> str | None:
    """Why ``path`` could not be written (None if it can): checked before a run, so a long run
    does not fail at its very end. A file's folder must exist; a folder (``is_dir``) may be
    created, under an existing writable folder."""
    p = Path(path)
    if is_dir:
        if p.exists():
            if not p.is_dir():
                return f"{p} exists and is not a folder"
            return None if os.access(p, os.W_OK | os.X_OK) else f"folder {p} is not writable"
        parent = p.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            return f"cannot create folder {p}: {parent} is not a folder"
        return None if os.access(parent, os.W_OK | os.X_OK) else f"cannot create folder {p}: {parent} is not writable"
    if p.is_dir():
        return f"{p} is a folder"
    folder = p.parent
    if not folder.is_dir():
        return f"folder {folder} does not exist" if not folder.exists() else f"{folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"folder {folder} is not writable"
    if p.exists() and not os.access(p, os.W_OK):
        return f"{p} is not writable"
    return None


@contextlib.contextmanager
def atomic_path(path: Path | str):
    """Yield a temporary path next to ``path``; on success it replaces ``path`` in one rename
    (readers see the old file or the whole new one, never half of it); on error it is removed."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def write_text_atomic(path: Path | str, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_csv(records: list[IterationRecord], path: Path) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(FIELDS)
        for r in records:
            w.writerow([getattr(r, f) for f in FIELDS])


def read_csv(path: Path) -> list[IterationRecord]:
    """Records from a CSV (as written by :func:`write_csv`). Every problem raises ValueError
    naming the file (and the line): unreadable, not UTF-8, not CSV, missing columns, bad or
    non-finite numbers."""
    out, lineno = [], 1
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            for lineno, row in enumerate(reader, start=2):
                try:
                    vals = [float(row[f]) for f in FIELDS[2:]]
                    if not all(math.isfinite(v) for v in vals):
                        raise ValueError("a number is not finite")
                    out.append(IterationRecord(row["job"], int(row["iteration"]), *vals))
                except (KeyError, ValueError, TypeError) as e:
                    missing = [f for f in FIELDS if f not in (reader.fieldnames or [])]
                    why = f"missing column(s) {', '.join(missing)}" if missing else str(e)
                    raise ValueError(f"{path}:{lineno}: bad iteration record ({why})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (after line {lineno}: {e.reason})") from None
    except csv.Error as e:
        raise ValueError(f"{path}: not a CSV file ({e})") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror or e})") from None
    return out
