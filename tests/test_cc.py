"""Congestion-control core against hand-computed windows and rates."""

import math

import numpy as np
import pytest

from mltcp.cc import ALGORITHMS, Cubic, Dcqcn, Linear, MLTCPReno, Reno, make_cc

MSS = 1000.0
RTT = np.array([1e-3])


def ack(cc, st, nbytes, now=0.0):
    cc.on_ack(st, np.array([float(nbytes)]), RTT, now)


def test_reno_slow_start_adds_acked_bytes():
    cc = Reno()
    st = cc.new_state(1, mss=1000)
    assert st.cwnd[0] == 10 * MSS
    ack(cc, st, MSS)
    assert st.cwnd[0] == 11 * MSS


def test_reno_slow_start_stops_at_ssthresh_and_spends_the_rest_in_avoidance():
    cc = Reno()
    st = cc.new_state(1, mss=1000)
    st.ssthresh[:] = 12 * MSS
    ack(cc, st, 4 * MSS)  # 2 MSS of slow start to 12, 2 MSS left for avoidance
    assert st.cwnd[0] == pytest.approx(12 * MSS + MSS * 2 * MSS / (12 * MSS))


def test_reno_additive_increase_one_mss_per_window():
    cc = Reno()
    st = cc.new_state(1, mss=1000)
    st.cwnd[:], st.ssthresh[:] = 20 * MSS, 10 * MSS
    ack(cc, st, 20 * MSS)
    assert st.cwnd[0] == pytest.approx(21 * MSS)


def test_reno_halves_on_loss_and_ecn_with_two_segment_floor():
    cc = Reno()
    st = cc.new_state(2, mss=1000)
    st.cwnd[:] = [20 * MSS, 3 * MSS]
    cc.on_congestion(st, np.array([True, True]), "loss", 0.0)
    assert list(st.cwnd) == [10 * MSS, 2 * MSS]
    assert list(st.ssthresh) == [10 * MSS, 2 * MSS]
    cc.on_congestion(st, np.array([True, False]), "ecn", 0.0)
    assert list(st.cwnd) == [5 * MSS, 2 * MSS]


def test_reno_timeout_resets_to_one_segment():
    cc = Reno()
    st = cc.new_state(1, mss=1000)
    st.cwnd[:] = 40 * MSS
    cc.on_timeout(st, np.array([True]), 0.0)
    assert st.cwnd[0] == MSS and st.ssthresh[0] == 20 * MSS


PUBLIC_F = {"slope": 4.0, "intercept": 0.25}  # the hook's arithmetic, checked with the public MLTCP-Reno's F


def mltcp_at_ratio(r, **kw):
    """An MLTCP-Reno flow that has learned 100 kB iterations and is r of the way through one."""
    cc = MLTCPReno(**{**PUBLIC_F, **kw})
    st = cc.new_state(1, mss=1000)
    ack(cc, st, 100_000, now=0.0)  # first iteration
    ack(cc, st, 100_000 * r or 1e-9, now=0.5)  # idle 0.5 s > min_idle: a new iteration
    return cc, st


@pytest.mark.parametrize("r", [0.0, 0.5, 1.0])
def test_mltcp_reno_scales_additive_increase_by_F(r):
    cc, st = mltcp_at_ratio(r)
    assert st.tracker.bytes_ratio[0] == pytest.approx(r, abs=1e-6)
    st.cwnd[:], st.ssthresh[:] = 20 * MSS, 10 * MSS
    cc.on_ack(st, np.array([20 * MSS]), RTT, 0.5)
    r_after = (100_000 * r + 20 * MSS) / 100_000
    F = 4.0 * min(r_after, 1.0) + 0.25
    assert st.cwnd[0] == pytest.approx(20 * MSS + F * MSS)


