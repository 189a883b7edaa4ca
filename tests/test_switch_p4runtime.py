"""P4Runtime server logic without a data plane: the servicer on a free local port, raw stubs.

No root needed. Covers pipeline config actions (VERIFY_AND_SAVE + COMMIT, RECONCILE_AND_COMMIT
keeping state by name under new ids), arbitration hand-over, counter/register writes, default
entries and read filters; the integration test with p4runtime-shell is test_p4runtime_target.py.
"""

from __future__ import annotations

import queue
from pathlib import Path

import grpc
import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb
from p4.v1 import p4runtime_pb2_grpc

from mltcp.emulation.switch import pipeline as pl
from mltcp.emulation.switch.p4info import missing_objects
from mltcp.emulation.switch.p4runtime_server import P4RuntimeTarget, serve
from mltcp.emulation.switch.runtime import free_tcp_port

P4INFO = Path(__file__).resolve().parents[1] / "p4src" / "mltcp.p4info.txtpb"
Cfg = pb.SetForwardingPipelineConfigRequest


def load_p4info() -> p4info_pb2.P4Info:
    if not P4INFO.exists():
        pytest.skip(f"{P4INFO} not committed yet")
    return text_format.Parse(P4INFO.read_text(), p4info_pb2.P4Info())


def shifted(p4info: p4info_pb2.P4Info, delta: int = 7) -> p4info_pb2.P4Info:
    """The same program with every object id (and reference) moved by ``delta``."""
    out = p4info_pb2.P4Info()
    out.CopyFrom(p4info)
    for t in out.tables:
        t.preamble.id += delta
        for r in t.action_refs:
            r.id += delta
        if t.const_default_action_id:
            t.const_default_action_id += delta
    for kind in ("actions", "counters", "registers"):
        for o in getattr(out, kind):
            o.preamble.id += delta
    return out


class Client:
    def __init__(self, addr: str, election: int):
        self.ch = grpc.insecure_channel(addr)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.ch)
        self.election = election
        self.q: queue.Queue = queue.Queue()
        self.stream = self.stub.StreamChannel(iter(self.q.get, None))
        m = pb.StreamMessageRequest()
        m.arbitration.device_id = 0
        m.arbitration.election_id.low = election
        self.q.put(m)

    def next_arbitration(self) -> pb.MasterArbitrationUpdate:
        return next(self.stream).arbitration

    def set_config(self, p4info, action=Cfg.VERIFY_AND_COMMIT):
        req = Cfg(device_id=0, action=action)
        req.election_id.low = self.election
        if p4info is not None:
            req.config.p4info.CopyFrom(p4info)
            req.config.p4_device_config = b"opaque"
        return self.stub.SetForwardingPipelineConfig(req)

    def write(self, *updates, **kw):
        req = pb.WriteRequest(device_id=0, **kw)
        req.election_id.low = self.election
        req.updates.extend(updates)
        return self.stub.Write(req)

    def read(self, *entities):
        req = pb.ReadRequest(device_id=0)
        req.entities.extend(entities)
        return [e for rep in self.stub.Read(req) for e in rep.entities]

    def close(self):
        self.q.put(None)
        self.ch.close()


@pytest.fixture()
def server():
    target = P4RuntimeTarget(pl.Pipeline(), device_id=0)
    port = free_tcp_port()
    srv = serve(target, f"127.0.0.1:{port}")
    clients: list[Client] = []

    def client(election: int) -> Client:
        c = Client(f"127.0.0.1:{port}", election)
        clients.append(c)
        return c

    try:
        yield target, client
    finally:
        for c in clients:
            c.close()
        srv.stop(0)


def ids(p4info) -> dict[str, int]:
    return {o.preamble.name: o.preamble.id
            for kind in ("tables", "actions", "counters", "registers") for o in getattr(p4info, kind)}


def route_update(i, utype, prefix: bytes, plen: int, port: int, mac: bytes = b"\x00\x00\x00\x00\x00\x02"):
    u = pb.Update(type=utype)
    te = u.entity.table_entry
    te.table_id = i["MyIngress.ipv4_lpm"]
    m = te.match.add(field_id=1)
    m.lpm.value = prefix
    m.lpm.prefix_len = plen
    a = te.action.action
    a.action_id = i["MyIngress.ipv4_forward"]
    a.params.add(param_id=1, value=mac)
    a.params.add(param_id=2, value=bytes([port]))
    return u


