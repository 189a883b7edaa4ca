"""P4Runtime messages for mltcp.p4 (p4.v1 protos), built from a P4Info. No network.

Names, parameters and widths come from :mod:`mltcp.p4src.names` (the one list the software
switch and the P4Info generator use too); ids from the P4Info in use, through a
:class:`~mltcp.p4src.p4info.P4InfoIndex` the caller holds (one per switch connection: no
global context). Byte strings are canonical (P4Runtime 1.4: shortest form, one zero byte for
0). Object names are the contract of docs/CONTRACTS.md.
"""

from __future__ import annotations

import ipaddress

from p4.v1 import p4runtime_pb2

from mltcp.p4src import names as N
from mltcp.p4src.p4info import P4InfoIndex

from .topology import Route

__all__ = [
    "P4InfoIndex",
    "bitstring",
    "counter_read_entity",
    "describe",
    "ecn_entry",
    "index",
    "progress_ecn_entry",
    "progress_entries",
    "progress_no_ecn_entry",
    "progress_priority_entry",
    "register_read_entity",
    "route_entry",
    "table_read_entity",
]


def index(p4info) -> P4InfoIndex:
    """The name/id index of a p4info_pb2.P4Info."""
    return P4InfoIndex.build(p4info)


def bitstring(value: int, bitwidth: int, what: str) -> bytes:
    """``value`` as a canonical P4Runtime byte string; ValueError if it does not fit."""
    if value < 0 or value >> bitwidth:
        raise ValueError(f"{what}: {value} does not fit bit<{bitwidth}>")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def _entry(idx: P4InfoIndex, table: str) -> p4runtime_pb2.TableEntry:
    return p4runtime_pb2.TableEntry(table_id=idx.id("table", table))


def _action(idx: P4InfoIndex, te: p4runtime_pb2.TableEntry, action: str, params: dict[str, int]) -> None:
    act = te.action.action
    act.action_id = idx.id("action", action)
    for name, value in params.items():
        p = idx.param(action, name)
        act.params.add(param_id=p.id, value=bitstring(value, p.bitwidth, f"{action} {name}"))


def route_entry(idx: P4InfoIndex, route: Route) -> p4runtime_pb2.TableEntry:
    """MyIngress.ipv4_lpm: prefix -> ipv4_forward(dstAddr=mac, port)."""
    te = _entry(idx, N.T_IPV4_LPM)
    net = ipaddress.IPv4Network(route.prefix)
    mf = idx.match_field(N.T_IPV4_LPM, N.K_IPV4_DST)
    if net.prefixlen:  # /0 is a wildcard: the field is omitted (P4Runtime)
        m = te.match.add(field_id=mf.id)
        m.lpm.value = bitstring(int(net.network_address), mf.bitwidth, N.K_IPV4_DST)
        m.lpm.prefix_len = net.prefixlen
    _action(idx, te, N.A_IPV4_FORWARD, {N.P_DST_ADDR: int(route.mac.replace(":", ""), 16), N.P_PORT: route.port})
    return te


def ecn_entry(idx: P4InfoIndex, port: int, threshold: int | None = None) -> p4runtime_pb2.TableEntry:
    """MyEgress.ecn_threshold: egress port -> set_ecn_threshold(threshold).

    With threshold None the entry has only its key (enough to delete it)."""
    return _port_entry(
        idx, N.T_ECN_THRESHOLD, port, N.A_SET_ECN_THRESHOLD, None if threshold is None else {N.P_THRESHOLD: threshold}
    )


def _port_entry(idx: P4InfoIndex, table: str, port: int, action: str, params: dict | None) -> p4runtime_pb2.TableEntry:
    """An entry of a table keyed on the egress port alone; ``params`` None: key only."""
    te = _entry(idx, table)
    mf = idx.match_field(table, N.K_EGRESS_PORT)
    te.match.add(field_id=mf.id).exact.value = bitstring(port, mf.bitwidth, N.K_EGRESS_PORT)
    if params is not None:
        _action(idx, te, action, params)
    return te


def _band_key(idx: P4InfoIndex, table: str, port_key: str, port: int, band: int, te: p4runtime_pb2.TableEntry) -> None:
    for name, v in ((port_key, port), (N.K_PROGRESS_BAND, band)):
        mf = idx.match_field(table, name)
        te.match.add(field_id=mf.id).exact.value = bitstring(v, mf.bitwidth, name)


def progress_ecn_entry(
    idx: P4InfoIndex, port: int, band: int, threshold: int | None = None
) -> p4runtime_pb2.TableEntry:
    """MyEgress.progress_ecn: (egress port, band) -> set_progress_ecn(threshold); None: key only."""
    te = _entry(idx, N.T_PROGRESS_ECN)
    _band_key(idx, N.T_PROGRESS_ECN, N.K_EGRESS_PORT, port, band, te)
    if threshold is not None:
        _action(idx, te, N.A_SET_PROGRESS_ECN, {N.P_THRESHOLD: threshold})
    return te


def progress_no_ecn_entry(idx: P4InfoIndex, port: int, band: int) -> p4runtime_pb2.TableEntry:
    """MyEgress.progress_ecn: (egress port, band) -> no_progress_ecn (the band is never marked)."""
    te = _entry(idx, N.T_PROGRESS_ECN)
    _band_key(idx, N.T_PROGRESS_ECN, N.K_EGRESS_PORT, port, band, te)
    _action(idx, te, N.A_NO_PROGRESS_ECN, {})
    return te


