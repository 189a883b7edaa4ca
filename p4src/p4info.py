"""A P4Info indexed by name and id, and the check that it describes mltcp.p4.

Ids are never hard-coded: the control plane (controlplane/entries.py) and the software
switch's P4Runtime server (emulation/switch/p4runtime_server.py) both resolve the names of
:mod:`mltcp.p4src.names` through a :class:`P4InfoIndex` of the P4Info in use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from p4.config.v1 import p4info_pb2

from .names import A_NOACTION, MLTCP_V1MODEL, Program

MatchType = p4info_pb2.MatchField.MatchType
KINDS = ("table", "action", "counter", "register")


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
        for kind, objs in zip(KINDS, (p4info.tables, p4info.actions, p4info.counters, p4info.registers)):
            target = idx.by_kind(kind)
            for o in objs:
                target[o.preamble.id] = o
                idx.ids[f"{kind}:{o.preamble.name}"] = o.preamble.id
        return idx

    def by_kind(self, kind: str) -> dict:
        return {"table": self.tables, "action": self.actions, "counter": self.counters, "register": self.registers}[
            kind
        ]

    def id(self, kind: str, name: str) -> int:
        """The id of ``kind`` object ``name``; KeyError naming it if the P4Info lacks it."""
        try:
            return self.ids[f"{kind}:{name}"]
        except KeyError:
            raise KeyError(f"{kind} {name!r} not in the P4Info") from None

    def name(self, kind: str, obj_id: int) -> str:
        return self.by_kind(kind)[obj_id].preamble.name

    def get(self, kind: str, name: str):
        """The P4Info message of ``kind`` object ``name`` (KeyError if absent)."""
        return self.by_kind(kind)[self.id(kind, name)]

    def match_field(self, table: str, name: str) -> p4info_pb2.MatchField:
        for m in self.get("table", table).match_fields:
            if m.name == name:
                return m
        raise KeyError(f"match field {name!r} not in table {table}")

    def param(self, action: str, name: str) -> p4info_pb2.Action.Param:
        for p in self.get("action", action).params:
            if p.name == name:
                return p
        raise KeyError(f"param {name!r} not in action {action}")


def missing_objects(p4info: p4info_pb2.P4Info, program: Program = MLTCP_V1MODEL) -> list[str]:
    """Everything ``program`` needs that this P4Info lacks or declares with another shape
    (NoAction may be absent: a P4Info without it still describes mltcp.p4)."""
    idx = P4InfoIndex.build(p4info)
    problems: list[str] = []
    by_name_t = {t.preamble.name: t for t in p4info.tables}
    by_name_a = {a.preamble.name: a for a in p4info.actions}
    for spec in program.tables:
        t = by_name_t.get(spec.name)
        if t is None:
            problems.append(f"table {spec.name}")
            continue
        fields = {m.name: m for m in t.match_fields}
        for fname, width, mtype in spec.keys:
            m = fields.get(fname)
            if m is None:
                problems.append(f"match field {fname} of table {spec.name}")
            elif m.match_type != MatchType.Value(mtype) or m.bitwidth != width:
                problems.append(f"match field {fname} of table {spec.name} as {mtype} bit<{width}>")
        refs = {idx.actions[r.id].preamble.name for r in t.action_refs if r.id in idx.actions}
        for aname in sorted(set(spec.actions) - refs - {A_NOACTION}):
            problems.append(f"action {aname} in table {spec.name}")
    for spec in program.actions:
        if spec.name == A_NOACTION:
            continue
        a = by_name_a.get(spec.name)
        if a is None:
            problems.append(f"action {spec.name}")
            continue
        have = {p.name: p.bitwidth for p in a.params}
        for pname, width in spec.params:
            if have.get(pname) != width:
                problems.append(f"param {pname} bit<{width}> of action {spec.name}")
    for kind, specs, objs in (
        ("counter", program.counters, p4info.counters),
        ("register", program.registers, p4info.registers),
    ):
        have = {o.preamble.name: o for o in objs}
        for spec in specs:
            o = have.get(spec.name)
            if o is None:
                problems.append(f"{kind} {spec.name}")
            elif o.size < spec.size:
                problems.append(f"{kind} {spec.name} of size >= {spec.size}")
    return problems