def test_mltcp_decrease_unchanged_by_default_and_scaled_when_asked():
    cc, st = mltcp_at_ratio(1.0)
    st.cwnd[:] = 20 * MSS
    cc.on_congestion(st, np.array([True]), "loss", 1.0)
    assert st.cwnd[0] == 10 * MSS
    cc, st = mltcp_at_ratio(1.0, scale_decrease=True)
    st.cwnd[:] = 20 * MSS
    cc.on_congestion(st, np.array([True]), "loss", 1.0)
    assert st.cwnd[0] == pytest.approx(20 * MSS * (1 - 0.2))  # r = 1 removes 0.8 - 0.6 = 0.2


def test_custom_aggressiveness_function():
    cc, st = mltcp_at_ratio(0.5, aggressiveness=lambda r: np.full_like(np.asarray(r, float), 3.0))
    st.cwnd[:], st.ssthresh[:] = 10 * MSS, 5 * MSS
    cc.on_ack(st, np.array([10 * MSS]), RTT, 0.6)
    assert st.cwnd[0] == pytest.approx(13 * MSS)
    assert Linear(2, 1)(0.5) == 2.0


def test_cubic_k_and_window_curve():
    cc = Cubic()
    st = cc.new_state(1, mss=1000)
    st.cwnd[:] = 100 * MSS
    cc.on_congestion(st, np.array([True]), "loss", 0.0)
    assert st.cwnd[0] == pytest.approx(70 * MSS)  # beta = 0.7
    assert st.ca.w_max[0] == pytest.approx(100.0)
    ack(cc, st, MSS, now=1.0)  # epoch starts at t = 1 s
    K = math.cbrt((100 - 70) / 0.4)
    assert st.ca.k[0] == pytest.approx(K)
    # W(t) = C (t - K)^3 + W_max; at t = K the curve is back at W_max
    assert cc.w_cubic(st, np.array([K]))[0] == pytest.approx(100.0)
    assert cc.w_cubic(st, np.array([0.0]))[0] == pytest.approx(70.0)


def test_cubic_growth_follows_target_per_ack():
    cc = Cubic()
    st = cc.new_state(1, mss=1000)
    st.cwnd[:] = 100 * MSS
    cc.on_congestion(st, np.array([True]), "loss", 0.0)
    ack(cc, st, MSS, now=0.0)  # epoch starts
    seg = st.cwnd[0] / MSS
    t = 2.0
    target = min(max(0.4 * (t + RTT[0] - st.ca.k[0]) ** 3 + 100.0, seg), 1.5 * seg)
    w_est = st.ca.w_est[0] + (3 * 0.3 / 1.7) * 1 / seg
    ack(cc, st, MSS, now=t)
    expected = max(seg + (target - seg) / seg, w_est)
    assert st.cwnd[0] / MSS == pytest.approx(expected)


def test_cubic_grows_at_least_5_percent_per_rtt_until_the_first_loss():
    """Linux bictcp_update: with no loss yet (last_max_cwnd == 0) cnt <= 20, one segment per 20
    acked; after a loss the curve alone; a timeout resets CUBIC (bictcp_reset) and the floor is back."""
    cc = Cubic()
    st = cc.new_state(1, mss=1000)
    st.cwnd[:] = 100 * MSS
    st.ssthresh[:] = 100 * MSS  # avoidance, no loss yet
    ack(cc, st, MSS, now=0.0)  # epoch starts (W_max = cwnd: the curve is flat)
    before = st.cwnd[0]
    ack(cc, st, 10 * MSS, now=1e-3)
    assert st.cwnd[0] - before == pytest.approx(10 * MSS / 20, rel=1e-3)
    cc.on_congestion(st, np.array([True]), "loss", 1.0)
    ack(cc, st, MSS, now=1.0)
    before = st.cwnd[0]
    ack(cc, st, 10 * MSS, now=1.001)  # near the start of the concave curve: far below 1/20
    assert st.cwnd[0] - before < 10 * MSS / 20 / 2
    cc.on_timeout(st, np.array([True]), 2.0)
    assert st.ca.w_last_max[0] == 0.0 and st.ca.w_max[0] == 0.0 and st.cwnd[0] == MSS