def progress_priority_entry(
    idx: P4InfoIndex, port: int, band: int, priority: int | None = None
) -> p4runtime_pb2.TableEntry:
    """MyIngress.progress_priority: (egress spec, band) -> set_progress_priority(priority)."""
    te = _entry(idx, N.T_PROGRESS_PRIORITY)
    _band_key(idx, N.T_PROGRESS_PRIORITY, N.K_EGRESS_SPEC, port, band, te)
    if priority is not None:
        _action(idx, te, N.A_SET_PROGRESS_PRIORITY, {N.P_PRIORITY: priority})
    return te


def progress_contest_entry(idx: P4InfoIndex, port: int, window_us: int | None = None) -> p4runtime_pb2.TableEntry:
    """MyEgress.progress_contest: egress port -> set_contest_window(window, microseconds); None:
    key only."""
    return _port_entry(
        idx, N.T_PROGRESS_CONTEST, port, N.A_SET_CONTEST_WINDOW, None if window_us is None else {N.P_WINDOW: window_us}
    )


def contest_window_us(policy) -> int:
    """The policy's contest window as mltcp.p4's whole microseconds (at least 1 when set); 0: none."""
    w = float(getattr(policy, "contest_window_us", 0.0) or 0.0)
    return max(1, int(round(w))) if w > 0 else 0


def progress_entries(idx: P4InfoIndex, port: int, policy, base_threshold: int | None) -> list[p4runtime_pb2.TableEntry]:
    """The entries of a mltcp.progress_policy.ProgressPolicy on one port: one per hardware band
    (bytes_ratio[15:12]); ecn-by-progress scales the port's threshold ``base_threshold``,
    priority-by-progress maps the band to its priority, and by its priority_ecn: ``link`` adds
    nothing (v1model's enq_qdepth, on BMv2, is the port's total over its priority queues, compared
    with the port's threshold), ``off`` a no_progress_ecn entry per band, ``by-band`` is refused
    (v1model has no per-queue depth; mltcp_tna.p4's enq_qdepth is the queue's own); off: none."""
    if policy.name == "ecn-by-progress":
        if not base_threshold:
            raise ValueError(f"port {port}: ecn-by-progress needs the port's ECN threshold")
        ks = policy.thresholds(base_threshold)
        tes = [progress_ecn_entry(idx, port, hb, ks[b]) for hb, b in enumerate(policy.hw_band_map())]
        window = contest_window_us(policy)
        if window:  # the bands' thresholds only while another job shares the port
            tes.append(progress_contest_entry(idx, port, window))
        return tes
    if policy.name == "priority-by-progress":
        pecn = getattr(policy, "priority_ecn", "link")
        if pecn == "by-band":
            raise ValueError(
                f'port {port}: priority_ecn = "by-band" needs each priority queue\'s own depth, and '
                'v1model\'s enq_qdepth (BMv2) counts all the port\'s queues: use "link" or "off"'
            )
        tes = [progress_priority_entry(idx, port, hb, b) for hb, b in enumerate(policy.hw_band_map())]
        if pecn == "off":
            tes += [progress_no_ecn_entry(idx, port, hb) for hb in range(len(policy.hw_band_map()))]
        return tes
    return []


def table_read_entity(idx: P4InfoIndex, table: str) -> p4runtime_pb2.Entity:
    """Wildcard read of every entry of a table."""
    return p4runtime_pb2.Entity(table_entry=_entry(idx, table))


def counter_read_entity(idx: P4InfoIndex, name: str) -> p4runtime_pb2.Entity:
    """Wildcard read of every index of an indirect counter."""
    ent = p4runtime_pb2.Entity()
    ent.counter_entry.counter_id = idx.id("counter", name)
    return ent


def register_read_entity(idx: P4InfoIndex, name: str) -> p4runtime_pb2.Entity:
    """Wildcard read of every cell of a register."""
    ent = p4runtime_pb2.Entity()
    ent.register_entry.register_id = idx.id("register", name)
    return ent


def describe(idx: P4InfoIndex, te: p4runtime_pb2.TableEntry) -> str:
    """'route 10.0.0.0/24' / 'ECN threshold on port 2' for an entry of the journal."""
    name = idx.tables[te.table_id].preamble.name if te.table_id in idx.tables else "?"
    if name == N.T_IPV4_LPM:
        if not te.match:
            return "route 0.0.0.0/0"
        v = int.from_bytes(te.match[0].lpm.value, "big")
        return f"route {ipaddress.IPv4Address(v)}/{te.match[0].lpm.prefix_len}"
    if name == N.T_PROGRESS_CONTEST and te.match:
        return f"progress contest window on port {int.from_bytes(te.match[0].exact.value, 'big')}"
    if name in (N.T_PROGRESS_ECN, N.T_PROGRESS_PRIORITY) and len(te.match) == 2:
        port, band = (int.from_bytes(m.exact.value, "big") for m in te.match)
        what = "ECN threshold" if name == N.T_PROGRESS_ECN else "priority"
        return f"progress {what} on port {port} band {band}"
    if name == N.T_ECN_THRESHOLD and te.match:
        return f"ECN threshold on port {int.from_bytes(te.match[0].exact.value, 'big')}"
    return f"{name} entry"
