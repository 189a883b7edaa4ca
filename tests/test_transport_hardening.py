"""The userspace transport under abuse (issue 12, item 2): sequence numbers far past the window,
out-of-order floods, guessed and known connection ids, forged data and forged ACKs.

Each test is one of the probes that broke the old code: a datagram with seq >= rcv_nxt + 2^32
crashed the receiver (32-bit SACK encoding), out-of-order data was buffered without bound, data
spoofed with the live flow's address, port and conn_id was delivered as the flow's."""

import os
import socket
import struct
import time

import pytest

from mltcp.traffic.transport import (
    FlowSender,
    Receiver,
    TransportError,
    TransportFault,
    UdpTransport,
    auth,
    build_cc,
    pattern,
    wire,
)
from mltcp.traffic.transport.reassembly import SEG_OVERHEAD, Reassembly

PEER = ("127.0.0.1", 40000)


KEY = bytes(range(16))  # the connection key of the datagrams made here (sent, as a handshake does)


def data(seq, n, conn=7, job=1, iteration=0, payload=None, key=KEY):
    """A data datagram as a sender makes it: authenticated, carrying its key (handshake)."""
    body = pattern.chunk(seq, n) if payload is None else payload
    return auth.seal(
        wire.encode(0, job, iteration, 0, conn, seq, 0, 0, 0, len(body), wire.T_DATA) + body, key, send_key=True
    )


def feed(rx, dgram, peer=PEER, now=0.0):
    rx.handle(dgram, len(dgram), peer, 0, now)


@pytest.fixture
def rx():
    r = Receiver(("127.0.0.1", 0))
    yield r
    r.close()


# -- sequence space ------------------------------------------------------------------------------


@pytest.mark.parametrize("seq", [1 << 32, (1 << 32) + 1424, 5 << 40, wire.U64 - 100])
def test_data_far_past_the_window_is_refused_not_a_crash(rx, seq):
    feed(rx, data(0, 1000))
    feed(rx, data(seq, 100))  # old code: struct.error in the SACK encoding
    (f,) = rx.flows.values()
    assert f.refused == 1 and f.delivered == 1000 and f.ra.held_bytes == 0
    assert f.ra.sack_blocks() == []
    feed(rx, data(1000, 1000))  # the flow goes on
    assert f.delivered == 2000


def test_far_past_window_over_a_real_socket(rx):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    try:
        s.sendto(data(0, 500), rx.addr)
        s.sendto(data((1 << 32) + 7, 500), rx.addr)
        got = 0
        for _ in range(200):
            got += rx.drain(time.monotonic())
            if got >= 2:
                break
            time.sleep(0.005)
        a = wire.decode(s.recv(4096))  # answered at once (out of order), nothing held
        assert a.flags & wire.FLAG_ACK and a.ack == 500 and not a.sacks
    finally:
        s.close()


def test_sack_blocks_that_do_not_fit_32_bits_are_a_wire_error():
    with pytest.raises(wire.WireError):
        wire.encode(wire.FLAG_ACK, 0, 0, 0, 1, 0, 10, 0, 0, 0, 0, sacks=[(10 + (1 << 32), 11 + (1 << 32))])
    with pytest.raises(wire.WireError):
        wire.encode(0, 0, 0, 0, 1, 1 << 64, 0, 0, 0, 0, wire.T_DATA)


def test_decode_rejects_reversed_sack_blocks():
    h = bytearray(wire.encode(wire.FLAG_ACK, 0, 0, 0, 1, 0, 100, 0, 0, 0, 0, sacks=[(200, 300)]))
    struct.pack_into("!II", h, wire.FIXED_LEN, 300 - 100, 200 - 100)
    with pytest.raises(wire.WireError):
        wire.decode(bytes(h))


# -- bounded buffering ------------------------------------------------------------------------------


def test_out_of_order_flood_is_bounded_by_the_window():
    """48 MB far ahead of a hole at 0 (the old receiver held all of it: 27.7 MB in the probe)."""
    r = Receiver(("127.0.0.1", 0), window=4 << 20)
    try:
        mss = 1424
        for seq in range(mss, 48_000_000, mss):
            feed(r, data(seq, mss))
        (f,) = r.flows.values()
        assert f.ra.held_bytes <= 4 << 20 and r.held == f.ra.held_bytes
        assert f.refused > 25_000  # the rest was refused
        for seq in range(0, 4 << 20, mss):  # fill the hole: all delivered
            feed(r, data(seq, mss))
        assert f.delivered >= (4 << 20) and f.mismatched == 0 and r.held == f.ra.held_bytes
    finally:
        r.close()


