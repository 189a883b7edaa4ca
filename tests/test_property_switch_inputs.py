"""Property: any topology, scenario or switch-install input either does what it says or is
refused with exit 2 and nothing changed.

* ``mltcp switch install TOPOLOGY [--push]`` on generated topology files (valid and invalid routes,
  ECN thresholds, P4Info and device config paths, unknown and duplicate keys, broken TOML) against
  a live software-switch P4Runtime server: exit 0 and the switch holds exactly the routes and
  thresholds the file describes (plus, without --push, what it held before), or exit 2 with the
  switch's config and every table entry unchanged. Exit 1 (a failure after writing) never happens.
* ``mltcp simulate SCENARIO --out DIR`` on generated scenario files: the loader accepts the file, or
  the command exits 2 naming the file and has created nothing (the simulation itself is not run for
  accepted files: it is covered elsewhere and takes seconds per case).

Bounded and reproducible: fixed example counts, derandomized, no database. The module prints
``property cases run: ...`` with the accepted/refused split, for the record.
"""

from __future__ import annotations

import ipaddress
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mltcp import scenario as scn
from mltcp.controlplane.cli import app as switch_app
from mltcp.controlplane.client import connect
from mltcp.controlplane.topology import Route
from mltcp.emulation.switch import pipeline as pl
from mltcp.emulation.switch.p4runtime_server import P4RuntimeTarget, serve
from mltcp.p4src import P4INFO_PATH
from mltcp.p4src import names as N

RUN = CliRunner()
OLD = Route("10.250.0.0/16", 7, "00:00:00:00:00:fa")
COUNTS: dict[str, int] = {}


def _count(what: str) -> None:
    COUNTS[what] = COUNTS.get(what, 0) + 1


def prop(n: int):
    return settings(
        max_examples=n,
        deadline=timedelta(seconds=20),
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    )


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    cap = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and cap is not None:
        with cap.global_and_fixture_disabled():
            tr.write_line("")
            tr.write_line(
                f"property cases run: {sum(COUNTS.values())} "
                f"({', '.join(f'{k} {v}' for k, v in sorted(COUNTS.items()))})"
            )


# --- switch install ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def switch():
    target = P4RuntimeTarget(pl.Pipeline(), device_id=0)
    srv = serve(target, "127.0.0.1:0")
    try:
        yield target, f"127.0.0.1:{target.port}"
    finally:
        srv.stop(0)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("files")
    (d / "bad.txtpb").write_text("tables { this is not a P4Info\n")
    (d / "bad.json").write_text("[1, 2")
    (d / "good.json").write_text("{}")
    return d


def _state(target) -> tuple:
    return (
        target.config.SerializeToString(),
        target.saved is None,
        {t: sorted(e.SerializeToString() for e in d.values()) for t, d in target.dev.entries.items()},
    )


def _reset(addr: str) -> None:
    """A fresh pipeline holding one route: the state a refused input must leave."""
    with connect(addr, timeout=10) as c:
        c.push_pipeline(P4INFO_PATH)
        c.install_routes([OLD])


def _held(target) -> tuple[set, dict]:
    """(routes as (prefix, port, mac), {port: threshold}) the switch holds."""
    idx = target.dev.index
    routes, ecn = set(), {}
    for te in target.dev.entries[N.T_IPV4_LPM].values():
        plen = te.match[0].lpm.prefix_len if te.match else 0
        addr = int.from_bytes(te.match[0].lpm.value, "big") if te.match else 0
        params = {
            idx.actions[te.action.action.action_id].params[p.param_id - 1].name: int.from_bytes(p.value, "big")
            for p in te.action.action.params
        }
        mac = params[N.P_DST_ADDR].to_bytes(6, "big").hex(":")
        routes.add((f"{ipaddress.IPv4Address(addr)}/{plen}", params[N.P_PORT], mac))
    for te in target.dev.entries[N.T_ECN_THRESHOLD].values():
        ecn[int.from_bytes(te.match[0].exact.value, "big")] = int.from_bytes(te.action.action.params[0].value, "big")
    return routes, ecn


