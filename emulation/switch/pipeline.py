"""Pure model of the mltcp.p4 pipeline (v1model): parser, ingress, egress. No I/O.

Names follow docs/CONTRACTS.md. The model holds the P4 objects by their P4 names:

* table ``MyIngress.ipv4_lpm`` (lpm on ``hdr.ipv4.dstAddr``; ``ipv4_forward(dstAddr, port)``,
  ``drop``, ``NoAction``; default ``drop``),
* table ``MyEgress.ecn_threshold`` (exact on ``standard_metadata.egress_port``;
  ``set_ecn_threshold(threshold)``; default: no marking),
* table ``MyEgress.progress_ecn`` (exact on ``standard_metadata.egress_port`` and
  ``meta.progress_band`` = bytes_ratio[15:12]; ``set_progress_ecn(threshold)``): an MLTCP packet's
  own ECN threshold, in place of the port's (in-network MLTCP, docs/in-network.md);
  ``no_progress_ecn``: the band's MLTCP packets are never marked (priority_ecn = off),
* table ``MyEgress.progress_contest`` (exact on ``standard_metadata.egress_port``;
  ``set_contest_window(window)``, microseconds): progress_ecn applies only while the port is
  contested, i.e. a packet of another MLTCP job than the one before it passed the port within the
  window (registers ``MyEgress.contest_job``, job + 1, and ``MyEgress.contest_seen``, microseconds
  of the switch's clock); a job alone is marked at the port's threshold,
* table ``MyIngress.progress_priority`` (exact on the egress spec and ``meta.progress_band``;
  ``set_progress_priority(priority)``): the MLTCP packet's ``standard_metadata.priority`` (0-7),
  which selects its strict-priority queue at the egress port (``links.EgressQueue``, as BMv2
  with --priority-queues 8 but with one line rate per port),
* counters ``MyIngress.job_tx`` (packets and bytes), ``MyEgress.job_ecn_marks`` (packets),
  ``MyIngress.parse_errors`` (packets), register ``MyIngress.job_bytes_ratio`` (bit<16>).

Where BMv2 runs egress after the queue, this model runs it when the frame is queued (``enq_qdepth``
is the depth it found), so progress_contest sees the jobs in arrival order, which is the same
order on a FIFO port.

Parser: Ethernet -> IPv4 (0x0800) -> UDP (17) / TCP (6) for first fragments only; UDP with source
or destination port 9199 -> MLTCP shim (12 bytes, version must be 1). IPv4 options are skipped,
except the MLTCP IPv4 option (IHL 7 and the options start with kind 94, length 8; version must
be 1), which gives the packet a job_id and bytes_ratio as the shim does (kernel TCP stamped by
traffic/kernel/stamp.bpf.c); a UDP shim in the same packet wins. A truncated Ethernet/IPv4/UDP/TCP/shim header,
an IPv4 IHL below 5 or a shim version other than 1 is a parser error: ``parse_errors`` +1 and
the packet is dropped. Non-IPv4 frames parse fine but are dropped (no route).
``ipv4_forward`` sets the source MAC to the old destination MAC, the destination MAC to its
parameter and decrements TTL; a packet that arrives with TTL 0 or 1 is dropped before the
LPM lookup (RFC 1812 5.3.1; after the job counters, as in mltcp.p4); the IPv4 checksum is
recomputed for every forwarded packet.

Byte counts are frame lengths as received (like v1model's ``standard_metadata.packet_length``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

# P4 object names, widths and sizes: one list for the control plane, this model and the
# P4Info generator (mltcp.p4src.names; docs/CONTRACTS.md).
from mltcp.p4src.names import (
    A_DROP,
    A_IPV4_FORWARD,
    A_NOACTION,
    A_SET_ECN_THRESHOLD,
    A_SET_PROGRESS_ECN,
    A_SET_PROGRESS_PRIORITY,
    A_NO_PROGRESS_ECN,
    A_SET_CONTEST_WINDOW,
    BAND_BITS,
    C_JOB_ECN_MARKS,
    C_JOB_TX,
    C_PARSE_ERRORS,
    JOB_SLOTS,
    MLTCP_V1MODEL,
    P_DST_ADDR,
    P_PORT,
    P_PRIORITY,
    P_THRESHOLD,
    P_WINDOW,
    R_CONTEST_JOB,
    R_CONTEST_SEEN,
    R_JOB_BYTES_RATIO,
    T_ECN_THRESHOLD,
    T_IPV4_LPM,
    T_PROGRESS_CONTEST,
    T_PROGRESS_ECN,
    T_PROGRESS_PRIORITY,
)

ETH_LEN = 14
ETHERTYPE_IPV4 = 0x0800
IPV4_MIN_LEN = 20
UDP_LEN = 8
TCP_MIN_LEN = 20
SHIM_LEN = 12
IPOPT_KIND = 0x5E  # the MLTCP IPv4 option (mltcp.traffic.header.mltcp_ipopt)
IPOPT_LEN = 8
MLTCP_UDP_PORT = 9199
MLTCP_VERSION = 1
PROTO_TCP = 6
PROTO_UDP = 17

COUNTER_SIZES = {c.name: c.size for c in MLTCP_V1MODEL.counters}
REGISTER_SIZES = {r.name: r.size for r in MLTCP_V1MODEL.registers}
REGISTER_BITWIDTHS = {r.name: r.bitwidth for r in MLTCP_V1MODEL.registers}


class ParseError(Exception):
    """A header the parser had to extract was truncated or invalid."""


@dataclass(slots=True)
class Parsed:
    """Offsets and the few fields the pipeline needs; -1 means the header is absent."""

    length: int
    ip_off: int = -1
    ihl_bytes: int = 0
    l4_proto: int = -1
    job_id: int = -1
    bytes_ratio: int = 0


def parse(data: bytes | bytearray | memoryview) -> Parsed:
    """Run the parser state machine; raise :class:`ParseError` on a parser error."""
    n = len(data)
    if n < ETH_LEN:
        raise ParseError(f"truncated Ethernet header ({n} bytes)")
    p = Parsed(length=n)
    if (data[12] << 8 | data[13]) != ETHERTYPE_IPV4:
        return p
    off = ETH_LEN
    if n < off + IPV4_MIN_LEN:
        raise ParseError(f"truncated IPv4 header ({n - off} bytes)")
    ihl = (data[off] & 0x0F) * 4
    if ihl < IPV4_MIN_LEN:
        raise ParseError(f"IPv4 IHL {ihl // 4} < 5")
    if n < off + ihl:
        raise ParseError(f"truncated IPv4 options ({n - off} of {ihl} bytes)")
    p.ip_off = off
    p.ihl_bytes = ihl
    proto = data[off + 9]
    l4 = off + ihl
    if ihl == IPV4_MIN_LEN + IPOPT_LEN and data[off + 20] == IPOPT_KIND and data[off + 21] == IPOPT_LEN:
        if data[off + 22] >> 4 != MLTCP_VERSION:
            raise ParseError(f"MLTCP IPv4 option version {data[off + 22] >> 4} != {MLTCP_VERSION}")
        p.job_id = data[off + 24] << 8 | data[off + 25]
        p.bytes_ratio = data[off + 26] << 8 | data[off + 27]
    if (data[off + 6] & 0x1F) or data[off + 7]:  # not a first fragment: L4 not parsed
        return p
    if proto == PROTO_UDP:
        p.l4_proto = PROTO_UDP
        if n < l4 + UDP_LEN:
            raise ParseError(f"truncated UDP header ({n - l4} bytes)")
        sport = data[l4] << 8 | data[l4 + 1]
        dport = data[l4 + 2] << 8 | data[l4 + 3]
        if sport == MLTCP_UDP_PORT or dport == MLTCP_UDP_PORT:
            s = l4 + UDP_LEN
            if n < s + SHIM_LEN:
                raise ParseError(f"truncated MLTCP shim ({n - s} bytes)")
            version = data[s] >> 4
            if version != MLTCP_VERSION:
                raise ParseError(f"MLTCP shim version {version} != {MLTCP_VERSION}")
            p.job_id = data[s + 2] << 8 | data[s + 3]
            p.bytes_ratio = data[s + 8] << 8 | data[s + 9]
    elif proto == PROTO_TCP:
        p.l4_proto = PROTO_TCP
        if n < l4 + TCP_MIN_LEN:
            raise ParseError(f"truncated TCP header ({n - l4} bytes)")
    return p


def ipv4_checksum(header: bytes | bytearray | memoryview) -> int:
    """Internet checksum of an IPv4 header whose checksum field is zero (or ignored)."""
    words = struct.unpack(f"!{len(header) // 2}H", header)
    s = sum(words) - words[5]
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _fix_ipv4_checksum(buf: bytearray, off: int, ihl: int) -> None:
    c = ipv4_checksum(memoryview(buf)[off : off + ihl])
    buf[off + 10] = c >> 8
    buf[off + 11] = c & 0xFF


@dataclass
class CounterArray:
    """A P4 counter: packet and byte count per index."""

    size: int
    packets: list[int] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.packets = [0] * self.size
        self.bytes = [0] * self.size

    def count(self, index: int, nbytes: int) -> None:
        if 0 <= index < self.size:  # out-of-range index: no effect (as BMv2)
            self.packets[index] += 1
            self.bytes[index] += nbytes

    def set(self, index: int, packets: int, nbytes: int) -> None:
        self.packets[index] = packets
        self.bytes[index] = nbytes

    def reset(self) -> None:
        self.packets = [0] * self.size
        self.bytes = [0] * self.size


@dataclass(frozen=True, slots=True)
class Forward:
    """Send to ``port``; rewrite dst MAC and decrement TTL unless ``dst_mac`` is None (NoAction)."""

    dst_mac: bytes | None
    port: int


class LpmTable:
    """ipv4_lpm: {prefix_len: {masked prefix: action}}; action is a Forward or None (drop)."""

    def __init__(self) -> None:
        self._by_len: dict[int, dict[int, Forward | None]] = {}
        self._lens: list[int] = []
        self.default: Forward | None = None  # MyIngress.drop

    @staticmethod
    def mask(plen: int) -> int:
        return (0xFFFFFFFF << (32 - plen)) & 0xFFFFFFFF if plen else 0

    def key(self, prefix: int, plen: int) -> tuple[int, int]:
        if not 0 <= plen <= 32:
            raise ValueError(f"prefix length {plen} not in 0..32")
        if prefix & ~self.mask(plen) & 0xFFFFFFFF:
            raise ValueError(f"prefix {prefix:#010x}/{plen} has bits set beyond the prefix length")
        return prefix, plen

    def __contains__(self, k: tuple[int, int]) -> bool:
        return k[0] in self._by_len.get(k[1], {})

    def __len__(self) -> int:
        return sum(len(d) for d in self._by_len.values())

    def set(self, prefix: int, plen: int, action: Forward | None) -> None:
        self.key(prefix, plen)
        d = self._by_len.setdefault(plen, {})
        d[prefix] = action
        self._lens = sorted(self._by_len, reverse=True)

    def remove(self, prefix: int, plen: int) -> None:
        d = self._by_len.get(plen, {})
        del d[prefix]
        if not d:
            self._by_len.pop(plen, None)
        self._lens = sorted(self._by_len, reverse=True)

    def clear(self) -> None:
        self._by_len.clear()
        self._lens = []

    def lookup(self, addr: int) -> Forward | None:
        by_len = self._by_len
        for plen in self._lens:  # a snapshot list: writers replace it, never mutate it
            d = by_len.get(plen)
            if d is None:
                continue
            hit = d.get(addr & self.mask(plen), _MISS)
            if hit is not _MISS:
                return hit
        return self.default


_MISS = object()


class UnsupportedAction(Exception):
    """An action the P4Info allows in a table but this model does not implement."""


class TableModel:
    """What a P4Runtime server needs of one table of the model, by P4 name: the server checks
    an entry against the P4Info (ids, widths, match kinds) and hands over

    * ``key``: one item per match field, in P4Info order: ``(value,)`` for an exact field,
      ``(value, prefix_len)`` for an lpm field (``(0, 0)`` when omitted: a wildcard),
    * the action's name and its parameters by name (ints).

    :meth:`value` turns the action into what the data path uses (UnsupportedAction if this
    model has no such action); :meth:`put` / :meth:`delete` / :meth:`set_default` change the
    data path. ``default_action`` is the P4 program's default (what a read of an unset default
    entry shows)."""

    name = ""
    default_action = A_NOACTION

    def __init__(self, pipeline: "Pipeline") -> None:
        self.pipeline = pipeline

    def value(self, action: str, params: dict[str, int]):
        raise UnsupportedAction(f"action {action} is not implemented by this target")

    def put(self, key: tuple, value) -> None:
        raise NotImplementedError

    def delete(self, key: tuple) -> None:
        raise NotImplementedError

    def set_default(self, value) -> None:
        """``value`` from :meth:`value`, or None: back to the P4 program's default."""
        raise NotImplementedError


