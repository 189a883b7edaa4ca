"""Link mode ``bmv2``: simple_switch_grpc as the emulation's P4 switch (mltcp.emulation.bmv2).

Pure parts first (command lines, queue shaping, thrift output, bitstrings); then, as root with
p4c and BMv2 found by mltcp.tools, a dumbbell through one BMv2 switch: ping, two UDP jobs with a
queue-depth ECN threshold (marks read back over P4Runtime), logs and per-port pcaps kept on
request, and nothing of the run left behind.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mltcp import tools
from mltcp.controlplane.bmv2 import parse_register_dump, parse_thrift_addr
from mltcp.controlplane.client import ControlPlaneError
from mltcp.controlplane.counters import bitstring_to_int
from mltcp.emulation import bmv2
from mltcp.emulation.topologies import LinkParams, TopologyError, features
from mltcp.emulation.network import resolve_link_mode


def test_queue_rate_is_full_sized_frames_per_second():
    assert bmv2.queue_rate_pps(100) == round(100e6 / 8 / 1514)  # 8256 pps
    assert bmv2.queue_rate_pps(0.001) == 1  # never 0 (= stopped)


def test_queue_commands_depth_before_rate_per_port():
    txt = bmv2.queue_commands({3: (8256, 33), 1: (None, 64), 2: (100, None)})
    assert txt.splitlines() == [
        "set_queue_depth 64 1",
        "set_queue_rate 100 2",
        "set_queue_depth 33 3",
        "set_queue_rate 8256 3",
    ]


def test_switch_argv(monkeypatch, tmp_path):
    for sub in ("bin", "fast/bin"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
        f = tmp_path / sub / "simple_switch_grpc"
        f.write_text("#!/bin/sh\n")
        f.chmod(0o755)
    monkeypatch.setenv("MLTCP_P4TOOLS", str(tmp_path))
    argv = bmv2.switch_argv({2: "b", 1: "a"}, 50051, 9091, log_path=tmp_path / "s.log")
    assert argv[0] == str(tmp_path / "fast" / "bin" / "simple_switch_grpc")  # measurement build
    assert argv[argv.index("-i") : argv.index("-i") + 4] == ["-i", "1@a", "-i", "2@b"]
    assert "--no-p4" in argv and argv[-2:] == ["--grpc-server-addr", "127.0.0.1:50051"]
    assert "--log-file" not in argv  # the fast build has no logger
    ipc = argv[argv.index("--notifications-addr") + 1]
    assert ipc.startswith("ipc://") and str(os.getpid()) in ipc  # not the shared default
    dbg = bmv2.switch_argv({1: "a"}, 1, 2, log_path=tmp_path / "s.log", debug=True, pcap_dir=tmp_path)
    assert dbg[0] == str(tmp_path / "bin" / "simple_switch_grpc")
    assert "--log-file" in dbg and dbg[dbg.index("--pcap") + 1] == str(tmp_path)


def test_register_dump_and_thrift_address():
    out = "RuntimeCmd: MyIngress.job_bytes_ratio= 0, 7, 65535\nRuntimeCmd: \n"
    assert parse_register_dump(out, "MyIngress.job_bytes_ratio") == [0, 7, 65535]
    with pytest.raises(ControlPlaneError, match="Invalid register"):
        parse_register_dump("RuntimeCmd: Error: Invalid register name (x)\n", "x")
    assert parse_thrift_addr("10.0.0.1:9090") == ("10.0.0.1", 9090)
    assert parse_thrift_addr(":9091") == ("127.0.0.1", 9091) and parse_thrift_addr(9) == ("127.0.0.1", 9)
    for bad in ("9090x", "host:", "h:70000"):
        with pytest.raises(ValueError):
            parse_thrift_addr(bad)


@pytest.mark.parametrize(
    "raw,width,value",
    [
        (b"", 16, 0),
        (b"\x00\x00", 16, 0),  # PI's canonical zero, the padded zero
        (b"\x02", 9, 2),
        (b"\x00\x02", 9, 2),  # minimal width (BMv2) and padded (mltcp-switch)
        (b"\x10\xe1", 16, 4321),
        (b"\x01\xff", 9, 511),
    ],
)
def test_bitstring_both_encodings(raw, width, value):
    assert bitstring_to_int(raw, width) == value


@pytest.mark.parametrize("raw,width", [(b"\x02\x00", 9), (b"\x00\x00\x01", 16), (b"\x01\x00\x00", 19 - 3)])
def test_bitstring_too_wide_is_an_error(raw, width):
    with pytest.raises(ValueError):
        bitstring_to_int(raw, width)


def test_estimated_drops_leave_out_tail_loss_probes():
    from mltcp.records import IterationRecord

    recs = [IterationRecord("A", 0, 0, 0, 1, 10, 5, 0)]
    stats = {"A": [{"retransmits": 7, "tlp": 3}], "B": [{"retransmits": 2, "tlp": 2}]}
    assert bmv2.estimated_drops(recs, stats) == 4
    assert bmv2.estimated_drops(recs, {}) == 5  # kernel TCP: its retransmissions


def test_link_mode_bmv2_features_and_missing_tools(monkeypatch, tmp_path):
    assert features("bmv2") == {"rate": True, "buffer": True, "delay": False, "ecn": True}
    monkeypatch.setenv("MLTCP_P4TOOLS", str(tmp_path))  # an empty tools folder
    with pytest.raises(TopologyError, match="simple_switch_grpc"):
        resolve_link_mode("bmv2", "dumbbell")


def test_cli_pcap_needs_switch_logs_and_bmv2():
    for extra in (["--pcap"], ["--link-mode", "switch", "--switch-logs", "/tmp/x"]):
        r = subprocess.run(
            [sys.executable, "-m", "mltcp.cli", "emulate", "two-jobs", *extra],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode != 0 and ("--pcap" in r.stderr or "--switch-logs" in r.stderr), r.stderr


# ------------------------------------------------------------------ real BMv2 in Mininet


def _bm_why():
    from mltcp.emulation.netns import have_mininet_prereqs

    return have_mininet_prereqs() or tools.why_missing("p4c-bm2-ss", "simple_switch_grpc", "simple_switch_CLI")


@pytest.mark.integration
@pytest.mark.root
def test_dumbbell_through_bmv2_marks_ecn_keeps_pcaps_and_cleans_up(tmp_path):
    why = _bm_why()
    if why:
        print(f"skipped: {why}")
        pytest.skip(why)
    from mininet.log import setLogLevel

    from mltcp.emulation import netns
    from mltcp.emulation.arm import run_arm
    from mltcp.emulation.plan import Plan, job_plan
    from mltcp.emulation.network import build_network
    from mltcp.emulation.topologies import make_topology

    setLogLevel("error")

    # the network alone: one BMv2 on the path (the receiver side is a kernel bridge); ping
    prefix = netns.run_prefix()
    bn = LinkParams(rate_mbps=20, buffer_bytes=60_000, ecn_threshold_pkts=5)
    with netns.Cleanup(prefix) as cl:
        topo = make_topology("dumbbell", prefix, bn, n_jobs=2, switch_cls=bmv2.switch_class(tmp_path / "net"))
        net = build_network(topo, "bmv2", cl)
        (sw,) = [s for s in net.switches if isinstance(s, bmv2.Bmv2Switch)]
        pid = sw.proc.pid
        assert sw.queues == {1: (bmv2.queue_rate_pps(20), 40)}  # the bottleneck port s1-eth1
        assert sw.ecn == [[1, 5]] and len(sw.routes) == 4
        for s, r in topo.job_pairs:
            out = net[s].cmd(f"ping -c 1 -W 2 {topo.ip_of(r)}")
            assert " 0% packet loss" in out, out
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert not netns.leftovers(prefix, [pid])
    assert (tmp_path / "net" / f"{prefix}s1.log").is_file()

    # two UDP Reno jobs that queue up at 20 Mb/s: ECN marks counted by mltcp.p4 on BMv2
    jobs = [job_plan("j0", 400_000, 0.05, 0.0, 4), job_plan("j1", 400_000, 0.05, 0.01, 4)]
    plan = Plan("t", "dumbbell", bn, jobs, warmup=1)
    arm = run_arm(plan, "reno", "udp", link_mode="bmv2", switch_logs=tmp_path / "arm", pcap=True)
    assert arm.link_mode == "bmv2" and len(arm.records) == 8
    assert arm.ecn_marks is not None and arm.ecn_marks > 0
    pcaps = sorted(p.name for p in (tmp_path / "arm").rglob("*.pcap"))
    assert len(pcaps) == 6 and any(p.endswith("eth1_out.pcap") for p in pcaps)  # 3 ports, in/out
    out_pcap = next((tmp_path / "arm").rglob("*eth1_out.pcap"))
    from scapy.utils import rdpcap
    from scapy.layers.inet import IP

    ce = sum(1 for p in rdpcap(str(out_pcap)) if p.haslayer(IP) and p[IP].tos & 3 == 3)
    assert ce == arm.ecn_marks  # what the counters say is what left the bottleneck port marked
