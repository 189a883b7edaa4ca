"""The control-plane library and CLI against a minimal in-process P4Runtime server on loopback.

The fake server implements just enough of P4Runtime (arbitration, pipeline set/get, table
writes with per-update errors, wildcard counter/register reads) to exercise the client,
including reconnecting after the server restarts. The real software switch is exercised in
tests/test_p4runtime_target.py.
"""

from __future__ import annotations

import json
import threading
from concurrent import futures

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from typer.testing import CliRunner

from mltcp.p4src import names as N
from mltcp.controlplane.cli import app
from mltcp.controlplane.client import ControlPlaneError, connect
from mltcp.controlplane.install import install_topology
from mltcp.controlplane.topology import Route, parse_topology
from mltcp.p4src import P4INFO_PATH


def _canon(v: int) -> bytes:
    return v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big")


class FakeTarget(p4runtime_pb2_grpc.P4RuntimeServicer):
    def __init__(self, device_id: int = 0):
        self.device_id = device_id
        self.lock = threading.Lock()
        self.p4info = None
        self.device_config = None
        self.pushes = 0
        self.tables: dict[tuple[int, bytes], p4runtime_pb2.TableEntry] = {}
        self.counters: dict[int, dict[int, tuple[int, int]]] = {}
        self.registers: dict[int, dict[int, int]] = {}
        self.elections: dict[int, tuple[int, int]] = {}
        self._next_stream = 0

    # helpers for tests
    def obj_id(self, name: str) -> int:
        for seq in (self.p4info.tables, self.p4info.counters, self.p4info.registers):
            for o in seq:
                if o.preamble.name == name:
                    return o.preamble.id
        raise KeyError(name)

    def entries(self, table: str) -> list[p4runtime_pb2.TableEntry]:
        tid = self.obj_id(table)
        return [e for (t, _), e in self.tables.items() if t == tid]

    def _primary(self):
        return max(self.elections.values()) if self.elections else None

    def _check_primary(self, req, context):
        eid = (req.election_id.high, req.election_id.low)
        if eid != self._primary():
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "not primary")

    # RPCs
    def StreamChannel(self, request_iterator, context):
        with self.lock:
            sid = self._next_stream
            self._next_stream += 1
        try:
            for req in request_iterator:
                if not req.HasField("arbitration"):
                    continue
                arb = req.arbitration
                eid = (arb.election_id.high, arb.election_id.low)
                with self.lock:
                    if arb.device_id != self.device_id:
                        context.abort(grpc.StatusCode.NOT_FOUND, "no such device")
                    if eid in [e for s, e in self.elections.items() if s != sid]:
                        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "election id in use")
                    self.elections[sid] = eid
                    primary = self._primary() == eid
                resp = p4runtime_pb2.StreamMessageResponse()
                resp.arbitration.CopyFrom(arb)
                resp.arbitration.status.code = code_pb2.OK if primary else code_pb2.ALREADY_EXISTS
                yield resp
        finally:
            with self.lock:
                self.elections.pop(sid, None)

    def SetForwardingPipelineConfig(self, request, context):
        with self.lock:
            self._check_primary(request, context)
            self.p4info = request.config.p4info
            self.device_config = request.config.p4_device_config
            self.tables.clear()
            self.counters.clear()
            self.registers.clear()
            self.pushes += 1
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request, context):
        if self.p4info is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no pipeline")
        resp = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        resp.config.p4info.CopyFrom(self.p4info)
        return resp

    def Write(self, request, context):
        with self.lock:
            self._check_primary(request, context)
            if self.p4info is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no pipeline")
            codes = []
            for up in request.updates:
                te = up.entity.table_entry
                key = (te.table_id, b"".join(m.SerializeToString() for m in te.match))
                if up.type == p4runtime_pb2.Update.INSERT:
                    code = code_pb2.ALREADY_EXISTS if key in self.tables else code_pb2.OK
                elif up.type in (p4runtime_pb2.Update.MODIFY, p4runtime_pb2.Update.DELETE):
                    code = code_pb2.OK if key in self.tables else code_pb2.NOT_FOUND
                else:
                    code = code_pb2.INVALID_ARGUMENT
                if code == code_pb2.OK:
                    if up.type == p4runtime_pb2.Update.DELETE:
                        del self.tables[key]
                    else:
                        self.tables[key] = p4runtime_pb2.TableEntry()
                        self.tables[key].CopyFrom(te)
                codes.append(code)
        if any(c != code_pb2.OK for c in codes):
            st = status_pb2.Status(code=code_pb2.UNKNOWN, message="write failed")
            for c in codes:
                a = any_pb2.Any()
                a.Pack(p4runtime_pb2.Error(canonical_code=c, message=code_pb2.Code.Name(c)))
                st.details.append(a)
            context.set_trailing_metadata((("grpc-status-details-bin", st.SerializeToString()),))
            context.abort(grpc.StatusCode.UNKNOWN, "write failed")
        return p4runtime_pb2.WriteResponse()

    def Read(self, request, context):
        if self.p4info is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no pipeline")
        resp = p4runtime_pb2.ReadResponse()
        for ent in request.entities:
            kind = ent.WhichOneof("entity")
            if kind == "table_entry":
                for (tid, _), te in self.tables.items():
                    if ent.table_entry.table_id in (0, tid):
                        resp.entities.add().table_entry.CopyFrom(te)
            elif kind == "counter_entry":
                cid = ent.counter_entry.counter_id
                size = next(c.size for c in self.p4info.counters if c.preamble.id == cid)
                vals = self.counters.get(cid, {})
                for i in range(size):
                    ce = resp.entities.add().counter_entry
                    ce.counter_id, ce.index.index = cid, i
                    ce.data.packet_count, ce.data.byte_count = vals.get(i, (0, 0))
            elif kind == "register_entry":
                rid = ent.register_entry.register_id
                size = next(r.size for r in self.p4info.registers if r.preamble.id == rid)
                vals = self.registers.get(rid, {})
                for i in range(size):
                    re_ = resp.entities.add().register_entry
                    re_.register_id, re_.index.index = rid, i
                    re_.data.bitstring = _canon(vals.get(i, 0))
            else:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, kind)
        yield resp

    def Capabilities(self, request, context):
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version="1.4.1")


