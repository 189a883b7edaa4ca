"""The ns-3 engine (mltcp.sim.ns3_engine): topology mapping and ratios without ns-3, then real ns-3
runs (PyPI ns3; skipped, with the reason printed, only where ns-3 cannot be imported).

Importing ns-3 and compiling the engine's C++ takes tens of seconds, so the ns-3 tests share one
process-wide import and use small scenarios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mltcp.records import IterationRecord
from mltcp.scenario import ScenarioError, from_dict, load
from mltcp.sim import ns3_compare, ns3_engine

ROOT = Path(__file__).resolve().parents[1]
OK, WHY = ns3_engine.available()
needs_ns3 = pytest.mark.skipif(not OK, reason=WHY)


def _dumbbell(
    rate_mbps=100,
    delay_us=500,
    buffer_pkts=100,
    jobs=2,
    iterations=3,
    nbytes=500_000,
    compute_ms=40,
    extra_jobs=None,
    **top,
):
    d = {
        "name": "t",
        "iterations": iterations,
        "warmup_iterations": 1,
        "network": {"min_rto_ms": 200},
        "links": [{"name": "bn", "rate_mbps": rate_mbps, "delay_us": delay_us, "buffer_pkts": buffer_pkts}],
        "jobs": [
            {"name": f"J{i}", "compute_ms": compute_ms, "bytes": nbytes, "path": ["bn"], "start_offset_ms": i}
            for i in range(jobs)
        ]
        + (extra_jobs or []),
    }
    d.update(top)
    return from_dict(d)


# ---- without ns-3 ------------------------------------------------------------------------------


def test_consecutive_links_share_a_router_and_the_ring_has_three():
    sc = load("circular")
    ends, used = ns3_engine._routers(sc, ns3_engine._flows(sc))
    assert sorted(used) == ["l0", "l1", "l2"]
    assert len(set(ends.values())) == 3
    assert ends[("l0", 1)] == ends[("l1", 0)] and ends[("l2", 1)] == ends[("l0", 0)]


def test_a_path_that_loops_through_a_link_is_refused():
    sc = from_dict(
        {
            "name": "x",
            "iterations": 2,
            "warmup_iterations": 1,
            "links": [
                {"name": "a", "rate_mbps": 10, "delay_us": 10, "buffer_pkts": 10},
                {"name": "b", "rate_mbps": 10, "delay_us": 10, "buffer_pkts": 10},
            ],
            "jobs": [{"name": "J", "compute_ms": 1, "bytes": 1000, "path": ["a", "a"]}],
        }
    )
    with pytest.raises(ScenarioError, match="join a router to itself"):
        ns3_engine._routers(sc, ns3_engine._flows(sc))


def test_unsupported_algorithms_and_parameters_are_named():
    sc = _dumbbell()
    with pytest.raises(ScenarioError, match="dcqcn"):
        ns3_engine.check(sc, "dcqcn")
    sc.cc_params["reno"] = {"beta": 0.3}
    with pytest.raises(ScenarioError, match=r"cc_params\.reno\.beta"):
        ns3_engine.check(sc, "reno")
    sc.cc_params["reno"] = {}
    sc.cc_params["cubic"] = {"hystart": 2}
    with pytest.raises(ScenarioError, match=r"cc_params\.cubic\.hystart.*HyStart\+\+"):
        ns3_engine.check(sc, "cubic")
    sc.cc_params["cubic"] = {"hystart_train": 0.5}
    with pytest.raises(ScenarioError, match=r"cc_params\.cubic\.hystart_train"):
        ns3_engine.check(sc, "mltcp-cubic")
    ns3_engine.check(sc, "reno")  # CUBIC settings do not concern Reno
    sc.cc_params["cubic"] = {"hystart": 0, "hystart_train": 1.0}
    ns3_engine.check(sc, "cubic")


def test_the_hook_table_reaches_the_ns3_ops_as_the_fast_engine_reads_it():
    sc = _dumbbell(
        mltcp={
            "slope": 8.4,
            "intercept": 0.11,
            "shape": "convex",
            "exponent": 1.3,
            "boundary": "mark",
            "scale_decrease": True,
            "decrease_at_start": 0.55,
            "decrease_at_end": 0.14,
            "history": 5,
            "idle_gap": "min2",
            "idle_fraction": 0.34,
            "min_idle_ms": 0.27,
            "restart_window": 12,
            "adaptive": True,
            "trial": 6,
            "contended_above": 1.4,
            "hold_max": 20,
            "min_window": 7,
            "above_bdp_gain": 0.6,
        }
    )
    hook, marks = ns3_engine.hook_numbers(sc, "mltcp-cubic")
    inf = float("inf")
    assert hook[:18] == [8.4, 0.11, 2.0, inf, 1.3, 0.55, 0.14, 0.34, inf, 5.0, 1.0, 1.0, 12.0, 0.0, 1.0, 6.0, 1.4, 20.0]
    assert hook[18:] == [7.0, 0.6]
    assert marks
    hook, marks = ns3_engine.hook_numbers(_dumbbell(), "mltcp-reno")  # the hook's declared defaults
    assert hook[:18] == [1.78, 0.11, 0.0, inf, 2.0, 0.8, 0.2, 0.9, 1e-3, 3.0, 0.0, 0.0, 0.0, 0.0, 1.0, 4.0, 1.25, 32.0]
    assert hook[18:] == [4.0, 0.5]  # Reno's above_bdp_gain (mltcp.defaults)
    assert not marks
    assert ns3_engine.hook_numbers(sc, "reno") == ([], False)
    for cc in ("mltcp-reno", "mltcp-cubic"):  # every knob of the Reno/CUBIC variants is modelled
        ns3_engine.check(sc, cc)
        assert ns3_engine._unmodelled_knobs(cc) == []


def test_a_hook_knob_the_ns3_ops_do_not_model_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(ns3_engine, "HOOK_KNOBS", tuple(k for k in ns3_engine.HOOK_KNOBS if k != "min_idle"))
    sc = _dumbbell(mltcp={"min_idle_ms": 0.5})
    with pytest.raises(ScenarioError, match=r"mltcp\.min_idle_ms.*does not model"):
        ns3_engine.check(sc, "mltcp-reno")
    ns3_engine.check(sc, "reno")  # the baseline ignores [mltcp]
    ns3_engine.check(_dumbbell(), "mltcp-reno")  # a knob left at its default is not refused


def test_cli_exits_2_naming_the_file_and_the_unmodelled_knob(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from mltcp.cli import app

    monkeypatch.setattr(ns3_engine, "HOOK_KNOBS", tuple(k for k in ns3_engine.HOOK_KNOBS if k != "history"))
    toml = tmp_path / "h.toml"
    toml.write_text((ROOT / "scenarios" / "ns3-dumbbell-100m.toml").read_text() + "\n[mltcp]\nhistory = 5\n")
    r = CliRunner().invoke(app, ["simulate", str(toml), "--compare", "--engine", "ns3", "--json"])
    assert r.exit_code == 2, r.output
    assert "h.toml" in r.output and "mltcp.history" in r.output


def test_ratios_are_fast_over_ns3_per_iteration():
    sc = _dumbbell(iterations=3)

    def recs(durs, drops):
        return [IterationRecord("J0", i, 0.0, 0.0, d, 1.0, dr) for i, (d, dr) in enumerate(zip(durs, drops))]

    class R:
        def __init__(self, records, drops):
            self.records, self.drops, self.wall_time = records, drops, 1.0

    fast = {"reno": R(recs([1.0, 2.0, 3.0], [2, 0, 0]), 2)}
    ns3 = {"reno": R(recs([2.0, 2.0, 2.0], [1, 0, 0]), 1)}
    rat = ns3_compare.ratios(sc, fast, ns3)["reno"]
    j = rat["jobs"]["J0"]
    assert j["iteration_ratio"] == [0.5, 1.0, 1.5]
    assert j["avg_ratio"] == pytest.approx(2.5 / 2.0)  # after the 1 warm-up iteration
    assert j["drops_ratio"] == 2.0 and rat["drops_ratio"] == 2.0
    assert "J1" in rat["jobs"] and rat["jobs"]["J1"]["iteration_ratio"] == []


def test_cli_names_the_missing_extra(monkeypatch):
    import importlib.util

    from typer.testing import CliRunner

    from mltcp.cli import app

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in ("ns", "cppyy") else real(name, *a)
    )
    r = CliRunner().invoke(app, ["simulate", "two-jobs", "--engine", "ns3", "--json"])
    assert r.exit_code == 2
    assert "mltcp[ns3]" in r.output


def test_cli_refuses_an_unknown_engine():
    from typer.testing import CliRunner

    from mltcp.cli import app

    r = CliRunner().invoke(app, ["simulate", "two-jobs", "--engine", "omnet"])
    assert r.exit_code == 2 and "--engine" in r.output


def test_cli_refuses_host_jitter_out_of_range_or_without_ns3():
    from typer.testing import CliRunner

    from mltcp.cli import app

    for argv in (
        ["--engine", "ns3", "--ns3-host-jitter", "1.5"],
        ["--engine", "ns3", "--ns3-host-jitter", "-0.1"],
        ["--ns3-host-jitter", "0.5"],
    ):
        r = CliRunner().invoke(app, ["simulate", "two-jobs", *argv])
        assert r.exit_code == 2 and "--ns3-host-jitter" in r.output, (argv, r.output)
    for argv in (["--engine", "ns3", "--ns3-recovery", "newreno"], ["--ns3-recovery", "prr"]):
        r = CliRunner().invoke(app, ["simulate", "two-jobs", *argv])
        assert r.exit_code == 2 and "--ns3-recovery" in r.output, (argv, r.output)


# ---- with ns-3 ---------------------------------------------------------------------------------


@needs_ns3
def test_one_job_alone_takes_its_transfer_time_and_every_iteration_is_recorded():
    sc = _dumbbell(jobs=1, iterations=4, nbytes=1_250_000, buffer_pkts=1000)  # 100 ms at 100 Mb/s
    r = ns3_engine.run(sc, "reno")
    assert [x.iteration for x in r.records] == [0, 1, 2, 3]
    wire = 1_250_000 * 8 / 100e6  # the scenario's rate carries payload (headers on top, as the fast engine)
    for x in r.records:
        assert x.comm_start - x.start == pytest.approx(0.040, abs=1e-6)  # the compute phase
        assert wire < x.comm_duration < wire + 0.030  # slow start costs a few RTTs
    assert r.drops == 0 and r.bytes_acked == pytest.approx(4 * 1_250_000)
    assert r.ns3_stats["retransmissions"] == [0]


@needs_ns3
def test_the_drop_tail_buffer_is_the_scenario_s():
    """A 5-packet buffer drops (no FqCoDel left in front of it), a 2000-packet one does not; every
    dropped packet was retransmitted and counted against the job that sent it."""
    small = ns3_engine.run(_dumbbell(buffer_pkts=5), "reno")
    big = ns3_engine.run(_dumbbell(buffer_pkts=2000), "reno")
    assert big.drops == 0
    assert small.drops > 0
    assert sum(x.drops for x in small.records) == small.drops
    assert sum(small.ns3_stats["retransmissions"]) >= small.drops
    assert small.bytes_sent > small.bytes_acked


@needs_ns3
@pytest.mark.parametrize("cc", ["cubic", "mltcp-reno", "mltcp-cubic"])
def test_each_algorithm_completes_and_mltcp_learns_its_bytes_per_iteration(cc):
    # a buffer that never overflows: no RTO gap inside an iteration that the tracker could take
    # for an iteration boundary (it would, as the fast engine's tracker does)
    sc = _dumbbell(iterations=4, nbytes=400_000, buffer_pkts=2000)
    r = ns3_engine.run(sc, cc)
    assert len(r.records) == 8
    learned = r.ns3_stats["bytes_per_iter_learned"]
    if cc.startswith("mltcp"):
        assert learned == [pytest.approx(400_000, abs=1448)] * 2  # the tracker found the boundaries
    else:
        assert learned == [-1.0, -1.0]


@needs_ns3
def test_mltcp_makes_the_jobs_take_turns_where_reno_keeps_sharing():
    """Two identical jobs starting 2 ms apart with enough compute for a perfect interleave: under
    MLTCP-Reno the communication phases overlap less by the end of the run than under Reno.
    Stock ns-3 window growth (nic_limited_growth off): with the host's NIC limit this short case is
    decided by timeouts and MLTCP no longer separates the jobs (overlap 0.76 vs Reno's 0.71; the fast
    engine under loss_recovery = "ns3" likewise, 0.78 vs 0.85), docs/ns3.md. The path's BDP is about
    9 segments, so the window floor (4 segments) slows the separation: 24 iterations, the last 8
    compared (by iteration 12 the floor's run still overlaps as much as Reno)."""
    from mltcp import metrics

    stock = ns3_engine.Ns3Options(nic_limited_growth=False)
    sc = _dumbbell(jobs=2, iterations=24, nbytes=1_000_000, compute_ms=80, buffer_pkts=60, extra_jobs=None)
    sc.jobs[1].start_offset_s = 0.002
    over = {}
    for cc in ("reno", "mltcp-reno"):
        r = ns3_engine.run(sc, cc, options=stock)
        ov = metrics.overlap_fractions(r.records)
        over[cc] = sum(v for (j, i), v in ov.items() if i >= 16) / max(1, sum(1 for (j, i) in ov if i >= 16))
    assert over["mltcp-reno"] < over["reno"], over


@needs_ns3
def test_ecn_step_marking_marks_instead_of_dropping():
    d = {
        "name": "e",
        "iterations": 3,
        "warmup_iterations": 1,
        "links": [
            {"name": "bn", "rate_mbps": 100, "delay_us": 500, "buffer_pkts": 200, "ecn": "step", "ecn_k_pkts": 10}
        ],
        "jobs": [
            {"name": f"J{i}", "compute_ms": 20, "bytes": 500_000, "path": ["bn"], "start_offset_ms": i}
            for i in range(2)
        ],
    }
    r = ns3_engine.run(from_dict(d), "reno")
    assert r.ecn_marks > 0 and r.drops == 0
    assert sum(x.marks for x in r.records) == r.ecn_marks


@needs_ns3
def test_two_hop_paths_and_the_ring_route_each_job_over_its_links():
    sc = load("circular")
    for j in sc.jobs:
        j.iterations = 2
        j.bytes_per_iter = 300_000
    sc.warmup_iterations = 1
    r = ns3_engine.run(sc, "reno")
    assert sorted({x.job for x in r.records}) == ["X", "Y", "Z"] and len(r.records) == 6


@needs_ns3
def test_cli_both_engines_print_the_same_keys_and_per_iteration_ratios(tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text("""name = "cli"
iterations = 3
warmup_iterations = 1
[[links]]
name = "bn"
rate_mbps = 100
delay_us = 500
buffer_pkts = 50
[[jobs]]
name = "A"
compute_ms = 20
bytes = 300000
path = ["bn"]
""")
    r = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "simulate", str(toml), "--engine", "both", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)  # one (indented) JSON document
    assert set(rep) == {"fast", "ns3", "ratios"}
    assert set(rep["fast"]) == set(rep["ns3"])
    assert set(rep["fast"]["baseline"]) == set(rep["ns3"]["baseline"])
    ratios = rep["ratios"]["reno"]["jobs"]["A"]["iteration_ratio"]
    assert len(ratios) == 3 and all(0.5 < x < 2.0 for x in ratios)


@needs_ns3
def test_ns3_mltcp_with_unit_gain_is_reno_and_the_cap_and_decrease_ends_apply():
    """F = 1 everywhere (slope 0, intercept 1; or any slope capped at 1) and a decrease scaled by
    exactly 1 (both ends 0.5) run ns-3's TcpNewReno packet for packet; other decrease ends do not.
    (1 MB per iteration: with 500 kB one job times out in iteration 0 and the other then runs alone,
    without the shared losses the decrease acts on.)"""
    kw = dict(iterations=3, nbytes=1_000_000, buffer_pkts=20)
    key = lambda r: ([(x.job, x.iteration, x.end) for x in r.records], r.drops)
    reno = key(ns3_engine.run(_dumbbell(**kw), "reno"))
    unit = {"slope": 0.0, "intercept": 1.0}
    assert key(ns3_engine.run(_dumbbell(mltcp=unit, **kw), "mltcp-reno")) == reno
    capped = {
        "slope": 4.0,
        "intercept": 1.0,
        "shape": "capped",
        "cap": 1.0,
        "scale_decrease": True,
        "decrease_at_start": 0.5,
        "decrease_at_end": 0.5,
    }
    assert key(ns3_engine.run(_dumbbell(mltcp=capped, **kw), "mltcp-reno")) == reno
    gentle = dict(unit, scale_decrease=True, decrease_at_start=0.1, decrease_at_end=0.1)
    assert key(ns3_engine.run(_dumbbell(mltcp=gentle, **kw), "mltcp-reno")) != reno


@needs_ns3
def test_ns3_explicit_marks_find_the_iterations_the_idle_rule_is_told_to_miss():
    sc = _dumbbell(iterations=4, nbytes=400_000, buffer_pkts=2000, mltcp={"min_idle_ms": 1e6})
    assert ns3_engine.run(sc, "mltcp-reno").ns3_stats["bytes_per_iter_learned"] == [0.0, 0.0]  # no gap long enough
    sc.mltcp_params["boundary"] = "mark"
    learned = ns3_engine.run(sc, "mltcp-reno").ns3_stats["bytes_per_iter_learned"]
    assert learned == [pytest.approx(400_000, abs=1448)] * 2


@needs_ns3
def test_ns3_restart_window_restarts_each_iteration_s_window_as_the_fast_engine_does():
    """restart_window: every iteration after the first starts from at most that window (ns-3's
    Mltcp<Base>::IterationRestart, the fast engine's iteration_restart), and not without the knob.
    Here J1's first iteration waits for two RTOs: with the idle rule at the ACK those stalls are taken
    for compute gaps and split an iteration (fewer restarts); the missed-boundary rule finds the later
    boundaries, so the size learned is right. At TX_START (``boundary = "tx_start"``) or with marks
    J1 finds every boundary."""
    kw = dict(iterations=4, nbytes=1_000_000, buffer_pkts=200)

    def stats(**mltcp):
        r = ns3_engine.run(_dumbbell(**kw, mltcp={"adaptive": False, **mltcp}), "mltcp-reno").ns3_stats
        return r["iteration_restarts"], r["bytes_per_iter_learned"], r["timeouts"]

    assert stats()[0] == [0, 0]
    restarts, learned, timeouts = stats(restart_window=4)
    assert timeouts[1] >= 1 and restarts[0] == 3 and restarts[1] < 3 and learned[1] == 1_000_000
    for boundary in ("tx_start", "mark"):
        restarts, learned, _ = stats(restart_window=4, boundary=boundary)
        assert restarts == [3, 3] and learned == [1_000_000, 1_000_000], boundary


@needs_ns3
def test_a_nic_limited_flow_keeps_its_window_as_linux_does_and_stock_ns3_grows_it():
    """One flow alone, its NIC as fast as the bottleneck: stock ns-3 (no TSQ) queues its window in
    the NIC and keeps growing it; with the host's NIC limit (the default, as the fast engine and
    Linux) the window stops near twice the path's BDP (slow start's cwnd < 2 x out)."""
    sc = _dumbbell(jobs=1, iterations=2, nbytes=1_250_000, buffer_pkts=1000)  # BDP ~ 9 segments
    top = {}
    for nic in (True, False):
        r = ns3_engine.run(sc, "reno", options=ns3_engine.Ns3Options(nic_limited_growth=nic, trace_cwnd=True))
        top[nic] = r.ns3_stats["cwnd_trace"][0][1].max() / sc.mss
        assert (r.ns3_stats["growth_held_nic_limited"][0] > 0) == nic
    assert top[True] < 30 and top[False] > 300, top


@needs_ns3
def test_host_jitter_breaks_the_phase_lock_of_drop_tail_drops():
    """Two hosts whose NICs run at the bottleneck rate arrive at the drop-tail queue in a fixed
    phase: stock ns-3 puts the whole slow-start overshoot on one job (Floyd & Jacobson's phase
    effect). ``host_jitter`` (a random host delay below one segment's NIC time) spreads the drops
    over both jobs, differently per seed, and never reorders a host's packets."""

    def first_iteration_drops(jitter, seed):
        sc = load("ns3-dumbbell-1g-deep")
        sc.seed = seed
        for j in sc.jobs:
            j.iterations = 1
        r = ns3_engine.run(sc, "reno", options=ns3_engine.Ns3Options(host_jitter=jitter))
        return {x.job: x.drops for x in r.records}

    locked = first_iteration_drops(0.0, 1)
    assert min(locked.values()) <= 0.05 * sum(locked.values()), locked
    split = [first_iteration_drops(1.0, s) for s in (1, 2)]
    for d in split:
        assert 0.3 <= d["A"] / (d["A"] + d["B"]) <= 0.7, split
    assert split[0] != split[1]  # the seed drives the draws

    with pytest.raises(ValueError, match="host_jitter"):
        ns3_engine.run(load("ns3-dumbbell-1g-deep"), "reno", options=ns3_engine.Ns3Options(host_jitter=1.5))

    alone = _dumbbell(jobs=1, iterations=2, nbytes=2_000_000, buffer_pkts=5000)
    r = ns3_engine.run(alone, "reno", options=ns3_engine.Ns3Options(host_jitter=1.0))
    assert r.drops == 0 and r.ns3_stats["retransmissions"] == [0]  # no reordering, no spurious recovery


@needs_ns3
def test_cli_host_jitter_reaches_ns3_and_changes_the_drop_split(tmp_path):
    """`--ns3-host-jitter 1` runs ns-3 with the jittered hosts: the phase-locked first iteration
    (all drops on one job) no longer happens."""
    import csv

    from typer.testing import CliRunner

    from mltcp.cli import app

    toml = tmp_path / "deep.toml"
    toml.write_text(
        (ROOT / "scenarios" / "ns3-dumbbell-1g-deep.toml")
        .read_text()
        .replace("iterations = 30", "iterations = 1")
        .replace("warmup_iterations = 5", "warmup_iterations = 0")
    )
    split = {}
    for jitter in ("0", "1"):
        out = tmp_path / f"j{jitter}"
        r = CliRunner().invoke(
            app, ["simulate", str(toml), "--engine", "ns3", "--ns3-host-jitter", jitter, "--json", "--out", str(out)]
        )
        assert r.exit_code == 0, r.output[-2000:]
        with open(out / "records-reno.csv") as fh:
            split[jitter] = sorted(float(row["drops"]) for row in csv.DictReader(fh))
    assert split["0"][0] == 0 and split["1"][0] > 0.3 * sum(split["1"]), split


@needs_ns3
def test_no_rack_mltcp_reno_beats_reno_in_jittered_ns3():
    """scenarios/tuned/two-jobs-no-rack.toml (an experiment: the table tuned for a sender without
    RACK-TLP), seed 1, in ns-3 with jittered hosts (ns-3 3.44 recovers without RACK-TLP): MLTCP-Reno
    is faster than Reno with fewer drops (measured 62.6 -> 46.4 ms, 1.35x; drops 432 -> 172;
    docs/tuning.md "MLTCP without RACK-TLP")."""
    from mltcp import metrics

    sc = load("tuned/two-jobs-no-rack")
    opt = ns3_engine.Ns3Options(host_jitter=1.0)
    base = ns3_engine.run(sc, "reno", options=opt)
    ml = ns3_engine.run(sc, "mltcp-reno", options=opt)
    sb = metrics.summary(base.records, sc.warmup_iterations)
    sm = metrics.summary(ml.records, sc.warmup_iterations)
    assert sb["avg_iter_s"] / sm["avg_iter_s"] >= 1.2, (sb["avg_iter_s"], sm["avg_iter_s"])
    assert ml.drops < base.drops, (ml.drops, base.drops)


@needs_ns3
def test_cubic_epoch_moves_by_the_idle_time_before_each_iteration_as_linux_does():
    """ns-3's TcpCubic has no CwndEvent, so its W(t) counted each compute phase as sending time; the
    flow now moves the epoch by the idle time when it starts sending again (Linux bictcp_cwnd_event).
    Two jobs on a 20-packet buffer lose in their first iteration, so CUBIC has an epoch from then on."""
    sc = _dumbbell(buffer_pkts=20, iterations=4)
    for cc in ("cubic", "mltcp-cubic", "reno"):
        shifts = ns3_engine.run(sc, cc).ns3_stats["cubic_epoch_shifts"]
        if cc == "reno":
            assert shifts == [0, 0]
        else:
            assert all(1 <= s <= 3 for s in shifts), (cc, shifts)  # at most once per later iteration


def test_recovery_option_is_validated():
    with pytest.raises(ValueError, match="recovery"):
        ns3_engine.Ns3Options(recovery="newreno")
    assert set(ns3_engine.RECOVERY_TYPES) == {"prr", "prr-rfc", "classic"}


@needs_ns3
def test_ns3_prr_counts_dupacks_twice_and_prr_rfc_does_not():
    """ns-3 3.44's TcpPrrRecovery adds a segment to DeliveredData on every duplicate ACK although
    SACK already counts it: during a CUBIC recovery it sends 1.4 segments per delivered one, so one
    round trip after the first drops a second, larger burst overflows the shared drop-tail queue
    (both jobs lose). ``recovery = "prr-rfc"`` counts delivered data once (RFC 6937, Linux) and that
    burst is gone. The drop trace records every drop's time and job."""

    def run(rec):
        sc = load("ns3-dumbbell-100m")
        sc.seed = 1
        for j in sc.jobs:
            j.compute_s, j.iterations = 0.02, 8  # the jobs always share the link
        return ns3_engine.run(
            sc, "cubic", options=ns3_engine.Ns3Options(host_jitter=1.0, recovery=rec, trace_cwnd=True)
        )

    prr, rfc = run("prr"), run("prr-rfc")
    for r in (prr, rfc):
        t, job = r.ns3_stats["drop_trace"]
        assert len(t) == len(job) == r.drops > 0
        assert set(job.tolist()) == {0, 1} and (t[1:] >= t[:-1]).all()
    assert prr.drops >= 2 * rfc.drops, (prr.drops, rfc.drops)


@needs_ns3
def test_the_online_switch_gives_up_in_ns3_as_in_the_fast_engine():
    """J0 runs alone for 300 ms (its best rate: the link's), then J1 joins and their communication
    cannot fit the periods (40 ms each per 42 ms). J0 sees every iteration contended, gives up after
    its trial, tries again after the hold, gives up again: after 24 iterations it is at its base
    algorithm with a hold of 8, in both engines. J1 has never run alone, so its best rate is the
    shared one and it sees no contention: it stays engaged (the switch's blind spot). With the switch
    off both stay engaged. Iterations are marked, so both trackers see the same boundaries; the
    window floor is off (min_window = 0), so only the switch decides."""
    from mltcp import tracker as trk
    from mltcp.sim import engine

    late = {"name": "J1", "compute_ms": 2, "bytes": 500_000, "path": ["bn"], "start_offset_ms": 300}

    def case(**mltcp):
        table = {"boundary": "mark", "min_window": 0, **mltcp}
        return _dumbbell(jobs=1, iterations=24, compute_ms=2, extra_jobs=[late], mltcp=table)

    assert ns3_engine.run(case(), "mltcp-reno").ns3_stats["mltcp_engaged"] == [0, 1]
    run, _ = engine._setup(case(), "mltcp-reno", 0.0, None, True)
    engine._run_chunks(run, None, None)
    assert list(run.cc.tr[:, trk.ENGAGED]) == [0.0, 1.0] and run.cc.tr[0, trk.HOLD] == 8.0
    assert ns3_engine.run(case(adaptive=False), "mltcp-reno").ns3_stats["mltcp_engaged"] == [1, 1]


@needs_ns3
@pytest.mark.parametrize("boundary", ["idle", "tx_start", "mark"])
def test_the_ns3_tracker_measures_busy_time_as_the_fast_engines(boundary):
    """ns-3's C++ tracker fed the bucketed iterations of test_engage (collectives with backward
    compute between them): the same busy time, best rate and learned bytes as mltcp.tracker."""
    import math

    import numpy as np

    from mltcp import tracker as trk
    from mltcp.sim import ns3_cxx

    _, m = ns3_cxx.load()
    py = trk.IterationTracker(1, min_idle=math.inf if boundary == "mark" else 1e-3, boundary=boundary)
    cx = m.Tracker()
    cx.minIdle, cx.atTx = py.min_idle, boundary == "tx_start"
    py.last_gap, cx.lastGap = 0.020, 0.020
    t = 0.0
    for it in range(6):
        for bucket in range(4):
            t += 0.003 if bucket else 0.020
            if boundary == "mark" and bucket == 0:
                py.iteration_start(np.ones(1, bool))
                cx.IterationStart()
            py.tx_start(t)
            cx.TxStart(t)
            for _ in range(5):
                t += 0.0002 if it >= 3 else 0.0001
                py.on_ack(np.array([50.0]), t)
                cx.OnAck(50.0, t)
        assert (cx.lastComm, cx.bestRate) == pytest.approx((py.a[0, trk.LAST_COMM], py.a[0, trk.BEST_RATE]))
        assert cx.bytesPerIter == py.bytes_per_iter[0]
    # 4 collectives of 5 ACKs 0.2 ms apart, each from its send on except the first, from its first ACK
    assert cx.lastComm == pytest.approx(0.0038)