def test_cubic_fast_convergence_lowers_w_max():
    cc = Cubic()
    st = cc.new_state(1, mss=1000)
    st.cwnd[:] = 100 * MSS
    cc.on_congestion(st, np.array([True]), "loss", 0.0)  # w_last_max = 100
    st.cwnd[:] = 80 * MSS
    cc.on_congestion(st, np.array([True]), "loss", 1.0)  # 80 < 100: W_max = 80 * 1.7 / 2
    assert st.ca.w_max[0] == pytest.approx(80 * 1.7 / 2)
    # RFC 9438 / Linux keep one W_max: the next loss compares with the lowered 68, not with 80
    # (RFC 8312's W_last_max), so a loss at 75 is no reason to lower it again
    st.cwnd[:] = 75 * MSS
    cc.on_congestion(st, np.array([True]), "loss", 2.0)
    assert st.ca.w_max[0] == pytest.approx(75.0)
    st.cwnd[:] = 70 * MSS
    cc.on_congestion(st, np.array([True]), "loss", 3.0)  # 70 < 75: lowered
    assert st.ca.w_max[0] == pytest.approx(70 * 1.7 / 2)


def test_dcqcn_cnp_alpha_and_rate_sequence():
    line = 1e9
    cc = Dcqcn(line_rate=line, g=1 / 256, rai=5e6, rhai=10e6, min_rate=1e6, timer=1e-3, alpha_interval=1e-6)
    st = cc.new_state(1)
    assert st.rate[0] == line and st.ca.alpha[0] == 1.0
    cc.on_cnp(st, np.array([True]), 0.0)
    assert st.ca.alpha[0] == pytest.approx(1.0)  # (1-g)*1 + g
    assert st.rate[0] == pytest.approx(line / 2)  # Rc (1 - alpha/2)
    assert st.ca.target[0] == line
    # 100 alpha intervals without a CNP: alpha = (1-g)^100
    cc.on_timer(st, 100e-6)
    assert st.ca.alpha[0] == pytest.approx((1 - 1 / 256) ** 100)
    a = st.ca.alpha[0]
    cc.on_cnp(st, np.array([True]), 100e-6)
    assert st.ca.alpha[0] == pytest.approx((1 - 1 / 256) * a + 1 / 256)
    assert st.rate[0] == pytest.approx(line / 2 * (1 - st.ca.alpha[0] / 2))


def test_dcqcn_fast_recovery_then_additive_then_hyper():
    cc = Dcqcn(
        line_rate=100.0,
        rai=1.0,
        rhai=4.0,
        min_rate=1.0,
        timer=1.0,
        byte_counter=10.0,
        fast_recovery_steps=5,
        alpha_interval=1e9,
    )
    st = cc.new_state(1)
    st.rate[:], st.ca.target[:] = 20.0, 60.0
    rc, rt = 20.0, 60.0
    for i in range(1, 8):  # timer expiries only: T = 1..7, B = 0
        cc.on_timer(st, float(i))
        if i >= 5:
            rt += 1.0  # additive increase once T reaches F
        rc = (rc + rt) / 2
        assert st.ca.target[0] == pytest.approx(rt) and st.rate[0] == pytest.approx(rc)
    for _ in range(5):  # byte counter catches up: B = 5 -> hyper increase
        cc.on_sent(st, np.array([10.0]), 8.0)
    assert st.ca.b_count[0] == 5
    assert st.ca.target[0] > rt + 4.0 - 1e-9


def test_mltcp_dcqcn_scales_rate_increase():
    from mltcp.cc import MLTCPDcqcn

    cc = MLTCPDcqcn(
        line_rate=1000.0, rai=10.0, rhai=10.0, timer=1.0, fast_recovery_steps=0, alpha_interval=1e9, **PUBLIC_F
    )
    st = cc.new_state(1)
    cc.on_ack(st, np.array([100.0]), RTT, 0.0)
    cc.on_ack(st, np.array([50.0]), RTT, 1.0)  # r = 0.5 -> F = 2.25
    st.rate[:], st.ca.target[:] = 100.0, 100.0
    cc.on_timer(st, 5.0)
    assert st.ca.target[0] == pytest.approx(100.0 + 2.25 * 10.0)