class Server:
    """A FakeTarget served on 127.0.0.1; restartable on the same port."""

    def __init__(self, port: int = 0):
        self.port = port
        self.server = None
        self.target = None

    def start(self) -> "Server":
        self.target = FakeTarget()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(self.target, self.server)
        self.port = self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        assert self.port
        self.server.start()
        return self

    def stop(self):
        if self.server is not None:
            self.server.stop(None).wait()
            self.server = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def server():
    s = Server().start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def conn(server):
    c = connect(server.addr, timeout=5, retry_timeout=20)
    try:
        yield c
    finally:
        c.close()


# ------------------------------------------------------------------------------------------


def test_push_sends_p4info_and_config(server, conn, tmp_path):
    cfg = tmp_path / "bmv2.json"
    cfg.write_bytes(b'{"fake": "bmv2 json"}')
    conn.push_pipeline(P4INFO_PATH, cfg)
    t = server.target
    assert t.pushes == 1 and t.device_config == b'{"fake": "bmv2 json"}'
    assert {x.preamble.name for x in t.p4info.tables} == {
        N.T_IPV4_LPM,
        N.T_ECN_THRESHOLD,
        N.T_PROGRESS_ECN,
        N.T_PROGRESS_PRIORITY,
        N.T_PROGRESS_CONTEST,
    }


def test_push_without_config_sends_empty(server, conn):
    conn.push_pipeline()
    assert server.target.device_config == b""


def test_push_missing_file_is_clear_error(conn, tmp_path):
    with pytest.raises(ControlPlaneError, match="not found"):
        conn.push_pipeline(tmp_path / "nope.txtpb")


