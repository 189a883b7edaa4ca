"""Entry construction (p4.v1 messages from the P4Info, no target), counter rendering, backoff."""

from __future__ import annotations

import ipaddress
import json
import time

import pytest
from rich.console import Console

from mltcp.controlplane import entries as E
from mltcp.p4src import names as N
from mltcp.controlplane.client import Backoff, grpc_code, reader_election_id
from mltcp.controlplane.counters import CounterSnapshot, JobStats, to_json, to_table
from mltcp.controlplane.topology import Route
from mltcp.p4src import load_p4info


@pytest.fixture(scope="module")
def p4info():
    return load_p4info()


@pytest.fixture(scope="module")
def idx(p4info):
    return E.index(p4info)


def _ids(p4info):
    out = {}
    for seq in (p4info.tables, p4info.actions, p4info.counters, p4info.registers):
        for o in seq:
            out[o.preamble.name] = o.preamble.id
    return out


def test_route_entry(p4info, idx, capsys):
    te = E.route_entry(idx, Route("10.1.2.0/24", 300, "02:00:00:00:0a:0b"))
    assert capsys.readouterr().out == ""  # nothing printed while building
    ids = _ids(p4info)
    assert te.table_id == ids[N.T_IPV4_LPM]
    (mf,) = te.match
    assert mf.field_id == 1
    assert ipaddress.IPv4Address(mf.lpm.value.rjust(4, b"\0")) == ipaddress.IPv4Address("10.1.2.0")
    assert mf.lpm.prefix_len == 24
    act = te.action.action
    assert act.action_id == ids[N.A_IPV4_FORWARD]
    params = {p.param_id: p.value for p in act.params}
    # canonical byte strings (P4Runtime 1.4): no leading zero bytes
    assert params[1] == bytes.fromhex("020000000a0b")
    assert int.from_bytes(params[2], "big") == 300
    assert params[2] == (300).to_bytes(2, "big")


def test_canonical_bytestrings_stay_on(idx):
    te = E.route_entry(idx, Route("10.0.0.3/32", 3, "00:00:00:00:00:03"))
    params = {p.param_id: p.value for p in te.action.action.params}
    assert params == {1: b"\x03", 2: b"\x03"}


def test_ecn_entry(p4info, idx):
    ids = _ids(p4info)
    te = E.ecn_entry(idx, 7, 2**19 - 1)
    assert te.table_id == ids[N.T_ECN_THRESHOLD]
    assert te.match[0].exact.value == b"\x07"
    assert te.action.action.action_id == ids[N.A_SET_ECN_THRESHOLD]
    assert int.from_bytes(te.action.action.params[0].value, "big") == 2**19 - 1


def test_ecn_delete_entry_has_only_the_key(idx):
    te = E.ecn_entry(idx, 5)
    assert te.match[0].exact.value == b"\x05"
    assert not te.HasField("action")


def test_counter_and_register_reads_are_wildcards(p4info, idx):
    ids = _ids(p4info)
    ce = E.counter_read_entity(idx, N.C_JOB_TX).counter_entry
    assert ce.counter_id == ids[N.C_JOB_TX] and not ce.HasField("index")
    ent = E.register_read_entity(idx, N.R_JOB_BYTES_RATIO)
    assert ent.register_entry.register_id == ids[N.R_JOB_BYTES_RATIO]
    assert not ent.register_entry.HasField("index")
    with pytest.raises(KeyError):
        E.register_read_entity(idx, "MyIngress.nope")


def test_unknown_table_is_rejected(idx):
    with pytest.raises(KeyError, match="not_a_table"):
        E.table_read_entity(idx, "MyIngress.not_a_table")


def test_values_wider_than_the_p4info_are_refused(idx):
    with pytest.raises(ValueError, match="bit<9>"):
        E.ecn_entry(idx, 512, 1)
    with pytest.raises(ValueError, match="bit<19>"):
        E.ecn_entry(idx, 1, 2**19)


def test_entries_match_what_p4runtime_shell_builds(p4info, idx):
    """The same TableEntry messages as p4runtime-shell's (which the REPL and ptf use)."""
    import contextlib
    import io

    import p4runtime_sh.shell as sh

    sh.context.set_p4info(p4info)
    with contextlib.redirect_stdout(io.StringIO()):
        ref = sh.TableEntry(N.T_IPV4_LPM)(action="MyIngress.ipv4_forward")
        ref.match["hdr.ipv4.dstAddr"] = "10.1.2.0/24"
        ref.action["dstAddr"] = "02:00:00:00:0a:0b"
        ref.action["port"] = "300"
        ecn = sh.TableEntry(N.T_ECN_THRESHOLD)(action="MyEgress.set_ecn_threshold")
        ecn.match["standard_metadata.egress_port"] = "7"
        ecn.action["threshold"] = "0"
    assert E.route_entry(idx, Route("10.1.2.0/24", 300, "02:00:00:00:0a:0b")) == ref.msg()
    assert E.ecn_entry(idx, 7, 0) == ecn.msg()


def test_describe(idx):
    assert E.describe(idx, E.route_entry(idx, Route("10.5.0.0/16", 1, "00:00:00:00:00:01"))) == "route 10.5.0.0/16"
    assert E.describe(idx, E.ecn_entry(idx, 4, 9)) == "ECN threshold on port 4"


def _snap():
    s = CounterSnapshot("s1", "127.0.0.1:9559", 1000.0, parse_errors=4)
    s.jobs[1] = JobStats(1, tx_packets=200, tx_bytes=300_000, ecn_marks=50, bytes_ratio_q16=0xFFFF)
    s.jobs[2] = JobStats(2)  # all zero: hidden unless asked for
    s.jobs[9] = JobStats(9, tx_packets=1, tx_bytes=100, bytes_ratio_q16=32768)
    return s


def test_snapshot_json():
    doc = json.loads(to_json([_snap()]))
    (sw,) = doc["switches"]
    assert sw["switch"] == "s1" and sw["parse_errors"] == 4
    assert [j["job_id"] for j in sw["jobs"]] == [1, 9]
    j1 = sw["jobs"][0]
    assert (j1["tx_packets"], j1["tx_bytes"], j1["ecn_marks"]) == (200, 300_000, 50)
    assert j1["bytes_ratio"] == 1.0 and j1["bytes_ratio_q16"] == 0xFFFF
    assert sw["jobs"][1]["bytes_ratio"] == pytest.approx(0.5, abs=1e-4)


def test_snapshot_job_filter_includes_zero_jobs():
    doc = json.loads(to_json([_snap()], only={2, 9, 500}))
    assert [j["job_id"] for j in doc["switches"][0]["jobs"]] == [2, 9, 500]


def test_table_rendering():
    con = Console(width=150, record=True)
    con.print(to_table([_snap()]))
    text = con.export_text()
    assert "300,000" in text and "25.0%" in text and "1.0000" in text
    assert "s1: 4" in text


def test_mark_fraction_without_packets():
    assert JobStats(3, ecn_marks=0).mark_fraction == 0.0


def test_backoff_stops_at_deadline():
    b = Backoff(deadline=time.monotonic() - 1)
    assert b.sleep() is False
    b = Backoff(deadline=time.monotonic() + 60, first=0.001, cap=0.004)
    for _ in range(4):
        assert b.sleep() is True
    assert b.delay == 0.004


def test_reader_election_id_is_below_writers():
    hi, lo = reader_election_id()
    assert hi == 0 and lo > 0
    assert (hi, lo) < (1, 0)


def test_grpc_code_of_plain_exception():
    assert grpc_code(ValueError("x")) is None