def test_default_window_bounds_buffering(rx):
    mss = 1424
    for seq in range(mss, 40_000_000, mss):
        feed(rx, data(seq, mss))
    (f,) = rx.flows.values()
    assert 30 << 20 <= f.ra.held_bytes <= wire.RCV_WINDOW


def test_overlapping_and_tiny_segments_cannot_multiply_memory():
    ra = Reassembly(window=100_000)
    for s in range(1, 100_000, 7):  # 1400-byte segments every 7 bytes: 200x overlap
        ra.add(s, pattern.chunk(s, 1400))
    assert ra.held_bytes <= 100_000
    ra2 = Reassembly(window=1 << 20)  # 1-byte segments: the segment count is capped
    for s in range(1, 1 << 20, 2):
        ra2.add(s, pattern.chunk(s, 1))
    assert len(ra2._segs) <= ra2.max_segments == (1 << 20) // 256
    assert ra2.held_bytes + len(ra2._segs) * SEG_OVERHEAD <= (1 << 20) * 2


def test_receiver_wide_budget_and_flow_cap():
    r = Receiver(("127.0.0.1", 0), max_held=100_000, max_flows=3)
    try:
        for conn in range(1, 6):
            for seq in range(1000, 60_000, 1000):
                feed(r, data(seq, 1000, conn=conn))
        assert len(r.flows) == 3 and r.refused_flows == 2 * 59
        assert r.held <= 100_000 and sum(f.ra.held_bytes for f in r.flows.values()) == r.held
        assert sum(f.refused for f in r.flows.values()) > 0
    finally:
        r.close()


def test_sender_stays_inside_the_receive_window():
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    f = FlowSender(peer.getsockname(), build_cc("reno"), payload=1000, rcv_window=5000, clock=lambda: 0.0)
    try:
        f.enqueue(100_000, 0)
        f.service(0.0)
        assert f.sb.snd_nxt == 5000  # not the 10-segment initial window
    finally:
        f.close()
        peer.close()


# -- connection ids --------------------------------------------------------------------------------


def test_conn_ids_are_48_random_bits_per_connection():
    ids = [wire.new_conn_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids) and all(0 < c < 1 << 48 for c in ids)
    assert sum(c >> 32 != 0 for c in ids) > 19_000  # the high 16 bits are used
    peer = ("127.0.0.1", 9)
    flows = [FlowSender(peer, build_cc("reno")) for _ in range(8)]
    try:
        assert len({f.conn_id for f in flows}) == 8
    finally:
        for f in flows:
            f.close()


def test_conn_id_roundtrip_on_the_wire():
    c = 0xBEEF_DEADBEEF
    p = wire.decode(data(0, 10, conn=c))
    assert p.conn_id == c
    q = wire.decode(wire.encode(wire.FLAG_ACK, 0, 0, 0, c, 0, 5, 0, 0, 0, 0, sacks=[(10, 20)]))
    assert q.conn_id == c and q.sacks == ((10, 20),)


def test_guessed_conn_ids_open_separate_flows_and_touch_nothing(rx):
    feed(rx, data(0, 1000, conn=0xABCDEF123456))
    for guess in range(1, 50):  # same address, wrong conn_id: other flows
        feed(rx, data(1000, 1000, conn=guess, payload=b"\x00" * 1000))
        feed(rx, data(0, 1000, conn=guess))
    f = rx.flows[(PEER, 0xABCDEF123456)]
    assert f.delivered == 1000 and f.datagrams == 1


def test_garbage_at_the_right_offset_is_never_taken(rx):
    conn = 0x1234_56789ABC
    feed(rx, data(0, 1000, conn=conn))
    feed(rx, data(1000, 1000, conn=conn, payload=b"\xaa" * 1000))  # spoofed, in order
    (f,) = rx.flows.values()
    assert f.delivered == 1000 and f.mismatched == 1000
    feed(rx, data(1000, 1000, conn=conn))
    assert f.delivered == 2000 and f.crc == pattern.expected_crc(0, 2000)


# -- end to end: forged source address, port and conn_id (raw IP socket) ----------------------------