class RouteTable(TableModel):
    """MyIngress.ipv4_lpm: key (dstAddr, prefix_len) -> Forward (ipv4_forward, NoAction) or
    None (drop; also the default)."""

    name = T_IPV4_LPM
    default_action = A_DROP

    def value(self, action: str, params: dict[str, int]):
        if action == A_IPV4_FORWARD:
            return Forward(params[P_DST_ADDR].to_bytes(6, "big"), params[P_PORT])
        if action == A_DROP:
            return None
        if action == A_NOACTION:
            return Forward(None, 0)  # v1model: egress_spec stays 0, no rewrite
        return super().value(action, params)

    def put(self, key: tuple, value) -> None:
        self.pipeline.lpm.set(key[0], key[1], value)

    def delete(self, key: tuple) -> None:
        self.pipeline.lpm.remove(key[0], key[1])

    def set_default(self, value) -> None:
        self.pipeline.lpm.default = value


class EcnThresholdTable(TableModel):
    """MyEgress.ecn_threshold: key (egress_port,) -> queue depth that marks CE, or None
    (NoAction: no marking; also the default)."""

    name = T_ECN_THRESHOLD
    default_action = A_NOACTION

    def value(self, action: str, params: dict[str, int]):
        if action == A_SET_ECN_THRESHOLD:
            return params[P_THRESHOLD]
        if action == A_NOACTION:
            return None
        return super().value(action, params)

    def put(self, key: tuple, value) -> None:
        self.pipeline.ecn_thresholds[key[0]] = value

    def delete(self, key: tuple) -> None:
        self.pipeline.ecn_thresholds.pop(key[0], None)

    def set_default(self, value) -> None:
        self.pipeline.ecn_default = value


