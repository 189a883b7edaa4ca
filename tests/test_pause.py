"""PAUSE / PFC frames (traffic/pause.py): building and parsing them, a host's listener on a real
veth, and the userspace sender holding its data while its link is paused."""

from __future__ import annotations

import socket
import time

import pytest

from mltcp.traffic.pause import MAX_QUANTA, PauseListener, parse_pause, pause_frame, quanta_seconds

MAC = bytes.fromhex("024d4c5443fd")


def test_frames_round_trip():
    p = pause_frame(MAC, 1000)
    assert len(p) == 60 and p[:6] == bytes.fromhex("0180c2000001") and p[6:12] == MAC
    assert p[12:16] == b"\x88\x08\x00\x01" and parse_pause(p) == 1000
    pfc = pause_frame(MAC, MAX_QUANTA, classes=1 << 5)
    assert pfc[14:18] == b"\x01\x01\x00\x20" and parse_pause(pfc) == MAX_QUANTA
    assert parse_pause(pause_frame(MAC, 0, classes=0b11)) == 0  # resume
    assert parse_pause(b"\x00" * 12 + b"\x08\x00" + b"\x00" * 46) is None  # IPv4: not a pause
    assert parse_pause(b"\x00" * 12 + b"\x88\x08\x00\x02" + b"\x00" * 42) is None  # another opcode
    assert quanta_seconds(MAX_QUANTA, 25e6) == pytest.approx(65535 * 512 / 25e6)


@pytest.mark.parametrize(
    "kw", [dict(quanta=-1), dict(quanta=1 << 16), dict(quanta=1, classes=0), dict(quanta=1, classes=256)]
)
def test_bad_frames_are_refused(kw):
    with pytest.raises(ValueError):
        pause_frame(MAC, **kw)


class _Paused:
    """A stand-in listener: paused until ``until`` on the caller's clock."""

    def __init__(self, until: float):
        self.until = until

    def paused(self, now: float) -> bool:
        return now < self.until


def test_a_paused_sender_sends_nothing_until_resumed():
    from mltcp.traffic.transport.sender import FlowSender, build_cc

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    now = [100.0]
    pause = _Paused(until=100.5)
    f = FlowSender(rx.getsockname(), build_cc("reno"), clock=lambda: now[0], pause=pause)
    try:
        f.enqueue(50_000, 0)
        wake = f.service(now[0])
        assert f.stats["sent"] == 0 and 100.0 < wake <= 100.5
        with pytest.raises(BlockingIOError):
            rx.recv(2048)
        now[0] = 100.6  # the pause has run out
        f.service(now[0])
        assert f.stats["sent"] > 0
        assert rx.recv(2048)
    finally:
        f.close()
        rx.close()


def _have_root_veth() -> str | None:
    from mltcp.emulation.switch.testbed import have_root_netns

    return have_root_netns()


@pytest.mark.skipif(_have_root_veth() is not None, reason=_have_root_veth() or "")
def test_listener_on_a_veth_pauses_and_resumes():
    from mltcp.emulation.switch.testbed import Testbed

    tb = Testbed("pz")
    try:
        a, b = tb.veth(f"{tb.tag}a", f"{tb.tag}b")
        lis = PauseListener(b, rate_bps=25e6)
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        tx.bind((a, 0))
        try:
            now = time.monotonic()
            assert not lis.paused(now)
            tx.send(pause_frame(MAC, MAX_QUANTA, classes=1 << 3))
            time.sleep(0.05)
            t = time.monotonic()
            assert lis.paused(t) and lis.until == pytest.approx(t + quanta_seconds(MAX_QUANTA, 25e6), abs=0.06)
            tx.send(pause_frame(MAC, 0, classes=1 << 3))  # resume
            time.sleep(0.05)
            assert not lis.paused(time.monotonic())
            assert lis.frames == 2 and 0.0 < lis.paused_s < 0.5
        finally:
            tx.close()
            lis.close()
    finally:
        tb.close()


def test_an_explicit_reordering_window_leaves_loss_detection_to_rack():
    """A lossless link's senders (reo_wnd given) do not take three duplicate ACKs for a loss:
    unpinned priority queues reorder a flow by far more than three segments."""
    from mltcp.traffic.transport.sender import FlowSender, build_cc

    plain = FlowSender(("127.0.0.1", 9), build_cc("dcqcn", line_rate=1e6))
    tolerant = FlowSender(("127.0.0.1", 9), build_cc("dcqcn", line_rate=1e6), reo_wnd=80.0)
    try:
        assert plain.sb.dupthresh == 3 and tolerant.sb.dupthresh > 1e6
    finally:
        plain.close()
        tolerant.close()