def _forge_udp(src: tuple[str, int], dst: tuple[str, int], payload: bytes) -> None:
    """Send one UDP datagram with a forged source address and port (IP_HDRINCL, needs root)."""
    udp = struct.pack("!HHHH", src[1], dst[1], 8 + len(payload), 0) + payload  # checksum 0: none
    total = 20 + len(udp)
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        total,
        0,
        0,
        64,
        socket.IPPROTO_UDP,
        0,
        socket.inet_aton(src[0]),
        socket.inet_aton(dst[0]),
    )
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    try:
        s.sendto(ip + udp, (dst[0], 0))
    finally:
        s.close()


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="forging a source address needs a raw socket (root)")


def _wait(cond, what, timeout=5.0):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _inject_during(tx, nbytes, inject):
    """Send ``nbytes`` on ``tx`` while ``inject()`` runs in another thread (the attack happens
    during the transfer, as it would on a wire)."""
    import threading

    t = threading.Thread(target=inject)
    t.start()
    try:
        tx.send_iteration(nbytes, 1)
    finally:
        t.join()


@needs_root
@pytest.mark.parametrize("mode", ["handshake", "psk"])
def test_spoofed_in_window_data_without_the_key_is_never_delivered(mode):
    """The issue's probe: 20 datagrams with the live flow's addresses, port, conn_id and in-window
    sequence numbers during a 3 MB transfer, into a receiver that does NOT check the test pattern
    (--no-verify): the MAC alone keeps every foreign byte out."""
    psk = b"0123456789abcdef0123456789abcdef" if mode == "psk" else None
    with Receiver(("127.0.0.1", 0), verify=False, psk=psk) as rx:
        rx.start()
        with UdpTransport([rx.addr], cc="reno", timeout=20, psk=psk) as tx:
            f = tx.flows[0]
            src = f.sock.getsockname()
            tx.send_iteration(100_000, 0)
            flow = rx.flows[(src, f.conn_id)]

            def inject():
                for k in range(20):  # the attacker's own key: all it can put in a handshake
                    seq = flow.delivered + 1424 * (k + 1)
                    _forge_udp(
                        src, rx.addr, data(seq, 1424, conn=f.conn_id, payload=os.urandom(1424), key=os.urandom(16))
                    )
                    time.sleep(0.002)

            _inject_during(tx, 2_900_000, inject)
            _wait(lambda: flow.forged == 20, "the spoofed datagrams")
            assert flow.delivered == 3_000_000
            assert flow.crc == f.crc == pattern.expected_crc(0, 3_000_000)  # only the sender's bytes


@needs_root
def test_on_path_attacker_who_saw_the_handshake_can_inject_and_the_sender_fails_loudly():
    """Without a PSK the key crosses the wire in the first datagrams: an attacker who saw them
    makes datagrams the receiver takes (docs/security.md says so). With --no-verify its bytes reach
    the delivered stream; the sender then sees ACKs for bytes it never sent and stops with a
    TransportFault instead of reporting the transfer as done."""
    with Receiver(("127.0.0.1", 0), verify=False) as rx:
        rx.start()
        with UdpTransport([rx.addr], cc="reno", timeout=20) as tx:
            f = tx.flows[0]
            src = f.sock.getsockname()
            tx.send_iteration(50_000, 0)
            flow = rx.flows[(src, f.conn_id)]
            seen_key = f.key  # what a sniffer reads from the flow's first datagrams
            for k in range(20):
                _forge_udp(
                    src, rx.addr, data(50_000 + k * 1424, 1424, conn=f.conn_id, payload=os.urandom(1424), key=seen_key)
                )
            _wait(lambda: flow.delivered == 50_000 + 20 * 1424, "the spoofed datagrams")
            assert flow.forged == 0 and flow.crc != pattern.expected_crc(0, flow.delivered)
            with pytest.raises(TransportFault, match="spoofed"):
                tx.send_iteration(10_000, 1)


def test_a_flipped_bit_or_a_missing_mac_is_dropped_before_anything_else():
    with Receiver(("127.0.0.1", 0), verify=False) as r:
        good = data(0, 1000)
        feed(r, good)
        (f,) = r.flows.values()
        assert f.delivered == 1000 and f.key == KEY
        bad = bytearray(data(1000, 1000))
        bad[100] ^= 1  # a payload bit
        feed(r, bytes(bad))
        plain = wire.encode(0, 1, 0, 0, 7, 1000, 0, 0, 0, 1000, wire.T_DATA) + pattern.chunk(1000, 1000)
        feed(r, plain)  # no MAC at all
        assert f.forged == 2 and f.delivered == 1000 and f.datagrams == 1
        feed(r, data(1000, 1000, key=os.urandom(16)))  # another key cannot replace it
        assert f.forged == 3 and f.key == KEY
        feed(r, plain, peer=("127.0.0.1", 40001))  # no flow yet: none is opened
        assert r.unauthenticated == 1 and len(r.flows) == 1


