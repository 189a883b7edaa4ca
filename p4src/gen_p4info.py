"""Write p4src/mltcp.p4info.txtpb: the P4Info that p4c would emit for p4src/mltcp.p4.

p4c and BMv2 are not installable on the build machines, so the P4Info is generated here from
the description of mltcp.p4's control-plane objects in :mod:`mltcp.p4src.names` (the one list
the control plane and the software switch use too; tests/test_p4info.py checks it against the
P4 source, and against p4c's own output wherever p4c is on PATH).

Ids follow p4c's scheme (control-plane/p4RuntimeSymbolTable.cpp): without an @id annotation an
object's id is ``(resource type prefix << 24) | (jenkins_one_at_a_time(fully qualified name) &
0xffffff)``, names of one resource type hashed in sorted order with linear probing of the hash
on collision. The alias is the shortest unique dot-separated suffix of the name among all
P4Runtime symbols. (Checked against published p4c output: "NoAction" -> 21257015,
"MyIngress.ipv4_lpm" -> 37375156.)

Usage:  python -m mltcp.p4src.gen_p4info [--check] [--out PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from .names import MLTCP_V1MODEL, Program

HERE = Path(__file__).resolve().parent
P4INFO_PATH = HERE / "mltcp.p4info.txtpb"

# p4.config.v1.P4Ids.Prefix
PREFIX = {
    "action": p4info_pb2.P4Ids.ACTION,
    "table": p4info_pb2.P4Ids.TABLE,
    "counter": p4info_pb2.P4Ids.COUNTER,
    "register": p4info_pb2.P4Ids.REGISTER,
}

HEADER = "# proto-file: p4/config/v1/p4info.proto\n# proto-message: p4.config.v1.P4Info\n\n"


def jenkins_one_at_a_time(data: bytes) -> int:
    """Bob Jenkins' one-at-a-time hash over bytes, 32-bit (as p4c uses for P4Runtime ids)."""
    h = 0
    for b in data:
        h = (h + b) & 0xFFFFFFFF
        h = (h + (h << 10)) & 0xFFFFFFFF
        h ^= h >> 6
    h = (h + (h << 3)) & 0xFFFFFFFF
    h ^= h >> 11
    h = (h + (h << 15)) & 0xFFFFFFFF
    return h


def assign_ids(names_by_type: dict[str, list[str]]) -> dict[tuple[str, str], int]:
    """Ids for every (resource type, name), the way p4c assigns them when no @id is given."""
    used: set[int] = set()
    ids: dict[tuple[str, str], int] = {}
    for rtype in sorted(names_by_type, key=lambda t: PREFIX[t]):
        prefix = PREFIX[rtype]
        for name in sorted(set(names_by_type[rtype])):
            value = jenkins_one_at_a_time(name.encode())
            while ((prefix << 24) | (value & 0xFFFFFF)) in used:
                value = (value + 1) & 0xFFFFFFFF
            pid = (prefix << 24) | (value & 0xFFFFFF)
            used.add(pid)
            ids[(rtype, name)] = pid
    return ids


def shortest_unique_suffix(name: str, all_names: set[str]) -> str:
    """p4c's default alias: fewest trailing components of `name` not shared with another name."""
    parts = name.split(".")
    others = [n.split(".") for n in all_names if n != name]
    for k in range(1, len(parts) + 1):
        suffix = parts[-k:]
        if not any(len(o) >= k and o[-k:] == suffix for o in others):
            return ".".join(suffix)
    return name


def build_p4info(prog: Program = MLTCP_V1MODEL) -> p4info_pb2.P4Info:
    names = {
        "table": [t.name for t in prog.tables],
        "action": [a.name for a in prog.actions],
        "counter": [c.name for c in prog.counters],
        "register": [r.name for r in prog.registers],
    }
    ids = assign_ids(names)
    all_names = {n for ns in names.values() for n in ns}

    def preamble(msg, rtype: str, name: str, annotations=()):
        msg.id = ids[(rtype, name)]
        msg.name = name
        msg.alias = shortest_unique_suffix(name, all_names)
        msg.annotations.extend(annotations)

    info = p4info_pb2.P4Info()
    info.pkg_info.arch = prog.arch
    for t in prog.tables:
        tm = info.tables.add()
        preamble(tm.preamble, "table", t.name)
        for i, (fname, width, mtype) in enumerate(t.keys, start=1):
            mf = tm.match_fields.add()
            mf.id, mf.name, mf.bitwidth = i, fname, width
            mf.match_type = p4info_pb2.MatchField.MatchType.Value(mtype)
        for aname in t.actions:
            tm.action_refs.add().id = ids[("action", aname)]
        tm.size = t.size
    for a in prog.actions:
        am = info.actions.add()
        preamble(am.preamble, "action", a.name, a.annotations)
        for i, (pname, width) in enumerate(a.params, start=1):
            pm = am.params.add()
            pm.id, pm.name, pm.bitwidth = i, pname, width
    for c in prog.counters:
        cm = info.counters.add()
        preamble(cm.preamble, "counter", c.name)
        cm.spec.unit = p4info_pb2.CounterSpec.Unit.Value(c.unit)
        cm.size = c.size
    for r in prog.registers:
        rm = info.registers.add()
        preamble(rm.preamble, "register", r.name)
        rm.type_spec.bitstring.bit.bitwidth = r.bitwidth
        rm.size = r.size
    info.type_info.SetInParent()
    return info


def render(info: p4info_pb2.P4Info) -> str:
    return HEADER + text_format.MessageToString(info)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=P4INFO_PATH)
    ap.add_argument("--check", action="store_true", help="exit 1 if the file differs from what would be generated")
    args = ap.parse_args(argv)
    text = render(build_p4info())
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date: run python -m mltcp.p4src.gen_p4info", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
