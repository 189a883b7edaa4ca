"""Sender side: which segments are in flight, SACKed, lost, and need retransmission.

Loss detection combines three rules: RACK-style time order (a segment is lost once a segment sent
more than ``reo_wnd`` after it has been delivered; this also catches lost retransmissions), the
classic three duplicate ACKs, and the retransmission timeout (the sender calls :meth:`on_rto`).
Pure bookkeeping, no I/O or clocks of its own: times are passed in.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict


class Seg:
    __slots__ = ("seq", "len", "end", "xmit", "ntx", "sacked", "lost", "iteration", "first")

    def __init__(self, seq: int, length: int, iteration: int, first: bool):
        self.seq, self.len, self.end = seq, length, seq + length
        self.xmit = 0.0
        self.ntx = 0
        self.sacked = self.lost = False
        self.iteration, self.first = iteration, first


class AckResult:
    __slots__ = ("delivered", "advanced", "lost")

    def __init__(self):
        self.delivered = 0  # bytes newly delivered (cumulatively acked or SACKed)
        self.advanced = False  # cumulative ack moved
        self.lost = 0  # segments newly marked lost


class Scoreboard:
    def __init__(self, dupthresh: int = 3):
        self.dupthresh = dupthresh
        self.snd_una = 0
        self.snd_nxt = 0
        self.segs: dict[int, Seg] = {}  # every segment not cumulatively acked
        self.inflight: OrderedDict[int, Seg] = OrderedDict()  # sent, not SACKed/lost; by send time
        self.inflight_bytes = 0
        self._retx: list[int] = []  # heap of lost segment seqs
        self._sacked: list[list[int]] = []  # merged SACKed ranges above snd_una
        self.dupacks = 0
        self.rack_xmit = float("-inf")
        self.retransmits = 0
        self.spurious_hint = 0  # SACKs for segments already marked lost

    # -- sending ------------------------------------------------------------------------------
    def new_segment(self, length: int, iteration: int, first: bool) -> Seg:
        seg = Seg(self.snd_nxt, length, iteration, first)
        self.segs[seg.seq] = seg
        self.snd_nxt = seg.end
        return seg

    def sent(self, seg: Seg, now: float) -> None:
        """Record a (re)transmission of ``seg`` at ``now``."""
        if seg.ntx:
            self.retransmits += 1
        seg.ntx += 1
        seg.xmit = now
        seg.lost = False
        if seg.seq in self.inflight:
            self.inflight.move_to_end(seg.seq)
        else:
            self.inflight[seg.seq] = seg
            self.inflight_bytes += seg.len

    def next_lost(self) -> Seg | None:
        """The lowest lost segment still needing a retransmission (None if none)."""
        h, segs = self._retx, self.segs
        while h:
            seg = segs.get(h[0])
            if seg is None or seg.sacked or not seg.lost:
                heapq.heappop(h)
                continue
            return seg
        return None

    def pop_lost(self) -> None:
        heapq.heappop(self._retx)

    @property
    def lost_pending(self) -> bool:
        return self.next_lost() is not None

    @property
    def outstanding(self) -> bool:
        return self.snd_una < self.snd_nxt

    def oldest_xmit(self) -> float | None:
        for seg in self.inflight.values():
            return seg.xmit
        return None

    # -- ACK processing -----------------------------------------------------------------------
    def _mark_lost(self, seg: Seg, res: AckResult) -> None:
        if seg.seq in self.inflight:
            del self.inflight[seg.seq]
            self.inflight_bytes -= seg.len
        seg.lost = True
        heapq.heappush(self._retx, seg.seq)
        res.lost += 1

    def _deliver(self, seg: Seg, echo: float | None) -> None:
        # RACK: the send time of the most recent delivered transmission. For a retransmitted
        # segment, only if the echoed timestamp shows the retransmission was the one delivered.
        if seg.ntx == 1 or echo is None or echo >= seg.xmit:
            if seg.xmit > self.rack_xmit:
                self.rack_xmit = seg.xmit

    def on_ack(self, ack: int, sacks, echo: float | None = None, reo_wnd: float = 0.0) -> AckResult:
        """Apply a cumulative ack and SACK blocks. ``echo``: send time echoed by the receiver."""
        res = AckResult()
        segs, inflight = self.segs, self.inflight
        if ack > self.snd_una:
            if ack > self.snd_nxt:
                ack = self.snd_nxt
            s = self.snd_una
            while s < ack:
                seg = segs.pop(s, None)
                if seg is None:
                    break
                if seg.seq in inflight:
                    del inflight[seg.seq]
                    self.inflight_bytes -= seg.len
                if not seg.sacked:
                    res.delivered += seg.len
                    self._deliver(seg, echo)
                s = seg.end
            self.snd_una = s
            res.advanced = True
            self.dupacks = 0
            r = self._sacked
            while r and r[0][1] <= s:
                r.pop(0)
            if r and r[0][0] < s:
                r[0][0] = s
        elif self.snd_una < self.snd_nxt:
            self.dupacks += 1
        for a, b in sacks:
            a, b = max(a, self.snd_una), min(b, self.snd_nxt)
            if a < b:
                res.delivered += self._sack(a, b, echo)
        # Loss detection.
        if self.rack_xmit > float("-inf"):
            limit = self.rack_xmit - reo_wnd
            while inflight:
                seg = next(iter(inflight.values()))
                if seg.xmit >= limit or seg.xmit >= self.rack_xmit:
                    break
                self._mark_lost(seg, res)
        if self.dupacks == self.dupthresh:
            seg = segs.get(self.snd_una)
            if seg is not None and not seg.sacked and not seg.lost and seg.ntx == 1:
                self._mark_lost(seg, res)
        return res

    def _sack(self, a: int, b: int, echo) -> int:
        """Mark [a, b) SACKed; return bytes newly SACKed."""
        r = self._sacked
        parts, cur = [], a
        for s, e in r:
            if e <= cur:
                continue
            if s >= b:
                break
            if s > cur:
                parts.append((cur, s))
            cur = max(cur, e)
            if cur >= b:
                break
        if cur < b:
            parts.append((cur, b))
        got = 0
        segs, inflight = self.segs, self.inflight
        for s, e in parts:
            while s < e:
                seg = segs.get(s)
                if seg is None:
                    break
                if seg.end > e:  # partial SACK of a segment: not counted
                    break
                if not seg.sacked:
                    seg.sacked = True
                    got += seg.len
                    if seg.seq in inflight:
                        del inflight[seg.seq]
                        self.inflight_bytes -= seg.len
                    elif seg.lost:
                        self.spurious_hint += 1
                    seg.lost = False
                    self._deliver(seg, echo)
                s = seg.end
        # merge [a, b) into the SACKed ranges
        i = 0
        while i < len(r) and r[i][1] < a:
            i += 1
        j = i
        while j < len(r) and r[j][0] <= b:
            a, b = min(a, r[j][0]), max(b, r[j][1])
            j += 1
        r[i:j] = [[a, b]]
        return got

    def mark_first_lost(self) -> None:
        """Mark the first unacknowledged, un-SACKed segment lost (a timeout with nothing in flight)."""
        seg = self.segs.get(self.snd_una)
        if seg is not None and not seg.sacked and not seg.lost:
            self._mark_lost(seg, AckResult())

    def on_rto(self) -> int:
        """Retransmission timeout: everything in flight is presumed lost. Returns how many."""
        res = AckResult()
        for seg in list(self.inflight.values()):
            self._mark_lost(seg, res)
        self.dupacks = 0
        self.rack_xmit = float("-inf")
        return res.lost
