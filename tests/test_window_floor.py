"""The window floor (``min_window``) is relative to the path: ``min_window`` segments, but never
more than the flow's path BDP once the tracker knows it (best iteration rate x smallest RTT), in the
userspace ops, the simulator's kernel and the BPF integer model alike."""

import math

import pytest

from mltcp import defaults, scenario
from mltcp import tracker as trk
from mltcp.cc import make_cc
from mltcp.cc.base import CWND
from mltcp.cc.mltcp import floor_bytes
from mltcp.sim.engine import simulate
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


def _disengaged(cc, st):
    """The online switch has made flow 0 its base (and has judged every closed iteration)."""
    a = st.tracker.a
    a[0, trk.ENGAGED] = 0.0
    a[0, trk.SEEN] = a[0, trk.ITERATION]
    return cc


@pytest.mark.parametrize("cwnd_segs, expected", [(100, 0.5), (20, 1.0)])
def test_a_disengaged_flow_grows_at_above_bdp_gain_only_above_its_path_bdp(cwnd_segs, expected):
    """A 29-segment BDP (3.4 Gb/s x 100 us): above it the disengaged flow grows at above_bdp_gain,
    below it at its base's rate; while engaged the gain is F's, whatever the window."""
    cc = make_cc("mltcp-reno", above_bdp_gain=0.5)
    _, st = _flow_behind(cwnd_segs, best_rate=425e6, min_rtt=100e-6)
    f0 = float(cc.F(st.tracker.bytes_ratio)[0])
    assert float(cc.increase_gain(st)[0]) == pytest.approx(f0)  # engaged (the start): F
    assert float(_disengaged(cc, st).increase_gain(st)[0]) == expected


def test_above_bdp_gain_is_reno_s_half_by_default_off_elsewhere_and_waits_for_the_bdp():
    _, st = _flow_behind(100, best_rate=425e6, min_rtt=100e-6)  # 100 segments, above a 29-segment BDP
    for name, expected in (("mltcp-reno", 0.5), ("mltcp-cubic", 1.0), ("mltcp-dctcp", 1.0)):
        cc = make_cc(name)
        assert cc.above_bdp_gain == expected, name
        assert float(_disengaged(cc, st).increase_gain(st)[0]) == expected, name
    cc = make_cc("mltcp-cubic", above_bdp_gain=0.5)
    _, st = _flow_behind(100)  # no rate, no RTT: the BDP is unknown, so the base's gain
    assert float(_disengaged(cc, st).increase_gain(st)[0]) == 1.0


CLASH = """name = "clash"
description = "two jobs whose communication (16 ms each alone) cannot take turns in a 21 ms period"
seed = {seed}
iterations = 30
warmup_iterations = 5
cc = "reno"
[network]
mss = 1448
step_us = 10
[[links]]
name = "bottleneck"
rate_gbps = 1.0
delay_us = 100
buffer_kb = 100
{table}
[[jobs]]
name = "A"
compute_ms = 5
bytes = 2_000_000
path = ["bottleneck"]
[[jobs]]
name = "B"
compute_ms = 5
bytes = 2_000_000
start_offset_ms = 3
path = ["bottleneck"]
"""


def test_a_slower_increase_above_the_bdp_drops_less_where_no_interleave_forms(tmp_path):
    """Jobs that cannot take turns: the switch makes the flows their base, and above_bdp_gain = 0.5
    then fills the queue half as fast: fewer drops over three seeds, iterations as fast."""

    def run(table, seed):
        path = tmp_path / f"clash-{seed}.toml"
        path.write_text(CLASH.format(seed=seed, table=table))
        res = simulate(scenario.load(str(path)), "mltcp-reno")
        return res.drops, sum(r.duration for r in res.records[10:]) / len(res.records[10:])

    plain = [run("[mltcp]\nabove_bdp_gain = 1.0", s) for s in (1, 2, 3)]
    gentle = [run("[mltcp]\nabove_bdp_gain = 0.5", s) for s in (1, 2, 3)]
    assert sum(d for d, _ in gentle) < 0.95 * sum(d for d, _ in plain)
    assert sum(t for _, t in gentle) < 1.02 * sum(t for _, t in plain)


def test_the_bpf_model_grows_a_disengaged_window_at_above_bdp_gain_above_the_bdp():
    """mltcp_window_gain's integer model: disengaged (F is then 1.0), 100 segments on a 2-segment
    BDP grow at half the rate with above_bdp_q10 = 512; 1 segment (below the BDP) at the full rate;
    an unknown BDP leaves the base's growth."""
    bdp = model.bdp_segments(25 << model.SHIFT, 100, MSS)  # 200 Mb/s x 100 us: 1.7 segments
    w = model.reno_w(100)
    base = model.grow(100, 0, w, 100, model.ONE, 1 << 30, bdp_segs=bdp, engaged=False)
    half = model.grow(100, 0, w, 100, model.ONE, 1 << 30, bdp_segs=bdp, engaged=False, above_bdp_q10=512)
    assert base[0] == 101 and half == (100, 50 * model.ONE)  # half a segment carried in cnt
    below = model.grow(1, 0, model.reno_w(1), 1, model.ONE, 1 << 30, bdp_segs=bdp, engaged=False, above_bdp_q10=512)
    assert below[0] == 2
    assert model.grow(100, 0, w, 100, model.ONE, 1 << 30, engaged=False, above_bdp_q10=512) == base