def test_make_cc_names_and_errors():
    for n in ALGORITHMS:
        assert make_cc(n).name == n
    with pytest.raises(ValueError, match="unknown congestion control"):
        make_cc("vegas")


def test_vectorised_flows_are_independent():
    cc = Reno()
    st = cc.new_state(3, mss=1000)
    st.ssthresh[:] = 5 * MSS
    cc.on_ack(st, np.array([MSS, 0.0, 10 * MSS]), np.full(3, 1e-3), 0.0)
    assert st.cwnd[1] == 10 * MSS
    assert st.cwnd[0] == pytest.approx(10 * MSS + MSS * MSS / (10 * MSS))
    assert st.cwnd[2] == pytest.approx(11 * MSS)


def test_params_are_declared_on_the_class_with_units_and_scenario_keys():
    from mltcp.cc import Dcqcn, MLTCPCubic

    assert Reno.params["beta"].default == 0.5
    f = Dcqcn.scenario_fields()
    assert f["rai_mbps"].name == "rai" and f["rai_mbps"].from_scenario(40) == pytest.approx(40e6 / 8)
    assert "line_rate" not in {p.key for p in f.values()}  # set by the caller, not a file
    assert set(Cubic.params) <= set(MLTCPCubic.params) and "slope" in MLTCPCubic.params
    with pytest.raises(TypeError, match="unknown parameter"):
        Reno(bogus=1)
    with pytest.raises(ValueError, match="positive"):
        f["timer_us"].from_scenario(-1)


def test_state_is_typed_and_owned_by_the_algorithm():
    st = Cubic().new_state(2, mss=1000)
    assert type(st.ca).__name__ == "CubicState" and np.isnan(st.ca.epoch).all()
    assert not hasattr(st, "w_max")
    assert Reno().new_state(1).tracker is None and MLTCPReno().new_state(1).tracker is not None


def test_cong_avoid_is_separate_from_pkts_acked():
    cc = MLTCPReno()
    st = cc.new_state(1, mss=1000)
    cc.pkts_acked(st, np.array([5000.0]), RTT, 0.0)  # tracker counts it, the window does not grow
    assert st.cwnd[0] == 10 * MSS and st.tracker.bytes_cur[0] == 5000
    cc.cong_avoid(st, np.array([5000.0]), 0.0)
    assert st.cwnd[0] == 15 * MSS


def test_tx_start_restart_after_idle_and_cubic_epoch_shift():
    from mltcp.cc import TX_START

    cc = Cubic()
    st = cc.new_state(1, mss=1000)
    st.cwnd[:], st.ssthresh[:] = 80 * MSS, 10 * MSS
    st.ca.epoch[:] = 1.0
    done = cc.cwnd_event(st, TX_START, 3.0, idle=0.5, rto=0.2)  # 2.5 RTOs idle: halved twice
    assert done[0] and st.cwnd[0] == 20 * MSS and st.ssthresh[0] == 60 * MSS
    assert st.ca.epoch[0] == 1.5  # the idle time does not count
    st.cwnd[:] = 80 * MSS
    assert not cc.cwnd_event(st, TX_START, 3.0, idle=0.1, rto=0.2)[0] and st.cwnd[0] == 80 * MSS
    assert not cc.cwnd_event(st, TX_START, 3.0, idle=1.0, rto=0.2, restart=False)[0]
    st.cwnd[:] = 12 * MSS
    cc.cwnd_event(st, TX_START, 9.0, idle=5.0, rto=0.2)  # never below the initial window
    assert st.cwnd[0] == 10 * MSS


# ---- CUBIC slow-start exit: HyStart (Linux / ns-3) and HyStart++ (RFC 9406) ----------------------


def _ss_ack(cc, st, nbytes, rtt, now):
    cc.on_ack(st, np.array([float(nbytes)]), np.array([rtt]), now)


