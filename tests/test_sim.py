"""Simulator behaviour: conservation of bytes, determinism, queueing/ECN/loss, and MLTCP's effect."""

import numpy as np
import pytest

from mltcp import metrics
from mltcp.scenario import from_dict
from mltcp.sim.engine import simulate


def scenario(jobs=2, iterations=8, buffer_bdp=4.0, ecn=None, rate_gbps=1.0, offset_ms=1.0, **extra):
    link = {"name": "bn", "rate_gbps": rate_gbps, "delay_us": 50, "buffer_bdp": buffer_bdp}
    if ecn:
        link.update(ecn="step", ecn_k_pkts=ecn)
    d = {
        "name": "t",
        "iterations": iterations,
        "warmup_iterations": min(2, iterations - 1),
        "links": [link],
        "jobs": [
            {
                "name": f"J{i}",
                "compute_ms": 20,
                "bytes": 2_500_000 * rate_gbps,
                "path": ["bn"],
                "start_offset_ms": i * offset_ms,
            }
            for i in range(jobs)
        ],
    }
    d.update(extra)
    return from_dict(d, "test.toml")


@pytest.mark.parametrize("loss_model", ["packet", "fluid"])
@pytest.mark.parametrize(
    "cc", ["reno", "mltcp-reno", "cubic", "mltcp-cubic", "dctcp", "mltcp-dctcp", "dcqcn", "mltcp-dcqcn"]
)
def test_bytes_are_conserved(cc, loss_model):
    sc = scenario(iterations=4, buffer_bdp=1.0, network={"loss_model": loss_model})
    r = simulate(sc, cc)
    assert len(r.records) == 8
    assert all(rec.bytes == 2_500_000 for rec in r.records)
    # every byte of every iteration was acknowledged exactly once
    assert r.bytes_acked == pytest.approx(sum(rec.bytes for rec in r.records), rel=1e-9)
    # what was sent is what arrived plus what was dropped (and then sent again)
    assert r.bytes_sent == pytest.approx(r.bytes_acked + r.drops * sc.mss, rel=1e-9)
    assert r.bytes_in_flight == pytest.approx(0.0, abs=1e-6)
    assert sum(rec.drops for rec in r.records) == pytest.approx(r.drops, rel=1e-9)


def test_deterministic_for_a_seed():
    sc = scenario(iterations=5)
    for j in sc.jobs:
        j.jitter = 0.05
    a, b = simulate(sc, "mltcp-reno"), simulate(sc, "mltcp-reno")
    assert [(x.job, x.start, x.end) for x in a.records] == [(x.job, x.start, x.end) for x in b.records]
    sc.seed = 2
    c = simulate(sc, "mltcp-reno")
    assert [x.end for x in a.records] != [x.end for x in c.records]


def test_single_job_alone_runs_at_line_rate_without_loss():
    sc = scenario(jobs=1, iterations=5)
    r = simulate(sc, "reno")
    comm = [rec.comm_duration for rec in r.records]
    alone = 2_500_000 / (1e9 / 8)
    assert all(alone <= c <= alone * 1.05 for c in comm[1:])
    assert r.drops == 0


def test_two_jobs_collide_and_queue_drops_packets():
    r = simulate(scenario(offset_ms=0.0), "reno")
    assert r.drops > 0
    first = [rec for rec in r.records if rec.iteration == 0]
    assert all(rec.comm_duration > 1.5 * 0.02 for rec in first)  # shared link: about twice as long


def test_ecn_step_marking_replaces_drops():
    r = simulate(scenario(ecn=10, buffer_bdp=8.0, offset_ms=0.0), "reno")
    assert r.ecn_marks > 0
    assert r.drops == 0


def test_trace_has_per_job_rates():
    sc = scenario(iterations=3)
    r = simulate(sc, "reno", trace_interval=1e-3)
    assert r.trace_rate.shape[1] == 2
    assert r.trace_rate.max() <= 1.2e9  # nobody beats the link for long
    delivered = (r.trace_rate * 1e-3 / 8).sum()
    assert delivered == pytest.approx(r.bytes_acked, rel=0.01)


def test_multi_link_path_uses_the_slowest_link():
    d = {
        "name": "m",
        "iterations": 3,
        "warmup_iterations": 1,
        "links": [
            {"name": "a", "rate_gbps": 1.0, "delay_us": 25, "buffer_bdp": 4},
            {"name": "b", "rate_mbps": 500, "delay_us": 25, "buffer_bdp": 4},
        ],
        "jobs": [{"name": "X", "compute_ms": 10, "bytes": 1_000_000, "path": ["a", "b"]}],
    }
    r = simulate(from_dict(d), "reno")
    assert r.records[-1].comm_duration >= 1_000_000 / (500e6 / 8)


@pytest.mark.integration
def test_mltcp_interleaves_two_compatible_jobs_and_reno_does_not():
    """The headline behaviour on a reduced two-jobs case, with the shipped default (60 iterations: the
    default's F, a mean of 1, interleaves these jobs by iteration ~28; the public F by ~3)."""
    sc = scenario(iterations=60)
    sc.warmup_iterations = 10
    reno, ml = simulate(sc, "reno"), simulate(sc, "mltcp-reno")
    ideal = sc.ideal_iter_s(sc.jobs[0])
    s_reno = metrics.summary(reno.records, 10)
    s_ml = metrics.summary(ml.records, 10)
    assert s_ml["avg_iter_s"] < 1.1 * ideal
    assert s_reno["avg_iter_s"] > 1.2 * s_ml["avg_iter_s"]
    assert metrics.converged_at(ml.records) is not None
    assert metrics.converged_at(reno.records) is None