valid_prefixes = st.builds(
    lambda a, n: str(ipaddress.IPv4Network((a, n), strict=False)), st.integers(0, 2**32 - 1), st.integers(0, 32)
)
valid_macs = st.builds(lambda b: b.hex(":"), st.binary(min_size=6, max_size=6))
# one corruption of an otherwise valid topology: (what, value)
CORRUPTIONS = st.one_of(
    st.tuples(st.just("prefix"), st.sampled_from(["10.0.0.1/33", "10.0.0.1/24", "300.0.0.1", "", "::1/128", 5])),
    st.tuples(st.just("port"), st.sampled_from([-1, 512, 65535, "3", 1.5, True])),
    st.tuples(st.just("mac"), st.sampled_from(["00:00:00:00:00", "zz:00:00:00:00:00", 7])),
    st.tuples(st.just("threshold"), st.sampled_from([-5, 2**19, "20", 2.5])),
    st.tuples(st.just("p4info"), st.sampled_from(["missing.txtpb", "bad.txtpb"])),
    st.tuples(st.just("config"), st.sampled_from(["bad.json", "missing.json"])),
    st.tuples(st.just("text"), st.sampled_from(["colour = 1", "DUP", "BROKEN", "DUP_PREFIX"])),
)


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(v)


@st.composite
def topologies(draw):
    routes = draw(
        st.lists(
            st.tuples(valid_prefixes, st.integers(0, 511), valid_macs),
            max_size=5,
            unique_by=lambda r: str(ipaddress.IPv4Network(r[0])),
        )
    )
    ecn = draw(
        st.lists(st.tuples(st.integers(0, 511), st.integers(0, 2**19 - 1)), max_size=3, unique_by=lambda e: e[0])
    )
    p4info = draw(st.sampled_from([None, "P4INFO"]))
    config = draw(st.sampled_from([None, "good.json"]))
    extra, corrupted = "", False
    if draw(st.integers(0, 9)) < 6:  # 60 %: one thing wrong
        what, bad = draw(CORRUPTIONS)
        corrupted = True
        if what in ("prefix", "port", "mac") and routes:
            k = draw(st.integers(0, len(routes) - 1))
            r = list(routes[k])
            r[("prefix", "port", "mac").index(what)] = bad
            routes[k] = tuple(r)
        elif what in ("port", "threshold") and ecn:
            k = draw(st.integers(0, len(ecn) - 1))
            e = list(ecn[k])
            e[0 if what == "port" else 1] = bad
            ecn[k] = tuple(e)
        elif what in ("prefix", "port", "mac", "threshold"):
            corrupted = False  # no entry to corrupt
        elif what == "p4info":
            p4info = bad
        elif what == "config":
            config = bad
        elif what == "text":
            extra = bad
            if bad == "DUP_PREFIX":
                extra = ""
                routes.append(routes[0] if routes else ("10.1.0.0/16", 1, "00:00:00:00:00:01"))
                if len(routes) == 1:
                    routes.append(routes[0])
    return (routes, ecn, p4info, config, extra), corrupted


def _topology_text(addr, routes, ecn, p4info, config, extra, files: Path) -> str:
    lines = ["[[switches]]", 'name = "s1"', f'grpc = "{addr}"']
    if p4info:
        lines.append(f"p4info = {_toml(str(P4INFO_PATH) if p4info == 'P4INFO' else str(files / p4info))}")
    if config:
        lines.append(f"config = {_toml(str(files / config))}")
    if extra == "colour = 1":
        lines.append(extra)
    elif extra == "DUP":
        lines.append('name = "s2"')
    for prefix, port, mac in routes:
        lines += ["[[switches.routes]]", f"prefix = {_toml(prefix)}", f"port = {_toml(port)}", f"mac = {_toml(mac)}"]
    for port, k in ecn:
        lines += ["[[switches.ecn]]", f"port = {_toml(port)}", f"threshold = {_toml(k)}"]
    text = "\n".join(lines) + "\n"
    return text + "[[switches]\n" if extra == "BROKEN" else text


