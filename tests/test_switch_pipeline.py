"""Unit tests of the software switch's pipeline model and link model (pure, no I/O)."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from mltcp.emulation.switch import pipeline as pl
from mltcp.emulation.switch.links import EgressQueue, LinkConfig, parse_link_overrides, parse_rate, parse_time
from mltcp.traffic.header import MLTCP

MAC_A = "00:00:00:00:01:01"
MAC_B = "00:00:00:00:02:02"


def ip(s: str) -> int:
    return int.from_bytes(bytes(int(x) for x in s.split(".")), "big")


def mltcp_pkt(job=3, ratio=1234, dst="10.0.2.2", tos=1, payload=b"x" * 100, version=1):
    return bytes(
        Ether(src=MAC_A, dst="00:00:00:00:00:fe")
        / IP(src="10.0.1.1", dst=dst, tos=tos, ttl=64)
        / UDP(sport=40000, dport=9199)
        / MLTCP(version=version, job_id=job, bytes_ratio=ratio, iteration=7)
        / payload
    )


def forwarding_pipeline() -> pl.Pipeline:
    p = pl.Pipeline()
    p.lpm.set(ip("10.0.2.0"), 24, pl.Forward(bytes.fromhex("000000000202"), 2))
    p.lpm.set(ip("10.0.2.128"), 25, pl.Forward(bytes.fromhex("000000000303"), 3))
    p.lpm.set(ip("10.0.0.0"), 8, pl.Forward(bytes.fromhex("000000000404"), 4))
    return p


def test_lpm_longest_prefix_wins_and_default_drops():
    p = forwarding_pipeline()
    assert p.ingress(mltcp_pkt(dst="10.0.2.5"), 1).port == 2
    assert p.ingress(mltcp_pkt(dst="10.0.2.200"), 1).port == 3
    assert p.ingress(mltcp_pkt(dst="10.9.9.9"), 1).port == 4
    assert p.ingress(mltcp_pkt(dst="192.168.0.1"), 1) is None  # default drop
    p.lpm.remove(ip("10.0.2.128"), 25)
    assert p.ingress(mltcp_pkt(dst="10.0.2.200"), 1).port == 2
    p.lpm.default = pl.Forward(bytes(6), 7)
    assert p.ingress(mltcp_pkt(dst="192.168.0.1"), 1).port == 7


def test_lpm_rejects_host_bits_beyond_prefix():
    t = pl.LpmTable()
    with pytest.raises(ValueError):
        t.set(ip("10.0.2.1"), 24, None)
    with pytest.raises(ValueError):
        t.set(0, 33, None)


def test_forward_rewrites_macs_ttl_and_checksum():
    p = forwarding_pipeline()
    raw = mltcp_pkt(dst="10.0.2.5")
    res = p.ingress(raw, 1)
    out = Ether(bytes(res.buf))
    assert out.dst == MAC_B
    assert out.src == "00:00:00:00:00:fe"  # old destination MAC becomes the source
    assert out[IP].ttl == 63
    want = IP(bytes(out[IP]))
    del want.chksum
    assert out[IP].chksum == IP(bytes(want))[IP].chksum
    assert bytes(out[UDP].payload) == bytes(Ether(raw)[UDP].payload)


@pytest.mark.parametrize("ttl,forwarded", [(0, False), (1, False), (2, True)])
def test_ttl_0_and_1_are_dropped_after_the_job_counters(ttl, forwarded):
    """RFC 1812 5.3.1, as mltcp.p4: no forwarding with TTL 0 or 1 (TTL 0 used to leave as 255)."""
    p = forwarding_pipeline()
    raw = bytearray(mltcp_pkt(job=4, dst="10.0.2.5"))
    raw[14 + 8] = ttl
    res = p.ingress(bytes(raw), 1)
    assert (res is not None) == forwarded
    if forwarded:
        assert Ether(bytes(res.buf))[IP].ttl == ttl - 1
    assert p.counters[pl.C_JOB_TX].packets[4] == 1


def test_checksum_with_ipv4_options():
    p = forwarding_pipeline()
    raw = bytes(Ether() / IP(dst="10.0.2.5", options=b"\x01\x01\x01\x00") / UDP(dport=5) / b"hi")
    res = p.ingress(raw, 1)
    out = Ether(bytes(res.buf))
    ref = out[IP].copy()
    ref.chksum = None
    assert out[IP].chksum == IP(bytes(ref)).chksum
    assert pl.ipv4_checksum(bytes(res.buf[14 : 14 + 24])) == out[IP].chksum


def test_job_counters_and_register():
    p = forwarding_pipeline()
    sizes = []
    for i in range(5):
        raw = mltcp_pkt(job=9, ratio=100 * i, payload=b"y" * (10 + i))
        sizes.append(len(raw))
        p.ingress(raw, 1)
    c = p.counters[pl.C_JOB_TX]
    assert c.packets[9] == 5 and c.bytes[9] == sum(sizes)
    assert p.registers[pl.R_JOB_BYTES_RATIO][9] == 400
    assert sum(c.packets) == 5
    # counted even when the route drops the packet, as mltcp.p4 counts before ipv4_lpm
    p.ingress(mltcp_pkt(job=10, dst="192.168.1.1"), 1)
    assert c.packets[10] == 1
    # job ids beyond the counter are forwarded but not recorded
    assert p.ingress(mltcp_pkt(job=5000), 1) is not None
    assert sum(c.packets) == 6


def test_shim_by_source_port_too():
    p = forwarding_pipeline()
    raw = bytes(Ether() / IP(dst="10.0.2.5") / UDP(sport=9199, dport=5555) / bytes(MLTCP(job_id=4, bytes_ratio=7)))
    assert p.ingress(raw, 1) is not None
    assert p.counters[pl.C_JOB_TX].packets[4] == 1


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(mltcp_pkt(version=2), id="bad-version"),
        pytest.param(mltcp_pkt()[: 14 + 20 + 8 + 11], id="truncated-shim"),
        pytest.param(mltcp_pkt()[: 14 + 20 + 5], id="truncated-udp"),
        pytest.param(mltcp_pkt()[: 14 + 12], id="truncated-ipv4"),
        pytest.param(bytes(Ether() / IP(dst="10.0.2.5") / TCP())[: 14 + 20 + 10], id="truncated-tcp"),
        pytest.param(bytes(Ether() / IP(dst="10.0.2.5", ihl=4) / UDP()), id="ihl-below-5"),
        pytest.param(b"\x00" * 10, id="runt"),
    ],
)
def test_parse_errors_are_counted_and_dropped(raw):
    p = forwarding_pipeline()
    assert p.ingress(raw, 1) is None
    assert p.counters[pl.C_PARSE_ERRORS].packets[0] == 1
    assert sum(p.counters[pl.C_JOB_TX].packets) == 0


def test_non_first_fragment_is_not_parsed_beyond_ipv4():
    p = forwarding_pipeline()
    raw = bytes(Ether() / IP(dst="10.0.2.5", proto=17, frag=10) / (b"\x00" * 3))
    assert p.ingress(raw, 1) is not None
    assert p.counters[pl.C_PARSE_ERRORS].packets[0] == 0


def test_non_ipv4_dropped_without_parse_error():
    p = forwarding_pipeline()
    raw = bytes(Ether(type=0x86DD) / (b"\x60" + b"\x00" * 60))
    assert p.ingress(raw, 1) is None
    assert p.counters[pl.C_PARSE_ERRORS].packets[0] == 0


@pytest.mark.parametrize("threshold", [1, 5, 10])
def test_ecn_marking_starts_at_threshold(threshold):
    p = forwarding_pipeline()
    p.ecn_thresholds[2] = threshold
    marked = []
    for depth in range(threshold + 3):
        res = p.ingress(mltcp_pkt(job=2, tos=2), 1)
        marked.append(p.egress(res, depth))
        ipb = bytes(res.buf[14:34])
        if marked[-1]:
            assert ipb[1] & 3 == 3
        assert pl.ipv4_checksum(ipb) == int.from_bytes(ipb[10:12], "big")
    assert marked == [d >= threshold for d in range(threshold + 3)]
    assert p.counters[pl.C_JOB_ECN_MARKS].packets[2] == 3


def test_ecn_only_ect_packets_and_configured_ports():
    p = forwarding_pipeline()
    p.ecn_thresholds[2] = 0
    for tos, want in ((0, False), (1, True), (2, True), (3, False)):
        res = p.ingress(mltcp_pkt(tos=tos), 1)
        assert p.egress(res, 50) is want
    res = p.ingress(mltcp_pkt(dst="10.0.2.200", tos=1), 1)  # port 3: no entry, default off
    assert p.egress(res, 50) is False
    p.ecn_default = 4
    res = p.ingress(mltcp_pkt(dst="10.0.2.200", tos=1), 1)
    assert p.egress(res, 3) is False and p.egress(res, 4) is True


def test_reset_state_clears_everything():
    p = forwarding_pipeline()
    p.ingress(mltcp_pkt(job=1), 1)
    p.ecn_thresholds[2] = 3
    p.reset_state()
    assert sum(p.counters[pl.C_JOB_TX].packets) == 0 and not p.ecn_thresholds
    assert p.ingress(mltcp_pkt(), 1) is None  # routes are gone too


# ---------------------------------------------------------------- link model
def test_parse_units():
    assert parse_rate("100mbit") == 100e6
    assert parse_rate("1gbit") == 1e9
    assert parse_rate("10mbps") == 80e6
    assert parse_rate("unlimited") is None
    assert parse_time("1ms") == pytest.approx(1e-3)
    assert parse_time("250us") == pytest.approx(250e-6)
    assert parse_time("0") == 0
    for bad in ("fast", "10 parsecs", "-3mbit"):
        with pytest.raises(ValueError):
            parse_rate(bad)
    with pytest.raises(ValueError):
        parse_time("1 fortnight")
    cfg = parse_link_overrides("rate=10mbit,delay=2ms,buffer=7,loss=1.5", LinkConfig())
    assert (cfg.rate_bps, cfg.delay_s, cfg.buffer_pkts, cfg.loss_pct) == (10e6, 2e-3, 7, 1.5)
    with pytest.raises(ValueError):
        parse_link_overrides("colour=red", LinkConfig())
    with pytest.raises(ValueError):
        LinkConfig(loss_pct=101)


def test_queue_depth_rate_and_delay():
    q = EgressQueue(LinkConfig(rate_bps=8e6, delay_s=0.5, buffer_pkts=3))  # 1000 B = 1 ms
    # a burst at t=0: first frame starts at once, the others wait
    depths, times = [], []
    for _ in range(5):
        depths.append(q.admit(0.0, 1000))
        if depths[-1] is not None:
            times.append(q.schedule(0.0, 1000))
    assert depths == [0, 0, 1, 2, None]  # waiting frames, not counting the one on the wire
    assert [t[0] for t in times] == pytest.approx([0.501, 0.502, 0.503, 0.504])
    assert q.dropped == 1
    assert q.depth(0.0025) == 1  # frames starting at 1, 2 ms are gone; 3 ms waits
    assert q.depth(0.010) == 0


def test_strict_priority_serves_the_highest_waiting_priority_when_the_line_frees():
    q = EgressQueue(LinkConfig(rate_bps=8e6, delay_s=0.5, buffer_pkts=2))  # 1000 B = 1 ms
    assert q.admit_priority(0.0, 0) == 0
    q.push(0, 1000, "a0", 0.0)
    done, times, item = q.next_frame(0.0)  # the line was free: a0 goes at once
    assert (done, times, item) == (pytest.approx(0.001), [pytest.approx(0.501)], "a0")
    for name in ("a1", "a2"):
        assert q.admit_priority(0.0002, 0) is not None
        q.push(0, 1000, name, 0.0002)
    assert q.admit_priority(0.0003, 0) is None and q.dropped == 1  # priority 0's queue holds 2
    assert q.admit_priority(0.0005, 7) == 2  # depth: every priority's waiting frames
    q.push(7, 1000, "b7", 0.0005)
    assert q.next_frame(0.0009) is None  # a0 still on the line
    order = []
    t = 0.001
    while (nxt := q.next_frame(t)) is not None:
        t, _, item = nxt
        order.append((item, round(t * 1e3, 6)))
    assert order == [("b7", 2.0), ("a1", 3.0), ("a2", 4.0)]  # b7 overtakes the frames that waited longer
    q.push(0, 1000, "late", 0.010)  # an idle line: starts on arrival, not before
    assert q.next_frame(0.010)[0] == pytest.approx(0.011)


def test_unshaped_queue_has_no_depth():
    q = EgressQueue(LinkConfig(rate_bps=None, delay_s=0.0))
    for _ in range(10):
        assert q.admit(1.0, 1500) == 0
        assert q.schedule(1.0, 1500) == [1.0]


def test_impairments_are_seeded_and_near_their_rates():
    def run(seed):
        q = EgressQueue(LinkConfig(loss_pct=10, duplicate_pct=5, reorder_pct=20, reorder_gap_s=1.0, seed=seed))
        return [q.schedule(float(i), 100) for i in range(20000)], q

    a, qa = run(7)
    b, _ = run(7)
    c, _ = run(8)
    assert a == b and a != c
    n = 20000
    assert abs(qa.lost / n - 0.10) < 0.01
    assert abs(qa.duplicated / (n - qa.lost) - 0.05) < 0.01
    assert abs(qa.reordered / (n - qa.lost) - 0.20) < 0.015
    assert sum(len(x) == 2 for x in a) == qa.duplicated
    assert sum(len(x) == 0 for x in a) == qa.lost
    assert sum(1 for i, x in enumerate(a) if x and x[0] == i + 1.0) == qa.reordered


@pytest.mark.parametrize("l4", ["udp", "tcp", "udp-odd"])
def test_complete_l4_checksum_of_offloaded_frames(l4):
    from scapy.layers.inet import in4_chksum

    from mltcp.emulation.switch.dataplane import complete_l4_checksum

    payload = b"q" * (101 if l4 == "udp-odd" else 100)
    seg = UDP(sport=1, dport=2) / payload if l4.startswith("udp") else TCP(sport=1, dport=2, flags="PA") / payload
    good = Ether(bytes(Ether() / IP(src="10.0.1.1", dst="10.0.2.2") / seg))
    # what a sender with TX checksum offload hands over: the folded pseudo-header sum, not complemented
    ipl = good[IP]
    l4bytes = bytes(ipl.payload)
    zeroed = bytearray(l4bytes)
    off = 6 if l4.startswith("udp") else 16
    zeroed[off : off + 2] = b"\0\0"
    pseudo_only = ~in4_chksum(ipl.proto, ipl, b"") & 0xFFFF
    partial = bytearray(bytes(good))
    start = 14 + 20
    partial[start + off : start + off + 2] = pseudo_only.to_bytes(2, "big")
    fixed = complete_l4_checksum(bytes(partial))
    assert fixed == bytes(good)
    # non-IPv4 and other protocols are left alone
    arp = bytes(Ether(type=0x0806) / (b"\x00" * 28))
    assert complete_l4_checksum(arp) == arp
