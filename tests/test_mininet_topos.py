"""emulation/topologies.py as `mn --custom` loads it: a `topos` dict whose dumbbell carries its
link options on the links, built and pinged through Mininet's API (never the `mn` command: its
failure path runs `mn -c`, which kills processes by name)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mltcp.emulation import netns

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = ROOT / "emulation" / "topologies.py"


def _load_as_mn_custom() -> dict:
    """What `mn --custom FILE` does (/usr/bin/mn, MininetRunner.custom): exec the file's source
    into an empty dict and keep what it defines."""
    ns: dict = {}
    exec(compile(TOPOLOGIES.read_text(), str(TOPOLOGIES), "exec"), ns, ns)
    return ns


def test_the_file_offers_a_dumbbell_whose_links_carry_their_options():
    ns = _load_as_mn_custom()
    assert set(ns["topos"]) == {"dumbbell"} and "shaped" in ns["links"]
    topo = ns["topos"]["dumbbell"](2, 50, 1, 30_000)
    info = topo.linkInfo("s1", "s2")
    assert info["bw"] == 50.0 and info["delay"] == "1ms" and info["max_queue_size"] == 20
    assert set(topo.hosts()) == {"a1", "a2", "b1", "b2"}
    # access links carry nothing: only the bottleneck is shaped
    assert "bw" not in topo.linkInfo("b1", "s2")


def test_link_options_round_trip():
    from mltcp.emulation.topologies import LinkParams, TopologyError

    p = LinkParams(rate_mbps=100.0, delay_ms=0.5, buffer_bytes=150_000, ecn_threshold_pkts=20)
    assert LinkParams.from_link_opts(**p.link_opts()) == p
    assert LinkParams.from_link_opts(delay="500us").delay_ms == pytest.approx(0.5)
    with pytest.raises(TopologyError, match="rate_mbps"):
        LinkParams.from_link_opts(bw=-1)


def test_exact_buffer_and_burst_travel_on_the_link():
    from mltcp.emulation.topologies import LinkParams, tc_commands

    p = LinkParams(rate_mbps=100.0, buffer_bytes=50_000, burst_bytes=0)
    opts = p.link_opts()
    assert opts["max_queue_size"] == 33 and opts["buffer_bytes"] == 50_000 and opts["burst"] == 0
    assert LinkParams.from_link_opts(**opts) == p
    assert "buffer_bytes" not in LinkParams(buffer_bytes=30_000).link_opts()  # whole packets
    flat = [" ".join(c) for c in tc_commands("d", p, "htb")]
    assert not any("burst" in c for c in flat), flat  # 0: tc's own burst (one MTU)
    assert any("limit 50000" in c for c in flat), flat
    # unset: 1 ms of the rate, at least 15 kB
    for rate, burst in ((700.0, 87_500), (50.0, 15_000)):
        flat = [" ".join(c) for c in tc_commands("d", LinkParams(rate_mbps=rate), "htb")]
        assert any(f"burst {burst} cburst {burst}" in c for c in flat), flat


def test_a_delay_node_stands_in_the_bottleneck():
    """The kernel path's delay line as the dumbbell's delay node: s1-w carries rate and buffer,
    w the delay, w-s2 nothing; without a delay no node."""
    from mininet.node import Switch

    from mltcp.emulation.topologies import Dumbbell, LinkParams, TopologyError

    class Wire(Switch):
        pass

    topo = Dumbbell(prefix="k", n=2, bottleneck=LinkParams(50.0, 1.5, 60_000), delay_node=Wire)
    assert topo.nodeInfo("kw")["cls"] is Wire and topo.nodeInfo("kw")["delay_us"] == 1500
    assert topo.bottlenecks == [("ks1", "kw")]
    info = topo.linkInfo("ks1", "kw")
    assert info["bw"] == 50.0 and info["max_queue_size"] == 40 and "delay" not in info
    assert "bw" not in topo.linkInfo("kw", "ks2") and "delay" not in topo.linkInfo("kw", "ks2")
    assert topo.job_pairs == [("ka1", "kb1"), ("ka2", "kb2")]
    plain = Dumbbell(prefix="k", n=1, bottleneck=LinkParams(50.0, 0.0, 60_000), delay_node=Wire)
    assert "kw" not in plain.switches() and plain.bottlenecks == [("ks1", "ks2")]
    with pytest.raises(TopologyError, match="rx_bridge"):
        Dumbbell(prefix="k", bottleneck=LinkParams(50.0, 1.0), delay_node=Wire, rx_bridge=True)


needs_mininet = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("brctl") is None, reason="needs root and bridge-utils (Mininet's LinuxBridge)"
)


@pytest.mark.integration
@needs_mininet
def test_the_dumbbell_builds_shapes_and_pings_through_mininets_api():
    from mininet.net import Mininet

    ns = _load_as_mn_custom()
    prefix = netns.run_prefix()
    topo = ns["topos"]["dumbbell"](2, 50, 0, 30_000, prefix=prefix)
    with netns.Cleanup(prefix) as cl:  # stops the net and removes its links, also on failure
        net = Mininet(
            topo=topo, link=ns["links"]["shaped"], controller=None, build=False, autoSetMacs=False, waitConnected=False
        )
        cl.net = net
        net.build()
        net.start()
        a1, b2 = net[prefix + "a1"], net[prefix + "b2"]
        assert net.ping([a1, b2], timeout="2") == 0.0
        s1 = net[prefix + "s1"]
        bott = next(
            i
            for i in s1.intfList()
            if i.link and {i.link.intf1.node.name, i.link.intf2.node.name} == {prefix + "s1", prefix + "s2"}
        )
        qd = s1.cmd(f"tc qdisc show dev {bott.name}")
        assert "htb" in qd and "bfifo" in qd and "limit 30000b" in qd, qd
        cls = s1.cmd(f"tc class show dev {bott.name}")
        assert "rate 50Mbit" in cls, cls
    left = [n for n in netns.root_links() if n.startswith(prefix)]
    assert not left, left


def test_receive_packet_steering_command():
    from mltcp.emulation.topologies import rps_mask, steer_flows_command

    assert rps_mask(2) == "3" and rps_mask(8) == "ff" and rps_mask(1) == "1"
    assert rps_mask(32) == "ffffffff" and rps_mask(36) == "f,ffffffff" and rps_mask(64) == "ffffffff,ffffffff"
    line = steer_flows_command(["p-eth0", "p-eth1"], "3")
    assert line.startswith("unshare -m sh -c ") and line.endswith(" 2>&1")
    for name in ("p-eth0", "p-eth1"):
        assert f"/sys/class/net/{name}/queues/rx-*/rps_cpus" in line
    assert "umount -l /sys && mount -t sysfs sysfs /sys" in line and "echo 3 >" in line
