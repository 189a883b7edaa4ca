"""The P4Runtime server under abuse: many streams, garbage bytes, fuzzed requests.

In-process server on a free loopback port (no root). Bounded: at most ``MAX_STREAMS + 8``
streams, and each hypothesis test runs a fixed number of examples (printed at the end of the
module as ``fuzz cases: N``). Every call carries a deadline, so a frozen server fails the test
instead of hanging it.
"""

from __future__ import annotations

import queue
import threading

import grpc
import pytest
from google.protobuf import text_format
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb
from p4.v1 import p4runtime_pb2_grpc

from mltcp.emulation.switch import pipeline as pl
from mltcp.emulation.switch.p4runtime_server import P4RuntimeTarget, serve
from mltcp.p4src import P4INFO_PATH

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

MAX_STREAMS = 24
DEADLINE = 10.0  # seconds per RPC: generous for a loaded 2-core machine; a freeze is forever
FUZZ = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
CASES = {"n": 0}
Cfg = pb.SetForwardingPipelineConfigRequest


def load_p4info() -> p4info_pb2.P4Info:
    return text_format.Parse(P4INFO_PATH.read_text(), p4info_pb2.P4Info())


@pytest.fixture(scope="module")
def server():
    # silent streams are never closed to make room here (see the eviction test below)
    target = P4RuntimeTarget(pl.Pipeline(), device_id=0, max_streams=MAX_STREAMS, arbitration_grace_s=1e9)
    srv = serve(target, "127.0.0.1:0")
    ch = grpc.insecure_channel(f"127.0.0.1:{target.port}")
    stub = p4runtime_pb2_grpc.P4RuntimeStub(ch)
    # one primary for the whole module (election id 1)
    q: queue.Queue = queue.Queue()
    stream = stub.StreamChannel(iter(q.get, None))
    m = pb.StreamMessageRequest()
    m.arbitration.device_id = 0
    m.arbitration.election_id.low = 1
    q.put(m)
    assert next(stream).arbitration.status.code == code_pb2.OK
    req = Cfg(device_id=0, action=Cfg.VERIFY_AND_COMMIT)
    req.election_id.low = 1
    req.config.p4info.CopyFrom(load_p4info())
    stub.SetForwardingPipelineConfig(req, timeout=DEADLINE)
    try:
        yield target, stub, ch
    finally:
        q.put(None)
        ch.close()
        srv.stop(0)
        print(f"\nfuzz cases: {CASES['n']}")


def alive(stub) -> None:
    """The server still answers a unary call and a read."""
    stub.Capabilities(pb.CapabilitiesRequest(), timeout=DEADLINE)
    list(stub.Read(pb.ReadRequest(device_id=0, entities=[pb.Entity(table_entry=pb.TableEntry())]), timeout=DEADLINE))


class IdleStream:
    """A StreamChannel that sends nothing (or one arbitration) and reads nothing."""

    def __init__(self, addr: str, election: int | None = None):
        self.ch = grpc.insecure_channel(addr)
        self.q: queue.Queue = queue.Queue()
        self.call = p4runtime_pb2_grpc.P4RuntimeStub(self.ch).StreamChannel(iter(self.q.get, None))
        if election is not None:
            m = pb.StreamMessageRequest()
            m.arbitration.device_id = 0
            m.arbitration.election_id.low = election
            self.q.put(m)

    def first(self, timeout: float = DEADLINE):
        """The first message, or the RpcError that ended the stream."""
        box: list = []

        def get():
            try:
                box.append(next(self.call))
            except grpc.RpcError as e:
                box.append(e)

        t = threading.Thread(target=get, daemon=True)
        t.start()
        t.join(timeout)
        return box[0] if box else None

    def close(self):
        self.q.put(None)
        self.call.cancel()
        self.ch.close()


