"""The payload the sender streams: a fixed pseudo-random pattern indexed by stream offset.

Both ends know it, so the receiver can check every delivered byte against what should be at
that offset (a lost, duplicated or reordered byte shows up as a mismatch or a short stream), and a
CRC-32 over the whole transfer can be compared with :func:`expected_crc`.
"""

from __future__ import annotations

import random
import zlib

PERIOD = 1_000_003  # prime, so no segment size lines up with it
_PAD = 65536
_BUF = random.Random(0x4D4C5443).randbytes(PERIOD)
PATTERN = _BUF + _BUF[:_PAD]


def chunk(offset: int, n: int) -> bytes:
    """Pattern bytes [offset, offset + n) (n <= 65536)."""
    o = offset % PERIOD
    return PATTERN[o : o + n]


def matches(offset: int, data) -> bool:
    """True if ``data`` equals the pattern at ``offset``."""
    n = len(data)
    while n > _PAD:  # long chunks (reassembly can deliver several segments at once) are split
        if not matches(offset, data[:_PAD]):
            return False
        offset, data, n = offset + _PAD, data[_PAD:], n - _PAD
    return chunk(offset, n) == data


def expected_crc(start: int, end: int, crc: int = 0) -> int:
    """CRC-32 of pattern bytes [start, end)."""
    off = start
    while off < end:
        n = min(_PAD, end - off)
        crc = zlib.crc32(chunk(off, n), crc)
        off += n
    return crc