def test_committed_p4info_is_complete():
    assert missing_objects(load_p4info()) == []


def test_pipeline_inactive_until_committed_and_save_then_commit(server):
    target, client = server
    p4info = load_p4info()
    c = client(5)
    assert c.next_arbitration().status.code == 0
    assert target.pipeline.active is False
    with pytest.raises(grpc.RpcError) as e:
        c.read(pb.Entity(table_entry=pb.TableEntry()))
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as e:
        c.set_config(None, Cfg.COMMIT)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    c.set_config(p4info, Cfg.VERIFY_AND_SAVE)
    assert target.pipeline.active is False
    c.set_config(None, Cfg.COMMIT)
    assert target.pipeline.active is True
    got = c.stub.GetForwardingPipelineConfig(pb.GetForwardingPipelineConfigRequest(device_id=0))
    assert got.config.p4_device_config == b"opaque"
    assert len(got.config.p4info.tables) == len(p4info.tables)


def test_reconcile_keeps_state_under_new_ids(server):
    target, client = server
    p4info = load_p4info()
    i = ids(p4info)
    c = client(5)
    c.next_arbitration()
    c.set_config(p4info)
    c.write(route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2))
    target.pipeline.counters[pl.C_JOB_TX].count(3, 100)
    new = shifted(p4info)
    c.set_config(new, Cfg.RECONCILE_AND_COMMIT)
    j = ids(new)
    (e,) = c.read(pb.Entity(table_entry=pb.TableEntry(table_id=j["MyIngress.ipv4_lpm"])))
    assert e.table_entry.table_id == j["MyIngress.ipv4_lpm"]
    assert e.table_entry.action.action.action_id == j["MyIngress.ipv4_forward"]
    assert target.pipeline.lpm.lookup(0x0A000205).port == 2
    ce = pb.Entity()
    ce.counter_entry.counter_id = j["MyIngress.job_tx"]
    ce.counter_entry.index.index = 3
    (got,) = c.read(ce)
    assert got.counter_entry.data.packet_count == 1
    # the old ids are gone
    with pytest.raises(grpc.RpcError) as e:
        c.read(pb.Entity(table_entry=pb.TableEntry(table_id=i["MyIngress.ipv4_lpm"])))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # a plain commit resets
    c.set_config(new)
    assert c.read(pb.Entity(table_entry=pb.TableEntry(table_id=j["MyIngress.ipv4_lpm"]))) == []
    assert target.pipeline.counters[pl.C_JOB_TX].packets[3] == 0


def test_primary_hand_over(server):
    target, client = server
    p4info = load_p4info()
    a = client(5)
    assert a.next_arbitration().status.code == 0
    b = client(9)
    assert b.next_arbitration().status.code == 0  # b is the new primary
    demoted = a.next_arbitration()  # a is told
    assert demoted.status.code != 0 and demoted.election_id.low == 9
    with pytest.raises(grpc.RpcError) as e:
        a.set_config(p4info)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    b.set_config(p4info)
    b.close()
    assert a.next_arbitration().status.code == 0  # primary again once b is gone
    a.set_config(p4info)


