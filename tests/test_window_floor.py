"""The window floor (``min_window``) is relative to the path: ``min_window`` segments, but never
more than the flow's path BDP once the tracker knows it (best iteration rate x smallest RTT), in the
userspace ops, the simulator's kernel and the BPF integer model alike."""

import math

import pytest

from mltcp import defaults
from mltcp import tracker as trk
from mltcp.cc import make_cc
from mltcp.cc.base import CWND
from mltcp.cc.mltcp import floor_bytes
from mltcp.traffic.kernel import model

MSS = 1448


def _flow_behind(cwnd_segs, best_rate=0.0, min_rtt=0.0):
    """One mltcp-reno flow at the start of its iteration (r = 0, so F < 1) with ``cwnd_segs``."""
    cc = make_cc("mltcp-reno")
    st = cc.new_state(1, MSS)
    st.tcp[0, CWND] = cwnd_segs * MSS
    st.tracker.a[0, trk.BYTES_PER_ITER] = 1e6  # an iteration has been learned, none of it sent
    st.tracker.a[0, trk.BEST_RATE] = best_rate
    if min_rtt:
        st.tracker.rtt_sample(min_rtt)
    return cc, st


def test_floor_is_min_window_until_the_path_bdp_is_known_then_at_most_one_bdp():
    cc, st = _flow_behind(3)
    mp, a = cc.hook_vector(), st.tracker.a
    assert floor_bytes(mp, a, 0, MSS) == defaults.MIN_WINDOW * MSS  # no rate, no RTT yet
    a[0, trk.BEST_RATE] = 25e6  # 200 Mb/s
    assert floor_bytes(mp, a, 0, MSS) == defaults.MIN_WINDOW * MSS  # still no RTT sample
    st.tracker.rtt_sample(100e-6)
    st.tracker.rtt_sample(0.0)  # no sample: ignored
    st.tracker.rtt_sample(300e-6)  # larger: the smallest is kept
    assert a[0, trk.MIN_RTT] == 100e-6
    assert floor_bytes(mp, a, 0, MSS) == pytest.approx(2500.0)  # 25 MB/s x 100 us: under 2 segments
    a[0, trk.BEST_RATE] = 425e6  # 3.4 Gb/s: a 29-segment BDP, the floor is min_window again
    assert floor_bytes(mp, a, 0, MSS) == defaults.MIN_WINDOW * MSS


def test_a_flow_behind_on_a_few_segment_bdp_is_slowed_below_min_window():
    """At 3 segments and F(0) < 1: on a 60-segment BDP the floor keeps the increase at 1; on a
    2-segment BDP the flow may yield (its increase is F), since 3 segments would fill the link."""
    cc, st = _flow_behind(3, best_rate=425e6, min_rtt=200e-6)
    f0 = float(cc.F(st.tracker.bytes_ratio)[0])
    assert f0 < 1.0
    assert float(cc.increase_gain(st)[0]) == 1.0
    cc, st = _flow_behind(3, best_rate=25e6, min_rtt=120e-6)
    assert float(cc.increase_gain(st)[0]) == pytest.approx(f0)


def test_the_mltcp_hook_records_the_smallest_rtt_sample_on_every_ack():
    cc, st = _flow_behind(10)
    for rtt in (400e-6, 150e-6, 900e-6):
        cc.on_ack(st, MSS, rtt, 1.0)
    assert st.tracker.a[0, trk.MIN_RTT] == 150e-6


def test_the_bpf_model_floor_matches():
    rate_q10 = 25 << model.SHIFT  # 25 bytes/us = 200 Mb/s
    assert model.bdp_segments(rate_q10, 100, MSS) == pytest.approx(2500 / MSS)
    assert model.bdp_segments(0, 100, MSS) == math.inf and model.bdp_segments(rate_q10, 0, MSS) == math.inf
    fq = model.f_q10(model.q10(1.78), model.q10(0.11), 0)  # the default F at r = 0
    w = model.reno_w(3)
    floored = model.grow(3, 0, w, 3, fq, 1 << 30)  # BDP unknown: 3 < 4 segments, F counts as 1
    yielding = model.grow(3, 0, w, 3, fq, 1 << 30, bdp_segs=model.bdp_segments(rate_q10, 100, MSS))
    assert floored[0] == 4 and yielding[0] == 3
