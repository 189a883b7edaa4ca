"""`mltcp emulate` end to end (subprocess, as a user runs it). Root + Mininet; integration."""

import json
import subprocess
import sys

import pytest

from mltcp.emulation import netns
from mltcp.emulation.netns import have_mininet_prereqs
from mltcp.emulation.peers import udp_available
from _kernel_prereq import missing as kernel_missing

why = have_mininet_prereqs()
pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.skipif(why is not None, reason=f"emulation {why}")]

CLI = [sys.executable, "-m", "mltcp.emulation.cli"]


def run_cli(args, timeout=120):
    p = subprocess.Popen(CLI + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    left = netns.leftovers(netns.run_prefix(p.pid))
    assert not left, f"left behind: {left}"
    return p.returncode, out, err


@pytest.mark.skipif(not udp_available(), reason="userspace transport not importable")
def test_two_jobs_smoke_udp_compare(tmp_path):
    rc, out, err = run_cli(
        [
            "two-jobs",
            "--transport",
            "udp",
            "--compare",
            "--rate-mbps",
            "100",
            "--dilate",
            "--iterations",
            "6",
            "--json",
            "--records",
            str(tmp_path),
        ]
    )
    assert rc == 0, err
    d = json.loads(out)
    for k in (
        "scenario",
        "baseline",
        "mltcp",
        "speedup_avg",
        "speedup_p99",
        "converged_at_iteration",
        "ideal_iter_s",
        "sim_vs_emu",
    ):
        assert k in d
    assert d["scenario"] == "two-jobs"
    assert d["baseline"]["cc"] == "reno" and d["mltcp"]["cc"] == "mltcp-reno"
    assert d["baseline"]["iterations"] == 12 and d["mltcp"]["iterations"] == 12
    assert d["baseline"]["avg_iter_s"] >= d["ideal_iter_s"] * 0.9
    assert d["speedup_avg"] == pytest.approx(d["baseline"]["avg_iter_s"] / d["mltcp"]["avg_iter_s"], rel=1e-3)
    assert set(d["sim_vs_emu"]["baseline"]) == {"A", "B"}
    from mltcp.records import read_csv

    recs = read_csv(tmp_path / "mltcp.csv")
    assert len(recs) == 12 and {r.job for r in recs} == {"A", "B"}
    assert d["emulation"]["features"]["delay"] is False or d["emulation"]["link_mode"] != "htb"


def test_baseline_peer_smoke():
    rc, out, err = run_cli(
        [
            "baseline-peer",
            "two-jobs",
            "--rate-mbps",
            "50",
            "--dilate",
            "--iterations",
            "3",
            "--peer-seconds",
            "1.5",
            "--json",
        ]
    )
    assert rc == 0, err
    d = json.loads(out)
    labels = [r["label"] for r in d["fairness"]]
    assert labels[:2] == ["kernel reno", "kernel cubic"]
    for r in d["fairness"]:
        assert len(r["flows_mbps"]) == 2
        assert 0 < r["total_mbps"] <= 50 * 1.05  # the bottleneck caps the sum
        assert 0.5 <= r["jain"] <= 1.0
    assert set(d["iterations"]) == {"reno", "cubic"}
    assert d["iterations"]["reno"]["iterations"] == 6


def test_bad_scenario_and_option_errors():
    rc, out, err = run_cli(["no-such-scenario", "--json"], timeout=30)
    assert rc == 2 and "no-such-scenario" in err
    rc, out, err = run_cli(["run", "two-jobs", "--rate-mbps", "-5", "--json"], timeout=30)
    assert rc == 2 and "rate-mbps" in err
    rc, out, err = run_cli(["two-jobs", "--link-mode", "warp", "--json"], timeout=30)
    assert rc == 2 and "link mode" in err
    assert out == ""


def test_emulate_topo_ring():
    rc, out, err = run_cli(["topo", "ring", "--json"], timeout=60)
    assert rc == 0, err
    d = json.loads(out)
    assert d["all_reachable"] and [p["router_hops"] for p in d["pairs"]] == [3, 3, 3]


@pytest.mark.skipif(kernel_missing() is not None, reason=f"kernel BPF: {kernel_missing()}")
def test_kernel_hosts_stamp_the_option_for_a_progress_switch(tmp_path):
    """--transport kernel with switch_policy: every sender stamps its segments (stamp.bpf.c) and
    mltcp-switch forwards them all; the counters come back in the JSON."""
    rc, out, err = run_cli(
        [
            "run",
            "innet-ecn-reno-two-jobs",
            "--link-mode",
            "switch",
            "--transport",
            "kernel",
            "--rate-mbps",
            "25",
            "--dilate",
            "--iterations",
            "4",
            "--no-sim",
            "--json",
        ],
        timeout=240,
    )
    assert rc == 0, err
    d = json.loads(out)["baseline"]
    assert d["iterations"] == 8
    st = d["stamp_stats"]
    assert set(st) == {"A", "B"}
    for job in st.values():
        # every data segment stamped, none refused; 4 iterations, so 3 boundaries found
        assert job["stamped"] > 0 and job["no_room"] == 0 and job["failed"] == 0
        assert job["iterations"] == 3
