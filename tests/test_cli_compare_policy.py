"""`mltcp simulate S --compare-policy`: the scenario's algorithm through a plain switch and through
its `switch_policy`, reported in `--compare`'s JSON shape; and the summary's "never"."""

import json
import os
import subprocess
import sys

from rich.console import Console

from mltcp.cli import summary_table

MLTCP = [sys.executable, "-m", "mltcp.cli"]
REPORT_KEYS = {
    "scenario",
    "source",
    "jobs",
    "warmup_iterations",
    "baseline",
    "mltcp",
    "speedup_avg",
    "speedup_p99",
    "converged_at_iteration",
    "ideal_iter_s",
}

POLICY = """name = "policy"
iterations = 14
warmup_iterations = 4
cc = "reno"
switch_policy = "ecn-by-progress"
[switch]
bands = 4
ecn_scale_lo = 0.25
[[links]]
name = "l"
rate_gbps = 1
delay_us = 50
buffer_bdp = 4
ecn = "step"
ecn_k_pkts = 20
[[jobs]]
name = "a"
compute_ms = 4
bytes = 500_000
path = ["l"]
[[jobs]]
name = "b"
compute_ms = 4
bytes = 500_000
start_offset_ms = 0.5
path = ["l"]
"""


def _simulate(tmp_path, toml: str, *args):
    f = tmp_path / "s.toml"
    f.write_text(toml)
    env = dict(os.environ, COLUMNS="200")  # the tables unwrapped
    return subprocess.run(MLTCP + ["simulate", str(f), *args], capture_output=True, text=True, timeout=300, env=env)


def test_compare_policy_has_the_compare_shape(tmp_path):
    r = _simulate(tmp_path, POLICY, "--compare-policy", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert set(rep) == REPORT_KEYS
    base, on = rep["baseline"], rep["mltcp"]
    assert (base["switch_policy"], on["switch_policy"]) == ("off", "ecn-by-progress")
    assert base["cc"] == on["cc"] == "reno"
    assert set(base) == set(on)
    assert rep["speedup_avg"] == round(base["avg_iter_s"] / on["avg_iter_s"], 4)
    # the policy marks a flow behind in its iteration earlier: the two arms differ
    assert base["ecn_marks"] != on["ecn_marks"]


def test_compare_policy_tables(tmp_path):
    r = _simulate(tmp_path, POLICY, "--compare-policy")
    assert r.returncode == 0, r.stderr
    assert "reno (switch off)" in r.stdout and "reno (switch ecn-by-progress)" in r.stdout


def test_compare_policy_needs_a_policy(tmp_path):
    r = _simulate(tmp_path, POLICY.replace('switch_policy = "ecn-by-progress"', ""), "--compare-policy", "--json")
    assert r.returncode == 2 and r.stdout == ""
    assert "switch_policy" in r.stderr and "s.toml" in r.stderr


def test_compare_policy_is_not_compare(tmp_path):
    r = _simulate(tmp_path, POLICY, "--compare-policy", "--compare")
    assert r.returncode == 2 and "--compare-policy" in r.stderr
    r = _simulate(tmp_path, POLICY, "--compare-policy", "--engine", "ns3")
    assert r.returncode == 2 and "--compare-policy" in r.stderr


def _side(cc, interleaved):
    return {
        "cc": cc,
        "avg_iter_s": 0.05,
        "p99_iter_s": 0.06,
        "drops": 3.0,
        "ecn_marks": 0.0,
        "converged_at_iteration": interleaved,
    }


def test_summary_says_never_when_the_jobs_never_interleave():
    rep = {
        "baseline": _side("reno", None),
        "mltcp": _side("mltcp-reno", 3),
        "ideal_iter_s": 0.04,
        "speedup_avg": 1.2,
        "speedup_p99": 1.3,
    }
    console = Console(width=200, record=True)
    console.print(summary_table(rep))
    text = console.export_text()
    rows = {
        cells[0]: cells[-1]
        for cells in ([c.strip() for c in l.strip("│").split("│")] for l in text.splitlines() if l.startswith("│"))
    }
    assert rows["reno"] == "never" and rows["mltcp-reno"] == "3"
    assert "None" not in text
