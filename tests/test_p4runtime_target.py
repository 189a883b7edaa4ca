"""The software target serves real P4Runtime: p4runtime-shell connects, pushes the committed P4Info,
writes ipv4_lpm / ecn_threshold entries and reads counters; bad requests get proper gRPC codes.

Needs root (veths, AF_PACKET): the switch runs as a subprocess on two veth pairs in the root
namespace (unique names) with its gRPC server on a free port of 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from mltcp.emulation.switch import dataplane as dp
from mltcp.emulation.switch.runtime import spawn_switch, stop_switch
from mltcp.emulation.switch.testbed import Testbed, have_root_netns
from mltcp.traffic.header import MLTCP

ROOT = Path(__file__).resolve().parents[1]
P4INFO = ROOT / "p4src" / "mltcp.p4info.txtpb"

_why = have_root_netns()
pytestmark = [pytest.mark.integration, pytest.mark.root, pytest.mark.skipif(_why is not None, reason=_why or "")]

if _why:
    print(f"test_p4runtime_target skipped: {_why}")


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """(grpc address, host-side interface of port 1, of port 2)."""
    if not P4INFO.exists():
        pytest.skip(f"{P4INFO} not committed yet")
    pid = os.getpid() % 100000
    tb = Testbed("p4rt")
    proc = None
    try:
        sa, ha = tb.veth(f"p4s{pid}a", f"p4h{pid}a")
        sb, hb = tb.veth(f"p4s{pid}b", f"p4h{pid}b")
        log = open(tmp_path_factory.mktemp("sw") / "switch.log", "w+")
        proc, port = spawn_switch({1: sa, 2: sb}, grpc_host="127.0.0.1", stderr=log)
        yield f"127.0.0.1:{port}", ha, hb
    finally:
        if proc is not None:
            stop_switch(proc, 10)
        tb.close()


@pytest.fixture(scope="module")
def shell(target, tmp_path_factory):
    import p4runtime_sh.shell as sh

    devcfg = tmp_path_factory.mktemp("cfg") / "device_config.bin"
    devcfg.write_bytes(b"")  # the software target treats the device config as opaque
    sh.setup(
        device_id=0,
        grpc_addr=target[0],
        election_id=(0, 1),
        config=sh.FwdPipeConfig(str(P4INFO), str(devcfg)),
        verbose=False,
    )
    try:
        yield sh
    finally:
        sh.teardown()


def _raw(ifname: str) -> socket.socket:
    return dp.packet_socket(ifname)  # not socket(ETH_P_ALL) + bind: that also captures other links


def _recv_all(s: socket.socket, want: int, timeout: float = 5.0) -> list[bytes]:
    got: list[bytes] = []
    end = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < end:
        r, _, _ = select.select([s], [], [], 0.2)
        if r:
            data, addr = s.recvfrom(65536)
            if addr[2] != 4:  # not our own outgoing frames
                got.append(data)
    return got


def _load_p4info() -> p4info_pb2.P4Info:
    return text_format.Parse(P4INFO.read_text(), p4info_pb2.P4Info())


def test_shell_programs_tables_and_reads_counters(shell, target):
    sh = shell
    te = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.ipv4_forward")
    te.match["hdr.ipv4.dstAddr"] = "10.0.2.0/24"
    te.action["dstAddr"] = "00:00:00:00:02:02"
    te.action["port"] = "2"
    te.insert()
    ecn = sh.TableEntry("MyEgress.ecn_threshold")(action="MyEgress.set_ecn_threshold")
    ecn.match["standard_metadata.egress_port"] = "2"
    ecn.action["threshold"] = "10"
    ecn.insert()

    entries = list(sh.TableEntry("MyIngress.ipv4_lpm").read())
    assert len(entries) == 1
    assert entries[0].match["hdr.ipv4.dstAddr"].lpm.prefix_len == 24
    assert len(list(sh.TableEntry("MyEgress.ecn_threshold").read())) == 1

    # traffic: 25 packets of job 7 enter port 1 and must leave port 2 with rewritten MACs
    _, h1, h2 = target
    tx, rx = _raw(h1), _raw(h2)
    try:
        pkt = bytes(
            Ether(dst="00:00:00:00:00:01", src="00:00:00:00:01:01")
            / IP(src="10.0.1.1", dst="10.0.2.2")
            / UDP(sport=1234, dport=9199)
            / MLTCP(job_id=7, bytes_ratio=4321)
            / (b"z" * 200)
        )
        for _ in range(25):
            tx.send(pkt)
        got = [g for g in _recv_all(rx, 25) if Ether(g).haslayer(MLTCP)]
    finally:
        tx.close()
        rx.close()
    assert len(got) == 25
    assert Ether(got[0]).dst == "00:00:00:00:02:02" and Ether(got[0])[IP].ttl == 63

    c = sh.CounterEntry("MyIngress.job_tx")
    c.index = 7
    (one,) = list(c.read())
    assert one.packet_count == 25 and one.byte_count == 25 * len(pkt)
    every = list(sh.CounterEntry("MyIngress.job_tx").read())  # wildcard index
    assert len(every) == 1024
    assert sum(e.packet_count for e in every) == 25

    # register read through the shell's client (p4runtime-shell 0.0.6 has no RegisterEntry)
    ent = p4runtime_pb2.Entity()
    reg = next(r for r in _load_p4info().registers if r.preamble.name == "MyIngress.job_bytes_ratio")
    ent.register_entry.register_id = reg.preamble.id
    ent.register_entry.index.index = 7
    (rep,) = list(sh.client.read_one(ent))
    assert int.from_bytes(rep.entities[0].register_entry.data.bitstring, "big") == 4321

    # modify, delete, and the error codes of the P4Runtime spec
    te.action["port"] = "1"
    te.modify()
    from p4runtime_sh.p4runtime import P4RuntimeWriteException
    from google.rpc import code_pb2

    dup = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.drop")
    dup.match["hdr.ipv4.dstAddr"] = "10.0.2.0/24"
    with pytest.raises(P4RuntimeWriteException) as e:
        dup.insert()
    assert e.value.errors[0][1].canonical_code == code_pb2.ALREADY_EXISTS
    ghost = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.drop")
    ghost.match["hdr.ipv4.dstAddr"] = "10.9.0.0/16"
    with pytest.raises(P4RuntimeWriteException) as e:
        ghost.delete()
    assert e.value.errors[0][1].canonical_code == code_pb2.NOT_FOUND
    with pytest.raises(P4RuntimeWriteException) as e:
        ghost.modify()
    assert e.value.errors[0][1].canonical_code == code_pb2.NOT_FOUND
    te.delete()
    assert list(sh.TableEntry("MyIngress.ipv4_lpm").read()) == []

    # default action modify on ecn_threshold, read back as the default entry
    d = sh.TableEntry("MyEgress.ecn_threshold")(action="MyEgress.set_ecn_threshold", is_default=True)
    d.action["threshold"] = "40"
    d.modify()
    q = sh.TableEntry("MyEgress.ecn_threshold")
    q.is_default = True
    (back,) = list(q.read())
    assert back.is_default


@pytest.fixture()
def stub(target):
    ch = grpc.insecure_channel(target[0])
    try:
        yield p4runtime_pb2_grpc.P4RuntimeStub(ch)
    finally:
        ch.close()


def _ids(p4info: p4info_pb2.P4Info) -> dict[str, int]:
    out = {}
    for kind in ("tables", "actions", "counters", "registers"):
        for o in getattr(p4info, kind):
            out[o.preamble.name] = o.preamble.id
    return out


def test_unsupported_and_invalid_requests_get_grpc_codes(shell, stub):
    ids = _ids(_load_p4info())
    # reading an entity type the target does not have
    req = p4runtime_pb2.ReadRequest(device_id=0)
    req.entities.add().action_profile_member.action_profile_id = 0
    with pytest.raises(grpc.RpcError) as e:
        list(stub.Read(req))
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # wrong device id
    with pytest.raises(grpc.RpcError) as e:
        stub.GetForwardingPipelineConfig(p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=9))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # a writer that is not the primary (no arbitration on this channel, another election id)
    w = p4runtime_pb2.WriteRequest(device_id=0)
    w.election_id.low = 99
    u = w.updates.add(type=p4runtime_pb2.Update.INSERT)
    u.entity.table_entry.table_id = ids["MyIngress.ipv4_lpm"]
    with pytest.raises(grpc.RpcError) as e:
        stub.Write(w)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # as the primary (election id 1): unsupported atomicity, then per-update errors
    w.election_id.low = 1
    w.atomicity = p4runtime_pb2.WriteRequest.DATAPLANE_ATOMIC
    with pytest.raises(grpc.RpcError) as e:
        stub.Write(w)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    w.atomicity = p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR
    del w.updates[:]
    bad = w.updates.add(type=p4runtime_pb2.Update.INSERT).entity.table_entry
    bad.table_id = ids["MyIngress.ipv4_lpm"]
    m = bad.match.add(field_id=1)
    m.lpm.value = bytes([10, 0, 2, 1])
    m.lpm.prefix_len = 24  # host bits set beyond the prefix
    bad.action.action.action_id = ids["MyIngress.drop"]
    w.updates.add(type=p4runtime_pb2.Update.MODIFY).entity.meter_entry.meter_id = 5
    with pytest.raises(grpc.RpcError) as e:
        stub.Write(w)
    assert e.value.code() == grpc.StatusCode.UNKNOWN
    from p4runtime_sh.p4runtime import P4RuntimeWriteException

    codes = [err.canonical_code for _, err in P4RuntimeWriteException(e.value).errors]
    assert codes == [grpc.StatusCode.INVALID_ARGUMENT.value[0], grpc.StatusCode.UNIMPLEMENTED.value[0]]
    # counter index out of range
    req = p4runtime_pb2.ReadRequest(device_id=0)
    ce = req.entities.add().counter_entry
    ce.counter_id = ids["MyIngress.parse_errors"]
    ce.index.index = 5
    with pytest.raises(grpc.RpcError) as e:
        list(stub.Read(req))
    assert e.value.code() == grpc.StatusCode.OUT_OF_RANGE
    # capabilities
    cap = stub.Capabilities(p4runtime_pb2.CapabilitiesRequest())
    assert cap.p4runtime_api_version.startswith("1.")


def test_set_pipeline_rejects_p4info_without_mltcp_objects(shell, stub):
    p4info = _load_p4info()
    keep = [t for t in p4info.tables if t.preamble.name != "MyEgress.ecn_threshold"]
    del p4info.tables[:]
    p4info.tables.extend(keep)
    del p4info.registers[:]
    req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=0, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY
    )
    req.election_id.low = 1
    req.config.p4info.CopyFrom(p4info)
    with pytest.raises(grpc.RpcError) as e:
        stub.SetForwardingPipelineConfig(req)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "MyEgress.ecn_threshold" in e.value.details()
    assert "MyIngress.job_bytes_ratio" in e.value.details()
    # the good P4Info verifies; the running config is still served
    req.config.p4info.CopyFrom(_load_p4info())
    stub.SetForwardingPipelineConfig(req)
    got = stub.GetForwardingPipelineConfig(
        p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=0, response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE
        )
    )
    assert {t.preamble.name for t in got.config.p4info.tables} >= {"MyIngress.ipv4_lpm", "MyEgress.ecn_threshold"}


def test_second_client_is_backup_and_cannot_write(shell, target):
    ch = grpc.insecure_channel(target[0])
    stub = p4runtime_pb2_grpc.P4RuntimeStub(ch)
    import queue

    outq: queue.Queue = queue.Queue()

    def reqs():
        while True:
            m = outq.get()
            if m is None:
                return
            yield m

    try:
        stream = stub.StreamChannel(reqs())
        m = p4runtime_pb2.StreamMessageRequest()
        m.arbitration.device_id = 0
        m.arbitration.election_id.low = 0  # below the shell's election id 1
        outq.put(m)
        rep = next(stream)
        assert rep.arbitration.status.code != 0  # backup
        assert rep.arbitration.election_id.low == 1  # the primary's id
        # a PacketOut on the stream is answered with a StreamError (no CPU port)
        pm = p4runtime_pb2.StreamMessageRequest()
        pm.packet.payload = b"\x00" * 20
        outq.put(pm)
        err = next(stream)
        assert err.HasField("error") and err.error.canonical_code == 12  # UNIMPLEMENTED
        w = p4runtime_pb2.WriteRequest(device_id=0)
        w.election_id.low = 0
        with pytest.raises(grpc.RpcError) as e:
            stub.Write(w)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        outq.put(None)
        ch.close()


def test_controlplane_library_drives_the_target(shell, target):
    """The project's control plane (mltcp.controlplane, on p4runtime-shell) against this target.
    Runs in a subprocess: p4runtime-shell keeps one client per process (the module's shell)."""
    pytest.importorskip("mltcp.controlplane.client")
    script = f"""
import json
from mltcp.controlplane.client import connect
from mltcp.controlplane.topology import Route
with connect({target[0]!r}, device_id=0) as sw:
    sw.push_pipeline()
    sw.install_routes([Route("10.0.2.0/24", 2, "00:00:00:00:02:02"),
                       Route("10.0.1.0/24", 1, "00:00:00:00:01:01")])
    sw.set_ecn_threshold(port=2, threshold=20)
    snap = sw.read_counters()
    print(json.dumps(dict(routes=len(sw.read_table("MyIngress.ipv4_lpm")),
                          ecn=len(sw.read_table("MyEgress.ecn_threshold")),
                          parse_errors=snap.parse_errors, jobs=len(snap.active_jobs()))))
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    import json

    got = json.loads(r.stdout.strip().splitlines()[-1])
    # the push reset the target: only what this client installed is there
    assert got == {"routes": 2, "ecn": 1, "parse_errors": 0, "jobs": 0}


# ------------------------------------------------------------------ the same control plane on BMv2
# simple_switch_grpc (p4c-compiled mltcp.p4) on two root-namespace veth pairs; `mltcp switch`
# pushes, installs from a topology file, sets ECN and reads counters and the register.

from mltcp import tools  # noqa: E402

_bm_why = tools.why_missing("p4c-bm2-ss", "simple_switch_grpc", "simple_switch_CLI")


@pytest.fixture(scope="module")
def bmv2_target(tmp_path_factory):
    """(grpc address, thrift address, BMv2 JSON, host side of port 1, of port 2)."""
    if _bm_why:
        print(f"BMv2 target skipped: {_bm_why}")
        pytest.skip(_bm_why)
    from mltcp.emulation import bmv2

    tmp = tmp_path_factory.mktemp("bmv2")
    js = tools.compile_v1model(ROOT / "p4src" / "mltcp.p4", tmp)
    pid = os.getpid() % 100000
    tb = Testbed("p4bm")
    proc = None
    try:
        sa, ha = tb.veth(f"b4s{pid}a", f"b4h{pid}a")
        sb, hb = tb.veth(f"b4s{pid}b", f"b4h{pid}b")
        proc, gport, tport = bmv2.start_in_netns(None, {1: sa, 2: sb}, log_path=tmp / "bmv2.log")
        yield f"127.0.0.1:{gport}", f"127.0.0.1:{tport}", js, ha, hb
    finally:
        if proc is not None:
            bmv2.stop(proc)
        tb.close()


def _mltcp(*args, timeout=120):
    r = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "switch", *args], capture_output=True, text=True, timeout=timeout
    )
    return r.returncode, r.stdout, r.stderr


def test_mltcp_switch_cli_programs_bmv2_and_reads_counters_and_register(bmv2_target, tmp_path):
    grpc_addr, thrift, js, h1, h2 = bmv2_target
    topo = tmp_path / "one.toml"
    topo.write_text(f"""[[switches]]
name = "bm"
grpc = "{grpc_addr}"
config = "{js}"
  [[switches.routes]]
  prefix = "10.0.2.0/24"
  port = 2
  mac = "00:00:00:00:02:02"
  [[switches.routes]]
  prefix = "10.0.1.0/24"
  port = 1
  mac = "00:00:00:00:01:01"
  [[switches.ecn]]
  port = 2
  threshold = 20
""")
    rc, out, err = _mltcp("install", str(topo), "--push", "--json")
    assert rc == 0, err
    assert json.loads(out)["switches"][0] == {
        "switch": "bm",
        "grpc": grpc_addr,
        "pushed": True,
        "routes": 2,
        "ecn_thresholds": 1,
    }
    rc, out, err = _mltcp("set-ecn", "--grpc", grpc_addr, "--port", "1", "--threshold", "7")
    assert rc == 0 and "ECN threshold 7" in out, err

    tx, rx = _raw(h1), _raw(h2)
    try:
        pkt = bytes(
            Ether(dst="00:00:00:00:00:01", src="00:00:00:00:01:01")
            / IP(src="10.0.1.1", dst="10.0.2.2")
            / UDP(sport=1234, dport=9199)
            / MLTCP(job_id=7, bytes_ratio=4321)
            / (b"z" * 200)
        )
        for _ in range(25):
            tx.send(pkt)
        got = [g for g in _recv_all(rx, 25) if Ether(g).haslayer(MLTCP)]
    finally:
        tx.close()
        rx.close()
    assert len(got) == 25
    assert Ether(got[0]).dst == "00:00:00:00:02:02" and Ether(got[0])[IP].ttl == 63

    rc, out, err = _mltcp("counters", "--grpc", grpc_addr, "--thrift", thrift, "--json")
    assert rc == 0, err
    (sw,) = json.loads(out)["switches"]
    (job,) = sw["jobs"]
    assert (job["job_id"], job["tx_packets"], job["tx_bytes"]) == (7, 25, 25 * len(pkt))
    assert job["bytes_ratio"] == pytest.approx(4321 / 0xFFFF, abs=1e-6)  # the register, over thrift
    assert sw["parse_errors"] == 0
    # PI reads no registers: without the thrift address the command says what to give
    rc, out, err = _mltcp("counters", "--grpc", grpc_addr)
    assert rc == 1 and "--thrift" in err
    rc, out, err = _mltcp("counters", "--grpc", grpc_addr, "--thrift", "nonsense")
    assert rc == 2 and "--thrift" in err


def test_controlplane_library_reads_bmv2_tables(bmv2_target):
    """Table reads from PI come back with minimal-width byte strings; the library reads them."""
    grpc_addr, thrift, js, _, _ = bmv2_target
    script = f"""
import json
from mltcp.controlplane.client import connect
from mltcp.controlplane.bmv2 import read_counters
from mltcp.controlplane.counters import bitstring_to_int
from mltcp.controlplane.topology import Route
with connect({grpc_addr!r}, device_id=0) as sw:
    sw.push_pipeline(config_path={str(js)!r})
    sw.install_routes([Route("10.0.2.0/24", 2, "00:00:00:00:02:02"),
                       Route("10.0.1.0/24", 1, "00:00:00:00:01:01")])
    sw.set_ecn_threshold(port=2, threshold=20)
    lpm = sw.read_table("MyIngress.ipv4_lpm")
    ecn = sw.read_table("MyEgress.ecn_threshold")
    ports = sorted(bitstring_to_int(p.value, 9) for t in lpm for p in t.action.action.params
                   if p.param_id == 2)
    widths = sorted(len(p.value) for t in lpm for p in t.action.action.params if p.param_id == 2)
    snap = read_counters(sw, {thrift!r})
    print(json.dumps(dict(routes=len(lpm), ecn=len(ecn), ports=ports, widths=widths,
                          k=bitstring_to_int(ecn[0].action.action.params[0].value, 19),
                          parse_errors=snap.parse_errors, jobs=len(snap.active_jobs()))))
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"routes": 2, "ecn": 1, "ports": [1, 2], "widths": [1, 1], "k": 20, "parse_errors": 0, "jobs": 0}
