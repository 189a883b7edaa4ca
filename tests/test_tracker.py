import numpy as np
import pytest

from mltcp.tracker import IterationTracker


def feed(tr, nbytes, now):
    tr.on_ack(np.array([float(nbytes)]), now)


def test_ratio_is_zero_until_an_iteration_completes():
    tr = IterationTracker(1, min_idle=1e-3)
    feed(tr, 500, 0.0)
    feed(tr, 500, 0.0001)
    assert tr.bytes_ratio[0] == 0.0


def test_idle_gap_starts_a_new_iteration_and_learns_its_size():
    tr = IterationTracker(1, idle_fraction=0.9, min_idle=1e-3)
    for i in range(10):
        feed(tr, 100, i * 1e-4)  # 1000 bytes in one burst
    feed(tr, 250, 0.020)  # 20 ms idle > 1 ms: boundary
    assert tr.iteration[0] == 1
    assert tr.bytes_per_iter[0] == 1000
    assert tr.bytes_ratio[0] == pytest.approx(0.25)
    feed(tr, 1000, 0.0201)
    assert tr.bytes_ratio[0] == 1.0  # clamped


def test_boundary_threshold_follows_the_previous_compute_gap():
    tr = IterationTracker(1, idle_fraction=0.9, min_idle=1e-3)
    feed(tr, 100, 0.0)
    feed(tr, 100, 0.001)  # iteration 0: 200 bytes
    feed(tr, 100, 0.021)  # first gap 20 ms -> boundary; last_gap = 20 ms
    feed(tr, 100, 0.021 + 0.015)  # 15 ms < 0.9 * 20 ms, 100 of the 200 bytes: same iteration
    assert tr.iteration[0] == 1
    feed(tr, 100, 0.036 + 0.019)  # 19 ms > 18 ms: boundary
    assert tr.iteration[0] == 2


def test_once_twice_the_learned_bytes_are_in_any_gap_over_min_idle_ends_the_iteration():
    tr = IterationTracker(1, idle_fraction=0.9, min_idle=1e-3)
    feed(tr, 200, 0.0)
    feed(tr, 100, 0.100)  # 100 ms gap: boundary, threshold now 90 ms, 200 bytes learned
    feed(tr, 200, 0.110)  # 10 ms, under the threshold: same iteration (300 bytes, 1.5x the learned)
    feed(tr, 100, 0.125)  # 15 ms: still under it, and not yet twice the learned bytes: same iteration
    assert tr.iteration[0] == 1
    feed(tr, 100, 0.1255)  # 0.5 ms after twice the learned bytes are in: under min_idle, no boundary
    assert tr.iteration[0] == 1
    feed(tr, 100, 0.1405)  # 15 ms < 90 ms, but 500 bytes >= 2 x 200: a boundary was missed, this is one
    assert tr.iteration[0] == 2 and tr.history[0, 0] == 500


def test_median_of_history_resists_one_misdetected_boundary_and_follows_size_changes():
    tr = IterationTracker(1, min_idle=1e-3)
    t = 0.0
    for size in (1000, 1000, 1000):
        feed(tr, size, t)
        t += 0.05
    feed(tr, 10, t)  # a spurious short "iteration" (e.g. an RTO stall)
    t += 0.05
    assert tr.bytes_per_iter[0] == 1000
    feed(tr, 1000, t)
    t += 0.05
    for size in (4000, 4000, 4000):  # the model got bigger
        feed(tr, size, t)
        t += 0.05
    assert tr.bytes_per_iter[0] == 4000


def test_explicit_iteration_start():
    tr = IterationTracker(2, min_idle=10.0)  # idle rule effectively off
    tr.on_ack(np.array([600.0, 300.0]), 0.0)
    tr.iteration_start(np.array([True, False]))
    assert list(tr.iteration) == [1, 0]
    assert tr.bytes_per_iter[0] == 600
    tr.on_ack(np.array([300.0, 0.0]), 0.001)
    assert tr.bytes_ratio[0] == pytest.approx(0.5)
    assert tr.bytes_ratio[1] == 0.0
    tr.iteration_start(np.array([True, True]))  # a flow with 0 bytes so far does not close
    assert list(tr.iteration) == [2, 1]


def test_bad_idle_fraction():
    with pytest.raises(ValueError):
        IterationTracker(1, idle_fraction=0)


def test_explicit_start_and_idle_rule_together_close_each_iteration_once():
    tr = IterationTracker(1, min_idle=1e-3)
    t = 0.0
    for _ in range(4):
        tr.iteration_start(np.array([True]))  # the framework says "new iteration"
        t += 0.02  # ... then the first ack comes after the compute gap
        feed(tr, 1000, t)
        feed(tr, 1000, t + 1e-4)
    assert tr.iteration[0] == 3  # the first call had nothing to close
    assert tr.bytes_per_iter[0] == 2000
    assert tr.bytes_ratio[0] == 1.0


def _iterations_with_a_stall(tr, tx_start):
    """Iterations of 1000 bytes (10 ACKs 0.1 ms apart) behind 20 ms compute gaps; iteration 2 stalls
    200 ms mid-way with data in flight (a retransmission timeout: ACKs stop, no send from idle).
    ``tx_start`` tells the tracker each iteration's first send (nothing in flight)."""
    t = 0.0
    for it in range(8):
        if it:
            t += 0.020
            if tx_start:
                tr.tx_start(t)
        for k in range(10):
            t += 0.0001 + (0.2 if it == 2 and k == 5 else 0.0)
            feed(tr, 100, t)
    return t


def test_a_timeout_stall_splits_one_iteration_at_the_ack_and_not_at_tx_start():
    """At the ACK the 200 ms stall looks like a compute gap: it closes iteration 2 in the middle and,
    as the last gap, raises the threshold to 180 ms, above every later 20 ms compute gap. The
    missed-boundary rule finds the next boundary once twice the learned bytes are in (the second
    half of iteration 2 and iterations 3 and 4 run together, then every iteration closes at its own
    boundary again). Checked at
    TX_START (the kernel tracker's rule) the stall, with data in flight, is no gap, and every
    iteration closes at its own boundary."""
    ack = IterationTracker(1, idle_fraction=0.9, min_idle=1e-3, history=3)
    _iterations_with_a_stall(ack, tx_start=False)
    assert ack.iteration[0] == 6 and ack.last_gap[0] == pytest.approx(0.020, abs=2e-4)
    assert ack.bytes_cur[0] == 1000 and list(ack.history[0]) == [1000, 1000, 2500]
    tx = IterationTracker(1, idle_fraction=0.9, min_idle=1e-3, history=3, boundary="tx_start")
    _iterations_with_a_stall(tx, tx_start=True)
    assert tx.iteration[0] == 7 and tx.bytes_per_iter[0] == 1000 and tx.bytes_ratio[0] == 1.0
    assert tx.last_gap[0] == pytest.approx(0.020)  # from the last ACK to the send
    quiet = IterationTracker(1, boundary="tx_start")  # without TX_START events: no boundary
    _iterations_with_a_stall(quiet, tx_start=False)
    assert quiet.iteration[0] == 0
    with pytest.raises(ValueError, match="boundary"):
        IterationTracker(1, boundary="ack")