def test_acks_without_the_key_are_not_taken(peer):
    f = FlowSender(peer.getsockname(), build_cc("reno"), payload=1000, clock=lambda: 0.0)
    try:
        f.enqueue(50_000, 0)
        f.service(0.0)
        forged = auth.seal(wire.encode(wire.FLAG_ACK, 0, 0, 0, f.conn_id, 0, 10_000, 0, 0, 0, 0), os.urandom(16))
        plain = wire.encode(wire.FLAG_ACK, 0, 0, 0, f.conn_id, 0, 10_000, 0, 0, 0, 0)
        _push(peer, f, [forged, plain], 0.001)
        assert f.stats["forged"] == 2 and f.sb.snd_una == 0 and f.send_key
        _push(peer, f, [_ack(f, 1000)], 0.002)  # the receiver's: taken
        assert f.sb.snd_una == 1000 and not f.send_key  # key confirmed: no longer sent
    finally:
        f.close()


def test_mismatched_psks_deliver_nothing_and_time_out():
    with Receiver(("127.0.0.1", 0), psk=b"receiver-key-0123456789") as rx:
        rx.start()
        with UdpTransport([rx.addr], cc="reno", timeout=1.5, psk=b"sender-key-0123456789") as tx:
            with pytest.raises(TransportError):
                tx.send_iteration(20_000, 0)
        assert rx.flows == {} and rx.unauthenticated > 0


# -- forged ACKs at the sender ----------------------------------------------------------------------


@pytest.fixture
def peer():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(2)
    yield s
    s.close()


def _ack(f, ack, sacks=()):
    """An ACK made by someone who holds the flow's key (its receiver, or an on-path attacker who
    saw the handshake): the sender's own checks are what is left."""
    return auth.seal(wire.encode(wire.FLAG_ACK, 0, 0, 0, f.conn_id, 0, ack, 0, 0, 0, 0, sacks=sacks), f.key)


def _push(peer, f, dgrams, now):
    for d in dgrams:
        peer.sendto(d, f.sock.getsockname())
    time.sleep(0.05)
    f.drain(now, limit=4096)


def test_ack_beyond_what_was_sent_is_ignored_and_faults(peer):
    f = FlowSender(peer.getsockname(), build_cc("reno"), payload=1000, clock=lambda: 0.0)
    try:
        f.enqueue(50_000, 0)
        f.service(0.0)
        _push(peer, f, [_ack(f, 10_001), _ack(f, wire.U64)], 0.001)
        assert f.sb.snd_una == 0 and f.fault and "spoofed" in f.fault
    finally:
        f.close()


def test_a_wrong_conn_id_ack_is_bad(peer):
    f = FlowSender(peer.getsockname(), build_cc("reno"), payload=1000, clock=lambda: 0.0)
    try:
        f.enqueue(50_000, 0)
        f.service(0.0)
        wrong = wire.encode(wire.FLAG_ACK, 0, 0, 0, f.conn_id ^ 1, 0, 10_000, 0, 0, 0, 0)
        _push(peer, f, [wrong], 0.001)
        assert f.sb.snd_una == 0 and f.stats["bad"] == 1 and f.fault is None
    finally:
        f.close()


def test_acks_that_keep_going_back_fault(peer):
    f = FlowSender(peer.getsockname(), build_cc("reno"), payload=1000, clock=lambda: 0.0)
    try:
        f.enqueue(50_000, 0)
        f.service(0.0)
        _push(peer, f, [_ack(f, 10_000)], 0.001)  # (forged) everything acknowledged
        assert f.sb.snd_una == 10_000 and f.fault is None
        _push(peer, f, [_ack(f, 2000)] * 63, 0.002)  # the real receiver is at 2000
        assert f.fault is None
        _push(peer, f, [_ack(f, 2000)], 0.003)
        assert f.fault and "in a row" in f.fault
    finally:
        f.close()
