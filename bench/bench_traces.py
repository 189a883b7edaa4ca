"""Memory and time of reading a large trace (not a test: prints what it measures).

Writes a trace of ``--rows`` rows in the public shape (``--flows`` rows per iteration) to a
temporary folder, then reads it in a fresh process per reader and reports each process's peak
resident memory (ru_maxrss) and wall time:

- ``baseline``: the interpreter with numpy and the module imported, reading nothing;
- ``new``: this checkout's ``traffic/traces.py`` (streamed into per-iteration numpy arrays);
- ``old``: the row-list reader of an earlier commit (``--old-rev``, default the commit before the
  streaming reader), taken from git, when it is available.

    python bench/bench_traces.py [--rows 10000000] [--flows 8] [--old-rev REV]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent

READER = r"""
import importlib.util, json, resource, sys, time
spec = importlib.util.spec_from_file_location("tr", sys.argv[1])
tr = importlib.util.module_from_spec(spec); sys.modules["tr"] = tr; spec.loader.exec_module(tr)
t0 = time.perf_counter()
if sys.argv[3] != "baseline":
    p = tr.load_profile(sys.argv[2], 10e9)
    n = len(p.compute_times)
else:
    n = 0
print(json.dumps({"iterations": n, "wall_s": time.perf_counter() - t0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def write_trace(path: Path, rows: int, flows: int) -> None:
    chunk = []
    with open(path, "w") as fh:
        fh.write("iteration_number,iteration_duration_seconds,flow_size_bytes_in_iteration\n")
        for r in range(rows):
            it = r // flows
            chunk.append(f"{it + 1},0.7{it % 97:02d}1,5986{r % 1000:04d}\n")
            if len(chunk) >= 100_000:
                fh.write("".join(chunk))
                chunk.clear()
        fh.write("".join(chunk))


def run(module: Path, trace: Path, mode: str) -> dict:
    p = subprocess.run([sys.executable, "-c", READER, str(module), str(trace), mode], capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
    return json.loads(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--flows", type=int, default=8)
    ap.add_argument("--old-rev", default="23355e9~1", help="git revision of the row-list reader ('' to skip)")
    a = ap.parse_args()
    con = Console()
    tmp = Path(tempfile.mkdtemp(prefix="mltcp-bench-traces-"))
    try:
        trace = tmp / "trace.csv"
        t0 = time.perf_counter()
        write_trace(trace, a.rows, a.flows)
        con.print(f"wrote {a.rows:,} rows ({trace.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s")
        readers = {"baseline": ROOT / "traffic" / "traces.py", "new": ROOT / "traffic" / "traces.py"}
        if a.old_rev:
            old = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{a.old_rev}:traffic/traces.py"], capture_output=True, text=True
            )
            if old.returncode == 0:
                (tmp / "old_traces.py").write_text(old.stdout)
                readers["old"] = tmp / "old_traces.py"
            else:
                con.print(f"old reader not available at {a.old_rev}: {old.stderr.strip()}")
        res = {name: run(mod, trace, name) for name, mod in readers.items()}
        t = Table(title=f"reading a {a.rows:,}-row trace ({a.flows} rows per iteration)")
        for c in ("reader", "iterations", "peak RSS (MB)", "wall (s)"):
            t.add_column(c, justify="right")
        for name, r in res.items():
            if "error" in r:
                t.add_row(name, "error", r["error"], "")
            else:
                t.add_row(name, f"{r['iterations']:,}", f"{r['peak_rss_mb']:.0f}", f"{r['wall_s']:.1f}")
        con.print(t)
        if "old" in res and "error" not in res["old"] and "error" not in res["new"]:
            base = res["baseline"]["peak_rss_mb"]
            con.print(
                f"memory above baseline: old {res['old']['peak_rss_mb'] - base:.0f} MB, "
                f"new {res['new']['peak_rss_mb'] - base:.0f} MB; wall old/new "
                f"{res['old']['wall_s'] / res['new']['wall_s']:.2f}x"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
