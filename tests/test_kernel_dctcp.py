"""bpf_dctcp (traffic/kernel/dctcp.bpf.c), the DCTCP this kernel lacks: registered and removed
by base_cc, it negotiates ECN by itself (TCP_CONG_NEEDS_ECN) and carries a transfer between two
namespaces. Root only."""

import socket
import subprocess
import threading

import pytest

from mltcp.traffic.kernel import base_cc, loader
from mltcp.traffic.kernel.netns import in_netns
from mltcp.traffic.kernel.transport import tcp_info
from _kernel_prereq import missing
from _veth_pair import veth_pair  # noqa: F401  (a fixture)

REASON = missing()
if REASON:
    print(f"test_kernel_dctcp: skipping: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

TCPI_OPT_ECN = 8
NBYTES = 2_000_000


@pytest.fixture
def dctcp():
    mine = base_cc.ensure("dctcp")
    try:
        yield base_cc.kernel_name("dctcp")
    finally:
        if mine:
            base_cc.remove("dctcp")
            assert "bpf_dctcp" not in loader.available()


def test_dctcp_negotiates_ecn_itself_and_transfers(dctcp, veth_pair):
    tx, rx = veth_pair
    assert dctcp in loader.available()
    for ns in (tx, rx):  # ECN off on both hosts: the algorithm must ask for it
        subprocess.run(["nsenter", f"--net={ns}", "sysctl", "-qw", "net.ipv4.tcp_ecn=0"], check=True)
    with in_netns(rx):
        srv = socket.socket()
    srv.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, dctcp.encode())
    srv.bind(("10.77.0.2", 0))
    srv.listen(1)
    got = []

    def receive():
        c, _ = srv.accept()
        got.append(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode())
        n = 0
        while b := c.recv(1 << 16):
            n += len(b)
        got.append(n)
        c.close()

    t = threading.Thread(target=receive)
    t.start()
    try:
        with in_netns(tx):
            c = socket.socket()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, dctcp.encode())
        c.settimeout(10)
        c.connect(srv.getsockname())
        c.sendall(b"d" * NBYTES)
        info = tcp_info(c)
        c.close()
    finally:
        t.join(20)
        srv.close()
    assert got == [dctcp, NBYTES]
    assert info["options"] & TCPI_OPT_ECN, f"ECN not negotiated: tcpi_options={info['options']:#x}"
