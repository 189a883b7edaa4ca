"""Index a pushed P4Info by name and check it describes mltcp.p4 (ids are never hard-coded)."""

from __future__ import annotations

from dataclasses import dataclass, field

from p4.config.v1 import p4info_pb2

from . import pipeline as pl

MatchType = p4info_pb2.MatchField.MatchType

# What the software target implements: object name -> shape it must have in the P4Info.
REQUIRED_TABLES = {
    pl.T_IPV4_LPM: {
        "match": {pl.K_IPV4_DST: (MatchType.LPM, 32)},
        "actions": {pl.A_IPV4_FORWARD, pl.A_DROP},
    },
    pl.T_ECN_THRESHOLD: {
        "match": {pl.K_EGRESS_PORT: (MatchType.EXACT, pl.PORT_BITS)},
        "actions": {pl.A_SET_ECN_THRESHOLD},
    },
}
REQUIRED_ACTIONS = {
    pl.A_IPV4_FORWARD: {"dstAddr": 48, "port": pl.PORT_BITS},
    pl.A_DROP: {},
    pl.A_SET_ECN_THRESHOLD: {"threshold": pl.THRESHOLD_BITS},
}
REQUIRED_COUNTERS = dict(pl.COUNTER_SIZES)
REQUIRED_REGISTERS = dict(pl.REGISTER_SIZES)


@dataclass
class P4InfoIndex:
    """Name/id maps over one P4Info message."""

    p4info: p4info_pb2.P4Info
    tables: dict[int, p4info_pb2.Table] = field(default_factory=dict)
    actions: dict[int, p4info_pb2.Action] = field(default_factory=dict)
    counters: dict[int, p4info_pb2.Counter] = field(default_factory=dict)
    registers: dict[int, p4info_pb2.Register] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)  # "kind:name" -> id

    @classmethod
    def build(cls, p4info: p4info_pb2.P4Info) -> "P4InfoIndex":
        idx = cls(p4info)
        for kind, objs, target in (
            ("table", p4info.tables, idx.tables),
            ("action", p4info.actions, idx.actions),
            ("counter", p4info.counters, idx.counters),
            ("register", p4info.registers, idx.registers),
        ):
            for o in objs:
                target[o.preamble.id] = o
                idx.ids[f"{kind}:{o.preamble.name}"] = o.preamble.id
        return idx

    def id(self, kind: str, name: str) -> int:
        return self.ids[f"{kind}:{name}"]

    def name(self, kind: str, obj_id: int) -> str:
        objs = {"table": self.tables, "action": self.actions, "counter": self.counters,
                "register": self.registers}[kind]
        return objs[obj_id].preamble.name


def missing_objects(p4info: p4info_pb2.P4Info) -> list[str]:
    """Everything mltcp.p4 needs that this P4Info lacks or declares with another shape."""
    idx = P4InfoIndex.build(p4info)
    problems: list[str] = []
    by_name_t = {t.preamble.name: t for t in p4info.tables}
    by_name_a = {a.preamble.name: a for a in p4info.actions}
    for name, spec in REQUIRED_TABLES.items():
        t = by_name_t.get(name)
        if t is None:
            problems.append(f"table {name}")
            continue
        fields = {m.name: m for m in t.match_fields}
        for fname, (mtype, width) in spec["match"].items():
            m = fields.get(fname)
            if m is None:
                problems.append(f"match field {fname} of table {name}")
            elif m.match_type != mtype or m.bitwidth != width:
                problems.append(
                    f"match field {fname} of table {name} as {MatchType.Name(mtype)} bit<{width}>")
        refs = {idx.actions[r.id].preamble.name for r in t.action_refs if r.id in idx.actions}
        for aname in sorted(spec["actions"] - refs):
            problems.append(f"action {aname} in table {name}")
    for name, params in REQUIRED_ACTIONS.items():
        a = by_name_a.get(name)
        if a is None:
            problems.append(f"action {name}")
            continue
        have = {p.name: p.bitwidth for p in a.params}
        for pname, width in params.items():
            if have.get(pname) != width:
                problems.append(f"param {pname} bit<{width}> of action {name}")
    counters = {c.preamble.name: c for c in p4info.counters}
    for name, size in REQUIRED_COUNTERS.items():
        c = counters.get(name)
        if c is None:
            problems.append(f"counter {name}")
        elif c.size < size:
            problems.append(f"counter {name} of size >= {size}")
    registers = {r.preamble.name: r for r in p4info.registers}
    for name, size in REQUIRED_REGISTERS.items():
        r = registers.get(name)
        if r is None:
            problems.append(f"register {name}")
        elif r.size < size:
            problems.append(f"register {name} of size >= {size}")
    return problems
