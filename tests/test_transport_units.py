"""Pure parts of the userspace transport: wire codec, RTO estimator, reassembly, scoreboard."""

import random

import pytest

from mltcp.traffic.transport import pattern, wire
from mltcp.traffic.transport.reassembly import Reassembly
from mltcp.traffic.transport.rtt import RttEstimator
from mltcp.traffic.transport.scoreboard import Scoreboard


def test_wire_roundtrip_with_sacks():
    h = wire.encode(
        wire.FLAG_ACK | wire.FLAG_ECE,
        7,
        123456,
        40000,
        0xDEADBEEF,
        0,
        10_000_000_000,
        99,
        42,
        0,
        0,
        ce_count=3,
        sacks=[(10_000_002_848, 10_000_005_696), (10_000_010_000, 10_000_011_424)],
    )
    p = wire.decode(h)
    assert (p.flags, p.job_id, p.iteration, p.ratio_q16, p.conn_id) == (0x9, 7, 123456, 40000, 0xDEADBEEF)
    assert p.ack == 10_000_000_000 and p.tsval == 99 and p.tsecr == 42 and p.ce_count == 3
    assert p.sacks == ((10_000_002_848, 10_000_005_696), (10_000_010_000, 10_000_011_424))
    assert p.payload_off == len(h) == wire.FIXED_LEN + 16


def test_wire_shim_matches_contract_and_scapy_layer():
    from mltcp.traffic.header import MLTCP

    h = wire.encode(wire.FLAG_ITER_START, 513, 9, wire.ratio_q16(0.5), 1, 2848, 0, 5, 0, 4, wire.T_DATA)
    s = MLTCP(h[: wire.SHIM_LEN])
    assert (s.version, int(s.flags), s.job_id, s.iteration, s.bytes_ratio) == (1, 0x4, 513, 9, 32768)
    assert h[0] >> 4 == 1 and h[0] & 0xF == wire.FLAG_ITER_START


@pytest.mark.parametrize("bad", [b"", b"\x10" * 20, b"\x20" + bytes(47)])
def test_wire_rejects_short_or_wrong_version(bad):
    with pytest.raises(wire.WireError):
        wire.decode(bad)


def test_wire_rejects_length_mismatch():
    h = wire.encode(0, 1, 1, 0, 1, 0, 0, 0, 0, 10, wire.T_DATA)
    with pytest.raises(wire.WireError):
        wire.decode(h + b"x" * 9)
    assert wire.decode(h + b"x" * 10).length == 10


def test_ratio_q16_clamps():
    assert wire.ratio_q16(0) == 0 and wire.ratio_q16(1) == 0xFFFF and wire.ratio_q16(1.2) == 0xFFFF
    assert wire.ratio_q16(float("nan")) == 0 and wire.ratio_q16(0.25) == round(0.25 * 65535)


def test_rto_rfc6298():
    e = RttEstimator(min_rto=0.2)
    assert e.rto == 1.0  # initial
    e.sample(0.1)
    assert e.srtt == 0.1 and e.rttvar == 0.05 and e.rto == pytest.approx(0.3)
    e.sample(0.1)
    assert e.rttvar == pytest.approx(0.0375) and e.rto == pytest.approx(0.25)
    for _ in range(50):
        e.sample(0.001)
    assert e.rto == 0.2  # clamped to min_rto
    e.backoff()
    e.backoff()
    assert e.rto == pytest.approx(0.8)
    e.sample(0.001)
    assert e.rto == 0.2  # a new sample clears the backoff
    with pytest.raises(ValueError):
        RttEstimator(min_rto=0)


def _segments(total, mss):
    return [(s, pattern.chunk(s, min(mss, total - s))) for s in range(0, total, mss)]


