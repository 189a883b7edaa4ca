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
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb
from p4.v1 import p4runtime_pb2_grpc

from mltcp.emulation.switch import pipeline as pl
from mltcp.p4src.p4info import missing_objects
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
        self.arbitrate(election)

    def arbitrate(self, election: int) -> None:
        """(Re-)send a MasterArbitrationUpdate; later requests carry this election id."""
        self.election = election
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
    return {
        o.preamble.name: o.preamble.id
        for kind in ("tables", "actions", "counters", "registers")
        for o in getattr(p4info, kind)
    }


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
    assert e.value.code() == grpc.StatusCode.NOT_FOUND  # P4Runtime 1.4.1: no saved config
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


def test_backup_stays_backup_after_primary_disconnects(server):
    """P4Runtime 1.1+: nobody is promoted when the primary goes; election_id_past stays."""
    target, client = server
    p4info = load_p4info()
    a = client(5)
    assert a.next_arbitration().status.code == 0
    b = client(9)
    assert b.next_arbitration().status.code == 0
    a.next_arbitration()  # demoted
    b.set_config(p4info)
    b.close()
    told = a.next_arbitration()  # the backups hear that the primary is gone...
    assert told.status.code == code_pb2.NOT_FOUND and told.election_id.low == 9
    for write in (
        lambda: a.set_config(p4info),  # ...and still may not write
        lambda: a.write(route_update(ids(p4info), pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2)),
    ):
        with pytest.raises(grpc.RpcError) as e:
            write()
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    a.arbitrate(5)  # below election_id_past: still a backup
    assert a.next_arbitration().status.code == code_pb2.NOT_FOUND
    with pytest.raises(grpc.RpcError) as e:
        a.set_config(p4info)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    a.arbitrate(9)  # >= election_id_past: primary
    got = a.next_arbitration()
    assert got.status.code == code_pb2.OK and got.election_id.low == 9
    a.set_config(p4info)


def test_duplicate_election_id_and_no_election_id(server):
    target, client = server
    a = client(5)
    assert a.next_arbitration().status.code == 0
    b = client(5)
    with pytest.raises(grpc.RpcError) as e:
        b.next_arbitration()
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # a stream without an election id is a backup, even with no primary around
    c = Client.__new__(Client)
    c.ch = grpc.insecure_channel(f"127.0.0.1:{target.port}")
    c.stub = p4runtime_pb2_grpc.P4RuntimeStub(c.ch)
    c.q = queue.Queue()
    c.stream = c.stub.StreamChannel(iter(c.q.get, None))
    m = pb.StreamMessageRequest()
    m.arbitration.device_id = 0
    c.q.put(m)
    try:
        assert c.next_arbitration().status.code == code_pb2.ALREADY_EXISTS
        a.close()
        assert c.next_arbitration().status.code == code_pb2.NOT_FOUND
    finally:
        c.close()


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
    (back,) = c.read(pb.Entity(table_entry=pb.TableEntry(table_id=i["MyIngress.ipv4_lpm"], is_default_action=True)))
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
    assert code_of(too_wide) == grpc.StatusCode.OUT_OF_RANGE
    wrong_action = route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2)
    wrong_action.entity.table_entry.action.action.action_id = i["MyEgress.set_ecn_threshold"]
    assert code_of(wrong_action) == grpc.StatusCode.INVALID_ARGUMENT
    unknown_table = route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2)
    unknown_table.entity.table_entry.table_id = 12345
    assert code_of(unknown_table) == grpc.StatusCode.NOT_FOUND
    prio = route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2)
    prio.entity.table_entry.priority = 10
    assert code_of(prio) == grpc.StatusCode.INVALID_ARGUMENT
    empty = route_update(i, pb.Update.INSERT, b"", 24, 2)
    assert code_of(empty) == grpc.StatusCode.INVALID_ARGUMENT

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


def write_error(c: Client, *updates) -> tuple[grpc.StatusCode, str]:
    """The canonical code and message of the first failed update of a Write."""
    from google.rpc import status_pb2

    with pytest.raises(grpc.RpcError) as e:
        c.write(*updates)
    assert e.value.code() == grpc.StatusCode.UNKNOWN
    (md,) = [v for k, v in e.value.trailing_metadata() if k == "grpc-status-details-bin"]
    st = status_pb2.Status.FromString(md)
    for d in st.details:
        err = pb.Error()
        d.Unpack(err)
        if err.canonical_code != code_pb2.OK:
            return next(s for s in grpc.StatusCode if s.value[0] == err.canonical_code), err.message
    raise AssertionError("no failed update")