def test_idle_streams_never_starve_unary_calls_and_extra_streams_are_refused(server):
    target, stub, _ = server
    addr = f"127.0.0.1:{target.port}"
    streams = []
    try:
        # fill every slot but the module's primary with idle, never-arbitrating streams
        # (the old server froze at 16: each stream held one of its 16 pool threads)
        while len(target.streams) < MAX_STREAMS:
            streams.append(IdleStream(addr))
            if len(streams) > 2 * MAX_STREAMS:
                pytest.fail(f"only {len(target.streams)} streams registered")
            alive(stub)
        for _ in range(8):  # more streams: refused at once, the unary calls still answered
            s = IdleStream(addr, election=100 + len(streams))
            streams.append(s)
            got = s.first()
            assert isinstance(got, grpc.RpcError), got
            assert got.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            alive(stub)
        assert len(target.streams) == MAX_STREAMS
        # unary calls in parallel with all slots taken
        errors: list = []

        def hammer():
            try:
                for _ in range(20):
                    alive(stub)
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        ts = [threading.Thread(target=hammer) for _ in range(12)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(4 * DEADLINE)
        assert errors == [] and not any(t.is_alive() for t in ts)
    finally:
        for s in streams:
            s.close()
    # the slots come back once the idle clients go
    for _ in range(100):
        if len(target.streams) == 1:
            break
        threading.Event().wait(0.05)
    assert len(target.streams) == 1
    s = IdleStream(addr, election=0)  # a backup (below the primary's 1) is served again
    try:
        got = s.first()
        assert not isinstance(got, grpc.RpcError) and got.arbitration.status.code == code_pb2.ALREADY_EXISTS
    finally:
        s.close()


def test_silent_streams_make_room_for_a_controller():
    """All slots held by streams that never arbitrate: a controller still gets in (the oldest
    silent stream is closed), becomes primary and writes."""
    target = P4RuntimeTarget(pl.Pipeline(), device_id=0, max_streams=8, arbitration_grace_s=0.2)
    srv = serve(target, "127.0.0.1:0")
    addr = f"127.0.0.1:{target.port}"
    idle = []
    try:
        while len(target.streams) < 8:
            idle.append(IdleStream(addr))
            threading.Event().wait(0.01)
        threading.Event().wait(0.3)
        ctl = IdleStream(addr, election=1)
        idle.append(ctl)
        got = ctl.first()
        assert not isinstance(got, grpc.RpcError), got
        assert got.arbitration.status.code == code_pb2.OK
        assert len(target.streams) == 8
        closed = idle[0].first(timeout=DEADLINE)
        assert isinstance(closed, grpc.RpcError) and closed.code() == grpc.StatusCode.CANCELLED
        stub = p4runtime_pb2_grpc.P4RuntimeStub(ctl.ch)
        req = Cfg(device_id=0, action=Cfg.VERIFY_AND_COMMIT)
        req.election_id.low = 1
        req.config.p4info.CopyFrom(load_p4info())
        stub.SetForwardingPipelineConfig(req, timeout=DEADLINE)
        assert target.pipeline.active
    finally:
        for s in idle:
            s.close()
        srv.stop(0)


METHODS = ["Write", "Read", "SetForwardingPipelineConfig", "GetForwardingPipelineConfig", "Capabilities"]


@FUZZ
@given(method=st.sampled_from(METHODS), raw=st.binary(max_size=256))
def test_garbage_bytes_get_a_status_not_a_crash(server, method, raw):
    target, stub, ch = server
    CASES["n"] += 1
    path = f"/p4.v1.P4Runtime/{method}"
    if method == "Read":
        call = ch.unary_stream(path, request_serializer=None, response_deserializer=None)
        try:
            list(call(raw, timeout=DEADLINE))
        except grpc.RpcError as e:
            assert e.code() != grpc.StatusCode.DEADLINE_EXCEEDED
            assert "Exception calling application" not in (e.details() or "")
    else:
        call = ch.unary_unary(path, request_serializer=None, response_deserializer=None)
        try:
            call(raw, timeout=DEADLINE)
        except grpc.RpcError as e:
            assert e.code() != grpc.StatusCode.DEADLINE_EXCEEDED
            assert "Exception calling application" not in (e.details() or "")


def _bytes():
    return st.one_of(st.binary(max_size=9), st.sampled_from([b"", b"\x00", b"\x00" * 7 + b"\x01"]))


@st.composite
def table_entries(draw):
    ids = [t.preamble.id for t in load_p4info().tables] + [0, 1, 2**32 - 1]
    acts = [a.preamble.id for a in load_p4info().actions] + [0, 7]
    te = pb.TableEntry(table_id=draw(st.sampled_from(ids)))
    for _ in range(draw(st.integers(0, 3))):
        m = te.match.add(field_id=draw(st.integers(0, 3)))
        kind = draw(st.sampled_from(["exact", "lpm", "ternary", "range", "optional", None]))
        if kind == "exact":
            m.exact.value = draw(_bytes())
        elif kind == "lpm":
            m.lpm.value = draw(_bytes())
            m.lpm.prefix_len = draw(st.integers(-2, 40))
        elif kind == "ternary":
            m.ternary.value = draw(_bytes())
            m.ternary.mask = draw(_bytes())
        elif kind == "range":
            m.range.low = draw(_bytes())
            m.range.high = draw(_bytes())
        elif kind == "optional":
            m.optional.value = draw(_bytes())
    which = draw(st.sampled_from(["action", "profile", None]))
    if which == "action":
        te.action.action.action_id = draw(st.sampled_from(acts))
        for _ in range(draw(st.integers(0, 3))):
            te.action.action.params.add(param_id=draw(st.integers(0, 3)), value=draw(_bytes()))
    elif which == "profile":
        te.action.action_profile_member_id = draw(st.integers(0, 5))
    te.priority = draw(st.sampled_from([0, 0, 0, 1, -1]))
    te.is_default_action = draw(st.booleans())
    te.is_const = draw(st.sampled_from([False, False, True]))
    te.idle_timeout_ns = draw(st.sampled_from([0, 0, 5]))
    return te


CODES = {c.value[0] for c in grpc.StatusCode}


@FUZZ
@given(updates=st.lists(st.tuples(st.sampled_from([0, 1, 2, 3, 9]), table_entries()), min_size=1, max_size=6))
def test_fuzzed_writes_get_per_update_answers(server, updates):
    target, stub, _ = server
    CASES["n"] += 1
    req = pb.WriteRequest(device_id=0)
    req.election_id.low = 1
    for utype, te in updates:
        u = req.updates.add()
        u.type = utype
        u.entity.table_entry.CopyFrom(te)
    try:
        stub.Write(req, timeout=DEADLINE)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.UNKNOWN, (e.code(), e.details())
        assert "Exception calling application" not in (e.details() or "")
        from google.rpc import status_pb2

        (md,) = [v for k, v in e.trailing_metadata() if k == "grpc-status-details-bin"]
        st_ = status_pb2.Status.FromString(md)
        assert len(st_.details) == len(updates)
        for d in st_.details:
            err = pb.Error()
            assert d.Unpack(err)
            assert err.canonical_code in CODES
    # the model and what Read reports agree after every batch
    rep = list(
        stub.Read(pb.ReadRequest(device_id=0, entities=[pb.Entity(table_entry=pb.TableEntry())]), timeout=DEADLINE)
    )
    n = sum(1 for r in rep for e in r.entities if not e.table_entry.is_default_action)
    assert n == len(target.pipeline.lpm) + len(target.pipeline.ecn_thresholds)


@FUZZ
@given(
    drop=st.sets(st.integers(0, 40), max_size=6),
    shift=st.integers(0, 3),
    action=st.sampled_from(
        [Cfg.VERIFY, Cfg.VERIFY_AND_SAVE, Cfg.RECONCILE_AND_COMMIT, Cfg.COMMIT, Cfg.UNSPECIFIED, 17]
    ),
)
def test_fuzzed_pipeline_configs_validate_or_refuse(server, drop, shift, action):
    """P4Infos with random objects removed and ids moved: each is accepted or refused with a
    proper code; the server keeps a usable pipeline (no VERIFY_AND_COMMIT: that would reset)."""
    target, stub, _ = server
    CASES["n"] += 1
    info = load_p4info()
    objs = [
        (kind, i) for kind in ("tables", "actions", "counters", "registers") for i in range(len(getattr(info, kind)))
    ]
    for kind, i in sorted({objs[d % len(objs)] for d in drop}, key=lambda x: -x[1]):
        del getattr(info, kind)[i]
    for kind in ("tables", "actions", "counters", "registers"):
        for o in getattr(info, kind):
            o.preamble.id += shift
    for t in info.tables:
        for r in t.action_refs:
            r.id += shift
    req = Cfg(device_id=0, action=action)
    req.election_id.low = 1
    req.config.p4info.CopyFrom(info)
    try:
        stub.SetForwardingPipelineConfig(req, timeout=DEADLINE)
    except grpc.RpcError as e:
        assert e.code() in (
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.FAILED_PRECONDITION,
            grpc.StatusCode.NOT_FOUND,
        ), (e.code(), e.details())
    if target.saved is not None:  # leave no half-done save behind for the next example
        commit = Cfg(device_id=0, action=Cfg.COMMIT)
        commit.election_id.low = 1
        stub.SetForwardingPipelineConfig(commit, timeout=DEADLINE)
    alive(stub)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    msgs=st.lists(
        st.one_of(
            st.builds(
                lambda d, h, lo, r: ("arb", d, h, lo, r),
                st.sampled_from([0, 0, 1, 2**64 - 1]),
                st.integers(0, 2),
                st.integers(0, 2**64 - 1),
                st.sampled_from(["", "x"]),
            ),
            st.builds(lambda p: ("pkt", p), st.binary(max_size=64)),
            st.just(("digest",)),
            st.just(("other",)),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_fuzzed_stream_messages_end_in_answers_or_a_status(msgs):
    """Random arbitration / packet / digest / unknown messages on a fresh server each time (a
    fuzzed id may become primary); the stream answers or ends with a status, the server lives."""
    CASES["n"] += 1
    target = P4RuntimeTarget(pl.Pipeline(), device_id=0)
    srv = serve(target, "127.0.0.1:0")
    ch = grpc.insecure_channel(f"127.0.0.1:{target.port}")
    try:
        _stream_case(target, p4runtime_pb2_grpc.P4RuntimeStub(ch), msgs)
    finally:
        ch.close()
        srv.stop(0)


def _stream_case(target, stub, msgs):
    q: queue.Queue = queue.Queue()
    call = stub.StreamChannel(iter(q.get, None), timeout=DEADLINE)
    for m in msgs:
        r = pb.StreamMessageRequest()
        if m[0] == "arb":
            _, dev, high, low, role = m
            r.arbitration.device_id = dev
            if (high, low) != (0, 0):  # (0, 0): no election id at all
                r.arbitration.election_id.high = high
                r.arbitration.election_id.low = low
            if role:
                r.arbitration.role.name = role
        elif m[0] == "pkt":
            r.packet.payload = m[1]
        elif m[0] == "digest":
            r.digest_ack.digest_id = 1
        else:
            r.other.type_url = "x"
        q.put(r)
    q.put(None)  # half-close: the server answers what it got, then ends the stream
    try:
        for rep in call:
            assert rep.WhichOneof("update") in ("arbitration", "error")
    except grpc.RpcError as e:
        codes = [
            grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.UNIMPLEMENTED,
            grpc.StatusCode.CANCELLED,
        ]
        arbs = [m for m in msgs if m[0] == "arb"]
        if any(a[1] == 0 and b[1] != 0 for k, a in enumerate(arbs) for b in arbs[k + 1 :]):
            # P4Runtime 1.4.1, 5.3: an arbitrated stream that names another device
            codes.append(grpc.StatusCode.FAILED_PRECONDITION)
        assert e.code() in codes, (e.code(), e.details())
    stub.Capabilities(pb.CapabilitiesRequest(), timeout=DEADLINE)
    for _ in range(100):  # the stream is gone: so is its primary role
        if not target.streams:
            break
        threading.Event().wait(0.02)
    assert target.streams == [] and target.primary is None


def test_oversized_and_wrong_device_requests(server):
    target, stub, _ = server
    req = pb.WriteRequest(device_id=0)
    req.election_id.low = 1
    u = req.updates.add(type=pb.Update.INSERT)
    u.entity.table_entry.table_id = 1
    u.entity.table_entry.controller_metadata = 0
    u.entity.table_entry.metadata = b"x" * (5 << 20)  # over gRPC's 4 MiB receive limit
    with pytest.raises(grpc.RpcError) as e:
        stub.Write(req, timeout=DEADLINE)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    for rpc, r in (
        (stub.Write, pb.WriteRequest(device_id=7)),
        (stub.GetForwardingPipelineConfig, pb.GetForwardingPipelineConfigRequest(device_id=7)),
    ):
        with pytest.raises(grpc.RpcError) as e:
            rpc(r, timeout=DEADLINE)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    alive(stub)