@pytest.mark.parametrize("seed", range(5))
def test_reassembly_delivers_in_order_despite_chaos(seed):
    rng = random.Random(seed)
    segs = _segments(200_000, 1000)
    arrivals = segs + rng.sample(segs, 30)  # duplicates
    rng.shuffle(arrivals)
    # overlapping retransmissions with different boundaries
    arrivals += [(s + 500, pattern.chunk(s + 500, 1000)) for s, _ in rng.sample(segs[:-1], 10)]
    ra = Reassembly()
    out = bytearray()
    for s, d in arrivals:
        delivered, _dup = ra.add(s, d)
        for c in delivered:
            out += c
    assert ra.rcv_nxt == 200_000 and bytes(out) == pattern.chunk(0, 0) + b"".join(d for _, d in segs)
    assert ra.held_bytes == 0 and ra.sack_blocks() == []


def test_reassembly_sack_blocks_latest_first_and_duplicates():
    ra = Reassembly()
    assert ra.add(0, b"a" * 10) == ([b"a" * 10], False)
    ra.add(20, b"b" * 10)
    ra.add(50, b"c" * 10)
    ra.add(30, b"d" * 10)  # extends the [20, 30) block
    assert ra.sack_blocks() == [(20, 40), (50, 60)]
    ra.add(50, b"c" * 10)
    assert ra.sack_blocks()[0] == (50, 60)
    assert ra.add(0, b"a" * 10) == ([], True)
    out, dup = ra.add(10, b"e" * 10)
    assert not dup and b"".join(out) == b"e" * 10 + b"b" * 10 + b"d" * 10 and ra.rcv_nxt == 40
    assert ra.sack_blocks() == [(50, 60)]


def _sent_board(n, mss=100, t0=0.0, dt=0.001):
    sb = Scoreboard()
    segs = []
    for i in range(n):
        seg = sb.new_segment(mss, 0, i == 0)
        sb.sent(seg, t0 + i * dt)
        segs.append(seg)
    return sb, segs


def test_scoreboard_cumulative_ack_and_sack():
    sb, _ = _sent_board(10)
    r = sb.on_ack(300, ())
    assert r.delivered == 300 and r.advanced and sb.snd_una == 300 and sb.inflight_bytes == 700
    r = sb.on_ack(300, [(500, 700)], reo_wnd=1.0)  # wide reordering window: no loss yet
    assert r.delivered == 200 and not r.advanced and sb.inflight_bytes == 500 and r.lost == 0
    r = sb.on_ack(300, [(500, 700)], reo_wnd=1.0)  # same SACK again: nothing new
    assert r.delivered == 0
    r = sb.on_ack(800, ())  # SACKed bytes are not counted twice
    assert r.delivered == 300 and sb.snd_una == 800


def test_scoreboard_rack_marks_earlier_segments_lost():
    sb, segs = _sent_board(10)
    r = sb.on_ack(200, [(400, 600)], echo=None, reo_wnd=0.0)
    # segments 200 and 300 were sent before 400/500 and are not delivered: lost
    assert r.lost == 2 and sb.next_lost().seq == 200
    sb.pop_lost()
    assert sb.next_lost().seq == 300
    # retransmit 200 at t=1; a later SACK of 200 clears it, 300 still pending
    sb.sent(segs[2], 1.0)
    assert sb.retransmits == 1
    r = sb.on_ack(200, [(200, 300), (400, 600)], echo=1.0)
    assert r.delivered == 100


def test_scoreboard_reordering_window_tolerates_small_reorder():
    sb, _ = _sent_board(10, dt=0.001)
    r = sb.on_ack(200, [(300, 400)], reo_wnd=0.005)
    assert r.lost == 0


def test_scoreboard_three_dupacks():
    sb = Scoreboard()
    for i in range(6):
        sb.sent(sb.new_segment(100, 0, False), 0.0)  # all at the same time: RACK cannot decide
    sb.on_ack(100, ())
    for k in range(2):
        assert sb.on_ack(100, ()).lost == 0
    assert sb.on_ack(100, ()).lost == 1 and sb.next_lost().seq == 100


def test_scoreboard_rto_marks_all_in_flight():
    sb, _ = _sent_board(5)
    sb.on_ack(100, [(300, 400)], reo_wnd=1.0)
    assert sb.on_rto() == 3  # 100, 200 and 400 were in flight
    assert sb.inflight_bytes == 0 and sb.next_lost().seq == 100
