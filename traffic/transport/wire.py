"""Wire format of the userspace MLTCP transport: the 12-byte MLTCP shim, then the transport header.

A struct codec (not scapy) because it runs per datagram on the data path. The shim layout is the
one in docs/CONTRACTS.md and :mod:`mltcp.traffic.header`; the transport header follows it::

    0        8        16       24       32
    +--------+--------+--------+--------+
    |          conn_id, low 32 bits     |   48-bit random id per sending flow
    +--------+--------+--------+--------+
    |                                   |
    +             seq (u64)             +   stream offset of the first payload byte
    |                                   |
    +--------+--------+--------+--------+
    |                                   |
    +             ack (u64)             +   cumulative ack: next byte expected (ACKs)
    |                                   |
    +--------+--------+--------+--------+
    |            tsval (u32, us)        |   sender's clock when this datagram left
    +--------+--------+--------+--------+
    |            tsecr (u32, us)        |   tsval echoed (ACKs)
    +--------+--------+--------+--------+
    |   length (u16)  | tflags | nsack  |   payload bytes; DATA/RETX/FIN; SACK blocks that follow
    +--------+--------+--------+--------+
    |  ce_count (u16) | conn_id high 16 |   CE-marked datagrams since the previous ACK
    +--------+--------+--------+--------+
    | nsack x (start - ack u32, end - ack u32)   SACK blocks relative to ack, start < end
    +--------+--------+--------+--------+
    | payload (length bytes)
    +--------+--------+--------+--------+
    | connection key (16 bytes)         |   tflag T_KEY only: the sender's handshake
    +--------+--------+--------+--------+
    | MAC (8 bytes)                     |   tflag T_AUTH: keyed BLAKE2b of all the bytes above
    +--------+--------+--------+--------+

The key and the MAC are :mod:`.auth`'s (docs/security.md): with T_AUTH a datagram's last 8 bytes
are its tag, checked before anything in it is used.

Sequence numbers are 64-bit stream offsets (they never wrap: 2^64 bytes is 16 EiB); SACK blocks are
32-bit offsets from the cumulative ack, which the receive window (:data:`RCV_WINDOW`, far below
2^32) keeps in range. The connection id's 48 random bits (the header's former reserved u16 holds
the high 16) are what an off-path sender would have to guess, on top of the flow's address and
ephemeral port; see docs/hardening-inputs.md.
"""

from __future__ import annotations

import secrets
import struct
from typing import NamedTuple

# Shim (see docs/CONTRACTS.md); duplicated as constants so the data path does not import scapy.
MLTCP_UDP_PORT = 9199
MLTCP_VERSION = 1
SHIM = struct.Struct("!BBHIHH")
SHIM_LEN = SHIM.size  # 12
FLAG_ACK, FLAG_CNP, FLAG_ITER_START, FLAG_ECE = 0x1, 0x2, 0x4, 0x8

# Transport header.
HDR = struct.Struct("!IQQIIHBBHH")
HDR_LEN = HDR.size  # 36
FIXED_LEN = SHIM_LEN + HDR_LEN  # 48
SHIM_HDR = struct.Struct("!BBHIHH" + "IQQIIHBBHH")
SACK = struct.Struct("!II")
MAX_SACK = 4
T_DATA, T_RETX, T_FIN = 0x1, 0x2, 0x4
T_AUTH, T_KEY = 0x8, 0x10  # a MAC ends the datagram; the connection key precedes it
TAG_LEN, KEY_LEN = 8, 16  # as traffic.transport.auth

IP_UDP_OVERHEAD = 28  # IPv4 + UDP
# 1500-byte IP datagrams: 1500 - 28 - 48 - 8 (MAC) - 16 (the handshake's key, first datagrams
# only) = 1400 payload bytes.
DEFAULT_PAYLOAD = 1500 - IP_UDP_OVERHEAD - FIXED_LEN - TAG_LEN - KEY_LEN

Q16_ONE = 0xFFFF
U32 = 0xFFFFFFFF
U64 = (1 << 64) - 1
CONN_BITS = 48
# Receive window: how far past the cumulative ack a receiver accepts data (and buffers it out of
# order), and how far past snd_una a sender sends. Twice the sender's largest congestion window
# (16 MiB), so a window-limited flow never hits it; far below 2^32 so SACK offsets always fit.
RCV_WINDOW = 32 << 20