def test_bytestrings_with_leading_zeros_are_accepted_and_read_back_canonical(server):
    target, client = server
    p4info = load_p4info()
    i = ids(p4info)
    c = client(1)
    c.next_arbitration()
    c.set_config(p4info)
    # 6 bytes for bit<32>, 8 for bit<48>, 3 for bit<9>: values fit, so they are valid
    u = route_update(
        i, pb.Update.INSERT, b"\x00\x00" + bytes([10, 0, 2, 0]), 24, 2, mac=b"\x00\x00" + b"\x00\x00\x00\x00\x00\x07"
    )
    u.entity.table_entry.action.action.params[1].value = b"\x00\x00\x03"
    c.write(u)
    fwd = target.pipeline.lpm.lookup(0x0A000209)
    assert fwd.port == 3 and fwd.dst_mac == b"\x00\x00\x00\x00\x00\x07"
    (e,) = c.read(pb.Entity(table_entry=pb.TableEntry(table_id=i["MyIngress.ipv4_lpm"])))
    assert e.table_entry.match[0].lpm.value == bytes([10, 0, 2, 0])
    assert [p.value for p in e.table_entry.action.action.params] == [b"\x07", b"\x03"]
    # a padded key finds the same entry; a value that does not fit is OUT_OF_RANGE
    dup = route_update(i, pb.Update.INSERT, b"\x00" + bytes([10, 0, 2, 0]), 24, 2)
    assert write_error(c, dup)[0] == grpc.StatusCode.ALREADY_EXISTS
    big = route_update(i, pb.Update.INSERT, b"\x01" + bytes([10, 0, 2, 0]), 24, 2)
    assert write_error(c, big)[0] == grpc.StatusCode.OUT_OF_RANGE


def test_is_const_in_a_write_is_refused(server):
    target, client = server
    p4info = load_p4info()
    i = ids(p4info)
    c = client(1)
    c.next_arbitration()
    c.set_config(p4info)
    u = route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2)
    u.entity.table_entry.is_const = True
    code, msg = write_error(c, u)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "is_const" in msg
    assert len(target.pipeline.lpm) == 0


def test_table_size_is_enforced(server):
    target, client = server
    p4info = load_p4info()
    for t in p4info.tables:
        if t.preamble.name == "MyIngress.ipv4_lpm":
            t.size = 2
    i = ids(p4info)
    c = client(1)
    c.next_arbitration()
    c.set_config(p4info)
    c.write(
        route_update(i, pb.Update.INSERT, bytes([10, 0, 1, 0]), 24, 1),
        route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2),
    )
    full = route_update(i, pb.Update.INSERT, bytes([10, 0, 3, 0]), 24, 3)
    assert write_error(c, full)[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    c.write(route_update(i, pb.Update.MODIFY, bytes([10, 0, 2, 0]), 24, 4))  # modify still fine


def _without_noaction(p4info) -> p4info_pb2.P4Info:
    out = p4info_pb2.P4Info()
    out.CopyFrom(p4info)
    noaction = next(a.preamble.id for a in out.actions if a.preamble.name == "NoAction")
    keep = [a for a in out.actions if a.preamble.id != noaction]
    del out.actions[:]
    out.actions.extend(keep)
    for t in out.tables:
        refs = [r for r in t.action_refs if r.id != noaction]
        del t.action_refs[:]
        t.action_refs.extend(refs)
    return out


def test_reconcile_that_cannot_keep_state_fails_and_changes_nothing(server):
    target, client = server
    p4info = load_p4info()
    i = ids(p4info)
    c = client(1)
    c.next_arbitration()
    c.set_config(p4info)
    c.write(route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2))
    d = pb.Update(type=pb.Update.MODIFY)  # ecn_threshold default = NoAction
    d.entity.table_entry.table_id = i["MyEgress.ecn_threshold"]
    d.entity.table_entry.is_default_action = True
    d.entity.table_entry.action.action.action_id = i["NoAction"]
    c.write(d)
    before = c.read(pb.Entity(table_entry=pb.TableEntry()))
    new = shifted(_without_noaction(p4info))
    assert missing_objects(new) == []  # a valid mltcp.p4 P4Info, just without NoAction
    with pytest.raises(grpc.RpcError) as e:
        c.set_config(new, Cfg.RECONCILE_AND_COMMIT)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # P4Runtime 1.4.1
    assert "NoAction" in e.value.details() and "nothing was changed" in e.value.details()
    # state unchanged: still the old P4Info, ids and entries
    got = c.stub.GetForwardingPipelineConfig(pb.GetForwardingPipelineConfigRequest(device_id=0))
    assert ids(got.config.p4info) == i
    assert c.read(pb.Entity(table_entry=pb.TableEntry())) == before
    assert (
        c.read(pb.Entity(table_entry=pb.TableEntry(table_id=i["MyEgress.ecn_threshold"], is_default_action=True)))[
            0
        ].table_entry.action.action.action_id
        == i["NoAction"]
    )
    assert target.pipeline.lpm.lookup(0x0A000201).port == 2


