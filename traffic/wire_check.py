"""Does a capture agree with the iteration records a job's ranks wrote?

The ranks of a torch-ddp job record, per iteration, when its first collective was called
(``comm_start``) and when its last one returned (``last_collective``). A capture of the link,
read by :func:`mltcp.traffic.pcap.read_records` (``mltcp traffic pcap-records``), gives the same
job's traffic per flow, cut into bursts at idle gaps. This module matches the bursts on rank 0's
connections (both directions) to the records and measures the difference: pure logic, no I/O.

A burst belongs to the record whose communication it is part of, decided by what rank 0 must
have done for it to exist. A burst rank 0 sent starts after rank 0 called that iteration's first
collective: it belongs to the last record whose ``comm_start`` is at most ``clock_s`` before the
burst's first packet, if it starts before that record's optimizer step (``end``) plus ``slack_s``
(a retransmitted tail). A burst rank 0 received ends before rank 0's last collective of that
iteration returned: it belongs to the first record whose ``end`` is at most ``clock_s`` before
the burst's last packet (the last record, for a burst that ran on into the closing barrier), if
that packet came after the record's ``start`` less ``slack_s``. The peer may start an
iteration's traffic well before rank 0 reaches its collective (the ranks are not in step), so a
received burst's start says nothing about its iteration. Bursts that end before the first
record began or start after the last one ended are the run's setup and teardown (DDP's first
broadcast, gloo's closing barrier): counted apart. Other bursts that match no record are
counted as unmatched: traffic the records do not know about. A record may get several bursts
(a gap between DDP's buckets longer than the idle gap splits an iteration on the wire); its
wire view is the first packet rank 0 sent and the last packet it received in any.
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass

from mltcp.records import IterationRecord


@dataclass(frozen=True)
class Agreement:
    records: int  # rank-0 records compared
    matched: int  # records with traffic on the wire
    bursts: int  # bursts on rank 0's connections
    unmatched_bursts: int  # bursts during the run outside every record's communication
    outside_run: int  # bursts before the first record began or after the last one ended
    first_err_ms: tuple[float, float]  # |first packet sent - first collective called|: median, max
    last_err_ms: tuple[float, float]  # |last packet received - last collective returned|: median, max
    period_wire_s: float  # mean time from one iteration's first packet rank 0 sent to the next's
    period_records_s: float  # the same from the records' first collectives

    @property
    def period_ratio(self) -> float:
        return self.period_wire_s / self.period_records_s if self.period_records_s else float("nan")

    def as_dict(self) -> dict:
        return {
            "records": self.records,
            "matched": self.matched,
            "bursts": self.bursts,
            "unmatched_bursts": self.unmatched_bursts,
            "outside_run": self.outside_run,
            "first_packet_err_ms": {"median": self.first_err_ms[0], "max": self.first_err_ms[1]},
            "last_received_err_ms": {"median": self.last_err_ms[0], "max": self.last_err_ms[1]},
            "period_wire_s": self.period_wire_s,
            "period_records_s": self.period_records_s,
            "period_ratio": self.period_ratio,
        }


def _ends(label: str) -> tuple[str, str, str, str]:
    """(src ip, src port, dst ip, dst port) of a pcap-records flow label ``src:sport>dst:dport``."""
    src, _, dst = str(label).partition(">")
    s_ip, _, s_port = src.rpartition(":")
    d_ip, _, d_port = dst.rpartition(":")
    return s_ip, s_port, d_ip, d_port


def of_host(wire: list[IterationRecord], ip: str, skip_ports=()) -> list[IterationRecord]:
    """The bursts of the flows ``ip`` sent or received, without those to or from ``skip_ports``
    (e.g. the rendezvous store's)."""
    skip = {str(p) for p in skip_ports}
    out = []
    for w in wire:
        s_ip, s_port, d_ip, d_port = _ends(w.job)
        if ip in (s_ip, d_ip) and s_port not in skip and d_port not in skip:
            out.append(w)
    return sorted(out, key=lambda w: w.comm_start)


def _median_max(xs: list[float]) -> tuple[float, float]:
    return (round(statistics.median(xs), 3), round(max(xs), 3)) if xs else (float("nan"), float("nan"))


def _mean_step(ts: list[float]) -> float:
    return (ts[-1] - ts[0]) / (len(ts) - 1) if len(ts) > 1 else float("nan")


def _outside_run(recs: list[IterationRecord], w: IterationRecord, clock_s: float, slack_s: float) -> bool:
    """Before the first record began or after the last one ended."""
    return not recs or w.end < recs[0].start - slack_s or w.comm_start > recs[-1].end + clock_s


def _record_of(recs: list[IterationRecord], w: IterationRecord, ip: str, clock_s: float, slack_s: float):
    """The record a burst during the run belongs to (see the module's docstring), or None."""
    if _ends(w.job)[0] == ip:  # rank 0 sent it
        k = bisect.bisect_right([r.comm_start - clock_s for r in recs], w.comm_start) - 1
        ok = k >= 0 and w.comm_start <= recs[k].end + slack_s
    else:  # rank 0 received it
        k = min(bisect.bisect_left([r.end + clock_s for r in recs], w.end), len(recs) - 1)
        ok = w.end >= recs[k].start - slack_s
    return recs[k] if ok else None


def agreement(
    records: list[IterationRecord],
    last_collective: dict[int, float],
    bursts: list[IterationRecord],
    ip: str,
    clock_s: float = 0.005,
    slack_s: float = 0.05,
) -> Agreement:
    """Rank 0's ``records`` of one job (``last_collective``: iteration -> when its last collective
    returned, same clock) against the ``bursts`` on its connections (:func:`of_host`; ``ip`` is
    rank 0's address). The first packet rank 0 sent is compared with its first collective's call
    (the peer's may come earlier: the ranks reach the collective at different times), the last
    packet it received with its last collective's return (gloo's send returns once the bytes are
    in the socket's buffer, so rank 0's own last packets may leave after that). The wire's period
    is taken between the first packets rank 0 sent, as the records' between its first collectives."""
    recs = sorted(records, key=lambda r: r.comm_start)
    mine: dict[int, list[IterationRecord]] = {r.iteration: [] for r in recs}
    unmatched = outside = 0
    for w in bursts:
        if _outside_run(recs, w, clock_s, slack_s):
            outside += 1
            continue
        r = _record_of(recs, w, ip, clock_s, slack_s)
        if r is None:
            unmatched += 1
        else:
            mine[r.iteration].append(w)
    first_err, last_err, firsts, rec_firsts = [], [], [], []
    for r in recs:
        ws = mine[r.iteration]
        sent = [w.comm_start for w in ws if _ends(w.job)[0] == ip]
        if sent:
            firsts.append(min(sent))
            rec_firsts.append(r.comm_start)
            first_err.append(abs(min(sent) - r.comm_start) * 1e3)
        received = [w.end for w in ws if _ends(w.job)[2] == ip]
        if r.iteration in last_collective and received:
            last_err.append(abs(max(received) - last_collective[r.iteration]) * 1e3)
    return Agreement(
        records=len(recs),
        matched=sum(1 for ws in mine.values() if ws),
        bursts=len(bursts),
        unmatched_bursts=unmatched,
        outside_run=outside,
        first_err_ms=_median_max(first_err),
        last_err_ms=_median_max(last_err),
        period_wire_s=_mean_step(firsts),
        period_records_s=_mean_step(rec_firsts),
    )