def _described(routes, ecn) -> tuple[set, dict]:
    want_routes = {
        (str(ipaddress.IPv4Network(p if "/" in p else p + "/32")), port, mac.lower()) for p, port, mac in routes
    }
    return want_routes, {port: k for port, k in ecn}


@prop(80)
@given(case=topologies(), push=st.booleans())
def test_switch_install_does_what_the_file_says_or_exits_2_changing_nothing(switch, files, tmp_path, case, push):
    topo, corrupted = case
    target, addr = switch
    _reset(addr)
    before = _state(target)
    path = tmp_path / "topo.toml"
    path.write_text(_topology_text(addr, *topo, files))
    res = RUN.invoke(switch_app, ["install", str(path), "--timeout", "10", *(["--push"] if push else [])])
    assert res.exit_code in (0, 2), res.output
    if res.exit_code == 2:
        _count("install:refused")
        assert corrupted, res.output  # only a bad input is refused
        assert str(path) in res.output.replace("\n", "")  # the file is named
        assert _state(target) == before  # and nothing was written
        return
    _count("install:installed")
    assert not corrupted, _topology_text(addr, *topo, files)  # every bad input is refused
    routes, ecn, *_ = topo
    want_routes, want_ecn = _described(routes, ecn)
    old = {(OLD.prefix, OLD.port, OLD.mac)}
    assert _held(target) == (want_routes | (set() if push else old), want_ecn)


# --- scenarios -----------------------------------------------------------------------------------

BASE = {
    "name": "p",
    "iterations": 3,
    "warmup_iterations": 1,
    "cc": "reno",
    "links": [{"name": "l", "rate_gbps": 1.0, "delay_us": 50, "buffer_pkts": 100}],
    "jobs": [{"name": "A", "compute_ms": 2, "bytes": 100_000, "path": ["l"]}],
}
values = st.one_of(st.integers(-3, 10**7), st.sampled_from([0.5, -1.0, 1e30, "x", True, "reno", "l"]))


def _scenario_text(doc: dict, dup: bool) -> str:
    out = [f"{k} = {_toml(v)}" for k, v in doc.items() if not isinstance(v, list)]
    if dup:
        out.append('name = "again"')  # a duplicate key ("name" is never removed)
    for table in ("links", "jobs"):
        for t in doc[table] if isinstance(doc.get(table), list) else []:
            out.append(f"[[{table}]]")
            for k, v in t.items():
                out.append(f"{k} = [{', '.join(_toml(x) for x in v)}]" if isinstance(v, list) else f"{k} = {_toml(v)}")
    return "\n".join(out) + "\n"


@st.composite
def scenarios(draw):
    doc = {k: (list(map(dict, v)) if isinstance(v, list) else v) for k, v in BASE.items()}
    for _ in range(draw(st.sampled_from([0, 0, 1, 2, 3]))):
        where = draw(st.sampled_from(["top", "links", "jobs"]))
        if where != "top" and not isinstance(doc.get(where), list):
            where = "top"  # the table itself was removed or replaced
        table = doc if where == "top" else doc[where][0]
        key = draw(st.sampled_from(sorted(table) + ["nope"]))
        if draw(st.booleans()) and key in table and key != "name":
            del table[key]
        else:
            table[key] = draw(values)
    return doc, draw(st.booleans()) and draw(st.booleans())


@prop(150)
@given(case=scenarios())
def test_scenario_loads_or_simulate_exits_2_creating_nothing(tmp_path, case):
    from mltcp.cli import app

    doc, dup = case
    path = tmp_path / "s.toml"
    path.write_text(_scenario_text(doc, dup))
    try:
        scn.load(str(path))
    except scn.ScenarioError as e:
        _count("scenario:refused")
        assert str(e).startswith(str(path))
        if dup:
            assert "duplicate key name" in str(e)  # the key is named (mltcp.tomlfile)
        out = tmp_path / "out"
        res = RUN.invoke(app, ["simulate", str(path), "--out", str(out)])
        assert res.exit_code == 2 and not out.exists(), res.output
        return
    _count("scenario:accepted")
    assert not dup  # a duplicate key is never accepted