def test_install_routes_is_idempotent(server, conn):
    conn.push_pipeline()
    routes = [Route("10.0.0.1/32", 1, "00:00:00:00:00:01"), Route("10.0.1.0/24", 2, "00:00:00:00:00:02")]
    assert conn.install_routes(routes) == 2
    # second time: ALREADY_EXISTS -> modify, new next hop
    assert conn.install_routes([Route("10.0.1.0/24", 5, "00:00:00:00:00:05")]) == 1
    ents = server.target.entries(N.T_IPV4_LPM)
    assert len(ents) == 2
    by_len = {e.match[0].lpm.prefix_len: e for e in ents}
    port = by_len[24].action.action.params[1].value
    assert int.from_bytes(port, "big") == 5
    assert len(conn.read_table(N.T_IPV4_LPM)) == 2


def test_ecn_threshold_set_modify_clear(server, conn):
    conn.push_pipeline()
    conn.set_ecn_threshold(3, 10)
    conn.set_ecn_threshold(3, 40)
    (e,) = server.target.entries(N.T_ECN_THRESHOLD)
    assert int.from_bytes(e.action.action.params[0].value, "big") == 40
    assert conn.clear_ecn_threshold(3) is True
    assert server.target.entries(N.T_ECN_THRESHOLD) == []
    assert conn.clear_ecn_threshold(3) is False


def test_ecn_threshold_bounds_checked_before_sending(server, conn):
    conn.push_pipeline()
    with pytest.raises(ValueError, match="threshold"):
        conn.set_ecn_threshold(1, 2**19)
    with pytest.raises(ValueError, match="port"):
        conn.set_ecn_threshold(512, 1)
    assert server.target.entries(N.T_ECN_THRESHOLD) == []


def test_read_counters(server, conn):
    conn.push_pipeline()
    t = server.target
    t.counters[t.obj_id(N.C_JOB_TX)] = {1: (100, 150_000), 7: (3, 300)}
    t.counters[t.obj_id(N.C_JOB_ECN_MARKS)] = {1: (25, 0)}
    t.counters[t.obj_id(N.C_PARSE_ERRORS)] = {0: (6, 0)}
    t.registers[t.obj_id(N.R_JOB_BYTES_RATIO)] = {1: 0xFFFF, 7: 0x8000}
    snap = conn.read_counters()
    assert snap.parse_errors == 6
    assert [j.job_id for j in snap.active_jobs()] == [1, 7]
    j1 = snap.jobs[1]
    assert (j1.tx_packets, j1.tx_bytes, j1.ecn_marks, j1.bytes_ratio_q16) == (100, 150_000, 25, 0xFFFF)
    assert snap.jobs[7].bytes_ratio == pytest.approx(0.5, abs=1e-4)


def test_attach_without_pipeline_is_clear_error(server, conn):
    with pytest.raises(ControlPlaneError, match="push"):
        conn.attach()


def test_reconnects_and_repushes_after_restart(server, conn):
    conn.push_pipeline()
    conn.set_ecn_threshold(2, 10)
    server.stop()
    # the target comes back (empty) on the same port a moment later
    timer = threading.Timer(0.5, server.start)
    timer.start()
    try:
        conn.set_ecn_threshold(2, 30)  # blocks, reconnects, re-pushes, repeats
    finally:
        timer.join()
    assert conn.reconnects >= 1
    assert server.target.pushes == 1  # the new server got our pipeline again
    (e,) = server.target.entries(N.T_ECN_THRESHOLD)
    assert int.from_bytes(e.action.action.params[0].value, "big") == 30


def test_gives_up_after_retry_timeout(server):
    c = connect(server.addr, timeout=5, retry_timeout=1.0)
    try:
        c.push_pipeline()
        server.stop()
        with pytest.raises(ControlPlaneError, match="unavailable"):
            c.read_counters()
    finally:
        c.close()


def test_unreachable_server():
    # a port nobody listens on (bound then closed)
    s = Server().start()
    addr = s.addr
    s.stop()
    with pytest.raises(ControlPlaneError, match="not reachable"):
        connect(addr, timeout=0.5)