class _EntryDictTable(TableModel):
    """A table whose entries are one dict of the pipeline (``store``), keyed by the match value
    (one field) or the tuple of them; NoAction (value None) as an entry removes it, and is the only
    default action. Subclasses map their own actions to values and pass the rest up here."""

    store = ""

    def value(self, action: str, params: dict[str, int]):
        if action == A_NOACTION:
            return None
        return super().value(action, params)

    def _entries(self) -> dict:
        return getattr(self.pipeline, self.store)

    @staticmethod
    def _key(key: tuple):
        return key[0] if len(key) == 1 else tuple(key)

    def put(self, key: tuple, value) -> None:
        if value is None:
            self._entries().pop(self._key(key), None)
        else:
            self._entries()[self._key(key)] = value

    def delete(self, key: tuple) -> None:
        self._entries().pop(self._key(key), None)

    def set_default(self, value) -> None:
        if value is not None:
            raise UnsupportedAction(f"{self.name}: only NoAction as the default action")


class ProgressContestTable(_EntryDictTable):
    """MyEgress.progress_contest: key (egress_port,) -> the window (microseconds) within which
    another job's packet makes the port contested; None (NoAction, the default): always contested."""

    name = T_PROGRESS_CONTEST
    store = "progress_contest"

    def value(self, action: str, params: dict[str, int]):
        if action == A_SET_CONTEST_WINDOW:
            return params[P_WINDOW]
        return super().value(action, params)


