"""The committed P4Info matches the P4 sources (v1model and TNA), and p4c where available."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from mltcp.p4src import P4_PATH, P4INFO_PATH, TNA_PATH, load_p4info
from mltcp.p4src import gen_p4info
from mltcp import tools

# ------------------------------------------------------------------------------------------
# A small regex reader for the declarations in our own P4 sources (not a general P4 parser).


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", " ", src)


def _block(src: str, open_at: int) -> str:
    """Text between the brace at `open_at` and its matching closing brace."""
    depth = 0
    for i in range(open_at, len(src)):
        if src[i] == "{":
            depth += 1
        elif src[i] == "}":
            depth -= 1
            if depth == 0:
                return src[open_at + 1 : i]
    raise AssertionError("unbalanced braces")


def _int(expr: str, defines: dict[str, int]) -> int:
    expr = expr.strip()
    return defines[expr] if expr in defines else int(expr, 0)


def _width(typ: str, typedefs: dict[str, int]) -> int:
    typ = typ.strip()
    m = re.fullmatch(r"bit<(\d+)>", typ)
    if m:
        return int(m.group(1))
    return typedefs[typ]


COUNTER_UNITS = {
    "packets": "PACKETS",
    "bytes": "BYTES",
    "packets_and_bytes": "BOTH",
    "PACKETS": "PACKETS",
    "BYTES": "BYTES",
    "PACKETS_AND_BYTES": "BOTH",
}


def read_p4(path: Path, extra_typedefs: dict[str, int] | None = None) -> dict:
    src = _strip_comments(path.read_text())
    defines = {m.group(1): int(m.group(2), 0) for m in re.finditer(r"#define\s+(\w+)\s+(\d+)", src)}
    typedefs = dict(extra_typedefs or {})
    typedefs.update({m.group(2): int(m.group(1)) for m in re.finditer(r"typedef\s+bit<(\d+)>\s+(\w+)\s*;", src)})
    out = {"tables": {}, "actions": {}, "counters": {}, "registers": {}}
    for cm in re.finditer(r"\bcontrol\s+(\w+)\s*\(", src):
        ctrl = cm.group(1)
        body = _block(src, src.index("{", cm.end()))
        for am in re.finditer(r"\baction\s+(\w+)\s*\(([^)]*)\)", body):
            params = []
            for p in filter(None, (x.strip() for x in am.group(2).split(","))):
                typ, name = p.rsplit(None, 1)
                params.append((name, _width(typ, typedefs)))
            out["actions"][f"{ctrl}.{am.group(1)}"] = tuple(params)
        for tm in re.finditer(r"\btable\s+(\w+)\s*\{", body):
            tbody = _block(body, tm.end() - 1)
            keys = []
            kbody = _block(tbody, tbody.index("{", tbody.index("key")))
            for km in re.finditer(r"([\w.]+)\s*:\s*(\w+)\s*(?:@name\(\"([^\"]+)\"\))?\s*;", kbody):
                keys.append((km.group(3) or km.group(1), km.group(2).upper()))
            abody = _block(tbody, tbody.index("{", tbody.index("actions")))
            acts = []
            for a in filter(None, (x.strip() for x in abody.split(";"))):
                acts.append(a if a == "NoAction" else f"{ctrl}.{a}")
            size = int(re.search(r"\bsize\s*=\s*(\d+)", tbody).group(1))
            out["tables"][f"{ctrl}.{tm.group(1)}"] = {"keys": keys, "actions": acts, "size": size}
            if "NoAction" in acts:
                out["actions"]["NoAction"] = ()
        # v1model: counter(SIZE, CounterType.x) name;   TNA: Counter<W, I>(SIZE, CounterType_t.X) name;
        for m in re.finditer(
            r"\b[Cc]ounter\s*(?:<(?:[^<>]|<[^<>]*>)*>)?\s*\(\s*(\w+)\s*,\s*CounterType(?:_t)?"
            r"\.(\w+)\s*\)\s*(\w+)\s*;",
            body,
        ):
            out["counters"][f"{ctrl}.{m.group(3)}"] = (COUNTER_UNITS[m.group(2)], _int(m.group(1), defines))
        # v1model: register<bit<W>>(SIZE) name;   TNA: Register<bit<W>, I>(SIZE, init) name;
        for m in re.finditer(
            r"\b[Rr]egister\s*<\s*bit<(\d+)>\s*(?:,[^>]*)?>\s*\(\s*(\w+)"
            r"[^)]*\)\s*(\w+)\s*;",
            body,
        ):
            out["registers"][f"{ctrl}.{m.group(3)}"] = (int(m.group(1)), _int(m.group(2), defines))
    return out


def p4info_objects(info: p4info_pb2.P4Info) -> dict:
    aname = {a.preamble.id: a.preamble.name for a in info.actions}
    mt = p4info_pb2.MatchField.MatchType.Name
    unit = p4info_pb2.CounterSpec.Unit.Name
    return {
        "tables": {
            t.preamble.name: {
                "keys": [(f.name, mt(f.match_type)) for f in t.match_fields],
                "actions": [aname[r.id] for r in t.action_refs],
                "size": t.size,
            }
            for t in info.tables
        },
        "actions": {a.preamble.name: tuple((p.name, p.bitwidth) for p in a.params) for a in info.actions},
        "counters": {c.preamble.name: (unit(c.spec.unit), c.size) for c in info.counters},
        "registers": {r.preamble.name: (r.type_spec.bitstring.bit.bitwidth, r.size) for r in info.registers},
    }


@pytest.fixture(scope="module")
def committed():
    return load_p4info()


@pytest.fixture(scope="module")
def v1model_decls():
    return read_p4(P4_PATH)


# ------------------------------------------------------------------------------------------


def test_reader_finds_the_contract_objects(v1model_decls):
    # guards the regex reader itself: if it silently found nothing, the comparisons below
    # would compare empty sets
    assert set(v1model_decls["tables"]) == {
        "MyIngress.ipv4_lpm",
        "MyEgress.ecn_threshold",
        "MyIngress.progress_priority",
        "MyEgress.progress_ecn",
        "MyEgress.progress_contest",
    }
    assert set(v1model_decls["counters"]) == {"MyIngress.job_tx", "MyIngress.parse_errors", "MyEgress.job_ecn_marks"}
    assert set(v1model_decls["registers"]) == {
        "MyIngress.job_bytes_ratio",
        "MyEgress.contest_job",
        "MyEgress.contest_seen",
    }


@pytest.mark.parametrize("kind", ["tables", "actions", "counters", "registers"])
def test_v1model_names_match_p4info(kind, committed, v1model_decls):
    assert set(v1model_decls[kind]) == set(p4info_objects(committed)[kind])


@pytest.mark.parametrize("kind", ["tables", "actions", "counters", "registers"])
def test_v1model_shapes_match_p4info(kind, committed, v1model_decls):
    # keys + match types, action lists, sizes, param bitwidths, counter units, register widths
    assert v1model_decls[kind] == p4info_objects(committed)[kind]


@pytest.mark.parametrize("kind", ["tables", "actions", "counters", "registers"])
def test_tna_names_match_p4info(kind, committed):
    # Tofino's PortId_t is bit<9>
    tna = read_p4(TNA_PATH, extra_typedefs={"PortId_t": 9})
    assert set(tna[kind]) == set(p4info_objects(committed)[kind])


def test_tna_table_keys_and_params_match(committed):
    tna = read_p4(TNA_PATH, extra_typedefs={"PortId_t": 9})
    info = p4info_objects(committed)
    assert tna["tables"] == info["tables"]
    assert tna["actions"] == info["actions"]
    assert {k: v[0] for k, v in tna["counters"].items()} == {k: v[0] for k, v in info["counters"].items()}


def test_committed_file_is_what_the_generator_writes():
    assert P4INFO_PATH.read_text() == gen_p4info.render(gen_p4info.build_p4info())


def test_generator_check_mode_detects_stale_file(tmp_path):
    stale = tmp_path / "p.txtpb"
    stale.write_text(P4INFO_PATH.read_text().replace("size: 512", "size: 511"))
    assert gen_p4info.main(["--check", "--out", str(stale)]) == 1
    good = tmp_path / "q.txtpb"
    assert gen_p4info.main(["--out", str(good)]) == 0
    assert gen_p4info.main(["--check", "--out", str(good)]) == 0


# Ids: p4c's scheme, checked against ids published in p4c-generated P4Info files.
@pytest.mark.parametrize(
    "name,published",
    [
        ("NoAction", 21257015),
        ("MyIngress.drop", 25652968),
        ("MyIngress.ipv4_forward", 28792405),
    ],
)
def test_action_ids_match_published_p4c_output(name, published):
    ids = gen_p4info.assign_ids({"action": [name]})
    assert ids[("action", name)] == published


def test_table_id_matches_published_p4c_output():
    assert gen_p4info.assign_ids({"table": ["MyIngress.ipv4_lpm"]})[("table", "MyIngress.ipv4_lpm")] == 37375156


def test_ids_have_type_prefix_and_are_unique(committed):
    seen = set()
    for objs, prefix in (
        (committed.tables, p4info_pb2.P4Ids.TABLE),
        (committed.actions, p4info_pb2.P4Ids.ACTION),
        (committed.counters, p4info_pb2.P4Ids.COUNTER),
        (committed.registers, p4info_pb2.P4Ids.REGISTER),
    ):
        for o in objs:
            assert o.preamble.id >> 24 == prefix, o.preamble.name
            assert o.preamble.id not in seen
            seen.add(o.preamble.id)


def test_id_collision_is_resolved_by_linear_probing(monkeypatch):
    monkeypatch.setattr(gen_p4info, "jenkins_one_at_a_time", lambda data: 0x1234)
    ids = gen_p4info.assign_ids({"action": ["b", "a"]})
    # sorted order: "a" gets the hash, "b" the next value
    assert ids[("action", "a")] == (1 << 24) | 0x1234
    assert ids[("action", "b")] == (1 << 24) | 0x1235


def test_alias_is_shortest_unique_suffix():
    names = {"MyIngress.drop", "MyEgress.drop", "MyIngress.job_tx"}
    assert gen_p4info.shortest_unique_suffix("MyIngress.drop", names) == "MyIngress.drop"
    assert gen_p4info.shortest_unique_suffix("MyIngress.job_tx", names) == "job_tx"


def test_p4runtime_shell_context_accepts_it(committed):
    from p4runtime_sh.context import Context, P4Type

    ctx = Context()
    ctx.set_p4info(committed)
    assert ctx.get_obj(P4Type.table, "ipv4_lpm").preamble.name == "MyIngress.ipv4_lpm"
    assert ctx.get_mf_id("MyEgress.ecn_threshold", "standard_metadata.egress_port") == 1
    assert ctx.get_param("MyIngress.ipv4_forward", "port").bitwidth == 9


def _canonical(info: p4info_pb2.P4Info) -> dict:
    """What must agree with p4c: names, ids, shapes (ordering and annotations aside)."""
    objs = p4info_objects(info)
    ids = {
        (kind, o.preamble.name): o.preamble.id
        for kind, seq in (
            ("table", info.tables),
            ("action", info.actions),
            ("counter", info.counters),
            ("register", info.registers),
        )
        for o in seq
    }
    return {"arch": info.pkg_info.arch, "objs": objs, "ids": ids}


def _p4c_or_skip(*names):
    why = tools.why_missing(*names)
    if why:
        print(f"skipped: {why}")
        pytest.skip(why)


def test_matches_p4c_output(tmp_path, committed):
    """The p4c driver on mltcp.p4: no warning, and its P4Info is the committed one: the same
    objects and ids (checked field by field) and, with this p4c, the same bytes."""
    _p4c_or_skip("p4c")
    out = tmp_path / "mltcp.p4info.txtpb"
    r = subprocess.run(
        [
            tools.require("p4c"),
            "--target",
            "bmv2",
            "--arch",
            "v1model",
            "-o",
            str(tmp_path),
            "--p4runtime-files",
            str(out),
            str(P4_PATH),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "warning" not in (r.stdout + r.stderr).lower(), r.stderr
    assert (tmp_path / "mltcp.json").is_file()
    generated = p4info_pb2.P4Info()
    # newer p4c may emit fields that the installed P4Runtime 1.4.1 protos do not know
    text_format.Parse(out.read_text(), generated, allow_unknown_field=True)
    assert _canonical(generated) == _canonical(committed)
    assert out.read_text() == P4INFO_PATH.read_text()


def test_p4c_bm2_ss_writes_identical_p4info(tmp_path):
    _p4c_or_skip("p4c-bm2-ss")
    info = tmp_path / "p.txtpb"
    js = tools.compile_v1model(P4_PATH, tmp_path, p4info=info)
    assert info.read_bytes() == P4INFO_PATH.read_bytes()
    import json

    prog = json.loads(js.read_text())
    assert {t["name"] for p in prog["pipelines"] for t in p["tables"]} >= {
        "MyIngress.ipv4_lpm",
        "MyEgress.ecn_threshold",
    }


def test_p4c_rejects_a_broken_program(tmp_path):
    """The compile check can fail: a type error in a copy of mltcp.p4 is reported with its line."""
    _p4c_or_skip("p4c-bm2-ss")
    bad = tmp_path / "bad.p4"
    bad.write_text(P4_PATH.read_text().replace("hdr.ipv4.ttl = hdr.ipv4.ttl - 1;", "hdr.ipv4.ttl = hdr.ipv4.dstAddr;"))
    with pytest.raises(RuntimeError, match="bad.p4"):
        tools.compile_v1model(bad, tmp_path / "o")


@pytest.mark.parametrize("tofino", [1, 2])
def test_tna_program_passes_p4test(tofino, tmp_path):
    """p4test (the P4_16 front and mid end) on mltcp_tna.p4 against tna.p4 / t2na.p4."""
    _p4c_or_skip("p4test")
    inc = tools.tna_include()
    if inc is None:
        pytest.skip(f"tna.p4 not found ({tools.where()})")
    r = subprocess.run(
        [tools.require("p4test"), f"-D__TARGET_TOFINO__={tofino}", "-I", inc, str(TNA_PATH)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "error" not in r.stderr.lower(), r.stderr


def test_p4test_catches_a_tna_error(tmp_path):
    _p4c_or_skip("p4test")
    inc = tools.tna_include()
    if inc is None:
        pytest.skip(f"tna.p4 not found ({tools.where()})")
    bad = tmp_path / "bad_tna.p4"
    bad.write_text(
        TNA_PATH.read_text().replace("hdr.ipv4.ttl = hdr.ipv4.ttl - 1;", "hdr.ipv4.ttl = hdr.ipv4.ttl - true;")
    )
    r = subprocess.run(
        [tools.require("p4test"), "-D__TARGET_TOFINO__=1", "-I", inc, str(bad)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert r.returncode != 0 and "bad_tna.p4" in r.stderr
