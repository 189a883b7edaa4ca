"""The database load of one `mltcp tune` trial on PostgreSQL: transactions, rows written and bytes
per trial, measured from the server's own statistics (a throwaway PostgreSQL 15 server, started
as in the tests, removed afterwards).

    .venv/bin/python bench/bench_tune_db.py [--trials 20] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _postgres import PostgresServer, missing_reason  # noqa: E402

TINY = (Path(__file__).resolve().parents[1] / "tests" / "data" / "tiny.toml").read_text()  # two jobs

STATS = (
    "select xact_commit, xact_rollback, tup_inserted, tup_updated, tup_fetched, blks_hit + blks_read "
    "from pg_stat_database where datname = 'mltcp'"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seeds", default="1,2,3", help="training cases per trial = seeds (one scenario)")
    a = ap.parse_args()
    why = missing_reason()
    if why:
        sys.exit(f"cannot run: {why}")
    pg = PostgresServer()
    try:
        pg.create()
        with tempfile.TemporaryDirectory() as d:
            tiny = Path(d) / "tiny.toml"
            tiny.write_text(TINY)
            base = [
                sys.executable,
                "-m",
                "mltcp.cli",
                "tune",
                "run",
                str(tiny),
                "--seeds",
                a.seeds,
                "--storage",
                pg.url,
                "--study",
                "bench",
                "--out",
                str(Path(d) / "o"),
                "--json",
            ]
            subprocess.run(base + ["--trials", "0"], check=True, capture_output=True)  # study + baselines
            time.sleep(1.0)  # the statistics collector catches up
            before = pg.query(STATS)[0]
            t0 = time.perf_counter()
            subprocess.run(
                base + ["--trials", str(a.trials), "--workers", str(a.workers)], check=True, capture_output=True
            )
            wall = time.perf_counter() - t0
            time.sleep(1.0)
            after = pg.query(STATS)[0]
            size = pg.query("select pg_database_size('mltcp')")[0][0]
        d_ = [y - x for x, y in zip(before, after)]
        per = {
            k: v / a.trials
            for k, v in zip(
                ("commits", "rollbacks", "rows_inserted", "rows_updated", "rows_fetched", "blocks_touched"), d_
            )
        }
        out = {
            "trials": a.trials,
            "workers": a.workers,
            "cases_per_trial": len(a.seeds.split(",")),
            "wall_s": round(wall, 2),
            "per_trial": {k: round(v, 1) for k, v in per.items()},
            "database_bytes_after": size,
        }
        print(
            f"{a.trials} trials, {a.workers} workers, {out['cases_per_trial']} cases each, {wall:.1f} s: per trial "
            f"{per['commits']:.0f} commits, {per['rows_inserted']:.0f} rows inserted, {per['rows_updated']:.0f} "
            f"updated, {per['rows_fetched']:.0f} fetched; database {size / 1e6:.1f} MB; load average "
            f"{os.getloadavg()[0]:.1f}"
        )
        print(json.dumps(out))
    finally:
        pg.close()


if __name__ == "__main__":
    main()
