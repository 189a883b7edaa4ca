"""pcap: records -> synthetic capture -> records, plain-flow grouping, and replay in a namespace."""

import os
import shutil
import subprocess
import sys

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import PcapWriter, rdpcap

from mltcp.records import IterationRecord
from mltcp.traffic import pcap
from mltcp.traffic.header import MLTCP


def _records():
    recs = []
    for job, compute, comm, nbytes, off in (
        ("job1", 0.050, 0.020, 2_000_000, 0.0),
        ("job7", 0.030, 0.035, 59_900_000, 0.013),
    ):
        t = off
        for i in range(6):
            recs.append(
                IterationRecord(
                    job, i, t, t + compute, t + compute + comm, nbytes, drops=float(i % 3), marks=float(2 * (i % 2))
                )
            )
            t += compute + comm
    return recs


def _close(a, b, tol=2e-6):
    assert (a.job, a.iteration) == (b.job, b.iteration)
    assert a.comm_start == pytest.approx(b.comm_start, abs=tol)
    assert a.end == pytest.approx(b.end, abs=tol)
    assert (a.bytes, a.drops, a.marks) == (b.bytes, b.drops, b.marks)


def test_records_pcap_records_roundtrip(tmp_path):
    recs = _records()
    path = tmp_path / "run.pcap"
    n = pcap.write_records(recs, path, packets_per_iter=6)
    assert n == len(rdpcap(str(path)))
    assert path.stat().st_size < 100_000
    back = pcap.read_records(path, epoch=pcap.DEFAULT_EPOCH)
    assert len(back) == len(recs)
    for a, b in zip(sorted(recs, key=lambda r: (r.job, r.iteration)), back):
        _close(a, b)
        if a.iteration > 0:  # start = end of the previous iteration
            assert b.start == pytest.approx(a.start, abs=2e-6)
    first = [b for b in back if b.iteration == 0]
    assert all(b.start < b.comm_start for b in first)


def test_pcap_packets_are_valid_mltcp(tmp_path):
    path = tmp_path / "one.pcap"
    pcap.write_records([IterationRecord("job3", 4, 0.0, 0.1, 0.2, 10_000, 0, 1)], path, packets_per_iter=4)
    pkts = rdpcap(str(path))
    shims = [p[MLTCP] for p in pkts]
    assert [s.job_id for s in shims] == [3] * 4 and {s.iteration for s in shims} == {4}
    assert [int(s.flags) & 0x4 for s in shims] == [4, 0, 0, 0]  # ITER_START on the first
    assert shims[-1].bytes_ratio == 0xFFFF
    assert sum((p[IP].tos & 3) == 3 for p in pkts) == 1
    assert all(p.wirelen <= 1514 for p in pkts)  # full-size segments, sampled
    heads = [pcap.wire.HDR.unpack_from(bytes(p[MLTCP].payload)) for p in pkts]
    assert all(p.wirelen - len(p) == h[5] for p, h in zip(pkts, heads))  # length field = missing bytes
    assert heads[0][1] == 0 and heads[-1][1] + heads[-1][5] == 10_000  # seq range = iteration bytes


def test_plain_flows_grouped_by_idle_gap(tmp_path):
    path = tmp_path / "plain.pcap"
    w = PcapWriter(str(path), linktype=1)
    t = 1000.0
    expected = []
    for it in range(4):
        start = t
        for k in range(50):
            p = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=5000, dport=6000) / Raw(b"x" * 1000)
            p.time = t
            w.write(p)
            t += 0.0001
        expected.append((start, t - 0.0001))
        t += 0.2  # compute gap
    w.close()
    back = pcap.read_records(path, epoch=1000.0)
    assert [r.iteration for r in back] == [0, 1, 2, 3]
    assert all(r.bytes == 50 * 1000 for r in back)
    for r, (s, e) in zip(back, expected):
        assert r.comm_start == pytest.approx(s - 1000.0, abs=2e-6) and r.end == pytest.approx(e - 1000.0, abs=2e-6)
    assert back[2].start == pytest.approx(back[1].end)
    later = pcap.read_records(path, epoch=1000.1)  # a run's epoch: what came before it is left out
    assert [r.comm_start for r in later] == pytest.approx([r.comm_start - 0.1 for r in back[1:]], abs=2e-6)
    r = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "traffic", "pcap-records", str(path), "--epoch", "nan"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "--epoch" in r.stderr


