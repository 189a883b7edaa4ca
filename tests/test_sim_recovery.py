"""Loss recovery in the fast engine: which losses fast recovery repairs and which wait for a timer
(the RTO, or Linux's tail-loss probe), and what a timeout does to the run."""

import numpy as np
import pytest

from mltcp.scenario import ScenarioError, from_dict
from mltcp.sim.engine import simulate
from mltcp.sim.recovery import _arm_timer, _split_loss
from mltcp.sim.state import LR_HOLE, LR_LEN, LR_PROBE, LR_PROBED, LR_RTO_AT, LR_RTX, TLP_EXTRA

MSS = 1448.0


def split(lo, lo_rtx=0.0, a=0.0, inflight=0.0, to_send=0.0, rtx=0.0, rack=False):
    lr = np.zeros((1, LR_LEN))
    lr[0, LR_RTX] = rtx
    return _split_loss(lr, 0, a, lo, lo_rtx, inflight, to_send, MSS, rack)


def test_a_loss_with_three_later_segments_is_repaired_by_fast_recovery():
    assert split(MSS, inflight=3 * MSS) == (MSS, 0.0)
    # one later segment comes back, limited transmit sends new data: enough duplicate ACKs
    assert split(MSS, inflight=MSS, to_send=10 * MSS) == (MSS, 0.0)


def test_a_tail_loss_waits_for_the_timer_in_ns3_mode():
    assert split(MSS) == (0.0, MSS)  # nothing sent after it
    assert split(MSS, inflight=MSS, to_send=0.5 * MSS) == (0.0, MSS)  # two duplicate ACKs at most
    # retransmissions still queued are not new data: they send no segment above the loss
    assert split(MSS, inflight=MSS, to_send=4 * MSS, rtx=4 * MSS) == (0.0, MSS)


def test_a_lost_retransmission_waits_for_the_rto_in_ns3_mode_but_rack_finds_it():
    assert split(2 * MSS, lo_rtx=MSS, inflight=20 * MSS, to_send=100 * MSS) == (MSS, MSS)
    assert split(2 * MSS, lo_rtx=MSS, inflight=20 * MSS, rack=True) == (2 * MSS, 0.0)
    # RACK too needs a later segment acknowledged; without one the probe (or RTO) finds the loss
    assert split(MSS, lo_rtx=MSS, rack=True) == (0.0, MSS)
    assert split(MSS, inflight=MSS, rack=True) == (MSS, 0.0)


def test_rack_counts_segments_a_partial_last_segment_reveals_the_loss_before_it():
    # the iteration's last 752 bytes sent after a lost full segment: delivered in the same slot, or
    # still in flight, their SACK marks it lost (Linux RACK), no timer; sent before it: nothing does
    assert split(MSS, a=752.0, rack=True) == (MSS, 0.0)
    assert split(MSS, inflight=752.0, rack=True) == (MSS, 0.0)
    assert split(MSS, a=MSS, rack=True) == (0.0, MSS)  # one whole segment: before or after, even odds
    assert split(752.0, a=MSS, rack=True) == (0.0, 752.0)  # the lost tail itself: nothing after it
    assert split(MSS, a=752.0) == (0.0, MSS)  # ns-3: a duplicate ACK, not three


def shallow(recovery, iterations=12):
    return from_dict(
        {
            "name": "shallow",
            "iterations": iterations,
            "warmup_iterations": 2,
            "network": {"loss_recovery": recovery},
            "links": [{"name": "bn", "rate_gbps": 1.0, "delay_us": 200, "buffer_pkts": 17}],
            "jobs": [
                {"name": f"J{i}", "compute_ms": 20, "bytes": 2_500_000, "path": ["bn"], "start_offset_ms": i}
                for i in range(2)
            ],
        },
        "t.toml",
    )