def test_packet_losses_hit_flows_unevenly_fluid_losses_do_not():
    """Two identical jobs starting together: fluid drops are shared exactly, so both flows lose the
    same and halve together; whole-packet drops land on one flow or the other."""

    def first_iteration_drops(model):
        r = simulate(scenario(iterations=2, offset_ms=0.0, network={"loss_model": model}), "reno")
        return sorted(rec.drops for rec in r.records if rec.iteration == 0)

    a, b = first_iteration_drops("fluid")
    assert a == pytest.approx(b)
    a, b = first_iteration_drops("packet")
    assert a != pytest.approx(b)
    assert a == round(a) and b == round(b)  # whole packets


@pytest.mark.parametrize("cc", ["reno", "cubic", "mltcp-reno", "dcqcn", "mltcp-dcqcn"])
def test_skipping_idle_slots_changes_nothing(cc):
    """The engine skips slots in which nothing can happen; stepping every slot gives the same run."""
    sc = scenario(iterations=4, buffer_bdp=2.0, rate_gbps=0.1, ecn=5 if "dcqcn" in cc else None)  # 1.7 packets
    a, b = simulate(sc, cc), simulate(sc, cc, skip=False)
    assert a.steps < b.steps
    assert [(x.job, x.iteration, x.end, x.drops) for x in a.records] == [
        (x.job, x.iteration, x.end, x.drops) for x in b.records
    ]
    assert (a.drops, a.ecn_marks, a.bytes_sent) == (b.drops, b.ecn_marks, b.bytes_sent)


def _multi(flows, flow_paths=None, iterations=3):
    from mltcp.workload import Job

    sc = from_dict(
        {
            "name": "mf",
            "iterations": iterations,
            "warmup_iterations": 1,
            "links": [
                {"name": "a", "rate_gbps": 1.0, "delay_us": 50, "buffer_bdp": 4},
                {"name": "b", "rate_mbps": 250, "delay_us": 50, "buffer_bdp": 4},
            ],
            "jobs": [{"name": "X", "compute_ms": 10, "bytes": 2_000_000, "path": ["a"]}],
        }
    )
    sc.jobs = [Job("X", 0.01, 2_000_000, ["a"], iterations=iterations, flows=flows, flow_paths=flow_paths)]
    return sc


@pytest.mark.parametrize("cc", ["reno", "mltcp-cubic", "dcqcn"])
def test_multi_flow_job_ends_when_every_flow_delivered(cc):
    sc = _multi(2, [["a"], ["b"]])
    r = simulate(sc, cc)
    assert [x.job for x in r.records] == ["X"] * 3 and all(x.bytes == 2_000_000 for x in r.records)
    assert r.bytes_acked == pytest.approx(3 * 2_000_000, rel=1e-9)
    # each flow carries half; the one on the 250 Mb/s link sets the iteration's communication time
    for x in r.records[1:]:
        assert x.comm_duration >= 1_000_000 / (250e6 / 8)
        assert x.comm_duration < 1.3 * 1_000_000 / (250e6 / 8) + 1e-3


def test_flows_of_one_job_share_a_link_like_one_flow():
    one, two = simulate(_multi(1), "reno"), simulate(_multi(2), "reno")
    assert two.bytes_acked == pytest.approx(one.bytes_acked)
    ideal = 2_000_000 / (1e9 / 8)
    for x in two.records[1:]:
        assert ideal <= x.comm_duration <= 1.2 * ideal + 1e-3


def test_sampling_the_windows_does_not_change_the_run():
    from mltcp.scenario import load

    sc = load("ns3-dumbbell-1g-shallow")
    for j in sc.jobs:
        j.iterations = 4
    a = simulate(sc, "cubic")
    b = simulate(sc, "cubic", cwnd_sample_s=1e-4)
    assert [(r.job, r.end, r.drops) for r in a.records] == [(r.job, r.end, r.drops) for r in b.records]
    assert a.cwnd_trace is None and b.cwnd_trace.shape[1] == 1 + 3 * 2
    assert np.all(np.diff(b.cwnd_trace[:, 0]) > 0) and b.cwnd_trace[:, 1:3].min() >= sc.mss


def test_dctcp_keeps_a_shallow_ecn_link_busy_where_ecn_reno_halves_below_the_bdp():
    """The DCTCP paper's point: with a marking threshold K well under the BDP, ECN-Reno's halvings
    empty the queue and the link idles; DCTCP cuts by alpha / 2 (the marked fraction) and keeps it
    busy. Two jobs sending at once (a lone flow is held to line rate by its NIC and never queues),
    1 Gb/s, 100 us RTT (BDP 8.6 segments), K = 2 segments: 5 MB per iteration, 40 ms at line rate."""
    sc = scenario(jobs=2, iterations=6, ecn=2, buffer_bdp=4.0, offset_ms=0.0)
    reno, dctcp = simulate(sc, "reno"), simulate(sc, "dctcp")
    comm = lambda r: np.mean([rec.end - rec.comm_start for rec in r.records[4:]])
    assert reno.ecn_marks > 0 and dctcp.ecn_marks > 0 and reno.drops == dctcp.drops == 0
    assert comm(reno) / comm(dctcp) > 1.15  # measured: 51.9 / 42.4 ms


def test_a_flow_with_many_feedback_entries_in_one_slot_does_not_overflow_the_ring():
    """circular, seed 25: a flow filed more than two entries into one ring row and filled it; the
    next flow's feedback for that slot now goes one slot later instead of failing the run."""
    from mltcp import sweep
    from mltcp.scenario import from_dict

    t = sweep.Task("circular", "reno", 25, 300)
    sc = from_dict(sweep.scenario_tables(t), "circular")
    res = simulate(sc, "reno")
    assert len(res.records) == sum(j.iterations for j in sc.jobs)
