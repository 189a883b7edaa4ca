"""MLTCP shim header: layout, scapy binding, Q0.16 helpers, strict parsing."""

import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from mltcp.traffic.header import (
    FLAG_ACK,
    FLAG_CNP,
    FLAG_ECE,
    FLAG_ITER_START,
    MLTCP,
    MLTCP_HEADER_LEN,
    MLTCP_UDP_PORT,
    MLTCPParseError,
    parse_mltcp,
    q16_to_ratio,
    ratio_to_q16,
)


def test_port_constant():
    assert MLTCP_UDP_PORT == 9199


def test_length_and_byte_layout():
    h = MLTCP(
        flags=FLAG_ACK | FLAG_ECE,
        reserved=0xAB,
        job_id=0x1234,
        iteration=0xDEADBEEF,
        bytes_ratio=0xBEEF,
        reserved2=0x0102,
    )
    raw = bytes(h)
    assert len(raw) == MLTCP_HEADER_LEN == 12
    # version in the high nibble, flags in the low nibble of byte 0
    assert raw[0] == (1 << 4) | 0x9
    assert raw[1] == 0xAB
    assert struct.unpack("!HIHH", raw[2:]) == (0x1234, 0xDEADBEEF, 0xBEEF, 0x0102)


def test_default_version_is_one():
    assert MLTCP().version == 1
    assert bytes(MLTCP())[0] >> 4 == 1


@pytest.mark.parametrize(
    "flags,names",
    [
        (FLAG_ACK, {"ACK"}),
        (FLAG_CNP, {"CNP"}),
        (FLAG_ITER_START, {"ITER_START"}),
        (FLAG_ECE, {"ECE"}),
        (0xF, {"ACK", "CNP", "ITER_START", "ECE"}),
        (0, set()),
    ],
)
def test_flag_bits(flags, names):
    h = MLTCP(bytes(MLTCP(flags=flags)))
    assert int(h.flags) == flags
    for n in ("ACK", "CNP", "ITER_START", "ECE"):
        assert getattr(h.flags, n) == (n in names)


def test_flags_by_name():
    h = MLTCP(flags="CNP+ITER_START")
    assert bytes(h)[0] & 0xF == FLAG_CNP | FLAG_ITER_START


def test_roundtrip_through_ethernet():
    pkt = (
        Ether()
        / IP(src="10.0.0.1", dst="10.0.0.2")
        / UDP(sport=40000, dport=MLTCP_UDP_PORT)
        / MLTCP(flags="ITER_START", job_id=42, iteration=7, bytes_ratio=ratio_to_q16(0.25))
        / b"payload"
    )
    back = Ether(bytes(pkt))
    assert back.haslayer(MLTCP)
    m = back[MLTCP]
    assert (m.version, int(m.flags), m.job_id, m.iteration) == (1, FLAG_ITER_START, 42, 7)
    assert m.bytes_ratio == ratio_to_q16(0.25)
    assert m.ratio == pytest.approx(0.25, abs=1 / 65535)
    assert bytes(m.payload) == b"payload"


def test_bound_on_source_port_too():
    raw = bytes(UDP(sport=MLTCP_UDP_PORT, dport=5555) / MLTCP(job_id=3))
    assert UDP(raw)[MLTCP].job_id == 3


def test_not_bound_on_other_ports():
    raw = bytes(UDP(sport=1000, dport=2000) / Raw(bytes(MLTCP(job_id=3))))
    assert not UDP(raw).haslayer(MLTCP)


def test_building_sets_destination_port():
    assert bytes(UDP() / MLTCP())[2:4] == struct.pack("!H", MLTCP_UDP_PORT)


def test_truncated_inside_udp_is_not_dissected_as_mltcp():
    raw = bytes(UDP(dport=MLTCP_UDP_PORT) / MLTCP(job_id=9))[: 8 + 5]
    pkt = UDP(raw)
    assert not pkt.haslayer(MLTCP)
    assert pkt.haslayer(Raw)


