"""bench/bench_ddp.py's pure parts: the tallies and the README's DDP table (rows per scenario and base)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_ddp", ROOT / "bench" / "bench_ddp.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def _row(avg, p99, retr_base, retr_mltcp, sim=(1.0,), base_avg=3.0):
    return {
        "speedup_avg": avg,
        "speedup_p99": p99,
        "interleaved_at": 4,
        "retrans_base": retr_base,
        "retrans_mltcp": retr_mltcp,
        "losses_identical": True,
        "sim_over_emu": list(sim),
        "base_avg": base_avg,
    }


def test_tallies_count_no_harm_the_target_and_the_simulator_within_15_percent():
    rows = [_row(1.25, 1.35, 100, 50), _row(1.0, 0.96, 100, 101, sim=(0.8, 1.0)), _row(0.97, 1.1, 100, 10)]
    t = bench.tallies(rows, 1.2, 1.3)
    assert (t["runs"], t["no_harm"], t["target"], t["losses_identical"], t["sim_within_15pc"]) == (3, 1, 1, 3, 2)


def test_readme_row_replaces_its_scenario_and_base_and_appends_others():
    rows = [_row(1.1, 1.2, 100, 50), _row(1.2, 1.0, 200, 20, base_avg=3.3)]
    t = bench.tallies(rows, 1.2, 1.3) | {"alone_avg": 2.5, "floor_avg": 2.75}
    row = bench.readme_row("ddp-two-jobs", "reno", rows, t)
    assert row.startswith("| `ddp-two-jobs` | reno | 2 | 2.500 / 2.750 | 1.20x-1.32x | 1.10x-1.20x |")
    assert "| 2 of 2 | 0 of 2 | 0.10-0.50 |" in row
    text = f"# x\n{bench.README_START}\nold\n{bench.README_END}\ntail\n"
    once = bench.with_readme_row(text, row)
    assert once.count("| `ddp-two-jobs` | reno |") == 1 and once.endswith(f"{bench.README_END}\ntail\n")
    newer = row.replace("| reno | 2 |", "| reno | 5 |")
    twice = bench.with_readme_row(bench.with_readme_row(once, newer), row.replace("| reno |", "| cubic |"))
    assert "| reno | 2 |" not in twice  # the reno row replaced in place
    assert twice.index("| `ddp-two-jobs` | reno | 5") < twice.index("| `ddp-two-jobs` | cubic |")
    assert bench.README_HEAD in twice and "old" not in twice
    with pytest.raises(ValueError, match="markers"):
        bench.with_readme_row("no block here", row)


def test_from_json_renders_the_readme_row_of_saved_runs_without_measuring(tmp_path):
    import json
    import subprocess
    import sys

    rows = [_row(1.1, 1.2, 100, 50)]
    saved = tmp_path / "runs.json"
    saved.write_text(json.dumps({"rows": rows, "tallies": bench.tallies(rows, 1.2, 1.3)}))
    readme = tmp_path / "README.md"
    readme.write_text(f"{bench.README_START}\n{bench.README_END}\n")
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_ddp.py"), "scenarios/ddp-tiny.toml", "--cc", "cubic"]
        + ["--from-json", str(saved), "--readme", str(readme)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    assert "| `ddp-tiny` | cubic | 1 | - | - | 1.10x | 1.20x | 1 of 1 |" in readme.read_text()


def test_switch_state_counts_the_engaged_connections_of_the_mltcp_arm():
    sock = {"completed": 9, "engaged": True, "learned_bytes": 1, "best_rate_mbit": 1.0, "last_stretch": 1.1}
    doc = {
        "kernel_sockets": {
            "baseline": {"A": {"0": None}},
            "mltcp": {"A": {"0": [sock], "1": [dict(sock, engaged=False, last_stretch=2.0)]}, "B": {"0": None}},
        }
    }
    assert bench.switch_state(doc) == {"engaged": 1, "connections": 2, "last_stretch": [1.1, 2.0]}
    assert bench.switch_state({}) == {"engaged": 0, "connections": 0, "last_stretch": []}


def test_run_table_has_a_delimiter_cell_per_column_and_a_row_per_run():
    full = {"load": 2.0, "base_p99": 3.5, "mltcp_avg": 2.8, "mltcp_p99": 3.0, "overlap_base": 0.9, "overlap_mltcp": 0.6}
    full |= {"drops_base": 90, "drops_mltcp": 40}
    rows = [_row(1.1, 1.2, 100, 50) | full, _row(0.9, 0.8, 200, 20) | full]
    lines = bench.run_table(rows, "the summary").splitlines()
    assert lines[0] == bench.HEAD and lines[1].count("---") == lines[0].count("|") - 1
    assert [ln.split(" | ")[0] for ln in lines[2:4]] == ["| 1", "| 2"]
    assert all(ln.count("|") == lines[0].count("|") for ln in lines[2:4])
    assert lines[-1] == "the summary"