NO_MARK = -1  # progress_ecn's no_progress_ecn: the band is not marked at any depth


class ProgressEcnTable(_EntryDictTable):
    """MyEgress.progress_ecn: key (egress_port, progress band) -> the MLTCP packet's ECN threshold,
    NO_MARK (no_progress_ecn: never marked) or None (NoAction: the port's threshold applies; also
    the default)."""

    name = T_PROGRESS_ECN
    store = "progress_ecn"

    def value(self, action: str, params: dict[str, int]):
        if action == A_SET_PROGRESS_ECN:
            return params[P_THRESHOLD]
        if action == A_NO_PROGRESS_ECN:
            return NO_MARK
        return super().value(action, params)


class ProgressPriorityTable(_EntryDictTable):
    """MyIngress.progress_priority: key (egress spec, band) -> the MLTCP packet's priority (0-7;
    NoAction: priority 0)."""

    name = T_PROGRESS_PRIORITY
    store = "progress_priority"

    def value(self, action: str, params: dict[str, int]):
        if action == A_SET_PROGRESS_PRIORITY:
            return params[P_PRIORITY]
        return super().value(action, params)


BAND_SHIFT = 16 - BAND_BITS


@dataclass(slots=True)
class IngressResult:
    """A packet that leaves ingress towards ``port``; ``buf`` is already rewritten."""

    buf: bytearray
    port: int
    parsed: Parsed
    priority: int = 0  # standard_metadata.priority: the egress port's strict-priority queue


