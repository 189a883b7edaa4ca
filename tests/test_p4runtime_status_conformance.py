"""P4Runtime 1.4.1 status codes, asked of both targets of mltcp.p4: the software switch's server and
BMv2's ``simple_switch_grpc`` (skipped with the reason when p4c/BMv2 are not installed).

``SPEC`` is what P4Runtime 1.4.1 specifies and what mltcp-switch answers; ``BMV2`` lists where
BMv2 1.15 answers otherwise (docs/p4-bmv2.md, conformance). A change on either side fails here.
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

from mltcp import tools
from mltcp.controlplane.session import update_errors
from mltcp.emulation.switch import pipeline as pl
from mltcp.emulation.switch.p4runtime_server import P4RuntimeTarget, serve
from mltcp.p4src import P4INFO_PATH

Cfg = pb.SetForwardingPipelineConfigRequest
SPEC = {
    "commit_nothing_saved": "NOT_FOUND",
    "unknown_action_id": "INVALID_ARGUMENT",
    "counter_read_negative_index": "INVALID_ARGUMENT",
    "counter_modify_without_index": "OK",  # every cell
    "entries_after_save": 2,  # the state at the save (re-keyed)
    "commit_with_config": "INVALID_ARGUMENT",
    "commit": "OK",
    "entries_after_commit": 3,  # the state at the save + the write since
    "rearbitrate_other_device": "FAILED_PRECONDITION",
}
BMV2 = dict(
    SPEC,
    commit_nothing_saved="UNKNOWN",
    counter_modify_without_index="UNIMPLEMENTED",
    entries_after_save=0,
    commit_with_config="OK",
    commit="UNKNOWN",
    entries_after_commit=1,
)


def _p4info() -> p4info_pb2.P4Info:
    return text_format.Parse(Path(P4INFO_PATH).read_text(), p4info_pb2.P4Info())


def ask(addr: str, devcfg: bytes) -> dict:
    """Each case of SPEC as the target at ``addr`` answers it, in this order (later cases build
    on earlier ones, as an operator's session would)."""
    info = _p4info()
    ids = {o.preamble.name: o.preamble.id for k in ("tables", "actions", "counters") for o in getattr(info, k)}
    ch = grpc.insecure_channel(addr)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(ch)
    q: queue.Queue = queue.Queue()
    stream = stub.StreamChannel(iter(q.get, None))
    got: dict = {}

    def arbitrate(device: int) -> None:
        m = pb.StreamMessageRequest()
        m.arbitration.device_id = device
        m.arbitration.election_id.low = 10
        q.put(m)

    def setcfg(action, with_cfg: bool = True) -> str:
        r = Cfg(device_id=0, action=action)
        r.election_id.low = 10
        if with_cfg:
            r.config.p4info.CopyFrom(info)
            r.config.p4_device_config = devcfg
        try:
            stub.SetForwardingPipelineConfig(r)
            return "OK"
        except grpc.RpcError as e:
            return e.code().name

    def write(u) -> str:
        r = pb.WriteRequest(device_id=0)
        r.election_id.low = 10
        r.updates.add().CopyFrom(u)
        try:
            stub.Write(r)
            return "OK"
        except grpc.RpcError as e:
            return code_pb2.Code.Name(update_errors(e, 1)[0][1])

    def read(ent):
        r = pb.ReadRequest(device_id=0)
        r.entities.add().CopyFrom(ent)
        try:
            return [e for rep in stub.Read(r) for e in rep.entities]
        except grpc.RpcError as e:
            return e.code().name

    def route(a: int):
        u = pb.Update(type=pb.Update.INSERT)
        te = u.entity.table_entry
        te.table_id = ids["MyIngress.ipv4_lpm"]
        m = te.match.add(field_id=1)
        m.lpm.value, m.lpm.prefix_len = bytes([10, 0, a, 0]), 24
        te.action.action.action_id = ids["MyIngress.ipv4_forward"]
        te.action.action.params.add(param_id=1, value=b"\x00\x00\x00\x00\x00\x02")
        te.action.action.params.add(param_id=2, value=b"\x02")
        return u

    lpm = pb.Entity()
    lpm.table_entry.table_id = ids["MyIngress.ipv4_lpm"]
    try:
        arbitrate(0)
        assert next(stream).arbitration.status.code == code_pb2.OK
        got["commit_nothing_saved"] = setcfg(Cfg.COMMIT, with_cfg=False)
        assert setcfg(Cfg.VERIFY_AND_COMMIT) == "OK"
        assert write(route(1)) == write(route(2)) == "OK"
        u = route(3)
        u.entity.table_entry.action.action.action_id = 0x01ABCDEF
        got["unknown_action_id"] = write(u)
        c = pb.Entity()
        c.counter_entry.counter_id = ids["MyIngress.job_tx"]
        c.counter_entry.index.index = -1
        r = read(c)
        got["counter_read_negative_index"] = r if isinstance(r, str) else "OK"
        cu = pb.Update(type=pb.Update.MODIFY)
        cu.entity.counter_entry.counter_id = ids["MyIngress.job_tx"]
        got["counter_modify_without_index"] = write(cu)
        assert setcfg(Cfg.VERIFY_AND_SAVE) == "OK"
        got["entries_after_save"] = len(read(lpm))
        assert write(route(3)) == "OK"
        got["commit_with_config"] = setcfg(Cfg.COMMIT)
        got["commit"] = setcfg(Cfg.COMMIT, with_cfg=False)
        got["entries_after_commit"] = len(read(lpm))
        arbitrate(5)
        try:
            next(stream)
            got["rearbitrate_other_device"] = "OK"
        except grpc.RpcError as e:
            got["rearbitrate_other_device"] = e.code().name
    finally:
        q.put(None)
        ch.close()
    return got


def test_mltcp_switch_answers_as_the_spec_says():
    target = P4RuntimeTarget(pl.Pipeline(), device_id=0)
    srv = serve(target, "127.0.0.1:0")
    try:
        assert ask(f"127.0.0.1:{target.port}", b"") == SPEC
    finally:
        srv.stop(0)


def test_bmv2_answers_as_the_conformance_docs_say(tmp_path):
    why = tools.why_missing("p4c-bm2-ss", "simple_switch_grpc")
    if why:
        print(f"BMv2 status-code conformance skipped: {why}")
        pytest.skip(why)
    from mltcp.emulation import bmv2 as B

    js = tools.compile_v1model(Path(P4INFO_PATH).with_suffix("").with_suffix(".p4"), tmp_path / "build")
    proc, grpc_port, _ = B.start_in_netns(None, {}, log_path=tmp_path / "bmv2.log")
    try:
        assert ask(f"127.0.0.1:{grpc_port}", js.read_bytes()) == BMV2
    finally:
        B.stop(proc, 5)