def test_read_errors(tmp_path):
    with pytest.raises(pcap.PcapError, match="no such file"):
        pcap.read_records(tmp_path / "missing.pcap")
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a pcap at all")
    with pytest.raises(pcap.PcapError, match="not a pcap"):
        pcap.read_records(bad)


def _need_netns():
    if os.geteuid() != 0:
        pytest.skip("replay test needs root (network namespaces)")
    if shutil.which("ip") is None:
        pytest.skip("replay test needs iproute2")


@pytest.fixture
def veth_pair():
    _need_netns()
    pid = os.getpid()
    ns_a, ns_b = f"mtpa{pid}", f"mtpb{pid}"
    try:
        for ns in (ns_a, ns_b):
            subprocess.run(["ip", "netns", "add", ns], check=True)
        subprocess.run(
            ["ip", "link", "add", "rpa", "netns", ns_a, "type", "veth", "peer", "rpb", "netns", ns_b], check=True
        )
        for ns, dev in ((ns_a, "rpa"), (ns_b, "rpb")):
            subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
        yield ns_a, ns_b
    finally:
        for ns in (ns_a, ns_b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _rx_packets(ns, dev):
    out = subprocess.run(
        ["ip", "-n", ns, "-s", "-j", "link", "show", dev], capture_output=True, text=True, check=True
    ).stdout
    import json

    return json.loads(out)[0]["stats64"]["rx"]["packets"]


def test_replay_in_namespace(tmp_path, veth_pair):
    ns_a, ns_b = veth_pair
    path = tmp_path / "r.pcap"
    recs = [IterationRecord("job2", i, 0.01 * i, 0.01 * i + 0.005, 0.01 * i + 0.008, 3_000_000) for i in range(3)]
    n = pcap.write_records(recs, path, packets_per_iter=5)
    before = _rx_packets(ns_b, "rpb")
    sent = pcap.replay(path, "rpa", netns=ns_a)
    assert sent == n == 15
    assert _rx_packets(ns_b, "rpb") - before >= n


def test_real_capture_of_a_transport_run(tmp_path):
    """tcpdump on loopback while `mltcp traffic send` runs; the capture gives back the run."""
    import signal
    import time

    if os.geteuid() != 0 or shutil.which("tcpdump") is None:
        pytest.skip("needs root and tcpdump")
    from mltcp.traffic.transport import Receiver, UdpTransport
    from mltcp.traffic.driver import JobSpec, run_job

    cap = tmp_path / "cap.pcap"
    with Receiver(("127.0.0.1", 0)) as rx:
        rx.start()
        port = rx.addr[1]
        dump = subprocess.Popen(
            ["tcpdump", "-i", "lo", "-U", "-s", "128", "-w", str(cap), "udp", "port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            line = dump.stderr.readline()
            if "listening" not in line:
                pytest.skip(f"tcpdump did not start: {line}")
            with UdpTransport([rx.addr], cc="mltcp-reno", job_id=3, timeout=30) as tr:
                sent = run_job(JobSpec.of(job_id=3, compute_s=0.02, bytes_per_iter=300_000), tr, 4)
            # tcpdump may lag behind (busy machine) and stops without draining on SIGINT:
            # wait until the file stops growing
            size, still, deadline = -1, 0, time.monotonic() + 20
            while still < 3 and time.monotonic() < deadline:
                time.sleep(0.25)
                new = cap.stat().st_size if cap.exists() else 0
                still = still + 1 if new == size else 0
                size = new
        finally:
            dump.send_signal(signal.SIGINT)
            dump.wait(10)
        rx.stop()
    assert not [r for r in pcap.read_records(cap) if r.job == "job3"]  # not port 9199: plain flows
    back = [r for r in pcap.read_records(cap, ports=[port]) if r.job == "job3"]
    assert [r.iteration for r in back] == [0, 1, 2, 3]
    assert all(r.bytes == 300_000 for r in back)
    # iteration spacing seen on the wire matches the sender's own records
    for a, b in zip(sent[1:], back[1:]):
        assert b.end - b.start > 0.02 * 0.9 and b.comm_start - b.start >= 0.0
    assert sum(b.end - b.comm_start for b in back) <= sum(a.end - a.comm_start for a in sent) + 0.01