def test_hystart_ack_train_ends_slow_start_at_train_fraction_of_min_rtt():
    for train in (0.5, 1.0):
        cc = Cubic(hystart_train=train)
        st = cc.new_state(1, mss=MSS)
        st.cwnd[:] = 100 * MSS  # one round = 100 ACKs = 2 ms of train
        t, dmin = 1.0, 400e-6
        _ss_ack(cc, st, MSS, dmin, t)  # starts the round (train start)
        while st.ssthresh[0] == np.inf:
            t += 20e-6  # ACKs 20 us apart: one train
            _ss_ack(cc, st, MSS, dmin, t)
            assert t < 1.01
        assert st.ca.hs_found[0] == 1.0 and 0 <= st.cwnd[0] - st.ssthresh[0] < 0.1 * MSS  # exit: ssthresh = cwnd
        assert t - 1.0 == pytest.approx(train * dmin, abs=21e-6)
        before = st.cwnd[0]
        _ss_ack(cc, st, MSS, dmin, t + 20e-6)  # avoidance now: far less than one MSS per ACK
        assert st.cwnd[0] - before < 0.5 * MSS


def test_hystart_sees_acks_that_do_not_grow_the_window():
    """A NIC-limited flow in slow start is not cwnd-limited, so its callers skip ``cong_avoid``; its
    ACK train must still end slow start (Linux runs hystart_update from bictcp_acked, ns-3 from
    TcpCubic::PktsAcked, on every ACK). Before, HyStart ran inside cong_avoid and missed such trains:
    in ns3-dumbbell-100m the first job left slow start at 97 segments instead of near the BDP."""
    cc = Cubic(hystart_train=1.0)
    st = cc.new_state(1, mss=MSS)
    st.cwnd[:] = 100 * MSS
    t, dmin = 1.0, 400e-6
    cc.pkts_acked(st, np.array([MSS]), np.array([dmin]), t)
    while st.ssthresh[0] == np.inf:
        t += 20e-6
        cc.pkts_acked(st, np.array([MSS]), np.array([dmin]), t)
        assert t < 1.01
    assert t - 1.0 == pytest.approx(dmin, abs=21e-6)
    assert st.cwnd[0] == 100 * MSS and st.ssthresh[0] == 100 * MSS  # exit, and no growth without cong_avoid


@pytest.mark.parametrize("rounds, train", [(0, 0.5), (1, 1.0)])
def test_hystart_rounds_as_linux_and_ns3_count_them(rounds, train):
    """Linux (rounds from 16 segments, train 1/2 min RTT) and ns-3 3.44 (rounds from the first ACK,
    checked before the next starts, train 1 min RTT) both leave slow start at the second burst after
    16 segments at a sub-millisecond RTT: the idle gap between bursts (ACKs < 2 ms apart) is inside
    the train. ns-3, traced at 1 Gb/s, 415 us RTT, ACKs 12 us apart: ssthresh 20 (docs/ns3.md).
    Rounds that start at a burst's first ACK and reset before the checks ended it at about 40."""
    cc = Cubic(hystart_train=train, hystart_rounds=rounds)
    st = cc.new_state(1, mss=MSS)
    rtt, spacing, t0 = 415e-6, 12e-6, 1.0
    burst_start, sent_in_burst = t0, 10  # the initial window's ACKs, then one burst per RTT
    while st.ssthresh[0] == np.inf:
        nxt = 0
        for k in range(sent_in_burst):
            _ss_ack(cc, st, MSS, rtt, burst_start + k * spacing)
            nxt += 2  # slow start: two segments out per ACK
            if st.ssthresh[0] != np.inf:
                break
        burst_start += rtt
        sent_in_burst = nxt
        assert burst_start < t0 + 10 * rtt
    assert 18 * MSS <= st.ssthresh[0] <= 22 * MSS, st.ssthresh[0] / MSS
    with pytest.raises(ValueError, match="hystart_rounds"):
        Cubic(hystart_rounds=2).kernel_params()


