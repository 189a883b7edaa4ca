"""The delay line (traffic/kernel/delayline.c) and the ECN marker (ecn_mark.bpf.c) in the kernel
dumbbell (the emulation's, in Mininet): the base RTT it gives, data through it intact, the
counters, CE marks instead of drops, and nothing left behind (process, links, node shells). Needs
root, gcc, clang, bpftool, ip/tc, brctl; skips with the reason otherwise."""

import os
import re
import shutil
import subprocess

import pytest

from mltcp.emulation.netns import leftovers, run_prefix
from mltcp.traffic.kernel import delayline
from mltcp.traffic.kernel.net import KernelNet
from mltcp.traffic.kernel.transport import KernelTransport, Receiver

pytestmark = [pytest.mark.integration, pytest.mark.root]

REASON = (
    "needs root"
    if os.geteuid() != 0
    else next(
        (
            f"{t} not installed"
            for t in ("gcc", "clang", "bpftool", "ip", "tc", "ping", "brctl", "mnexec")
            if shutil.which(t) is None
        ),
        None,
    )
)
if REASON:
    pytestmark.append(pytest.mark.skip(reason=REASON))


def _rtts(d: KernelNet) -> list[float]:
    out, _, _ = d.senders[0].pexec("ping", "-c", "6", "-i", "0.05", "-q", "-n", d.ip(d.receivers[0]))
    m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)", out)
    assert m, out
    return [float(x) for x in m.groups()]


@pytest.fixture
def wired():
    d = KernelNet(n=1, rate_mbit=50, buffer_bytes=60_000, delay_us=3000, prefix=run_prefix() + "w")
    pid = None
    try:
        d.build()
        pid = d.wire.proc.pid
        yield d
    finally:
        d.destroy()
        assert not leftovers(d.prefix, [pid] if pid else [])
        if pid is not None:
            assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()


def test_rtt_is_twice_the_delay(wired):
    mn, avg, mx = _rtts(wired)
    assert 6.0 <= mn < 9.0, (mn, avg, mx)  # 2 x 3 ms plus the stack; a loaded machine adds, never removes


def test_without_delay_no_wire():
    d = KernelNet(n=1, rate_mbit=50, buffer_bytes=60_000, min_rto_ms=5, idle_restart=False, prefix=run_prefix() + "n")
    try:
        d.build()
        assert d.wire is None and d.topo.name("w") not in d.topo.switches()
        assert _rtts(d)[0] < 3.0
        a, b = d.senders[0], d.receivers[0]  # the senders' settings, not the receivers'
        assert re.search(r"rto_min (lock )?5ms", a.cmd("ip -4 route show")) and "rto_min" not in b.cmd(
            "ip -4 route show"
        )
        assert [h.cmd("sysctl -n net.ipv4.tcp_slow_start_after_idle").strip() for h in (a, b)] == ["0", "1"]
        port = d.bottleneck  # s1's port: htb at tc's own burst (one MTU), bfifo
        cls, qd = port.node.cmd(f"tc class show dev {port.name}"), port.node.cmd(f"tc qdisc show dev {port.name}")
        assert "rate 50Mbit" in cls and re.search(r"burst 1[56]\d\db ", cls), cls
        assert "bfifo" in qd and "limit 60000b" in qd, qd
    finally:
        d.destroy()
    assert not leftovers(d.prefix)


def test_bytes_cross_intact_and_counted(wired):
    b = wired.receivers[0]
    rx = Receiver("0.0.0.0", 0, ns=wired.ns(b))
    tr = KernelTransport(wired.ip(b), rx.port, cc="reno", ns=wired.ns(wired.senders[0]))
    try:
        for it in range(3):
            tr.send_iteration(400_000, it)
    finally:
        tr.close()
        rx.close()
    wired.wire.stop()
    st = wired.wire.stats
    assert st["overflow"] == 0 and st["errors"] == 0
    assert st["forwarded_ab"] > 3 * 400_000 / 1514  # router -> receiver: at least the data frames
    assert st["forwarded_ba"] > 0  # the ACKs back


def test_bad_delay_refused():
    with pytest.raises(delayline.DelayLineError):
        delayline.DelayLine("a", "b", -1)
    p = subprocess.run([str(delayline.build()), "a", "b", "1ms"], capture_output=True, text=True)
    assert p.returncode == 2 and "whole number of microseconds" in p.stderr


def test_ecn_marker_marks_instead_of_dropping():
    from mltcp.traffic.kernel.transport import tcp_info

    d = KernelNet(n=1, rate_mbit=50, buffer_bytes=60_000, delay_us=1000, ecn_k_pkts=10, prefix=run_prefix() + "e")
    try:
        d.build()
        a, b = d.senders[0], d.receivers[0]
        for h in (a, b):
            assert h.cmd("sysctl -n net.ipv4.tcp_ecn").strip() == "1"
        rx = Receiver("0.0.0.0", 0, ns=d.ns(b))
        tr = KernelTransport(d.ip(b), rx.port, cc="reno", ns=d.ns(a))
        try:
            for it in range(3):
                tr.send_iteration(1_000_000, it)
            retrans = tcp_info(tr.sock)["total_retrans"]
        finally:
            tr.close()
            rx.close()
        st = d.ecn_stats()
        assert st["seen"] > 3 * 1_000_000 / 1514 and st["marked"] > 0
        assert retrans <= 2  # the window shrinks on CE long before the 60 kB buffer fills
    finally:
        d.destroy()
    assert not leftovers(d.prefix)


def test_a_failed_build_leaves_nothing(monkeypatch):
    """A build that fails after the net runs (here: the ECN marker) stops the delay line and
    removes the net: no links, no node shells, no delay-line process."""
    from mltcp.traffic.kernel import net as knet

    def boom(*_a):
        raise knet.NetnsError("injected")

    monkeypatch.setattr(knet, "build_ecn_marker", boom)
    d = KernelNet(n=1, rate_mbit=50, buffer_bytes=60_000, delay_us=1000, ecn_k_pkts=10, prefix=run_prefix() + "f")
    with pytest.raises(knet.NetnsError, match="injected"):
        d.build()
    assert d.wire is not None and d.wire.proc is None and d.wire.stats is not None  # it ran, and was stopped
    assert not leftovers(d.prefix)
    port = d.prefix + "w-eth1"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        assert port.encode() not in args, f"delay line {pid} still runs"