class Pipeline:
    """The switch's match-action state and the per-packet ingress/egress functions.

    Not thread-safe by itself: callers serialise writes (the P4Runtime server holds a lock and
    swaps whole entries; Python's GIL makes single dict/list updates atomic for the data path).
    """

    def __init__(self) -> None:
        self.lpm = LpmTable()
        self.ecn_thresholds: dict[int, int] = {}
        self.ecn_default: int | None = None  # threshold for ports without an entry; None = off
        self.progress_ecn: dict[tuple[int, int], int] = {}  # (port, band) -> threshold
        self.progress_priority: dict[tuple[int, int], int] = {}  # (port, band) -> priority
        self.progress_contest: dict[int, int] = {}  # port -> window (us)
        self.counters = {name: CounterArray(size) for name, size in COUNTER_SIZES.items()}
        self.registers = {name: [0] * size for name, size in REGISTER_SIZES.items()}
        self.active = True  # the P4Runtime server clears this until a pipeline config is set
        # the match-action tables as a P4Runtime server drives them (by P4 name)
        self.tables: dict[str, TableModel] = {
            T_IPV4_LPM: RouteTable(self),
            T_ECN_THRESHOLD: EcnThresholdTable(self),
            T_PROGRESS_ECN: ProgressEcnTable(self),
            T_PROGRESS_CONTEST: ProgressContestTable(self),
            T_PROGRESS_PRIORITY: ProgressPriorityTable(self),
        }

    def reset_state(self) -> None:
        """Forget all table entries, counters and registers (a new pipeline config)."""
        self.lpm = LpmTable()
        self.ecn_thresholds = {}
        self.ecn_default = None
        self.progress_ecn = {}
        self.progress_priority = {}
        self.progress_contest = {}
        for c in self.counters.values():
            c.reset()
        for name, size in REGISTER_SIZES.items():
            self.registers[name] = [0] * size

    # -- ingress --------------------------------------------------------------------------
    def ingress(self, data: bytes | bytearray, in_port: int) -> IngressResult | None:
        """Parse and run ingress; return None when the packet is dropped."""
        try:
            p = parse(data)
        except ParseError:
            self.counters[C_PARSE_ERRORS].count(0, len(data))
            return None
        if p.job_id >= 0:
            self.counters[C_JOB_TX].count(p.job_id, p.length)
            if p.job_id < JOB_SLOTS:
                self.registers[R_JOB_BYTES_RATIO][p.job_id] = p.bytes_ratio
        if p.ip_off < 0:
            return None
        off = p.ip_off
        if data[off + 8] <= 1:  # TTL 0 or 1: a router drops it (RFC 1812 5.3.1), as mltcp.p4
            return None
        dst = int.from_bytes(data[off + 16 : off + 20], "big")
        action = self.lpm.lookup(dst)
        if action is None:
            return None
        buf = bytearray(data)
        if action.dst_mac is not None:  # ipv4_forward (NoAction: egress_spec stays 0)
            buf[6:12] = buf[0:6]
            buf[0:6] = action.dst_mac
            buf[off + 8] = (buf[off + 8] - 1) & 0xFF
        _fix_ipv4_checksum(buf, off, p.ihl_bytes)
        prio = 0
        if p.job_id >= 0 and self.progress_priority:
            prio = self.progress_priority.get((action.port, p.bytes_ratio >> BAND_SHIFT), 0)
        return IngressResult(buf, action.port, p, prio)

    # -- egress ---------------------------------------------------------------------------
    def ecn_threshold_for(self, port: int) -> int | None:
        return self.ecn_thresholds.get(port, self.ecn_default)

    def contested(self, port: int, job: int, now: float) -> bool:
        """progress_contest on ``port`` for a packet of ``job`` at ``now`` (seconds): True without
        an entry; with one, whether a job change there (this packet's included) lies within the
        window. Updates contest_job / contest_seen as mltcp.p4 does."""
        window = self.progress_contest.get(port)
        if window is None:
            return True
        us = int(round(now * 1e6)) & ((1 << 48) - 1)
        last = self.registers[R_CONTEST_JOB]
        seen = self.registers[R_CONTEST_SEEN]
        me = (job + 1) & 0xFFFF
        if last[port] != 0 and last[port] != me:
            seen[port] = us
        last[port] = me
        return ((us - seen[port]) & ((1 << 48) - 1)) < window

    def egress(self, res: IngressResult, enq_qdepth: int, now: float = 0.0) -> bool:
        """Mark CE in place when ``enq_qdepth >= threshold`` and the packet is ECT; True if marked.
        ``now`` (seconds, the switch's clock) is what progress_contest compares."""
        threshold = self.ecn_thresholds.get(res.port, self.ecn_default)
        p = res.parsed
        if (
            p.job_id >= 0
            and self.progress_ecn
            and (not self.progress_contest or self.contested(res.port, p.job_id, now))
        ):
            # progress_ecn: the MLTCP packet's own threshold
            threshold = self.progress_ecn.get((res.port, p.bytes_ratio >> BAND_SHIFT), threshold)
        if threshold is None or threshold == NO_MARK or enq_qdepth < threshold:
            return False
        buf = res.buf
        tos = buf[p.ip_off + 1]
        if (tos & 3) not in (1, 2):
            return False
        buf[p.ip_off + 1] = tos | 3
        _fix_ipv4_checksum(buf, p.ip_off, p.ihl_bytes)
        if p.job_id >= 0:
            self.counters[C_JOB_ECN_MARKS].count(p.job_id, p.length)
        return True
