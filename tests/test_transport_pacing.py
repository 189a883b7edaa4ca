"""NIC-rate pacing of the userspace transport's window-based flows (FlowSender(nic_rate=...)),
driven with a fake clock: no timing assertions."""

import selectors
import socket

import pytest

from mltcp.traffic.transport import FlowSender, build_cc, sender as sender_mod
from mltcp.traffic.transport.sender import WIRE_OVERHEAD


@pytest.fixture
def peer():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(2)
    yield s
    s.close()


def _drain(peer):
    n = 0
    peer.settimeout(0.2)
    try:
        while True:
            peer.recvfrom(65536)
            n += 1
    except socket.timeout:
        return n


def test_window_flow_paced_at_nic_rate(peer):
    mss = 1000
    need = mss + WIRE_OVERHEAD
    rate = 100 * need  # 100 datagrams per second
    f = FlowSender(
        peer.getsockname(), build_cc("reno"), payload=mss, nic_rate=rate, nic_burst=4, nic_wake=2, clock=lambda: 0.0
    )
    try:
        f.st.cwnd[0] = 100 * mss  # the window is not what limits
        f.enqueue(50 * mss, 0)
        wake = f.service(0.0)
        assert f.stats["sent"] == 4  # one bucket (nic_burst datagrams), not the 16-datagram burst
        assert wake == pytest.approx(2 / 100)  # sleeps until nic_wake datagrams' worth is back
        f.service(0.005)  # half a datagram's time later: nothing
        assert f.stats["sent"] == 4
        f.service(0.02)  # 2 datagrams' worth accrued
        assert f.stats["sent"] == 6
        f.service(0.5)  # long gap (no RTO yet): the bucket is capped at nic_burst
        assert f.stats["sent"] == 10
        assert _drain(peer) == 10
    finally:
        f.close()


def test_unpaced_flow_sends_window_burst(peer):
    mss = 1000
    f = FlowSender(peer.getsockname(), build_cc("reno"), payload=mss, clock=lambda: 0.0)
    try:
        f.st.cwnd[0] = 100 * mss
        f.enqueue(50 * mss, 0)
        assert f.service(0.0) == 0.0  # burst of 16 sent, window open: come back at once
        assert f.stats["sent"] == 16
        _drain(peer)
    finally:
        f.close()


def test_paced_flow_still_window_limited(peer):
    mss = 1000
    f = FlowSender(peer.getsockname(), build_cc("reno"), payload=mss, nic_rate=1e9, clock=lambda: 0.0)
    try:
        f.st.cwnd[0] = 3 * mss
        f.enqueue(50 * mss, 0)
        f.service(0.0)
        f.service(0.5)
        assert f.stats["sent"] == 3  # a fast NIC does not override the window
        _drain(peer)
    finally:
        f.close()


@pytest.mark.parametrize(
    "kw",
    [
        dict(nic_rate=0),
        dict(nic_rate=-1.0),
        dict(nic_rate=1e6, nic_burst=0),
        dict(nic_rate=1e6, nic_burst=2, nic_wake=3),
    ],
)
def test_bad_pacing_parameters(peer, kw):
    with pytest.raises(ValueError):
        FlowSender(peer.getsockname(), build_cc("reno"), **kw)


def test_run_until_uses_microsecond_timer_when_paced(peer, monkeypatch):
    """epoll rounds timeouts up to 1 ms, which would cap a paced flow at one bucket per ms."""
    used = []
    real = selectors.SelectSelector

    class Spy(real):
        def __init__(self):
            used.append("select")
            super().__init__()

    monkeypatch.setattr(sender_mod.selectors, "SelectSelector", Spy)
    f = FlowSender(peer.getsockname(), build_cc("reno"), payload=1000, nic_rate=1e7)
    try:
        sender_mod.run_until([f], lambda: True)
        assert used == ["select"]
        g = FlowSender(peer.getsockname(), build_cc("reno"), payload=1000)
        try:
            sender_mod.run_until([g], lambda: True)
            assert used == ["select"]  # unpaced: the default (epoll) selector
        finally:
            g.close()
    finally:
        f.close()
