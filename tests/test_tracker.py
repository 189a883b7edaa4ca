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
        feed(tr, 100, i * 1e-4)           # 1000 bytes in one burst
    feed(tr, 250, 0.020)                  # 20 ms idle > 1 ms: boundary
    assert tr.iteration[0] == 1
    assert tr.bytes_per_iter[0] == 1000
    assert tr.bytes_ratio[0] == pytest.approx(0.25)
    feed(tr, 1000, 0.0201)
    assert tr.bytes_ratio[0] == 1.0       # clamped


def test_boundary_threshold_follows_the_previous_compute_gap():
    tr = IterationTracker(1, idle_fraction=0.9, min_idle=1e-3)
    feed(tr, 100, 0.0)
    feed(tr, 100, 0.020)                  # first gap 20 ms -> boundary; last_gap = 20 ms
    feed(tr, 100, 0.020 + 0.015)          # 15 ms < 0.9 * 20 ms: same iteration
    assert tr.iteration[0] == 1
    feed(tr, 100, 0.035 + 0.019)          # 19 ms > 18 ms: boundary
    assert tr.iteration[0] == 2


def test_median_of_history_resists_one_misdetected_boundary_and_follows_size_changes():
    tr = IterationTracker(1, min_idle=1e-3)
    t = 0.0
    for size in (1000, 1000, 1000):
        feed(tr, size, t)
        t += 0.05
    feed(tr, 10, t)                       # a spurious short "iteration" (e.g. an RTO stall)
    t += 0.05
    assert tr.bytes_per_iter[0] == 1000
    feed(tr, 1000, t)
    t += 0.05
    for size in (4000, 4000, 4000):       # the model got bigger
        feed(tr, size, t)
        t += 0.05
    assert tr.bytes_per_iter[0] == 4000


def test_explicit_iteration_start():
    tr = IterationTracker(2, min_idle=10.0)    # idle rule effectively off
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
        tr.iteration_start(np.array([True]))   # the framework says "new iteration"
        t += 0.02                               # ... then the first ack comes after the compute gap
        feed(tr, 1000, t)
        feed(tr, 1000, t + 1e-4)
    assert tr.iteration[0] == 3                 # the first call had nothing to close
    assert tr.bytes_per_iter[0] == 2000
    assert tr.bytes_ratio[0] == 1.0
