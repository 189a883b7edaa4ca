"""Scenario inputs through the simulator: multi-flow jobs, rings and traces run end to end."""

import json
import subprocess
import sys

import pytest

from mltcp import metrics
from mltcp.scenario import from_dict, load
from mltcp.sim.engine import simulate

FABRIC = {
    "kind": "leaf-spine",
    "leaves": 2,
    "spines": 2,
    "hosts_per_leaf": 4,
    "rate_gbps": 1,
    "delay_us": 10,
    "buffer_pkts": 100,
}


def _alone(job, **top):
    return from_dict(
        {"name": "alone", "iterations": 8, "warmup_iterations": 2, "fabric": FABRIC, "jobs": [job], **top}, "alone.toml"
    )


def _avg(sc, cc="reno"):
    r = simulate(sc, cc)
    return metrics.summary(r.records, sc.warmup_iterations)["avg_iter_s"], r


def test_a_ring_alone_takes_its_ideal_time():
    """Four flows in parallel, one per NIC: an iteration takes compute + 6 MB / 1 Gb/s, not the
    4 x 6 MB one flow would need."""
    sc = _alone({"name": "r", "pattern": "ring", "hosts": ["h0", "h1", "h4", "h5"], "gradient_mb": 4, "compute_ms": 20})
    avg, r = _avg(sc)
    assert sc.ideal_iter_s(sc.jobs[0]) == pytest.approx(0.02 + 6e6 / 125e6 + 80e-6)
    assert avg == pytest.approx(sc.ideal_iter_s(sc.jobs[0]), rel=0.08)
    assert {x.bytes for x in r.records} == {24e6}


def test_flows_sharing_one_nic_take_the_total_time():
    sc = _alone({"name": "f", "hosts": ["h0", "h5"], "flows": 4, "bytes": 4_000_000, "compute_ms": 20})
    avg, _ = _avg(sc)
    ideal = sc.ideal_iter_s(sc.jobs[0])
    assert ideal == pytest.approx(0.02 + 4e6 / 125e6 + 80e-6)  # the four share h0's NIC
    assert ideal <= avg < 1.15 * ideal  # (they also lose a little to each other)


def test_parameter_server_incast_is_bound_by_the_servers_link():
    sc = _alone(
        {"name": "p", "pattern": "ps", "server": "h7", "hosts": ["h0", "h1", "h4"], "gradient_mb": 1, "compute_ms": 20}
    )
    avg, _ = _avg(sc)
    assert avg == pytest.approx(sc.ideal_iter_s(sc.jobs[0]), rel=0.15)
    assert avg > 0.02 + 3e6 / 125e6  # three pushes share the server's down-link


def test_trace_compute_times_are_replayed(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("".join(f"{i},{0.05 + 0.01 * (i % 2)},1000000\n" * 2 for i in range(6)))
    sc = _alone({"name": "t", "trace": str(p), "trace_line_rate_gbps": 1, "hosts": ["h0", "h1"]})
    r = simulate(sc, "reno")
    comp = [x.comm_start - x.start for x in r.records]
    assert comp == pytest.approx([0.042, 0.052] * 4, abs=1e-4)  # duration - 1 MB at 1 Gb/s


def test_resnet50_pair_compare_json_from_the_trace():
    p = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "simulate", "resnet50-pair", "--compare", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["scenario"] == "resnet50-pair" and d["jobs"] == 2
    sc = load("resnet50-pair")
    assert [j.flows for j in sc.jobs] == [8, 8]
    for side in ("baseline", "mltcp"):
        assert d[side]["avg_iter_s"] >= d["ideal_iter_s"] * 0.99
    assert d["mltcp"]["avg_iter_s"] < d["baseline"]["avg_iter_s"]
