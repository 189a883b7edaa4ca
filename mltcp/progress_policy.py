"""In-network MLTCP: what a switch does with the bytes_ratio every MLTCP packet carries (pure logic).

A progress-aware switch favours the job further through its iteration, so hosts whose congestion
control cannot change (plain ECN-Reno, DCQCN) still drift into an interleaved schedule:

* ``ecn-by-progress``: the ECN threshold a packet is compared with grows with its bytes_ratio. A
  flow behind is marked earlier and yields; a flow ahead keeps its rate and finishes first.
* ``priority-by-progress``: strict-priority queues by bytes_ratio band (the band furthest through
  its iteration is served first).
* ``off``: a plain switch (the link's own ECN setting only).

bytes_ratio (Q0.16 in the shim) is cut into ``bands`` equal bands: band = bytes_ratio >> (16 -
log2(bands)), the same integer in the simulator, the software switch and mltcp.p4 (whose table
matches the top 4 bits, 16 hardware bands, each mapped onto a policy band by the control plane).
Threshold of band b = the link's threshold x scale(b), scale(b) = lo + (hi - lo) * b / (bands - 1).
Priority of band b = b (higher is served first, as v1model's ``standard_metadata.priority`` with
BMv2 ``--priority-queues``).

``contest_window_us`` (ecn-by-progress only; 0, the default, = always): the band's threshold applies
only while the port is contested, i.e. a packet of another job than the one before it passed the
port within the window; a job alone on the port is marked at the port's own threshold. Without it a
lone flow in a low band is marked at a fraction of the port's threshold, which Reno-style senders
need to be at least about a BDP to keep the link busy (mltcp.p4: table progress_contest, registers
contest_job / contest_seen).
``priority_ecn`` (priority-by-progress only) says what the strict-priority queues' ECN marking
compares with the link's thresholds: ``link`` the port's total queue (every band's), ``by-band``
the packet's own band queue, ``off`` nothing (no marks: drop-tail only), with the link's own
thresholds (ecn_scale_lo / hi are ecn-by-progress's). In mltcp.p4: ``link`` is v1model's (BMv2's
enq_qdepth counts all the port's priority queues; no progress_ecn entries), ``by-band`` is TNA's
(enq_qdepth of the packet's queue), ``off`` is a no_progress_ecn entry per band.
``priority_pin`` (default true): a flow's packets go to the band queue that already holds packets
of it, and move to the band its bytes_ratio says only once that queue has none of them, so a flow
is never reordered (flowlet-style; without it a flow moving up a band overtakes its own packets
waiting below, which TCP's dupACK rule and RoCE's go-back-N take for loss).
``priority_buffer``: ``per-band`` (each band queue as
deep as the link's buffer, BMv2's priority queues) or ``shared`` (the bands share the link's
buffer; what overflows it is dropped from the lowest band's arrivals first). With ``link`` the flow
ahead is marked by the queue the flow behind builds; with ``off`` it is not, and the flow behind
only sees its longer queueing delay (and drops once its band's queue is full).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

POLICIES = ("off", "ecn-by-progress", "priority-by-progress")
POLICY_CODE = {"off": 0, "ecn-by-progress": 1, "priority-by-progress": 2}
HW_BAND_BITS = 4  # mltcp.p4 matches bytes_ratio[15:12]
HW_BANDS = 1 << HW_BAND_BITS
PRIORITY_ECN = ("link", "by-band", "off")
PRIORITY_ECN_CODE = {"link": 0, "by-band": 1, "off": 2}
PRIORITY_BUFFER = ("per-band", "shared")
MAX_PRIORITY_BANDS = 8  # v1model priority is bit<3>; BMv2 --priority-queues at most 8
Q16_ONE = 0xFFFF
MAX_CONTEST_WINDOW_US = 60e6  # mltcp.p4's window is bit<32> microseconds; a minute is plenty
# ecn-by-progress's default tilt: the band furthest behind is marked at 0.9 of the port's threshold.
# Chosen on random ECN suites (docs/in-network.md, "Defaults on random suites"): a steeper tilt
# (0.25-0.75) gains as much where the jobs can interleave but slows the general suites, where the
# flow behind, marked down to a few segments, regrows one segment per RTT after the other finishes.
DEFAULT_ECN_SCALE_LO = 0.9


class PolicyError(ValueError):
    def __init__(self, fieldname: str, msg: str):
        self.field = fieldname
        super().__init__(f"{fieldname}: {msg}")


@dataclass(frozen=True)
class ProgressPolicy:
    name: str = "off"
    bands: int = 4
    ecn_scale_lo: float = DEFAULT_ECN_SCALE_LO  # threshold multiplier of the band furthest behind (bytes_ratio ~ 0)
    ecn_scale_hi: float = 1.0  # ... of the band furthest ahead (bytes_ratio ~ 1)
    links: tuple[str, ...] | None = None  # links (simulator) the policy runs on; None = all
    priority_ecn: str = "by-band"  # priority queues' ECN: the link's total queue, the band's own, or none
    priority_buffer: str = "per-band"  # each band queue as deep as the buffer (BMv2), or one shared buffer
    priority_pin: bool = True  # a flow keeps its band queue while packets of it wait there (no reordering)
    contest_window_us: float = (
        0.0  # ecn-by-progress: scale thresholds only while another job passed within it (0: always)
    )

    @property
    def code(self) -> int:
        return POLICY_CODE[self.name]

    @property
    def priority_ecn_code(self) -> int:
        return PRIORITY_ECN_CODE[self.priority_ecn]

    @property
    def active(self) -> bool:
        return self.name != "off"

    def band(self, ratio: float) -> int:
        """Band of a bytes_ratio in [0, 1], through its Q0.16 encoding (as the switch sees it)."""
        q = min(max(int(round(ratio * Q16_ONE)), 0), Q16_ONE)
        return band_of_q16(q, self.bands)

    def scale(self, band: int) -> float:
        return scale_of(band, self.bands, self.ecn_scale_lo, self.ecn_scale_hi)

    def thresholds(self, base: int) -> list[int]:
        """ECN threshold (queue depth, packets) of each policy band for a port whose plain
        threshold is ``base``; at least 1."""
        return [max(1, int(round(base * self.scale(b)))) for b in range(self.bands)]

    def hw_band_map(self) -> list[int]:
        """Policy band of each of mltcp.p4's 16 hardware bands (bytes_ratio[15:12])."""
        shift = HW_BAND_BITS - int(math.log2(self.bands))
        return [hb >> shift for hb in range(HW_BANDS)]


