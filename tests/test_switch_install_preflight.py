"""`mltcp switch install / push / set-ecn` check everything before the first write.

Against a live P4Runtime server: the software switch's (in process, no root) and BMv2's
``simple_switch_grpc`` (skipped with the reason when p4c/BMv2 are not installed). Each bad input
exits 2 naming the file and the field, and the switch's P4Info and tables are read back
afterwards to show nothing was written.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from typer.testing import CliRunner

from mltcp import tools
from mltcp.controlplane.cli import app
from mltcp.controlplane.client import connect
from mltcp.controlplane.topology import Route
from mltcp.emulation.switch import pipeline as pl
from mltcp.emulation.switch.p4runtime_server import P4RuntimeTarget, serve
from mltcp.p4src import P4INFO_PATH
from mltcp.p4src import names as N

RUN = CliRunner()
OLD_ROUTE = Route("10.9.0.0/24", 1, "00:00:00:00:00:09")


def _p4info() -> p4info_pb2.P4Info:
    return text_format.Parse(Path(P4INFO_PATH).read_text(), p4info_pb2.P4Info())


def _state(addr: str) -> tuple:
    """(P4Info, routes, ECN entries) as the switch answers them: what a write would change."""
    with connect(addr, election_id=(0, 77), timeout=10) as c:
        c.attach()
        info = c.client.get_p4info().SerializeToString()
        return (
            info,
            sorted(te.SerializeToString() for te in c.read_table(N.T_IPV4_LPM)),
            sorted(te.SerializeToString() for te in c.read_table(N.T_ECN_THRESHOLD)),
        )


def _sw_state(target) -> tuple:
    """The software switch's committed config and every stored entry (its server's own books)."""
    return (
        target.config.SerializeToString(),
        target.saved is None,
        {t: sorted(e.SerializeToString() for e in d.values()) for t, d in target.dev.entries.items()},
    )


def _program(addr: str, config: Path | None = None) -> None:
    """Push the pipeline and one route: the state every bad input must leave as it is."""
    with connect(addr, timeout=20) as c:
        c.push_pipeline(P4INFO_PATH, config)
        c.install_routes([OLD_ROUTE])


def _topology(tmp: Path, addrs: list[str], extra: str = "", route_port: int = 2, threshold: int = 20) -> Path:
    body = ""
    for k, addr in enumerate(addrs):
        body += textwrap.dedent(f"""
            [[switches]]
            name = "s{k + 1}"
            grpc = "{addr}"
            {extra if k == len(addrs) - 1 else ""}
              [[switches.routes]]
              prefix = "10.0.{k}.2/32"
              port = {route_port}
              mac = "00:00:00:00:00:02"
              [[switches.ecn]]
              port = 2
              threshold = {threshold}
        """)
    p = tmp / "topo.toml"
    p.write_text(body)
    return p


def _install(*args: str):
    return RUN.invoke(app, ["install", *args, "--timeout", "20"])


# --- the software switch's P4Runtime server --------------------------------------------------


@pytest.fixture
def switches():
    """Two software-switch P4Runtime servers with mltcp.p4 pushed and one route installed."""
    started = []
    try:
        for _ in range(2):
            target = P4RuntimeTarget(pl.Pipeline(), device_id=0)
            srv = serve(target, "127.0.0.1:0")
            started.append((target, srv))
            _program(f"127.0.0.1:{target.port}")
        yield [(t, f"127.0.0.1:{t.port}") for t, _ in started]
    finally:
        for _, srv in started:
            srv.stop(0)


@pytest.mark.parametrize("push", [False, True])
def test_missing_p4info_file_exits_2_naming_file_and_field_and_writes_nothing(switches, tmp_path, push):
    (target, addr), _ = switches
    before = _sw_state(target)
    topo = _topology(tmp_path, [addr], 'p4info = "nope.txtpb"')
    res = _install(str(topo), *(["--push"] if push else []))
    assert res.exit_code == 2, res.output
    assert f"{topo}: switches[0].p4info: nope.txtpb does not exist" in res.output.replace("\n", "")
    assert _sw_state(target) == before


def test_a_bad_second_switch_leaves_the_first_untouched(switches, tmp_path):
    (t1, a1), (t2, a2) = switches
    before = (_sw_state(t1), _sw_state(t2))
    bad = tmp_path / "bad.txtpb"
    bad.write_text("this is not a P4Info\n")
    topo = _topology(tmp_path, [a1, a2], f'p4info = "{bad}"')
    for push in ([], ["--push"]):
        res = _install(str(topo), *push)
        assert res.exit_code == 2, res.output
        assert "switches[1].p4info" in res.output and "not a P4Info" in res.output
        assert (_sw_state(t1), _sw_state(t2)) == before


def test_bad_device_config_json_exits_2_before_the_push(switches, tmp_path):
    (target, addr), _ = switches
    before = _sw_state(target)
    cfg = tmp_path / "mltcp.json"
    cfg.write_text("{ not json")
    topo = _topology(tmp_path, [addr], f'config = "{cfg}"')
    res = _install(str(topo), "--push")
    assert res.exit_code == 2, res.output
    assert "switches[0].config" in res.output and "not a BMv2 JSON device config" in res.output
    assert _sw_state(target) == before


def test_names_resolve_against_the_p4info_the_switch_runs(switches, tmp_path):
    """No P4Info file and no --push: the entries are checked against the P4Info read back from
    the switch. One that lacks MyEgress.ecn_threshold (a switch running another build) refuses
    the topology before its routes are written."""
    (target, addr), _ = switches
    info = _p4info()
    keep = [t for t in info.tables if t.preamble.name != N.T_ECN_THRESHOLD]
    del info.tables[:]
    info.tables.extend(keep)
    target.config.p4info.CopyFrom(info)  # what GetForwardingPipelineConfig now answers
    before = _sw_state(target)
    res = _install(str(_topology(tmp_path, [addr])))
    assert res.exit_code == 2, res.output
    out = res.output.replace("\n", "")
    assert "switches[0].ecn[0]" in out and N.T_ECN_THRESHOLD in out and "the P4Info s1 runs" in out
    assert _sw_state(target) == before


def test_widths_are_checked_against_the_p4info_the_switch_runs(switches, tmp_path):
    (target, addr), _ = switches
    info = _p4info()
    for a in info.actions:
        if a.preamble.name == N.A_IPV4_FORWARD:
            for p in a.params:
                if p.name == N.P_PORT:
                    p.bitwidth = 4  # a target with 16 ports
    target.config.p4info.CopyFrom(info)
    before = _sw_state(target)
    res = _install(str(_topology(tmp_path, [addr], route_port=20)))
    assert res.exit_code == 2, res.output
    assert "switches[0].routes[0].port" in res.output and "bit<4>" in res.output
    assert _sw_state(target) == before


def test_a_p4info_file_without_an_action_exits_2_before_the_push(switches, tmp_path):
    (target, addr), _ = switches
    info = _p4info()
    for a in info.actions:
        if a.preamble.name == N.A_SET_ECN_THRESHOLD:
            a.preamble.name = "MyEgress.renamed"
    f = tmp_path / "other.txtpb"
    f.write_text(text_format.MessageToString(info))
    before = _sw_state(target)
    res = _install(str(_topology(tmp_path, [addr], f'p4info = "{f}"')), "--push")
    assert res.exit_code == 2, res.output
    assert "switches[0].ecn[0]" in res.output and N.A_SET_ECN_THRESHOLD in res.output
    assert _sw_state(target) == before


def test_a_good_topology_installs_what_it_says(switches, tmp_path):
    (_, a1), (_, a2) = switches
    res = _install(str(_topology(tmp_path, [a1, a2])), "--json")
    assert res.exit_code == 0, res.output
    assert [s["routes"] for s in json.loads(res.output)["switches"]] == [1, 1]
    for k, addr in enumerate((a1, a2)):
        with connect(addr, election_id=(0, 78)) as c:
            c.attach()
            lpm = {te.match[0].lpm.value for te in c.read_table(N.T_IPV4_LPM)}
            assert bytes([10, 0, k, 2]) in lpm and bytes([10, 9, 0, 0]) in lpm
            assert len(c.read_table(N.T_ECN_THRESHOLD)) == 1


def test_push_names_the_option_or_field_of_a_missing_file(switches, tmp_path):
    (target, addr), _ = switches
    before = _sw_state(target)
    res = RUN.invoke(app, ["push", "--grpc", addr, "--p4info", str(tmp_path / "nope.txtpb")])
    assert res.exit_code == 2 and "command line: --p4info: nope.txtpb does not exist" in res.output.replace("\n", "")
    res = RUN.invoke(app, ["push", "--topology", str(_topology(tmp_path, [addr], 'p4info = "nope.txtpb"'))])
    assert res.exit_code == 2 and "switches[0].p4info: nope.txtpb does not exist" in res.output.replace("\n", "")
    assert _sw_state(target) == before


def test_set_ecn_checks_the_width_against_the_running_p4info(switches):
    (target, addr), _ = switches
    info = _p4info()
    for a in info.actions:
        if a.preamble.name == N.A_SET_ECN_THRESHOLD:
            a.params[0].bitwidth = 8
    target.config.p4info.CopyFrom(info)
    before = _sw_state(target)
    res = RUN.invoke(app, ["set-ecn", "--grpc", addr, "--port", "2", "--threshold", "1000"])
    assert res.exit_code == 2, res.output
    assert "--threshold" in res.output and "bit<8>" in res.output
    assert _sw_state(target) == before


# --- BMv2 ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bmv2(tmp_path_factory):
    why = tools.why_missing("p4c-bm2-ss", "simple_switch_grpc")
    if why:
        print(f"BMv2 preflight tests skipped: {why}")
        pytest.skip(why)
    from mltcp.emulation import bmv2 as B

    tmp = tmp_path_factory.mktemp("bmv2")
    js = tools.compile_v1model(Path(P4INFO_PATH).with_suffix("").with_suffix(".p4"), tmp / "build")
    proc, grpc_port, _ = B.start_in_netns(None, {}, log_path=tmp / "bmv2.log")
    try:
        addr = f"127.0.0.1:{grpc_port}"
        _program(addr, js)
        yield addr, js
    finally:
        B.stop(proc, 5)


def test_bmv2_missing_p4info_exits_2_and_writes_nothing(bmv2, tmp_path):
    addr, js = bmv2
    before = _state(addr)
    for push in ([], ["--push"]):
        topo = _topology(tmp_path, [addr], f'p4info = "nope.txtpb"\nconfig = "{js}"')
        res = _install(str(topo), *push)
        assert res.exit_code == 2, res.output
        assert f"{topo}: switches[0].p4info: nope.txtpb does not exist" in res.output.replace("\n", "")
        assert _state(addr) == before


def test_bmv2_good_topology_against_its_running_p4info(bmv2, tmp_path):
    addr, _ = bmv2
    res = _install(str(_topology(tmp_path, [addr])), "--json")
    assert res.exit_code == 0, res.output
    with connect(addr, election_id=(0, 79)) as c:
        c.attach()
        lpm = {te.match[0].lpm.value for te in c.read_table(N.T_IPV4_LPM)}
    assert {bytes([10, 0, 0, 2]), bytes([10, 9, 0, 0])} <= lpm


def test_library_install_topology_checks_before_writing(switches, tmp_path):
    from mltcp.controlplane.install import install_topology
    from mltcp.controlplane.topology import TopologyError, load_topology

    (t1, a1), (t2, a2) = switches
    before = (_sw_state(t1), _sw_state(t2))
    topo = load_topology(_topology(tmp_path, [a1, a2], 'p4info = "nope.txtpb"'))
    for push in (False, True):
        with pytest.raises(TopologyError, match=r"switches\[1\]\.p4info: nope.txtpb does not exist"):
            install_topology(topo, push=push)
        assert (_sw_state(t1), _sw_state(t2)) == before