def test_save_then_writes_then_commit_keeps_the_writes(server):
    target, client = server
    p4info = load_p4info()
    i = ids(p4info)
    c = client(1)
    c.next_arbitration()
    c.set_config(p4info)
    c.write(route_update(i, pb.Update.INSERT, bytes([10, 0, 1, 0]), 24, 1))  # old config's
    new = shifted(p4info)
    j = ids(new)
    c.set_config(new, Cfg.VERIFY_AND_SAVE)
    # until COMMIT the old forwarding state keeps running...
    assert target.pipeline.lpm.lookup(0x0A000101).port == 1
    # ...while reads and writes refer to the saved P4Info
    c.write(route_update(j, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2))
    assert target.pipeline.lpm.lookup(0x0A000201) is None
    got = c.read(pb.Entity(table_entry=pb.TableEntry(table_id=j["MyIngress.ipv4_lpm"])))
    assert {e.table_entry.match[0].lpm.value for e in got} == {bytes([10, 0, 1, 0]), bytes([10, 0, 2, 0])}
    with pytest.raises(grpc.RpcError):  # the old ids are gone for the client already
        c.write(route_update(i, pb.Update.INSERT, bytes([10, 0, 3, 0]), 24, 3))
    c.set_config(None, Cfg.COMMIT)
    # COMMIT = the state at the save (re-keyed into the saved P4Info) + the writes since
    assert target.pipeline.lpm.lookup(0x0A000201).port == 2  # the write since the save
    assert target.pipeline.lpm.lookup(0x0A000101).port == 1  # the state at the save
    got = c.read(pb.Entity(table_entry=pb.TableEntry(table_id=j["MyIngress.ipv4_lpm"])))
    assert {e.table_entry.match[0].lpm.value for e in got} == {bytes([10, 0, 1, 0]), bytes([10, 0, 2, 0])}
    assert all(e.table_entry.table_id == j["MyIngress.ipv4_lpm"] for e in got)
    got = c.stub.GetForwardingPipelineConfig(pb.GetForwardingPipelineConfigRequest(device_id=0))
    assert ids(got.config.p4info) == j


# --- status codes as P4Runtime 1.4.1 specifies them --------------------------------------------


def _code(fn) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as e:
        fn()
    return e.value.code()


def test_save_insert_commit_keeps_every_entry(server):
    """VERIFY_AND_SAVE, INSERT, COMMIT: the entries from before the save and the one written
    after it are all there (three of three), in the dataplane and in reads."""
    target, client = server
    p4info = load_p4info()
    i = ids(p4info)
    c = client(1)
    c.next_arbitration()
    c.set_config(p4info)
    c.write(
        route_update(i, pb.Update.INSERT, bytes([10, 0, 1, 0]), 24, 1),
        route_update(i, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2),
    )
    c.set_config(p4info, Cfg.VERIFY_AND_SAVE)
    assert len(c.read(pb.Entity(table_entry=pb.TableEntry(table_id=i["MyIngress.ipv4_lpm"])))) == 2
    c.write(route_update(i, pb.Update.INSERT, bytes([10, 0, 3, 0]), 24, 3))
    c.set_config(None, Cfg.COMMIT)
    got = c.read(pb.Entity(table_entry=pb.TableEntry(table_id=i["MyIngress.ipv4_lpm"])))
    assert len(got) == 3
    assert [target.pipeline.lpm.lookup(0x0A000001 + (k << 8)).port for k in (1, 2, 3)] == [1, 2, 3]


def test_save_of_a_p4info_that_cannot_hold_the_state_commits_only_the_writes_since(server):
    target, client = server
    p4info = load_p4info()
    i = ids(p4info)
    c = client(1)
    c.next_arbitration()
    c.set_config(p4info)
    d = pb.Update(type=pb.Update.MODIFY)  # a default entry the new P4Info cannot express
    d.entity.table_entry.table_id = i["MyEgress.ecn_threshold"]
    d.entity.table_entry.is_default_action = True
    d.entity.table_entry.action.action.action_id = i["NoAction"]
    c.write(d, route_update(i, pb.Update.INSERT, bytes([10, 0, 1, 0]), 24, 1))
    new = shifted(_without_noaction(p4info))
    j = ids(new)
    c.set_config(new, Cfg.VERIFY_AND_SAVE)  # saved; the staged state starts empty
    assert c.read(pb.Entity(table_entry=pb.TableEntry(table_id=j["MyIngress.ipv4_lpm"]))) == []
    assert target.pipeline.lpm.lookup(0x0A000101).port == 1  # still running until COMMIT
    c.write(route_update(j, pb.Update.INSERT, bytes([10, 0, 2, 0]), 24, 2))
    c.set_config(None, Cfg.COMMIT)
    assert target.pipeline.lpm.lookup(0x0A000101) is None
    assert target.pipeline.lpm.lookup(0x0A000201).port == 2


