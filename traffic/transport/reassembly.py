"""Receiver side: in-order delivery of a byte stream from segments that arrive in any order."""

from __future__ import annotations

import heapq
from bisect import bisect_left


# Per held segment, what the dict, heap and range entries cost besides the payload (CPython).
SEG_OVERHEAD = 200


class Reassembly:
    """Keeps out-of-order segments until the hole before them is filled.

    :meth:`add` returns the bytes that became deliverable (in order) and whether the segment was
    entirely old (a duplicate). ``rcv_nxt`` is the cumulative ack. :meth:`sack_blocks` lists the
    out-of-order ranges held, the one holding the latest segment first (RFC 2018).

    Bounded: only bytes in the receive window ``[rcv_nxt, rcv_nxt + window)`` are taken (a segment
    reaching past the right edge is cut there, one starting past it is refused), and at most
    ``window`` bytes in at most ``max_segments`` segments are held out of order (overlapping
    segments at different offsets cannot multiply the memory). A refused segment counts in
    ``refused`` and changes nothing: the sender retransmits it once the window has moved.
    Memory held is at most ``window + max_segments * SEG_OVERHEAD`` bytes.
    """

    def __init__(self, start: int = 0, window: int = 32 << 20, max_segments: int | None = None):
        if window < 1:
            raise ValueError(f"window must be >= 1 byte, got {window}")
        self.rcv_nxt = start
        self.window = window
        self.max_segments = max_segments if max_segments is not None else max(64, window // 256)
        self._segs: dict[int, bytes] = {}
        self._heap: list[int] = []
        self._ranges: list[list[int]] = []  # merged [start, end) of held data, sorted
        self._latest = -1
        self.held_bytes = 0
        self.refused = 0

    def add(self, seq: int, data) -> tuple[list, bool]:
        end = seq + len(data)
        if end <= self.rcv_nxt or not data:
            return [], True
        right = self.rcv_nxt + self.window
        if seq >= right:
            self.refused += 1
            return [], False
        if end > right:  # keep the part inside the window
            data, end = data[: right - seq], right
        if seq > self.rcv_nxt:
            if seq in self._segs and len(self._segs[seq]) >= len(data):
                self._latest = seq
                return [], True
            if (seq not in self._segs and len(self._segs) >= self.max_segments) or self.held_bytes - len(
                self._segs.get(seq, b"")
            ) + len(data) > self.window:
                self.refused += 1
                return [], False
            if seq not in self._segs:
                heapq.heappush(self._heap, seq)
            else:
                self.held_bytes -= len(self._segs[seq])
            self._segs[seq] = bytes(data)
            self.held_bytes += len(data)
            self._add_range(seq, end)
            self._latest = seq
            return [], False
        out = [data[self.rcv_nxt - seq :] if seq < self.rcv_nxt else data]
        self.rcv_nxt = end
        heap, segs = self._heap, self._segs
        while heap and heap[0] <= self.rcv_nxt:
            s = heapq.heappop(heap)
            d = segs.pop(s, None)
            if d is None:
                continue
            self.held_bytes -= len(d)
            e = s + len(d)
            if e > self.rcv_nxt:
                out.append(d[self.rcv_nxt - s :])
                self.rcv_nxt = e
        if self._ranges:
            r = self._ranges
            while r and r[0][1] <= self.rcv_nxt:
                r.pop(0)
            if r and r[0][0] < self.rcv_nxt:
                r[0][0] = self.rcv_nxt
        return out, False

    def _add_range(self, s: int, e: int) -> None:
        r = self._ranges
        i = bisect_left(r, [s, s])
        if i > 0 and r[i - 1][1] >= s:
            i -= 1
        j = i
        while j < len(r) and r[j][0] <= e:
            s, e = min(s, r[j][0]), max(e, r[j][1])
            j += 1
        r[i:j] = [[s, e]]

    def sack_blocks(self, limit: int = 4) -> list[tuple[int, int]]:
        r = self._ranges
        if not r:
            return []
        first = None
        for s, e in r:
            if s <= self._latest < e:
                first = (s, e)
                break
        blocks = [first] if first else []
        for s, e in r:
            if len(blocks) >= limit:
                break
            if (s, e) != first:
                blocks.append((s, e))
        return blocks
