"""The MLTCP IPv4 option on kernel TCP (traffic/kernel/stamp.bpf.c): what the switches read from
it, and (root) the real program on a veth between two namespaces, checked on the wire."""

import socket
import struct
import threading
import time

import pytest

from mltcp.emulation.arm import needs_stamper
from mltcp.emulation.switch.pipeline import ParseError, parse
from mltcp.traffic.header import FLAG_ITER_START, IPOPT_KIND, MLTCPParseError, mltcp_ipopt, parse_mltcp_ipopt
from mltcp.traffic.kernel.netns import in_netns
from mltcp.traffic.kernel.stamp import StampConfig
from _kernel_prereq import missing
from _veth_pair import veth_pair  # noqa: F401  (a fixture)

REASON = missing()
if REASON:
    print(f"test_kernel_stamp: skipping root tests: {REASON}")
needs_root = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def _frame(options: bytes = b"", proto: int = 6, payload: bytes = b"x" * 100) -> bytes:
    from scapy.layers.inet import IP, TCP, UDP, IPOption
    from scapy.layers.l2 import Ether

    l4 = TCP(sport=1000, dport=2000) if proto == 6 else UDP(sport=1000, dport=2000)
    ip = IP(src="10.0.0.1", dst="10.0.0.2", options=[IPOption(options)] if options else [])
    return bytes(Ether() / ip / l4 / payload)


def test_option_round_trip_and_refusals():
    opt = mltcp_ipopt(7, 0x8000, FLAG_ITER_START)
    assert len(opt) == 8 and opt[0] == IPOPT_KIND
    assert parse_mltcp_ipopt(opt) == (7, 0x8000, FLAG_ITER_START)
    assert parse_mltcp_ipopt(b"\x44\x08" + bytes(6)) is None  # another option: not ours
    assert parse_mltcp_ipopt(opt + b"\x01\x01\x01\x00") is None  # ours plus more: not matched
    with pytest.raises(MLTCPParseError, match="version 2"):
        parse_mltcp_ipopt(opt[:2] + bytes([0x20]) + opt[3:])
    with pytest.raises(ValueError):
        mltcp_ipopt(1, 0x10000)


def test_switch_parser_reads_the_option_on_tcp_and_udp():
    p = parse(_frame(mltcp_ipopt(3, 0xC000)))
    assert (p.l4_proto, p.job_id, p.bytes_ratio, p.ihl_bytes) == (6, 3, 0xC000, 28)
    assert parse(_frame(mltcp_ipopt(4, 0x1000), proto=17)).job_id == 4
    other = parse(_frame(b"\x44\x08\x05\x00" + bytes(4)))  # a timestamp option: skipped
    assert other.job_id == -1 and other.ihl_bytes == 28
    assert parse(_frame()).job_id == -1
    bad = mltcp_ipopt(3, 0)
    with pytest.raises(ParseError, match="option version 0"):
        parse(_frame(bad[:2] + b"\x00" + bad[3:]))


def test_stamper_wherever_a_p4_switch_reads_it():
    assert needs_stamper("switch", "kernel") and needs_stamper("bmv2", "kernel")
    assert not needs_stamper("switch", "udp")  # the userspace transport sends the shim
    assert not needs_stamper("htb", "kernel")  # no P4 switch to read it


def test_stamp_config_refuses_bad_values():
    with pytest.raises(ValueError, match="job_id"):
        StampConfig(job_id=70000)
    with pytest.raises(ValueError, match="min_idle_s"):
        StampConfig(job_id=1, min_idle_s=0)
    with pytest.raises(ValueError, match="link_mtu"):
        StampConfig(job_id=1, link_mtu=100)


# ---- root: the program itself ---------------------------------------------------------------

ITER_BYTES = 1_000_000
ITERS = 5
GAP_S = 0.15


def _capture(rx_ns: str, stop: threading.Event, out: list, ready: threading.Event) -> None:
    with in_netns(rx_ns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
    s.bind(("st1", 0))
    s.settimeout(0.2)
    ready.set()
    while not stop.is_set():
        try:
            f = s.recv(128)
        except socket.timeout:
            continue
        if f[14 + 9] == 6 and f[14 + 12 : 14 + 16] == bytes([10, 77, 0, 1]):
            out.append((time.monotonic(), f))
    s.close()


def _receiver(rx_ns: str, srv: socket.socket, got: list) -> None:
    c, _ = srv.accept()
    n = 0
    while b := c.recv(1 << 16):
        n += len(b)
    got.append(n)
    c.close()


@needs_root
def test_stamper_marks_every_data_segment_with_a_rising_ratio(veth_pair):
    from mltcp.traffic.kernel import stamp
    from mltcp.traffic.kernel.transport import set_pacing

    tx, rx = veth_pair
    stamp.install(tx, "st0", StampConfig(job_id=9, min_idle_s=0.05))
    frames, got = [], []
    stop, ready = threading.Event(), threading.Event()
    cap = threading.Thread(target=_capture, args=(rx, stop, frames, ready))
    cap.start()
    try:
        ready.wait(5)
        with in_netns(rx):
            srv = socket.socket()
        srv.bind(("10.77.0.2", 0))
        srv.listen(1)
        recv = threading.Thread(target=_receiver, args=(rx, srv, got))
        recv.start()
        with in_netns(tx):
            c = socket.create_connection(srv.getsockname(), timeout=10)
        set_pacing(c, 200.0)  # small GSO packets, so the ratio rises in small steps
        for _ in range(ITERS):
            c.sendall(b"x" * ITER_BYTES)
            time.sleep(GAP_S)
        c.close()
        recv.join(20)
        srv.close()
        time.sleep(0.3)
    finally:
        stop.set()
        cap.join(5)
    st = stamp.stats(tx, "st0")
    assert got == [ITER_BYTES * ITERS]  # the stamped stream arrives whole
    data = []
    for t, f in frames:
        ihl = (f[14] & 0xF) * 4
        tot = struct.unpack("!H", f[16:18])[0]
        doff = (f[14 + ihl + 12] >> 4) * 4
        if tot - ihl - doff <= 0:
            assert ihl == 20, "a segment without payload (SYN, ACK, FIN) is not stamped"
            continue
        assert ihl == 28, "every data segment carries the option"
        hdr = f[14 : 14 + 28]
        words = struct.unpack("!14H", hdr)
        total = sum(words)
        assert (total & 0xFFFF) + (total >> 16) == 0xFFFF, "IPv4 header checksum"
        assert tot <= 1500, "the frame fits the link MTU (the host's MTU leaves 8 bytes)"
        data.append(parse_mltcp_ipopt(hdr[20:28]))
    assert st["stamped"] > 0 and st["no_room"] == 0 and st["failed"] == 0
    assert all(j == 9 for j, _, _ in data)
    starts = [i for i, (_, _, fl) in enumerate(data) if fl & FLAG_ITER_START]
    # iteration starts: the first GSO packet of each iteration (its segments share the flag)
    firsts = [i for i in starts if i == 0 or i - 1 not in starts]
    assert len(firsts) == ITERS and st["iterations"] == ITERS - 1
    iters = [data[a:b] for a, b in zip(firsts, firsts[1:] + [len(data)])]
    assert all(r == 0 for _, r, _ in iters[0]), "nothing learned during the first iteration"
    for it in iters[1:]:
        ratios = [r / 0xFFFF for _, r, _ in it]
        assert ratios == sorted(ratios), "bytes_ratio never falls within an iteration"
        assert ratios[0] < 0.1 and ratios[-1] > 0.95