def test_second_writer_is_not_primary(server, conn):
    conn.push_pipeline()
    other = connect(server.addr, election_id=(0, 5), timeout=5)
    try:
        other.attach()
        assert other.read_counters().parse_errors == 0  # reads are fine
        with pytest.raises(ControlPlaneError, match="primary"):
            other.set_ecn_threshold(1, 1)
    finally:
        other.close()


def test_install_topology(server):
    topo = parse_topology(
        {
            "switches": [
                {
                    "name": "s9",
                    "grpc": server.addr,
                    "routes": [{"prefix": "10.0.0.2/32", "port": 2, "mac": "00:00:00:00:00:02"}],
                    "ecn": [{"port": 2, "threshold": 15}],
                }
            ]
        },
        "inline.toml",
    )
    (summary,) = install_topology(topo, push=True)
    assert summary == {"switch": "s9", "grpc": server.addr, "pushed": True, "routes": 1, "ecn_thresholds": 1}
    assert len(server.target.entries(N.T_IPV4_LPM)) == 1
    assert len(server.target.entries(N.T_ECN_THRESHOLD)) == 1


# --- CLI against the fake ------------------------------------------------------------------

runner = CliRunner()


def test_cli_push_install_setecn_counters(server, tmp_path):
    topo = tmp_path / "t.toml"
    topo.write_text(f"""
[[switches]]
name = "edge"
grpc = "{server.addr}"
  [[switches.routes]]
  prefix = "10.0.0.2/32"
  port = 2
  mac = "00:00:00:00:00:02"
""")
    res = runner.invoke(app, ["push", "--grpc", server.addr])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["install", str(topo), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["switches"][0]["routes"] == 1
    res = runner.invoke(app, ["set-ecn", "--topology", str(topo), "--port", "2", "--threshold", "12"])
    assert res.exit_code == 0, res.output
    t = server.target
    t.counters[t.obj_id(N.C_JOB_TX)] = {4: (10, 1000)}
    res = runner.invoke(app, ["counters", "--grpc", server.addr, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["switches"][0]["jobs"][0]["job_id"] == 4
    assert doc["switches"][0]["jobs"][0]["tx_bytes"] == 1000
    res = runner.invoke(app, ["watch", "--grpc", server.addr, "--json", "--count", "2", "--interval", "0.05"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.output.strip().splitlines()]
    assert len(lines) == 2 and lines[1]["switches"][0]["jobs"][0]["tx_packets"] == 10
    res = runner.invoke(app, ["counters", "--grpc", server.addr])
    assert res.exit_code == 0 and "1,000" in res.output
    res = runner.invoke(app, ["watch", "--grpc", server.addr, "--count", "2", "--interval", "0.05"])
    assert res.exit_code == 0 and "1,000" in res.output, res.output


def test_cli_unreachable_exit_1():
    s = Server().start()
    addr = s.addr
    s.stop()
    res = runner.invoke(app, ["counters", "--grpc", addr, "--timeout", "0.3"])
    assert res.exit_code == 1 and addr in res.output


def test_attached_reader_waits_for_pipeline_after_restart(server):
    # a watcher (attach only, lower election id) survives a target restart: it waits until
    # the writer pushes the pipeline again, then reads
    writer = connect(server.addr, timeout=5)
    reader = connect(server.addr, election_id=(0, 9), timeout=5, retry_timeout=20)
    try:
        writer.push_pipeline()
        reader.attach()
        reader.read_counters()
        writer.close()
        server.stop()
        server.start()

        def repush():
            with connect(server.addr, timeout=5) as w:
                w.push_pipeline()

        timer = threading.Timer(0.5, repush)
        timer.start()
        try:
            t = server.target
            snap = reader.read_counters()
        finally:
            timer.join()
        assert reader.reconnects >= 1 and t.pushes == 1
        assert snap.parse_errors == 0
    finally:
        reader.close()
        writer.close()


def test_reader_gives_up_when_nobody_pushes(server):
    writer = connect(server.addr, timeout=5)
    reader = connect(server.addr, election_id=(0, 9), timeout=5, retry_timeout=1.0)
    try:
        writer.push_pipeline()
        reader.attach()
        writer.close()
        server.stop()
        server.start()
        with pytest.raises(ControlPlaneError, match="without a pipeline"):
            reader.read_counters()
    finally:
        reader.close()
        writer.close()


def test_attach_wait_polls_until_pushed(server):
    reader = connect(server.addr, election_id=(0, 9), timeout=5, retry_timeout=20)
    try:

        def push():
            with connect(server.addr, timeout=5) as w:
                w.push_pipeline()

        timer = threading.Timer(0.5, push)
        timer.start()
        try:
            reader.attach(wait=True)
        finally:
            timer.join()
        assert reader.read_counters().parse_errors == 0
    finally:
        reader.close()


# --- restarts: the journal is replayed -----------------------------------------------------


def test_held_connection_restores_its_entries_after_a_restart(server, conn):
    """The old client re-pushed the pipeline, reported success and left the tables empty."""
    conn.push_pipeline()
    routes = [Route(f"10.1.{i}.0/24", 1 + i % 3, f"00:00:00:00:01:{i:02x}") for i in range(40)]
    conn.install_routes(routes)
    conn.set_ecn_threshold(2, 10)
    conn.set_ecn_threshold(3, 20)
    conn.clear_ecn_threshold(3)
    server.stop()
    server.start()  # a new, empty target on the same port
    snap = conn.read_counters()  # any operation: reconnect, re-push, replay
    assert snap.parse_errors == 0 and conn.reconnects >= 1
    assert server.target.pushes == 1
    assert len(server.target.entries(N.T_IPV4_LPM)) == 40
    (e,) = server.target.entries(N.T_ECN_THRESHOLD)
    assert int.from_bytes(e.action.action.params[0].value, "big") == 10
    assert conn.verify() == []


def test_reconnect_without_restart_does_not_wipe_the_switch(server, conn):
    """A dropped stream to a switch that kept its state: no re-push (it would erase entries
    others installed), the journal is written again as insert-or-modify."""
    conn.push_pipeline()
    conn.install_routes([Route("10.2.0.0/24", 1, "00:00:00:00:00:01")])
    with connect(server.addr, election_id=(0, 3), timeout=5) as other:  # a reader
        other.attach()
    server.target.tables[(server.target.obj_id(N.T_IPV4_LPM), b"someone else's")] = p4runtime_pb2.TableEntry(
        table_id=server.target.obj_id(N.T_IPV4_LPM)
    )
    conn.client.stream_out_q.put(None)  # end our stream; the server keeps its state
    conn.client.stream_recv_thread.join(5)
    assert conn.read_table(N.T_IPV4_LPM)
    assert conn.reconnects == 1 and server.target.pushes == 1
    assert len(server.target.entries(N.T_IPV4_LPM)) == 2


class RefusingTarget(FakeTarget):
    """A restarted target that accepts the pipeline but refuses route entries."""

    def Write(self, request, context):
        if any(u.entity.table_entry.match and u.entity.table_entry.match[0].HasField("lpm") for u in request.updates):
            st = status_pb2.Status(code=code_pb2.UNKNOWN, message="refused")
            for u in request.updates:
                a = any_pb2.Any()
                lpm = u.entity.table_entry.match[0].HasField("lpm")
                a.Pack(
                    p4runtime_pb2.Error(
                        canonical_code=code_pb2.RESOURCE_EXHAUSTED if lpm else code_pb2.OK,
                        message="table full" if lpm else "",
                    )
                )
                st.details.append(a)
            context.set_trailing_metadata((("grpc-status-details-bin", st.SerializeToString()),))
            context.abort(grpc.StatusCode.UNKNOWN, "refused")
        return super().Write(request, context)


def test_restart_whose_entries_cannot_be_restored_raises(server, conn):
    conn.push_pipeline()
    conn.install_routes([Route("10.3.0.0/24", 1, "00:00:00:00:00:01"), Route("10.3.1.0/24", 2, "00:00:00:00:00:02")])
    conn.set_ecn_threshold(1, 5)
    server.stop()
    server.target = RefusingTarget()
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(server.target, srv)
    assert srv.add_insecure_port(server.addr)
    srv.start()
    server.server = srv
    with pytest.raises(ControlPlaneError) as e:
        conn.read_counters()
    msg = str(e.value)
    assert "came back without the 3 entries" in msg and "1 of 3 restored" in msg
    assert "route 10.3.0.0/24" in msg and "RESOURCE_EXHAUSTED" in msg


def test_refused_routes_are_named_and_the_rest_installed(server, conn):
    conn.push_pipeline()
    t = server.target
    plain = t.Write

    def picky(request, context):
        """/16 routes are refused (INVALID_ARGUMENT); the rest of the batch goes through."""
        codes = []
        for u in request.updates:
            te = u.entity.table_entry
            if te.match and te.match[0].lpm.prefix_len == 16:
                codes.append(code_pb2.INVALID_ARGUMENT)
                continue
            one = p4runtime_pb2.WriteRequest(device_id=0, election_id=request.election_id)
            one.updates.add().CopyFrom(u)
            plain(one, context)
            codes.append(code_pb2.OK)
        if any(codes):
            st = status_pb2.Status(code=code_pb2.UNKNOWN, message="write failed")
            for c in codes:
                a = any_pb2.Any()
                a.Pack(p4runtime_pb2.Error(canonical_code=c, message="no /16 here" if c else ""))
                st.details.append(a)
            context.set_trailing_metadata((("grpc-status-details-bin", st.SerializeToString()),))
            context.abort(grpc.StatusCode.UNKNOWN, "write failed")
        return p4runtime_pb2.WriteResponse()

    t.Write = picky
    server.stop()  # re-register the servicer with the patched method
    server.target = t
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(t, srv)
    assert srv.add_insecure_port(server.addr)
    srv.start()
    server.server = srv
    routes = [
        Route("10.4.0.0/24", 1, "00:00:00:00:00:01"),
        Route("10.5.0.0/16", 1, "00:00:00:00:00:01"),
        Route("10.6.0.0/24", 2, "00:00:00:00:00:02"),
    ]
    with pytest.raises(ControlPlaneError) as e:
        conn.install_routes(routes)
    assert "1 of 3 refused" in str(e.value) and "route 10.5.0.0/16" in str(e.value)
    assert "INVALID_ARGUMENT" in str(e.value) and e.value.installed == 2
    assert len(t.entries(N.T_IPV4_LPM)) == 2
    assert conn.verify() == []  # the journal holds the two that went in


def test_multi_switch_install_says_which_switch_failed_and_what_was_left(tmp_path):
    a, c = Server().start(), Server().start()
    dead = Server().start()
    dead_addr = dead.addr
    dead.stop()
    try:
        topo = parse_topology(
            {
                "switches": [
                    {
                        "name": "s1",
                        "grpc": a.addr,
                        "routes": [{"prefix": "10.0.1.0/24", "port": 1, "mac": "00:00:00:00:00:01"}],
                    },
                    {
                        "name": "s2",
                        "grpc": dead_addr,
                        "routes": [{"prefix": "10.0.2.0/24", "port": 2, "mac": "00:00:00:00:00:02"}],
                    },
                    {
                        "name": "s3",
                        "grpc": c.addr,
                        "routes": [{"prefix": "10.0.3.0/24", "port": 3, "mac": "00:00:00:00:00:03"}],
                    },
                ]
            },
            "inline.toml",
        )
        from mltcp.controlplane.client import InstallError

        with pytest.raises(InstallError) as e:
            install_topology(topo, push=True, timeout=0.5)
        err = e.value
        assert err.failed == "s2" and err.left == ["s3"]
        assert [d["switch"] for d in err.done] == ["s1"]
        assert err.partial["routes"] == 0 and err.partial["routes_total"] == 1
        assert "switch s2 failed" in str(err) and "configured: s1" in str(err)
        assert "not attempted: s3" in str(err)
        assert len(a.target.entries(N.T_IPV4_LPM)) == 1 and c.target.p4info is None
        # the CLI says the same, on one line, exit 1; --json names the parts too
        f = tmp_path / "t.toml"
        f.write_text(
            "\n".join(
                f'[[switches]]\nname = "{n}"\ngrpc = "{g}"\n'
                for n, g in (("s1", a.addr), ("s2", dead_addr), ("s3", c.addr))
            )
        )
        res = runner.invoke(app, ["install", str(f), "--push", "--timeout", "0.5"])
        assert res.exit_code == 1
        assert "s1: 0 routes" in res.output and "switch s2 failed" in res.output
        assert "not attempted: s3" in res.output
        res = runner.invoke(app, ["install", str(f), "--push", "--timeout", "0.5", "--json"])
        assert res.exit_code == 1
        doc = json.loads(next(x for x in res.output.splitlines() if x.startswith("{")))
        assert doc["failed"]["switch"] == "s2" and doc["not_attempted"] == ["s3"]
        assert [s["switch"] for s in doc["switches"]] == ["s1"]
        res = runner.invoke(app, ["push", "--topology", str(f), "--timeout", "0.5"])
        assert res.exit_code == 1 and "push failed on switch s2" in res.output
        assert "done: s1" in res.output and "not attempted: s3" in res.output
    finally:
        a.stop()
        c.stop()


def test_reinstalling_hundreds_of_routes_on_the_software_target():
    """Every update of a repeated install is answered ALREADY_EXISTS first: with large batches
    that answer (one p4.v1.Error per update) outgrew gRPC's 16 KiB metadata limit."""
    from mltcp.emulation.switch import pipeline as pl
    from mltcp.emulation.switch.p4runtime_server import P4RuntimeTarget, serve

    target = P4RuntimeTarget(pl.Pipeline())
    srv = serve(target, "127.0.0.1:0")
    routes = [Route(f"10.{i // 256}.{i % 256}.0/24", 1 + i % 4, "00:00:00:00:00:01") for i in range(600)]
    try:
        with connect(f"127.0.0.1:{target.port}", timeout=5) as sw:
            sw.push_pipeline()
            assert sw.install_routes(routes) == 600
            moved = [Route(r.prefix, 5, r.mac) for r in routes]
            assert sw.install_routes(moved) == 600  # all modified
            assert sw.verify() == []
        assert len(target.pipeline.lpm) == 600
        assert target.pipeline.lpm.lookup(0x0A010203).port == 5
    finally:
        srv.stop(0)


def test_connections_to_two_switches_at_once_keep_their_own_session_and_p4info(tmp_path):
    """Each connection owns its channel, stream and P4Info index: two switches programmed
    alternately from one process, one of them with a P4Info whose ids differ, each gets its
    own entries; closing one leaves the other working."""
    from google.protobuf import text_format
    from mltcp.p4src import load_p4info

    other = load_p4info()
    for t in other.tables:  # same names, other ids: entries must use each device's own ids
        t.preamble.id += 7
    other_path = tmp_path / "other.txtpb"
    other_path.write_text(text_format.MessageToString(other))
    a, b = Server().start(), Server().start()
    try:
        ca = connect(a.addr, name="a", timeout=5)
        cb = connect(b.addr, name="b", timeout=5)
        ca.push_pipeline()
        cb.push_pipeline(other_path)
        for k in range(3):
            ca.install_routes([Route(f"10.1.{k}.0/24", 1, "00:00:00:00:00:01")])
            cb.install_routes([Route(f"10.2.{k}.0/24", 2, "00:00:00:00:00:02")])
        assert {ca.client.stream_alive, cb.client.stream_alive} == {True}
        assert ca.client.channel is not cb.client.channel
        ta, tb = a.target.entries(N.T_IPV4_LPM), b.target.entries(N.T_IPV4_LPM)
        assert len(ta) == 3 and len(tb) == 3
        assert tb[0].table_id == ta[0].table_id + 7
        ca.close()
        cb.set_ecn_threshold(2, 5)
        assert cb.verify() == []
        cb.close()
    finally:
        a.stop()
        b.stop()
