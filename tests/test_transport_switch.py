"""The userspace transport through the project's software switch (`mltcp-switch` dataplane) with
impairments injected by the switch on both directions: 5 % loss, 1 % reordering, 1 % duplication
of data *and* ACKs, on a 100 Mb/s, 1 ms link. Every algorithm must deliver every byte exactly
once and in order (byte check against the pattern, CRC-32 of the whole stream equal on both
sides). Two namespaces, the switch in this process; everything is removed even on failure."""

import os

import pytest
from _transport_cli import transfer

from mltcp.emulation.switch import pipeline as pl
from mltcp.emulation.switch.links import LinkConfig
from mltcp.emulation.switch.runtime import free_tcp_port, start_switch
from mltcp.emulation.switch.testbed import Testbed, have_root_netns

pytestmark = pytest.mark.root
_why = have_root_netns()
ALGORITHMS = ["reno", "cubic", "dcqcn", "mltcp-reno", "mltcp-cubic", "mltcp-dcqcn"]


def _mac(tb: Testbed, ns: str, ifname: str) -> bytes:
    out = tb.run(ns, "cat", f"/sys/class/net/{ifname}/address").stdout.strip()
    return bytes.fromhex(out.replace(":", ""))


@pytest.fixture(scope="module")
def impaired_path():
    if _why:
        pytest.skip(_why)
    pid = os.getpid() % 100000
    tb = Testbed("tsw")
    h = None
    try:
        na, nb = tb.netns("a"), tb.netns("b")
        sa, ha = tb.veth(f"tws{pid}a", f"twh{pid}a", ns_b=na)
        sb, hb = tb.veth(f"tws{pid}b", f"twh{pid}b", ns_b=nb)
        tb.addr(ha, "10.79.1.1/16", na)
        tb.addr(hb, "10.79.2.1/16", nb)
        mac_a, mac_b = _mac(tb, na, ha), _mac(tb, nb, hb)
        # the switch rewrites the destination MAC, so any neighbour entry does
        tb.run(na, "ip", "neigh", "add", "10.79.2.1", "lladdr", "02:00:00:00:00:02", "dev", ha)
        tb.run(nb, "ip", "neigh", "add", "10.79.1.1", "lladdr", "02:00:00:00:00:01", "dev", hb)

        def link(seed):
            return LinkConfig(
                rate_bps=100e6,
                delay_s=0.001,
                buffer_pkts=100,
                loss_pct=5,
                reorder_pct=1,
                duplicate_pct=1,
                reorder_gap_s=0.002,
                seed=seed,
            )

        h = start_switch({1: sa, 2: sb}, {1: link(3), 2: link(4)}, grpc_port=free_tcp_port(), grpc_host="127.0.0.1")
        h.pipeline.lpm.set(0x0A4F0100, 24, pl.Forward(mac_a, 1))
        h.pipeline.lpm.set(0x0A4F0200, 24, pl.Forward(mac_b, 2))
        h.pipeline.active = True
        yield na, nb, h
    finally:
        if h is not None:
            h.stop()
        tb.close()


@pytest.mark.parametrize("cc", ALGORITHMS)
def test_no_byte_lost_duplicated_or_reordered_through_the_impaired_switch(impaired_path, cc):
    na, nb, h = impaired_path
    before = {
        n: dict(lost=p.queue.lost, dup=p.queue.duplicated, reo=p.queue.reordered) for n, p in h.dataplane.ports.items()
    }
    _, sent, f = transfer(na, nb, "10.79.2.1:9199", cc, 1_000_000, 3, timeout_s=60)
    print(
        f"{cc}: {f['bytes']} bytes intact, {sent['retransmits']} retransmissions, "
        f"{f.get('duplicates', 0)} duplicates discarded; switch so far: "
        + ", ".join(
            f"port {n} lost {p.queue.lost} dup {p.queue.duplicated} reordered {p.queue.reordered}"
            for n, p in h.dataplane.ports.items()
        )
    )
    assert sent["retransmits"] > 0  # losses happened and were repaired
    for n, p in h.dataplane.ports.items():  # both directions were impaired
        q = p.queue
        assert q.lost > before[n]["lost"] and q.duplicated > before[n]["dup"], (n, cc)
    assert sum(p.queue.reordered - before[n]["reo"] for n, p in h.dataplane.ports.items()) > 0