def band_of_q16(q: int, bands: int) -> int:
    return q >> (16 - int(math.log2(bands)))


def scale_of(band: int, bands: int, lo: float, hi: float) -> float:
    return lo + (hi - lo) * band / (bands - 1)


def from_table(name, table: dict | None, where: str = "switch") -> ProgressPolicy:
    """Validate ``switch_policy`` and its ``[switch]`` table (field names in the errors)."""
    if not isinstance(name, str) or name not in POLICIES:
        raise PolicyError("switch_policy", f"must be one of {', '.join(POLICIES)} (got {name!r})")
    t = dict(table or {})
    known = {
        "bands",
        "ecn_scale_lo",
        "ecn_scale_hi",
        "links",
        "priority_ecn",
        "priority_buffer",
        "priority_pin",
        "contest_window_us",
    }
    for k in t:
        if k not in known:
            raise PolicyError(f"{where}.{k}", f"unknown field (fields: {', '.join(sorted(known))})")
    bands = t.get("bands", 4)
    top = MAX_PRIORITY_BANDS if name == "priority-by-progress" else HW_BANDS
    ok = tuple(b for b in (2, 4, 8, 16) if b <= top)
    if isinstance(bands, bool) or not isinstance(bands, int) or bands not in ok:
        raise PolicyError(f"{where}.bands", f"must be one of {ok} for {name} (got {bands!r})")
    vals = {}
    for k, d in (("ecn_scale_lo", DEFAULT_ECN_SCALE_LO), ("ecn_scale_hi", 1.0)):
        v = t.get(k, d)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v <= 100) or not math.isfinite(v):
            raise PolicyError(f"{where}.{k}", f"must be a number in (0, 100] (got {v!r})")
        vals[k] = float(v)
    if vals["ecn_scale_lo"] > vals["ecn_scale_hi"]:
        raise PolicyError(
            f"{where}.ecn_scale_lo", "must not exceed ecn_scale_hi (a flow behind is marked earlier, not later)"
        )
    links = t.get("links")
    if links is not None:
        if not isinstance(links, list) or not links or not all(isinstance(x, str) and x for x in links):
            raise PolicyError(f"{where}.links", f"must be a non-empty list of link names (got {links!r})")
        links = tuple(links)
    pecn = t.get("priority_ecn", "by-band")
    if not isinstance(pecn, str) or pecn not in PRIORITY_ECN:
        raise PolicyError(f"{where}.priority_ecn", f"must be one of {', '.join(PRIORITY_ECN)} (got {pecn!r})")
    pbuf = t.get("priority_buffer", "per-band")
    if not isinstance(pbuf, str) or pbuf not in PRIORITY_BUFFER:
        raise PolicyError(f"{where}.priority_buffer", f"must be one of {', '.join(PRIORITY_BUFFER)} (got {pbuf!r})")
    pin = t.get("priority_pin", True)
    if not isinstance(pin, bool):
        raise PolicyError(f"{where}.priority_pin", f"must be true or false (got {pin!r})")
    for k in ("priority_ecn", "priority_buffer", "priority_pin"):
        if k in t and name == "ecn-by-progress":
            raise PolicyError(f"{where}.{k}", "applies to priority-by-progress (or off), not ecn-by-progress")
    win = t.get("contest_window_us", 0.0)
    if (
        isinstance(win, bool)
        or not isinstance(win, (int, float))
        or not math.isfinite(win)
        or not (0 <= win <= MAX_CONTEST_WINDOW_US)
    ):
        raise PolicyError(
            f"{where}.contest_window_us",
            f"must be a number of microseconds in [0, {MAX_CONTEST_WINDOW_US:.0f}] (got {win!r})",
        )
    if win and name == "priority-by-progress":
        raise PolicyError(f"{where}.contest_window_us", "applies to ecn-by-progress (or off), not priority-by-progress")
    return ProgressPolicy(name, bands, vals["ecn_scale_lo"], vals["ecn_scale_hi"], links, pecn, pbuf, pin, float(win))
