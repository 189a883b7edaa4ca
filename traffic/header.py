"""The 12-byte MLTCP shim header carried after UDP (see docs/CONTRACTS.md).

```
 0                   1                   2                   3
 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
+-------+-------+---------------+-------------------------------+
|version| flags |   reserved    |            job_id             |
+-------+-------+---------------+-------------------------------+
|                       iteration (uint32)                      |
+-------------------------------+-------------------------------+
|   bytes_ratio (Q0.16, 0xFFFF=1)|          reserved2            |
+-------------------------------+-------------------------------+
```

The header is identified by UDP destination *or* source port 9199. Importing this module binds
the layer in scapy both ways, so ``UDP(raw_bytes)`` dissects the shim.

Malformed input: ``MLTCP(data)`` with fewer than 12 bytes raises ``struct.error`` (scapy);
inside a packet (``UDP(data)``, ``Ether(data)``) scapy instead leaves a truncated shim as a
``Raw`` payload. A wrong version is dissected as is. Use :func:`parse_mltcp` for a strict
parse that rejects truncated input and versions other than 1, as the P4 parser does.
"""

from __future__ import annotations

import math

from scapy.fields import BitField, ByteField, FlagsField, IntField, ShortField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

__all__ = [
    "MLTCP",
    "MLTCP_UDP_PORT",
    "MLTCP_HEADER_LEN",
    "MLTCP_VERSION",
    "FLAG_ACK",
    "FLAG_CNP",
    "FLAG_ITER_START",
    "FLAG_ECE",
    "MLTCPParseError",
    "ratio_to_q16",
    "q16_to_ratio",
    "parse_mltcp",
    "IPOPT_KIND",
    "IPOPT_LEN",
    "mltcp_ipopt",
    "parse_mltcp_ipopt",
]

MLTCP_UDP_PORT = 9199
MLTCP_HEADER_LEN = 12
MLTCP_VERSION = 1
Q16_ONE = 0xFFFF

FLAG_ACK = 0x1
FLAG_CNP = 0x2
FLAG_ITER_START = 0x4
FLAG_ECE = 0x8
# The MLTCP IPv4 option (docs/CONTRACTS.md): the shim's job_id and bytes_ratio for packets that
# carry no UDP shim (kernel TCP, stamped by traffic/kernel/stamp.bpf.c). Kind 94 = copy 0,
# class 2, number 30: an RFC 4727 experimental option. 8 bytes, so a stamped header has IHL 7.
IPOPT_KIND = 0x5E
IPOPT_LEN = 8

# FlagsField names, bit 0 first.
FLAG_NAMES = ["ACK", "CNP", "ITER_START", "ECE"]


class MLTCPParseError(ValueError):
    """Raised by :func:`parse_mltcp` for input that is not a valid MLTCP shim."""


class MLTCP(Packet):
    """Scapy layer for the MLTCP shim (12 bytes, network byte order)."""

    name = "MLTCP"
    fields_desc = [
        BitField("version", MLTCP_VERSION, 4),
        FlagsField("flags", 0, 4, FLAG_NAMES),
        ByteField("reserved", 0),
        ShortField("job_id", 0),
        IntField("iteration", 0),
        ShortField("bytes_ratio", 0),
        ShortField("reserved2", 0),
    ]

    @property
    def ratio(self) -> float:
        """bytes_ratio as a float in [0, 1]."""
        return q16_to_ratio(self.bytes_ratio)

    def mysummary(self):
        return self.sprintf(
            "MLTCP v%MLTCP.version% job=%MLTCP.job_id% iter=%MLTCP.iteration% "
            "ratio=%MLTCP.bytes_ratio% flags=%MLTCP.flags%"
        )

    def answers(self, other):
        return isinstance(other, MLTCP) and other.job_id == self.job_id


def ratio_to_q16(r: float) -> int:
    """Encode a bytes_ratio in [0, 1] as Q0.16 (``round(r * 65535)``, 0xFFFF means 1).

    Raises ValueError for NaN or values outside [0, 1].
    """
    r = float(r)
    if math.isnan(r) or r < 0.0 or r > 1.0:
        raise ValueError(f"bytes_ratio must be in [0, 1], got {r!r}")
    return int(round(r * Q16_ONE))


def q16_to_ratio(v: int) -> float:
    """Decode a Q0.16 bytes_ratio (0..0xFFFF) to a float in [0, 1]."""
    v = int(v)
    if v < 0 or v > Q16_ONE:
        raise ValueError(f"Q0.16 bytes_ratio must be in [0, 65535], got {v}")
    return v / Q16_ONE


def parse_mltcp(data: bytes) -> MLTCP:
    """Strictly parse an MLTCP shim (and whatever follows it, as payload) from ``data``.

    Raises MLTCPParseError if ``data`` is shorter than 12 bytes or the version is not 1.
    """
    data = bytes(data)
    if len(data) < MLTCP_HEADER_LEN:
        raise MLTCPParseError(f"MLTCP header truncated: {len(data)} bytes, need {MLTCP_HEADER_LEN}")
    version = data[0] >> 4
    if version != MLTCP_VERSION:
        raise MLTCPParseError(f"MLTCP version {version}, expected {MLTCP_VERSION}")
    return MLTCP(data)


def mltcp_ipopt(job_id: int, bytes_ratio: int, flags: int = 0) -> bytes:
    """The 8-byte MLTCP IPv4 option: kind 94, length 8, version | flags, 0, job_id, bytes_ratio
    (Q0.16), network byte order. Put it in ``IP(options=[IPOption(...)])`` to build a packet."""
    if not 0 <= job_id <= 0xFFFF or not 0 <= bytes_ratio <= Q16_ONE or not 0 <= flags <= 0xF:
        raise ValueError(f"job_id {job_id}, bytes_ratio {bytes_ratio} or flags {flags} out of range")
    return (
        bytes([IPOPT_KIND, IPOPT_LEN, MLTCP_VERSION << 4 | flags, 0])
        + job_id.to_bytes(2, "big")
        + bytes_ratio.to_bytes(2, "big")
    )


def parse_mltcp_ipopt(options: bytes) -> tuple[int, int, int] | None:
    """(job_id, bytes_ratio, flags) of the MLTCP option when ``options`` (an IPv4 header's
    options) is exactly that option, as the switches match it; None for any other options.
    Raises MLTCPParseError for the option with a version other than 1."""
    options = bytes(options)
    if len(options) != IPOPT_LEN or options[0] != IPOPT_KIND or options[1] != IPOPT_LEN:
        return None
    if options[2] >> 4 != MLTCP_VERSION:
        raise MLTCPParseError(f"MLTCP IPv4 option version {options[2] >> 4}, expected {MLTCP_VERSION}")
    return int.from_bytes(options[4:6], "big"), int.from_bytes(options[6:8], "big"), options[2] & 0xF


# Dissection matches either port. When building ``UDP()/MLTCP()`` scapy fills in the port of
# the binding registered last, so register dport last: the shim then goes to port 9199.
bind_layers(UDP, MLTCP, sport=MLTCP_UDP_PORT)
bind_layers(UDP, MLTCP, dport=MLTCP_UDP_PORT)