@pytest.mark.parametrize("cc", ["reno", "cubic"])
def test_timeouts_cost_the_rto_and_bytes_are_still_conserved(cc):
    sc = shallow("ns3")
    r = simulate(sc, cc)
    assert r.timeouts >= 1
    slow = [x for x in r.records if x.comm_duration >= sc.min_rto_s]
    assert 1 <= len(slow) <= r.timeouts  # an iteration that timed out waited at least the RTO
    assert r.bytes_acked == pytest.approx(sum(x.bytes for x in r.records), rel=1e-9)
    assert r.bytes_sent == pytest.approx(r.bytes_acked + r.drops * sc.mss, rel=1e-9)
    assert r.bytes_in_flight == pytest.approx(0.0, abs=1e-6)
    # the same run with RACK-TLP: probes repair tail losses, fewer iterations wait for an RTO
    lx = simulate(shallow("linux"), cc)
    assert lx.timeouts < r.timeouts
    assert sum(x.comm_duration >= sc.min_rto_s for x in lx.records) < len(slow)


def test_the_recovery_mode_is_checked():
    with pytest.raises(ScenarioError, match="network.loss_recovery"):
        shallow("bsd")


def test_in_ns3_mode_reno_takes_ssthresh_at_a_timeout_from_the_bytes_in_flight():
    """ns-3's TcpNewReno (RFC 5681 eq. 4): after a tail loss little is in flight, ssthresh = 2 MSS;
    CUBIC (ns-3 TcpCubic, Linux) keeps taking it from cwnd."""
    lows = {}
    for cc in ("reno", "cubic"):
        r = simulate(shallow("ns3"), cc, cwnd_sample_s=1e-4)
        assert r.timeouts >= 1
        lows[cc] = r.cwnd_trace[:, 3:5].min() / MSS  # ssthresh columns of the two flows
    assert lows["reno"] == pytest.approx(2.0) and lows["cubic"] > 4.0, lows


# ---- the timer armed for held bytes: Linux tcp_schedule_loss_probe / RFC 8985 7.2 ------------------
SRTT, RTTVAR, MIN_RTO = 0.4e-3, 0.1e-3, 0.2


def armed(hole, inflight=0.0, lo_rtx=0.0, rack=True, loss_rec=False, probed=0.0, t=1.0):
    lr = np.zeros((1, LR_LEN))
    lr[0, LR_HOLE], lr[0, LR_PROBED], lr[0, LR_RTO_AT] = hole, probed, np.inf
    _arm_timer(lr, 0, t, 0.5e-3, lo_rtx, SRTT, RTTVAR, MIN_RTO, inflight, MSS, rack, loss_rec)
    return lr[0, LR_RTO_AT] - t, lr[0, LR_PROBE] == 1.0


def test_a_lone_partial_tail_segment_gets_a_probe_at_the_rto_time():
    # one packet out (the iteration's last 752 bytes): PTO = 2 srtt + min_rto, later than the RTO, so
    # the timer fires at the RTO's time but as a loss probe (a CWR reduction, not cwnd 1)
    wait, probe = armed(752.0)
    assert probe and wait == pytest.approx(SRTT + MIN_RTO)  # Linux's RTO: srtt + max(4 rttvar, rto_min)
    # more than one packet out: 2 srtt + 2 ms
    wait, probe = armed(752.0, inflight=MSS)
    assert probe and wait == pytest.approx(2 * SRTT + TLP_EXTRA)


def test_no_probe_in_loss_recovery_after_a_probe_or_in_ns3_mode():
    for kw in ({"lo_rtx": MSS}, {"loss_rec": True}, {"probed": 1.0}, {"rack": False}):
        wait, probe = armed(2 * MSS, inflight=4 * MSS, **kw)
        assert not probe, kw
        # the RTO (a lost retransmission's: from about when it was sent, one RTT earlier); ns-3's
        # max(min_rto, srtt + 4 rttvar), Linux's srtt + max(4 rttvar, min_rto)
        rto = MIN_RTO if kw.get("rack") is False else SRTT + MIN_RTO
        assert wait == pytest.approx(rto - (0.5e-3 if "lo_rtx" in kw else 0.0)), kw
