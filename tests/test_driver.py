"""Job driver with a fake clock and a fake transport, and once over the real loopback transport."""

import numpy as np
import pytest

from mltcp.records import IterationRecord
from mltcp.traffic.driver import JobSpec, run_job
from mltcp.workload import Job


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t

    def sleep(self, d):
        assert d >= 0
        self.t += d


class FakeTransport:
    """Delivers at 1 MB/s on the fake clock; every other iteration needs 2 retransmits."""

    def __init__(self, clock):
        self.clock, self.calls, self.retransmits = clock, [], 0

    def send_iteration(self, nbytes, iteration):
        self.calls.append((nbytes, iteration, self.clock()))
        self.clock.t += nbytes / 1e6
        self.retransmits += 2 * (iteration % 2)


def test_run_job_records_phases():
    clk = FakeClock()
    tr = FakeTransport(clk)
    job = JobSpec.of(job_id=3, compute_s=0.05, bytes_per_iter=20_000, start_offset_s=0.5)
    recs = run_job(job, tr, 4, clock=clk, sleep=clk.sleep)
    assert [c[:2] for c in tr.calls] == [(20_000, i) for i in range(4)]
    assert all(isinstance(r, IterationRecord) for r in recs)
    assert recs[0].start == pytest.approx(0.5)  # after the start offset
    for i, r in enumerate(recs):
        assert r.job == "job3" and r.iteration == i and r.bytes == 20_000
        assert r.comm_start - r.start == pytest.approx(0.05)
        assert r.end - r.comm_start == pytest.approx(0.02)
        assert r.drops == 2 * (i % 2)
    assert recs[1].start == pytest.approx(recs[0].end)


def test_run_job_jitter_and_stragglers_follow_the_workload_model():
    clk = FakeClock()
    job = JobSpec.of(
        job_id=1, compute_s=0.1, bytes_per_iter=0, jitter=0.1, straggler_prob=0.3, straggler_delay_s=1.0, seed=5
    )
    recs = run_job(job, FakeTransport(clk), 200, clock=clk, sleep=clk.sleep)
    compute = np.array([r.comm_start - r.start for r in recs])
    expect = Job("x", 0.1, 0, [], jitter=0.1, straggler_prob=0.3, straggler_delay_s=1.0).compute_times(
        np.random.default_rng(5), 200
    )
    assert compute == pytest.approx(expect)
    stragglers = compute > 0.5
    assert 0.15 < stragglers.mean() < 0.45 and compute[~stragglers].std() > 0


def test_jobspec_validation_and_mapping():
    with pytest.raises(ValueError, match="compute_s"):
        JobSpec.of(job_id=1, compute_s=-1, bytes_per_iter=1)
    with pytest.raises(ValueError, match="job_id"):
        JobSpec.of(job_id=70000, compute_s=1, bytes_per_iter=1)
    j = JobSpec(Job("densenet", 0.07, 5e6, ["l0"], jitter=0.02), job_id=9, peers=["10.0.0.2:9199"])
    assert (j.label, j.job.compute_s, j.bytes_per_iter, j.job.jitter, j.peers) == (
        "densenet",
        0.07,
        5_000_000,
        0.02,
        ["10.0.0.2:9199"],
    )


def test_jobspec_round_trips_as_json_and_names_bad_fields():
    import json

    j = JobSpec.of(
        4,
        0.05,
        300_000,
        peers=["10.0.0.2:5001"],
        seed=7,
        name="A",
        jitter=0.1,
        straggler_prob=0.2,
        straggler_delay_s=0.03,
        start_offset_s=0.01,
        iterations=9,
    )
    back = JobSpec.from_dict(json.loads(json.dumps(j.to_dict())))
    assert back == j
    assert (back.compute_times(20) == j.compute_times(20)).all()  # same seed, same draws
    d = j.to_dict()
    d["job"]["compute_ms"] = 5
    with pytest.raises(ValueError, match=r"spec\.job: unknown field\(s\) compute_ms"):
        JobSpec.from_dict(d)
    d = j.to_dict()
    d["job"]["jitter"] = "lots"
    with pytest.raises(ValueError, match=r"spec\.job\.jitter"):
        JobSpec.from_dict(d)
    with pytest.raises(ValueError, match=r"spec\.job_id"):
        JobSpec.from_dict(dict(j.to_dict(), job_id=1.5))


def test_run_job_over_loopback_transport():
    from mltcp.traffic.transport import Receiver, UdpTransport

    with Receiver(("127.0.0.1", 0)) as rx:
        rx.start()
        with UdpTransport([rx.addr], cc="mltcp-reno", job_id=2, timeout=30) as tr:
            recs = run_job(JobSpec.of(job_id=2, compute_s=0.002, bytes_per_iter=200_000), tr, 5)
        rx.stop()
        (flow,) = rx.flows.values()
    assert flow.delivered == 5 * 200_000 and flow.mismatched == 0
    assert sorted(flow.iterations) == list(range(5))
    assert all(r.end > r.comm_start >= r.start + 0.002 for r in recs)
