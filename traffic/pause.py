"""Link-level flow control frames (IEEE 802.3 Annex 31B PAUSE and 802.1Qbb PFC) for the emulation's
lossless links: mltcp-switch sends them towards the hosts feeding a full priority queue, and the
userspace transport's senders stop for the time they ask, as a NIC does (a veth has no PFC).

A frame pauses for ``quanta`` x 512 bit times at the link's rate; quanta 0 resumes (XON). Pure
frame logic plus :class:`PauseListener`, a non-blocking AF_PACKET socket on the host's interface.
"""

from __future__ import annotations

import socket
import struct

ETH_P_PAUSE = 0x8808  # MAC control
PAUSE_DST = bytes.fromhex("0180c2000001")  # the reserved multicast address of MAC control frames
OP_PAUSE = 0x0001  # 802.3x: one quanta for the whole link
OP_PFC = 0x0101  # 802.1Qbb: a class-enable vector and 8 quanta
MAX_QUANTA = 0xFFFF
MIN_FRAME = 60  # without the FCS


def pause_frame(src_mac: bytes, quanta: int, classes: int | None = None) -> bytes:
    """A PAUSE frame (``classes`` None) or a PFC frame pausing the classes set in the 8-bit
    ``classes`` vector, each for ``quanta``; padded to the 60-byte minimum."""
    if not 0 <= quanta <= MAX_QUANTA:
        raise ValueError(f"quanta must be in 0..{MAX_QUANTA}, got {quanta}")
    if len(src_mac) != 6:
        raise ValueError("src_mac must be 6 bytes")
    head = PAUSE_DST + src_mac + struct.pack("!H", ETH_P_PAUSE)
    if classes is None:
        body = struct.pack("!HH", OP_PAUSE, quanta)
    else:
        if not 0 < classes <= 0xFF:
            raise ValueError(f"classes must be a non-empty 8-bit vector, got {classes}")
        body = struct.pack("!HH8H", OP_PFC, classes, *(quanta if classes >> c & 1 else 0 for c in range(8)))
    return (head + body).ljust(MIN_FRAME, b"\0")


def parse_pause(frame: bytes) -> int | None:
    """The pause a MAC control frame asks for, in quanta (for PFC the longest over its enabled
    classes: a host here sends one class), 0 = resume; None if ``frame`` is not PAUSE/PFC."""
    if len(frame) < 18 or frame[12:14] != b"\x88\x08":
        return None
    op = int.from_bytes(frame[14:16], "big")
    if op == OP_PAUSE:
        return int.from_bytes(frame[16:18], "big")
    if op == OP_PFC and len(frame) >= 34:
        vec = int.from_bytes(frame[16:18], "big")
        quanta = struct.unpack("!8H", frame[18:34])
        return max((q for c, q in enumerate(quanta) if vec >> c & 1), default=0)
    return None


def quanta_seconds(quanta: int, rate_bps: float) -> float:
    """How long ``quanta`` pause units last on a link of ``rate_bps`` (one quantum: 512 bit times)."""
    return quanta * 512.0 / rate_bps


class PauseListener:
    """Reads PAUSE/PFC frames arriving on ``ifname`` (root or CAP_NET_RAW; the socket is opened
    in the caller's network namespace) and tells whether the link is paused."""

    def __init__(self, ifname: str, rate_bps: float):
        if rate_bps <= 0:
            raise ValueError(f"rate_bps must be > 0, got {rate_bps}")
        self.rate_bps = rate_bps
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_PAUSE))
        self.sock.bind((ifname, 0))
        self.sock.setblocking(False)
        self.until = 0.0  # paused until this time (the caller's clock)
        self.frames = 0  # PAUSE/PFC frames read
        self.paused_s = 0.0  # time paused so far, as asked (an XON cuts it short)
        self._since: float | None = None

    def paused(self, now: float) -> bool:
        """Read what arrived, then: is sending paused at ``now``?"""
        while True:
            try:
                frame = self.sock.recv(128)
            except (BlockingIOError, InterruptedError):
                break
            q = parse_pause(frame)
            if q is None:
                continue
            self.frames += 1
            self.until = now + quanta_seconds(q, self.rate_bps)
        p = now < self.until
        if p and self._since is None:
            self._since = now
        elif not p and self._since is not None:
            self.paused_s += max(0.0, min(now, self.until) - self._since)
            self._since = None
        return p

    def close(self) -> None:
        self.sock.close()