def test_commit_carrying_a_config_is_invalid_argument_and_changes_nothing(server):
    target, client = server
    p4info = load_p4info()
    c = client(1)
    c.next_arbitration()
    c.set_config(p4info, Cfg.VERIFY_AND_SAVE)
    assert _code(lambda: c.set_config(p4info, Cfg.COMMIT)) == grpc.StatusCode.INVALID_ARGUMENT
    assert target.pipeline.active is False
    c.set_config(None, Cfg.COMMIT)  # the save is still there
    assert target.pipeline.active is True


def test_unknown_action_id_is_invalid_argument(server):
    _, client = server
    p4info = load_p4info()
    i = ids(p4info)
    c = client(1)
    c.next_arbitration()
    c.set_config(p4info)
    u = route_update(i, pb.Update.INSERT, bytes([10, 0, 1, 0]), 24, 1)
    u.entity.table_entry.action.action.action_id = 0x01ABCDEF
    code, _ = write_error(c, u)
    assert code == grpc.StatusCode.INVALID_ARGUMENT


def test_rearbitration_for_another_device_is_failed_precondition(server):
    _, client = server
    c = client(1)
    assert c.next_arbitration().status.code == code_pb2.OK
    m = pb.StreamMessageRequest()
    m.arbitration.device_id = 7
    m.arbitration.election_id.low = 1
    c.q.put(m)
    with pytest.raises(grpc.RpcError) as e:
        c.next_arbitration()
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_first_arbitration_for_an_unknown_device_is_not_found(server):
    target, _ = server
    ch = grpc.insecure_channel(f"127.0.0.1:{target.port}")
    q: queue.Queue = queue.Queue()
    stream = p4runtime_pb2_grpc.P4RuntimeStub(ch).StreamChannel(iter(q.get, None))
    m = pb.StreamMessageRequest()
    m.arbitration.device_id = 7
    m.arbitration.election_id.low = 2
    q.put(m)
    try:
        with pytest.raises(grpc.RpcError) as e:
            next(stream)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        q.put(None)
        ch.close()


def _counter_entity(i, name: str, index: int | None) -> pb.Entity:
    e = pb.Entity()
    e.counter_entry.counter_id = i[name]
    if index is not None:
        e.counter_entry.index.index = index
    return e


def test_counter_negative_index_is_invalid_argument_and_past_the_end_out_of_range(server):
    _, client = server
    p4info = load_p4info()
    i = ids(p4info)
    c = client(1)
    c.next_arbitration()
    c.set_config(p4info)
    assert _code(lambda: c.read(_counter_entity(i, "MyIngress.job_tx", -1))) == grpc.StatusCode.INVALID_ARGUMENT
    assert _code(lambda: c.read(_counter_entity(i, "MyIngress.job_tx", 1 << 40))) == grpc.StatusCode.OUT_OF_RANGE
    u = pb.Update(type=pb.Update.MODIFY)
    u.entity.CopyFrom(_counter_entity(i, "MyIngress.job_tx", -1))
    assert write_error(c, u)[0] == grpc.StatusCode.INVALID_ARGUMENT


def test_counter_and_register_modify_without_index_writes_every_cell(server):
    target, client = server
    p4info = load_p4info()
    i = ids(p4info)
    c = client(1)
    c.next_arbitration()
    c.set_config(p4info)
    target.pipeline.counters[pl.C_JOB_TX].count(3, 100)
    u = pb.Update(type=pb.Update.MODIFY)
    u.entity.CopyFrom(_counter_entity(i, "MyIngress.job_tx", None))
    u.entity.counter_entry.data.packet_count = 0
    u.entity.counter_entry.data.byte_count = 0
    c.write(u)
    got = c.read(_counter_entity(i, "MyIngress.job_tx", None))
    assert got and all(e.counter_entry.data.packet_count == 0 for e in got)
    reg = next(r for r in p4info.registers)
    r = pb.Update(type=pb.Update.MODIFY)
    r.entity.register_entry.register_id = reg.preamble.id
    r.entity.register_entry.data.bitstring = b"\x05"
    c.write(r)
    assert all(v == 5 for v in target.pipeline.registers[reg.preamble.name])
