"""traffic.wire_check: a capture's bursts against a job's rank records; emulation.capture's parsing."""

import math

from mltcp.records import IterationRecord
from mltcp.traffic.wire_check import agreement, of_host

from emulation.capture import kernel_dropped


def rec(i, comm_start, end, start=None):
    return IterationRecord("A", i, comm_start - 0.1 if start is None else start, comm_start, end, 1e6)


def burst(label, i, first, last):
    return IterationRecord(label, i, first, first, last, 1e6)


FLOW = "10.0.0.1:40000>10.0.0.2:50000"  # rank 0 (10.0.0.1) sends
BACK = "10.0.0.2:50000>10.0.0.1:40000"  # ...and receives
IP = "10.0.0.1"


def test_of_host_keeps_the_rank_s_connections_both_ways_without_the_store():
    wire = [
        burst(FLOW, 0, 1.0, 1.1),
        burst("10.0.0.2:50000>10.0.0.1:40000", 0, 1.01, 1.12),  # the peer's direction
        burst("10.0.0.1:29500>10.0.0.2:41000", 0, 0.5, 0.5),  # the rendezvous store
        burst("10.0.0.11:40000>10.0.0.2:50000", 0, 1.0, 1.1),  # another host's address starts alike
        burst("10.0.0.3:40000>10.0.0.4:50000", 0, 1.0, 1.1),  # another job
    ]
    assert of_host(wire, "10.0.0.1", skip_ports=[29500]) == wire[:2]


def test_bursts_that_match_the_records_agree():
    recs = [rec(i, 1.0 + i, 1.0 + i + 0.4) for i in range(5)]
    last = {i: 1.0 + i + 0.35 for i in range(5)}
    bursts = [burst(FLOW, i, 1.0 + i + 0.002, 1.0 + i + 0.36) for i in range(5)]  # sent: drains later
    bursts += [burst(BACK, i, 1.0 + i + 0.003, 1.0 + i + 0.348) for i in range(5)]
    a = agreement(recs, last, bursts, IP)
    assert (a.records, a.matched, a.bursts, a.unmatched_bursts) == (5, 5, 10, 0)
    assert a.first_err_ms == (2.0, 2.0)
    assert a.last_err_ms == (2.0, 2.0)  # the last packet received, not the last one sent
    assert a.period_wire_s == a.period_records_s == 1.0 and a.period_ratio == 1.0


def test_an_iteration_split_on_the_wire_is_one_record_and_stray_traffic_is_counted():
    recs = [rec(0, 1.0, 1.5), rec(1, 2.0, 2.5)]
    last = {0: 1.45, 1: 2.45}
    bursts = [
        burst(FLOW, 0, 1.01, 1.2),  # a gap between buckets split iteration 0 in two
        burst(BACK, 1, 1.3, 1.44),
        burst(FLOW, 4, 2.01, 2.3),
        burst(BACK, 2, 2.0, 2.44),  # the peer's first packet may come first: not compared
        burst(FLOW, 3, 1.8, 1.81),  # between the iterations: no record knows it
    ]
    a = agreement(recs, last, bursts, IP)
    assert (a.matched, a.bursts, a.unmatched_bursts) == (2, 5, 1)
    assert a.first_err_ms[1] == 10.0 and a.last_err_ms[1] == 10.0


def test_a_record_without_traffic_is_not_matched():
    recs = [rec(0, 1.0, 1.5), rec(1, 2.0, 2.5)]
    a = agreement(recs, {0: 1.4}, [burst(FLOW, 0, 1.0, 1.4)], IP)
    assert (a.records, a.matched) == (2, 1) and math.isnan(a.period_wire_s)
    assert math.isnan(a.last_err_ms[0])  # nothing received


def test_kernel_dropped_reads_tcpdump_s_exit_statistics():
    err = "listening on x\n1200 packets captured\n1210 packets received by filter\n3 packets dropped by kernel\n"
    assert kernel_dropped(err) == 3
    assert kernel_dropped("") is None


def test_a_later_bucket_stays_with_its_iteration_when_the_iterations_are_short():
    # 80 ms iterations: rank 0's second bucket leaves 40 ms before the next first collective
    recs = [rec(i, 1.0 + 0.08 * i, 1.0 + 0.08 * i + 0.03, start=1.0 + 0.08 * i - 0.04) for i in range(3)]
    bursts = [burst(FLOW, i, 1.0 + 0.08 * i + 0.001, 1.0 + 0.08 * i + 0.01) for i in range(3)]
    bursts += [burst(FLOW, i, 1.0 + 0.08 * i + 0.04, 1.0 + 0.08 * i + 0.045) for i in range(2)]  # tails
    a = agreement(recs, {}, bursts, IP)
    assert (a.matched, a.unmatched_bursts) == (3, 0)
    assert a.first_err_ms == (1.0, 1.0)


def test_the_peer_may_start_long_before_rank_0_and_the_period_is_rank_0_s():
    recs = [rec(i, 1.0 + i, 1.0 + i + 0.4) for i in range(4)]
    last = {i: 1.0 + i + 0.35 for i in range(4)}
    bursts = [burst(FLOW, i, 1.0 + i + 0.002, 1.0 + i + 0.36) for i in range(4)]
    # the peer's traffic of iteration 3 starts 200 ms before rank 0 reaches its collective
    bursts += [burst(BACK, i, 1.0 + i - (0.2 if i == 3 else 0.0), 1.0 + i + 0.348) for i in range(4)]
    a = agreement(recs, last, bursts, IP)
    assert (a.matched, a.unmatched_bursts) == (4, 0)
    assert a.period_ratio == 1.0  # the peer's early start does not shorten the wire's period
    assert a.last_err_ms == (2.0, 2.0)


def test_setup_and_teardown_traffic_is_counted_apart_from_the_iterations():
    recs = [rec(0, 1.0, 1.5), rec(1, 2.0, 2.5)]
    bursts = [
        burst(BACK, 0, 0.5, 0.6),  # DDP's first broadcast, before iteration 0 began at 0.9
        burst(FLOW, 0, 0.5, 0.6),
        burst(FLOW, 1, 2.7, 2.8),  # the closing barrier, after the last iteration ended
        burst(BACK, 1, 2.7, 2.8),
        burst(BACK, 2, 2.01, 2.52),  # the last iteration's traffic ran on into the barrier
    ]
    a = agreement(recs, {}, bursts, IP)
    assert (a.matched, a.unmatched_bursts, a.outside_run) == (1, 0, 4)
    assert a.as_dict()["outside_run"] == 4
