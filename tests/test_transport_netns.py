"""The transport between two network namespaces: a real 100 Mb/s htb bottleneck with a small bfifo
(drops) and kernel-set CE marks (nftables `ip ecn set ce` on 5 % of data). Needs root, ip, tc, nft."""

import os
import shutil
import subprocess

import pytest

from _transport_cli import transfer

pytestmark = pytest.mark.root


def _sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


@pytest.fixture
def link():
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")
    for tool in ("ip", "tc", "nft"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}")
    pid = os.getpid()
    a, b = f"mtna{pid}", f"mtnb{pid}"
    try:
        _sh("ip", "netns", "add", a)
        _sh("ip", "netns", "add", b)
        _sh("ip", "link", "add", "tna", "netns", a, "type", "veth", "peer", "tnb", "netns", b)
        _sh("ip", "-n", a, "addr", "add", "10.78.0.1/24", "dev", "tna")
        _sh("ip", "-n", b, "addr", "add", "10.78.0.2/24", "dev", "tnb")
        for ns, dev in ((a, "tna"), (b, "tnb")):
            _sh("ip", "-n", ns, "link", "set", dev, "up")
        _sh("tc", "-n", a, "qdisc", "add", "dev", "tna", "root", "handle", "1:", "htb", "default", "10")
        _sh(
            "tc",
            "-n",
            a,
            "class",
            "add",
            "dev",
            "tna",
            "parent",
            "1:",
            "classid",
            "1:10",
            "htb",
            "rate",
            "100mbit",
            "ceil",
            "100mbit",
        )
        _sh("tc", "-n", a, "qdisc", "add", "dev", "tna", "parent", "1:10", "handle", "10:", "bfifo", "limit", "30000")
        yield a, b
    finally:
        for ns in (a, b):
            _sh("ip", "netns", "del", ns, check=False)


def _mark_ce(ns):
    _sh("ip", "netns", "exec", ns, "nft", "add", "table", "ip", "mltcptest")
    _sh("ip", "netns", "exec", ns, "nft", "add chain ip mltcptest pre { type filter hook prerouting priority -150; }")
    _sh(
        "ip",
        "netns",
        "exec",
        ns,
        "nft",
        "add rule ip mltcptest pre udp dport 9199 numgen random mod 20 == 0 ip ecn set ce",
    )


def _run(link, cc, nbytes=1_500_000, iterations=2):
    a, b = link
    return transfer(a, b, "10.78.0.2:9199", cc, nbytes, iterations)


def test_reno_through_small_buffer_recovers_losses(link):
    recs, tx, rx = _run(link, "reno")
    assert tx["retransmits"] > 0 and tx["loss_events"] > 0  # the 30 KB bfifo dropped
    assert [r["iteration"] for r in recs] == [0, 1]


def test_kernel_ce_marks_reach_window_and_rate_senders(link):
    _mark_ce(link[1])
    _, tx, rx = _run(link, "mltcp-reno")
    assert rx["ce"] > 0 and tx["ece"] > 0 and tx["ecn_events"] > 0
    _, tx, rx = _run(link, "mltcp-dcqcn")
    assert rx["ce"] > 0 and rx["cnps"] > 0 and tx["cnp"] > 0