@pytest.mark.parametrize("n", range(0, MLTCP_HEADER_LEN))
def test_parse_rejects_truncated(n):
    with pytest.raises(MLTCPParseError, match="truncated"):
        parse_mltcp(bytes(MLTCP())[:n])


@pytest.mark.parametrize("version", [0, 2, 15])
def test_parse_rejects_bad_version(version):
    with pytest.raises(MLTCPParseError, match="version"):
        parse_mltcp(bytes(MLTCP(version=version)))


def test_parse_accepts_valid_with_payload():
    m = parse_mltcp(bytes(MLTCP(job_id=5, iteration=1) / b"xyz"))
    assert m.job_id == 5 and bytes(m.payload) == b"xyz"


def test_field_bounds_enforced_when_building():
    # out-of-range values must not silently produce a wrong header
    with pytest.raises(ValueError, match="job_id"):
        bytes(MLTCP(job_id=70000))
    with pytest.raises(ValueError, match="iteration"):
        bytes(MLTCP(iteration=2**32))


@pytest.mark.parametrize("r,q", [(0.0, 0), (1.0, 0xFFFF), (0.5, 32768), (0.25, 16384)])
def test_ratio_to_q16_values(r, q):
    assert ratio_to_q16(r) == q


@pytest.mark.parametrize("r", [-0.01, 1.0001, float("nan"), float("inf")])
def test_ratio_to_q16_bounds(r):
    with pytest.raises(ValueError):
        ratio_to_q16(r)


@pytest.mark.parametrize("v", [-1, 0x10000])
def test_q16_to_ratio_bounds(v):
    with pytest.raises(ValueError):
        q16_to_ratio(v)


def test_q16_roundtrip_error_within_half_step():
    for i in range(0, 1001):
        r = i / 1000
        assert abs(q16_to_ratio(ratio_to_q16(r)) - r) <= 0.5 / 65535 + 1e-12
    assert q16_to_ratio(0xFFFF) == 1.0


# --- the Wireshark dissector (p4src/mltcp.lua), run through tshark where installed ---------


def test_wireshark_dissector(tmp_path):
    import shutil
    import subprocess

    from scapy.utils import wrpcap

    from mltcp.p4src import DISSECTOR_PATH

    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark not installed (scripts/install-system.sh installs it)")
    ip = IP(src="10.0.0.1", dst="10.0.0.2")
    pkts = [
        Ether()
        / ip
        / UDP(sport=4000, dport=MLTCP_UDP_PORT)
        / MLTCP(flags="ACK+ECE", job_id=7, iteration=3, bytes_ratio=32768)
        / b"hello",
        Ether() / ip / UDP(sport=MLTCP_UDP_PORT, dport=4000) / MLTCP(version=2, job_id=8),
        Ether() / ip / UDP(sport=4000, dport=MLTCP_UDP_PORT) / Raw(b"\x10\x00\x00"),
    ]
    pcap = tmp_path / "mltcp.pcap"
    wrpcap(str(pcap), pkts)
    res = subprocess.run(
        [
            tshark,
            "-X",
            f"lua_script:{DISSECTOR_PATH}",
            "-r",
            str(pcap),
            "-T",
            "fields",
            "-E",
            "separator=|",
            "-e",
            "mltcp.version",
            "-e",
            "mltcp.job_id",
            "-e",
            "mltcp.iteration",
            "-e",
            "mltcp.bytes_ratio",
            "-e",
            "mltcp.flags.ack",
            "-e",
            "mltcp.flags.cnp",
            "-e",
            "mltcp.flags.ece",
            "-e",
            "_ws.expert.message",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    rows = [line.split("|") for line in res.stdout.strip().splitlines()]
    assert len(rows) == 3
    assert rows[0][:7] == ["1", "7", "3", "32768", "1", "0", "1"]
    assert rows[1][1] == "8" and "version" in rows[1][7]
    assert rows[2][1] == "" and "truncated" in rows[2][7]
