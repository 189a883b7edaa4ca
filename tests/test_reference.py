"""Centralized references: the serializers' schedules, CASSINI's shifts, and ref-best's guarantee."""

from __future__ import annotations

import pytest

from mltcp import compare, reference
from mltcp.scenario import from_dict, load
from mltcp.sim.engine import simulate


def _two_jobs(compute_ms=20.0, offset_ms=1.0, iterations=12, bytes_=2_500_000, second_bytes=None):
    return from_dict(
        {
            "name": "t",
            "iterations": iterations,
            "warmup_iterations": 2,
            "links": [{"name": "b", "rate_gbps": 1.0, "delay_us": 50, "buffer_bdp": 4.0}],
            "jobs": [
                {"name": "A", "compute_ms": compute_ms, "bytes": bytes_, "path": ["b"]},
                {
                    "name": "B",
                    "compute_ms": compute_ms,
                    "bytes": second_bytes or bytes_,
                    "start_offset_ms": offset_ms,
                    "path": ["b"],
                },
            ],
        }
    )


def _phases(records, job):
    return [(r.comm_start, r.end) for r in records if r.job == job]


def test_fifo_serializes_phases_on_a_shared_link_at_line_rate():
    sc = _two_jobs()
    recs = reference.serialize(sc, "fifo")
    assert len(recs) == 24
    a, b = _phases(recs, "A"), _phases(recs, "B")
    hold = reference.link_hold_s(sc)[0]
    for s0, _ in a:  # never two phases' bytes on the link at once
        for s1, _ in b:
            assert min(s0, s1) + hold - max(s0, s1) <= 1e-12
    alone = reference.comm_alone_s(sc)[0]
    assert all(abs((e - s) - alone) < 1e-12 for s, e in a + b)


def test_fifo_reaches_the_perfect_interleave_of_compatible_jobs():
    sc = _two_jobs()  # 20 ms compute, 20 ms alone: a perfect interleave exists
    side = compare.side(sc, "ref-fifo", reference.serialize(sc, "fifo"), 0, 0)
    assert side["avg_iter_s"] == pytest.approx(compare.ideal_iter_s(sc), rel=1e-9)


def test_srf_grants_the_shorter_phase_first():
    sc = _two_jobs(offset_ms=0.0, second_bytes=1_000_000)  # both ready at 20 ms
    first_b = _phases(reference.serialize(sc, "srf"), "B")[0]
    first_a = _phases(reference.serialize(sc, "srf"), "A")[0]
    assert first_b[0] < first_a[0]
    fifo_a = _phases(reference.serialize(sc, "fifo"), "A")[0]
    assert fifo_a[0] == pytest.approx(0.020)


def test_multi_link_phase_waits_for_every_link_of_its_path():
    sc = load("circular")
    recs = reference.serialize(sc, "fifo")
    links = reference.job_links(sc)
    hold = reference.link_hold_s(sc)
    by_job = {j.name: _phases(recs, j.name) for j in sc.jobs}
    for x, jx in enumerate(sc.jobs):
        for y, jy in enumerate(sc.jobs):
            if x < y and links[x] & links[y]:
                for s0, _ in by_job[jx.name]:
                    for s1, _ in by_job[jy.name]:
                        assert min(s0 + hold[x], s1 + hold[y]) - max(s0, s1) <= 1e-12


def test_compute_draws_are_the_simulators():
    sc = load("straggler")
    res = simulate(sc, "reno")
    draws = reference.compute_draws(sc)
    for k, job in enumerate(sc.jobs):
        recs = [r for r in res.records if r.job == job.name]
        got = [r.comm_start - r.start for r in recs[:5]]
        assert got == pytest.approx(list(draws[k][:5]), abs=2 * sc.step_s)


def test_cassini_places_two_half_share_jobs_half_a_period_apart():
    sc = _two_jobs(offset_ms=0.0)
    off = reference.cassini_offsets(sc, grid=400)
    period = sc.ideal_iter_s(sc.jobs[0])
    gap = abs(off[1] - off[0]) % period
    assert min(gap, period - gap) == pytest.approx(period / 2, rel=0.02)


def test_ref_best_is_never_worse_than_the_base_and_names_its_pick():
    sc = _two_jobs(offset_ms=1.0, compute_ms=10.0)
    base = simulate(sc, "reno")
    base_side = compare.side(sc, "reno", base.records, base.drops, base.ecn_marks)
    best = reference.reference_side(sc, "best", base_side=base_side)
    assert best["avg_iter_s"] <= base_side["avg_iter_s"]
    assert best["reference_pick"] in ("ref-fifo", "ref-srf", "ref-cassini", "reno")
    assert set(base_side) <= set(best)


def test_simulate_reference_prints_each_reference_with_the_arms_keys(tmp_path):
    import json
    import subprocess
    import sys
    import tomli_w

    sc = {
        "name": "t",
        "iterations": 12,
        "warmup_iterations": 2,
        "links": [{"name": "b", "rate_gbps": 1.0, "delay_us": 50, "buffer_bdp": 4.0}],
        "jobs": [
            {"name": "A", "compute_ms": 20, "bytes": 2_500_000, "path": ["b"]},
            {"name": "B", "compute_ms": 20, "bytes": 2_500_000, "start_offset_ms": 1, "path": ["b"]},
        ],
    }
    f = tmp_path / "t.toml"
    f.write_text(tomli_w.dumps(sc))
    run = lambda *a: subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "simulate", str(f), *a],  # noqa: E731
        capture_output=True,
        text=True,
        timeout=300,
    )
    r = run("--compare", "--reference", "fifo,cassini,best", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert set(rep["references"]) == {"ref-fifo", "ref-cassini", "ref-best"}
    for side in rep["references"].values():
        assert set(rep["baseline"]) <= set(side)
    assert rep["references"]["ref-best"]["avg_iter_s"] <= rep["baseline"]["avg_iter_s"]
    bad = run("--reference", "oracle")
    assert bad.returncode == 2 and "--reference" in bad.stderr and bad.stdout == ""


def test_max_min_rates_share_a_link_and_respect_each_jobs_rate_alone():
    need = [frozenset({"a"}), frozenset({"a", "b"}), frozenset({"b"})]
    rates = reference.max_min_rates([0, 1, 2], need, [10.0, 10.0, 2.0], {"a": 8.0, "b": 8.0})
    assert rates == pytest.approx({0: 4.0, 1: 4.0, 2: 2.0})  # a full at 4 each; job 2 capped at 2


def test_fair_share_of_two_colliding_jobs_takes_twice_as_long_then_runs_alone():
    sc = _two_jobs(offset_ms=0.0)
    recs = reference.fair_share(sc)
    first = [r for r in recs if r.iteration == 0]
    hold, rtt = reference.link_hold_s(sc)[0], sc.base_rtt(sc.jobs[0])
    assert [r.comm_duration for r in first] == pytest.approx([2 * hold + rtt] * 2)
    serial = compare.side(sc, "f", reference.serialize(sc, "fifo"), 0, 0)
    fair = compare.side(sc, "s", recs, 0, 0)
    assert fair["avg_iter_s"] > serial["avg_iter_s"]  # in lock-step they never separate