def test_hystart_delay_rule_and_low_window():
    def run(rtts, cwnd_seg=20):
        """First ACK: min RTT 1 ms; then ACKs 3 ms apart (no train), the second one ending the round."""
        cc = Cubic()
        st = cc.new_state(1, mss=MSS)
        st.cwnd[:] = cwnd_seg * MSS
        _ss_ack(cc, st, 1, 1e-3, 1.0)
        _ss_ack(cc, st, cwnd_seg * MSS, rtts[0], 1.003)  # the first round is acknowledged
        for n, r in enumerate(rtts[1:]):
            _ss_ack(cc, st, 1, r, 1.006 + 3e-3 * n)
        return st

    st = run([50e-3] * 12, cwnd_seg=6)  # below 16 segments: no exit however late
    assert st.ssthresh[0] == np.inf
    st = run([4.9e-3] * 12)  # threshold clamp(1 ms / 8) = 4 ms: 4.9 < 5
    assert st.ssthresh[0] == np.inf
    st = run([5.5e-3] * 7)  # 7 samples: not yet
    assert st.ssthresh[0] == np.inf
    st = run([5.5e-3] * 9)  # 8 samples over 1 + 4 ms: exit
    assert 0 <= st.cwnd[0] - st.ssthresh[0] < 0.1 * MSS and st.ca.hs_found[0] == 1.0


def test_hystart_off_is_plain_slow_start_and_timeout_rearms():
    cc = Cubic(hystart=0)
    st = cc.new_state(1, mss=MSS)
    st.cwnd[:] = 20 * MSS
    for n in range(100):
        _ss_ack(cc, st, MSS, 400e-6, 1.0 + 20e-6 * n)
    assert st.ssthresh[0] == np.inf and st.cwnd[0] == 120 * MSS
    cc = Cubic()
    st = cc.new_state(1, mss=MSS)
    st.cwnd[:] = 20 * MSS
    for n in range(40):
        _ss_ack(cc, st, MSS, 400e-6, 1.0 + 20e-6 * n)
    assert st.ca.hs_found[0] == 1.0
    cc.on_timeout(st, np.array([True]), 2.0)
    assert st.ca.hs_found[0] == 0.0 and st.ca.delay_min[0] == 0.0  # HyStart runs again after an RTO
    with pytest.raises(ValueError, match="hystart"):
        Cubic(hystart=3)


def test_hystart_plus_plus_conservative_slow_start_then_avoidance():
    cc = Cubic(hystart=2)
    st = cc.new_state(1, mss=MSS)
    st.cwnd[:] = 20 * MSS
    t = 1.0

    def round_of(rtt, n=10):
        nonlocal t
        end = st.ca.hs_end[0]
        while st.ca.hs_acked[0] < end or st.ca.hs_acked[0] == 0.0:
            t += 1e-3
            _ss_ack(cc, st, MSS, rtt, t)
        for _ in range(n - 1):  # the rest of the round's samples
            if st.ca.hs_acked[0] + MSS >= st.ca.hs_end[0]:
                break
            t += 1e-3
            _ss_ack(cc, st, MSS, rtt, t)

    round_of(1e-3)
    round_of(1e-3)
    assert st.ca.hs_css[0] == -1.0 and st.ssthresh[0] == np.inf
    round_of(6e-3)  # >= 1 ms + 4 ms over the last round: CSS
    assert st.ca.hs_css[0] >= 0.0 and st.ca.hs_css_base[0] == pytest.approx(6e-3)
    before = st.cwnd[0]
    t += 1e-3
    _ss_ack(cc, st, 4 * MSS, 6e-3, t)
    assert st.cwnd[0] - before == pytest.approx(MSS)  # growth divided by 4
    for _ in range(6):
        round_of(6e-3)
        if st.ssthresh[0] != np.inf:
            break
    # CSS_ROUNDS in CSS, then avoidance (no loss yet: Linux's floor of 1 segment per 20 acked, cnt <= 20)
    assert 0 <= st.cwnd[0] - st.ssthresh[0] < 0.6 * MSS and st.ca.hs_found[0] == 1.0
    # a spurious delay increase: the RTT falls below the baseline in CSS -> back to slow start
    cc = Cubic(hystart=2)
    st = cc.new_state(1, mss=MSS)
    st.cwnd[:] = 20 * MSS
    t = 1.0
    round_of(1e-3)
    round_of(6e-3)
    assert st.ca.hs_css[0] >= 0.0
    t += 1e-3
    _ss_ack(cc, st, MSS, 2e-3, t)
    assert st.ca.hs_css[0] == -1.0 and st.ssthresh[0] == np.inf