def new_conn_id() -> int:
    """A fresh connection id: 48 bits from the OS's CSPRNG, never 0."""
    while True:
        c = secrets.randbits(CONN_BITS)
        if c:
            return c


class WireError(ValueError):
    """A datagram that is not a valid MLTCP transport datagram."""


class Packet(NamedTuple):
    flags: int  # shim flags
    job_id: int
    iteration: int
    ratio_q16: int
    conn_id: int
    seq: int
    ack: int
    tsval: int
    tsecr: int
    length: int
    tflags: int
    ce_count: int
    sacks: tuple  # ((start, end), ...) absolute offsets
    payload_off: int  # where the payload starts in the buffer
    mac_off: int = -1  # T_AUTH: where the 8-byte tag starts (the bytes it covers end there)
    key: bytes = b""  # T_KEY: the connection key the sender sent


def ratio_q16(r: float) -> int:
    """bytes_ratio in [0, 1] to Q0.16 (clamped; the data path must not raise on float noise)."""
    if not r > 0.0:  # also NaN
        return 0
    return Q16_ONE if r >= 1.0 else int(r * Q16_ONE + 0.5)


def encode(
    flags: int,
    job_id: int,
    iteration: int,
    ratio: int,
    conn_id: int,
    seq: int,
    ack: int,
    tsval: int,
    tsecr: int,
    length: int,
    tflags: int,
    ce_count: int = 0,
    sacks: tuple | list = (),
) -> bytes:
    """Shim + transport header (+ SACK blocks); the caller appends ``length`` payload bytes."""
    n = len(sacks)
    if n > MAX_SACK:
        raise WireError(f"at most {MAX_SACK} SACK blocks, got {n}")
    if not (0 <= seq <= U64 and 0 <= ack <= U64):
        raise WireError(f"seq {seq} / ack {ack} outside the 64-bit sequence space")
    head = SHIM_HDR.pack(
        (MLTCP_VERSION << 4) | (flags & 0xF),
        0,
        job_id & 0xFFFF,
        iteration & U32,
        ratio,
        0,
        conn_id & U32,
        seq,
        ack,
        tsval & U32,
        tsecr & U32,
        length,
        tflags,
        n,
        min(ce_count, 0xFFFF),
        (conn_id >> 32) & 0xFFFF,
    )
    if not n:
        return head
    for s, e in sacks:
        if not 0 <= s - ack < e - ack <= U32:
            raise WireError(f"SACK block [{s}, {e}) does not fit 32 bits above ack {ack}")
    return head + b"".join(SACK.pack(s - ack, e - ack) for s, e in sacks)


def decode(buf, nbytes: int | None = None) -> Packet:
    """Parse a datagram (bytes or a buffer holding ``nbytes`` valid bytes)."""
    if nbytes is None:
        nbytes = len(buf)
    if nbytes < FIXED_LEN:
        raise WireError(f"datagram of {nbytes} bytes is shorter than the {FIXED_LEN}-byte headers")
    (vf, _r, job, it, ratio, _r2, conn, seq, ack, tsval, tsecr, length, tflags, nsack, ce, conn_hi) = (
        SHIM_HDR.unpack_from(buf, 0)
    )
    if vf >> 4 != MLTCP_VERSION:
        raise WireError(f"MLTCP version {vf >> 4}, expected {MLTCP_VERSION}")
    off = FIXED_LEN + nsack * SACK.size
    trailer = (TAG_LEN if tflags & T_AUTH else 0) + (KEY_LEN if tflags & T_KEY else 0)
    if nsack > MAX_SACK or off + length + trailer != nbytes or (tflags & T_KEY and not tflags & T_AUTH):
        raise WireError(f"bad lengths: {nsack} SACK blocks, payload {length}, tflags {tflags:#x}, datagram {nbytes}")
    sacks = ()
    if nsack:
        sacks = tuple((ack + s, ack + e) for s, e in SACK.iter_unpack(bytes(buf[FIXED_LEN:off])))
        for s, e in sacks:
            if not s < e:
                raise WireError(f"empty or reversed SACK block [{s}, {e})")
    mac_off = nbytes - TAG_LEN if tflags & T_AUTH else -1
    key = bytes(buf[off + length : off + length + KEY_LEN]) if tflags & T_KEY else b""
    return Packet(
        vf & 0xF,
        job,
        it,
        ratio,
        (conn_hi << 32) | conn,
        seq,
        ack,
        tsval,
        tsecr,
        length,
        tflags,
        ce,
        sacks,
        off,
        mac_off,
        key,
    )