def test_counter_register_writes_and_default_entries(server):
    target, client = server
    p4info = load_p4info()
    i = ids(p4info)
    c = client(1)
    c.next_arbitration()
    c.set_config(p4info)
    u = pb.Update(type=pb.Update.MODIFY)
    u.entity.counter_entry.counter_id = i["MyIngress.job_tx"]
    u.entity.counter_entry.index.index = 12
    u.entity.counter_entry.data.packet_count = 40
    u.entity.counter_entry.data.byte_count = 4000
    r = pb.Update(type=pb.Update.MODIFY)
    r.entity.register_entry.register_id = i["MyIngress.job_bytes_ratio"]
    r.entity.register_entry.index.index = 12
    r.entity.register_entry.data.bitstring = b"\x80\x00"
    c.write(u, r)
    assert target.pipeline.counters[pl.C_JOB_TX].bytes[12] == 4000
    assert target.pipeline.registers[pl.R_JOB_BYTES_RATIO][12] == 0x8000
    # packets-only counter: byte_count is not reported even though the model tracks bytes
    target.pipeline.counters[pl.C_JOB_ECN_MARKS].count(0, 1500)
    ce = pb.Entity()
    ce.counter_entry.counter_id = i["MyEgress.job_ecn_marks"]
    ce.counter_entry.index.index = 0
    (got,) = c.read(ce)
    assert (got.counter_entry.data.packet_count, got.counter_entry.data.byte_count) == (1, 0)
    # wildcard register read
    re_ = pb.Entity()
    re_.register_entry.register_id = i["MyIngress.job_bytes_ratio"]
    assert len(c.read(re_)) == 1024
    # ipv4_lpm default: modify to forward, reset with an empty action
    d = pb.Update(type=pb.Update.MODIFY)
    te = d.entity.table_entry
    te.table_id = i["MyIngress.ipv4_lpm"]
    te.is_default_action = True
    te.action.action.action_id = i["MyIngress.ipv4_forward"]
    te.action.action.params.add(param_id=1, value=b"\x02" * 6)
    te.action.action.params.add(param_id=2, value=b"\x04")
    c.write(d)
    assert target.pipeline.lpm.lookup(0x01020304).port == 4
    te.action.Clear()
    c.write(d)
    assert target.pipeline.lpm.lookup(0x01020304) is None
    (back,) = c.read(pb.Entity(table_entry=pb.TableEntry(table_id=i["MyIngress.ipv4_lpm"],
                                                         is_default_action=True)))
    assert back.table_entry.action.action.action_id == i["MyIngress.drop"]
    # INSERT on the default entry is invalid
    d.type = pb.Update.INSERT
    with pytest.raises(grpc.RpcError) as e:
        c.write(d)
    assert e.value.code() == grpc.StatusCode.UNKNOWN


def test_write_validation(server):
    target, client = server
    p4info = load_p4info()
    i = ids(p4info)
    c = client(1)
    c.next_arbitration()
    c.set_config(p4info)

    def code_of(update) -> int:
        from google.rpc import status_pb2

        with pytest.raises(grpc.RpcError) as e:
            c.write(update)
        assert e.value.code() == grpc.StatusCode.UNKNOWN
        (md,) = [v for k, v in e.value.trailing_metadata() if k == "grpc-status-details-bin"]
        st = status_pb2.Status.FromString(md)
        err = pb.Error()
        st.details[0].Unpack(err)
        return grpc.StatusCode(next(s for s in grpc.StatusCode if s.value[0] == err.canonical_code))

    assert code_of(route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 1]), 24, 2)) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 0]), 0, 2)) == grpc.StatusCode.INVALID_ARGUMENT
    too_wide = route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2)
    too_wide.entity.table_entry.action.action.params[1].value = b"\x02\x00"  # 512 > bit<9>
    assert code_of(too_wide) == grpc.StatusCode.INVALID_ARGUMENT
    wrong_action = route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2)
    wrong_action.entity.table_entry.action.action.action_id = i["MyEgress.set_ecn_threshold"]
    assert code_of(wrong_action) == grpc.StatusCode.INVALID_ARGUMENT
    unknown_table = route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2)
    unknown_table.entity.table_entry.table_id = 12345
    assert code_of(unknown_table) == grpc.StatusCode.NOT_FOUND
    prio = route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2)
    prio.entity.table_entry.priority = 10
    assert code_of(prio) == grpc.StatusCode.INVALID_ARGUMENT
    longer = route_update(i, pb.Update.INSERT, b"\x00" + bytes([10, 0, 2, 0]), 24, 2)
    assert code_of(longer) == grpc.StatusCode.INVALID_ARGUMENT  # 5 bytes for bit<32>

    # canonical (short) and padded bytestrings address the same entry
    def ecn(value: bytes, k: int):
        u = pb.Update(type=pb.Update.INSERT)
        te = u.entity.table_entry
        te.table_id = i["MyEgress.ecn_threshold"]
        te.match.add(field_id=1).exact.value = value
        te.action.action.action_id = i["MyEgress.set_ecn_threshold"]
        te.action.action.params.add(param_id=1, value=bytes([k]))
        return u

    c.write(ecn(b"\x02", 10))
    assert code_of(ecn(b"\x00\x02", 20)) == grpc.StatusCode.ALREADY_EXISTS
    assert target.pipeline.ecn_thresholds == {2: 10}