# ---- DCTCP (RFC 8257) ---------------------------------------------------------------------------


def test_dctcp_alpha_is_the_marked_fraction_averaged_once_per_window():
    from mltcp.cc import Dctcp

    cc = Dctcp()
    st = cc.new_state(1, mss=1000)
    assert st.ca.alpha[0] == 1.0  # Linux dctcp_alpha_on_init
    rtt = np.array([1e-3])
    cc.in_ack_event(st, np.array([10 * MSS]), np.array([0.0]), rtt, 0.0)  # opens the first window
    cc.in_ack_event(st, np.array([10 * MSS]), np.array([5 * MSS]), rtt, 0.5e-3)
    assert st.ca.alpha[0] == 1.0  # the window has not ended: no update yet
    cc.in_ack_event(st, np.array([20 * MSS]), np.array([0.0]), rtt, 1.0e-3)
    # 5 of 40 segments marked over the window: alpha = 15/16 + 1/16 x 1/8
    assert st.ca.alpha[0] == pytest.approx(15 / 16 + 1 / 16 * 5 / 40)
    for k in range(200):  # no marks for many windows: alpha decays to 0
        cc.in_ack_event(st, np.array([10 * MSS]), np.array([0.0]), rtt, 2e-3 + k * 1e-3)
    assert st.ca.alpha[0] < 1e-4


def test_dctcp_cuts_by_alpha_over_two_on_ecn_and_halves_on_loss_and_timeout():
    from mltcp.cc import Dctcp

    cc = Dctcp()
    st = cc.new_state(3, mss=1000)
    st.cwnd[:] = 40 * MSS
    st.ca.alpha[:] = [0.1, 1.0, 0.1]
    cc.on_congestion(st, np.array([True, True, False]), "ecn", 0.0)
    assert list(st.cwnd) == pytest.approx([38 * MSS, 20 * MSS, 40 * MSS])
    cc.on_congestion(st, np.array([True, False, False]), "loss", 0.0)
    assert st.cwnd[0] == pytest.approx(19 * MSS)
    cc.on_timeout(st, np.array([False, False, True]), 0.0)
    assert st.cwnd[2] == MSS and st.ssthresh[2] == 20 * MSS
    st.cwnd[:] = 10 * MSS
    st.ssthresh[:] = 5 * MSS
    cc.on_ack(st, np.array([10 * MSS] * 3), np.array([1e-3] * 3), 0.0)  # Reno's additive increase
    assert st.cwnd[0] == pytest.approx(11 * MSS)


def test_mltcp_dctcp_is_dctcp_plus_the_hook():
    from mltcp.cc import MLTCPDctcp

    cc = MLTCPDctcp(scale_decrease=True, **PUBLIC_F)
    st = cc.new_state(1, mss=1000)
    ack(cc, st, 100_000, now=0.0)  # first iteration learns 100 kB
    ack(cc, st, 50_000, now=0.5)  # idle gap: the next one, half sent
    st.cwnd[:], st.ssthresh[:] = 20 * MSS, 10 * MSS
    ack(cc, st, 20 * MSS, now=0.6)  # r = 0.7: F = 4 x 0.7 + 0.25
    assert st.cwnd[0] == pytest.approx(20 * MSS + (4 * 0.7 + 0.25) * MSS)
    st.ca.alpha[:] = 0.5
    w = st.cwnd[0]
    cc.on_congestion(st, np.array([True]), "ecn", 0.6)
    # the ECN cut alpha / 2, scaled by the decrease's (0.8 - 0.6 r) / 0.5 at r = 0.7
    r = st.tracker.bytes_ratio[0]
    assert r == pytest.approx(0.7)
    assert st.cwnd[0] == pytest.approx(w * (1 - 0.25 * (0.8 - 0.6 * r) / 0.5))
