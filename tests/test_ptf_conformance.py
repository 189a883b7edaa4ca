"""Run the ptf conformance tests (tests/ptf/) against the software target, and against BMv2 when
simple_switch_grpc and p4c are on PATH (skipped here with the reason printed).

Layout: one network namespace holds three veth pairs sv1-3 <-> pv1-3, the switch (ports 1-3 on
sv1-3; port 3 shaped slow for the ECN test) and ptf (ports 1-3 on pv1-3). Everything is removed
afterwards, also on failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mltcp.emulation.switch.runtime import free_tcp_port, spawn_switch, stop_switch
from mltcp.emulation.switch.testbed import Testbed, have_root_netns

ROOT = Path(__file__).resolve().parents[1]
PTF_DIR = ROOT / "tests" / "ptf"
P4INFO = ROOT / "p4src" / "mltcp.p4info.txtpb"
PTF = Path(sys.executable).with_name("ptf")
SLOW_PORT_CONFIG = "rate=100kbit,buffer=400"  # 200-byte frames: 16 ms each, a burst queues up

_why = have_root_netns()
if _why is None and not PTF.exists() and shutil.which("ptf") is None:
    _why = "ptf is not installed"
pytestmark = [pytest.mark.integration, pytest.mark.root,
              pytest.mark.skipif(_why is not None, reason=_why or "")]
if _why:
    print(f"test_ptf_conformance skipped: {_why}")


def _ptf_bin() -> str:
    return str(PTF) if PTF.exists() else shutil.which("ptf")


@pytest.fixture(scope="module")
def bed():
    if not P4INFO.exists():
        pytest.skip(f"{P4INFO} not committed yet")
    tb = Testbed("ptf")
    try:
        ns = tb.netns("n")
        for i in (1, 2, 3):
            tb.veth(f"sv{i}", f"pv{i}", ns, ns)
        yield tb, ns
    finally:
        tb.close()


@pytest.fixture(scope="module")
def software_target(bed, tmp_path_factory):
    tb, ns = bed
    log = open(tmp_path_factory.mktemp("sw") / "switch.log", "w+")
    proc, port = spawn_switch({1: "sv1", 2: "sv2", 3: "sv3"}, netns=ns, grpc_host="127.0.0.1",
                              port_config={3: SLOW_PORT_CONFIG}, stderr=log)
    try:
        yield ns, f"127.0.0.1:{port}", log
    finally:
        stop_switch(proc, 10)


def run_ptf(ns: str, test: str, params: dict, tmp: Path, timeout: float = 240) -> str:
    tp = ";".join(f"{k}={v!r}" for k, v in params.items())
    cmd = ["ip", "netns", "exec", ns, _ptf_bin(), "--test-dir", str(PTF_DIR),
           "--interface", "1@pv1", "--interface", "2@pv2", "--interface", "3@pv3",
           "--log-file", str(tmp / f"ptf-{test}.log"), "--test-params", tp, f"mltcp_conformance.{test}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    out = r.stdout + r.stderr
    print(out[-4000:])
    assert r.returncode == 0, f"ptf {test} failed (rc {r.returncode}):\n{out[-3000:]}"
    return out


def _params(addr: str, **kw) -> dict:
    p = dict(grpcaddr=addr, p4info=str(P4INFO), devcfg="", target="mltcp-switch", slow_port=3)
    p.update(kw)
    return p


@pytest.mark.parametrize("test", ["Forwarding", "MalformedHeaders"])
def test_ptf_software_target(software_target, tmp_path, test):
    ns, addr, _ = software_target
    run_ptf(ns, test, _params(addr, fuzz_count=400), tmp_path)


def test_ptf_ecn_onset(software_target, tmp_path):
    ns, addr, _ = software_target
    out = run_ptf(ns, "EcnOnset", _params(addr, ecn_thresholds="5,10,20"), tmp_path)
    onsets = dict(re.findall(r"ECN-ONSET K=(\d+) first_marked_index=(\d+)", out))
    assert set(onsets) == {"5", "10", "20"}


def test_ptf_job_counters(software_target, tmp_path):
    ns, addr, _ = software_target
    out = run_ptf(ns, "JobCounters", _params(addr, counter_packets=2000), tmp_path)
    assert "JOB-COUNTERS" in out


def test_ptf_bmv2(tmp_path):
    """Same ptf tests against BMv2 simple_switch_grpc (the Vagrant VM has it)."""
    missing = [b for b in ("simple_switch_grpc", "p4c", "simple_switch_CLI") if shutil.which(b) is None]
    if missing:
        print(f"test_ptf_bmv2 skipped: {', '.join(missing)} not on PATH (BMv2/p4c are not "
              "installable here; run this in the VM)")
        pytest.skip(f"{', '.join(missing)} not on PATH")
    build = tmp_path / "build"
    build.mkdir()
    subprocess.run(["p4c", "--target", "bmv2", "--arch", "v1model", "-o", str(build),
                    str(ROOT / "p4src" / "mltcp.p4")], check=True)
    json_path = build / "mltcp.json"
    grpc_port, thrift_port = free_tcp_port(), free_tcp_port()
    tb = Testbed("bm")  # its own namespace: the software switch holds the module's veths
    sw = None
    try:
        ns = tb.netns("n")
        for i in (1, 2, 3):
            tb.veth(f"sv{i}", f"pv{i}", ns, ns)
        sw = subprocess.Popen(["ip", "netns", "exec", ns, "simple_switch_grpc", "--device-id", "0",
                               "-i", "1@sv1", "-i", "2@sv2", "-i", "3@sv3", "--thrift-port",
                               str(thrift_port), "--no-p4", "--",
                               "--grpc-server-addr", f"127.0.0.1:{grpc_port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2)
        for test in ("Forwarding", "EcnOnset", "JobCounters", "MalformedHeaders"):
            run_ptf(ns, test, _params(f"127.0.0.1:{grpc_port}", devcfg=str(json_path), target="bmv2",
                                      thrift_port=thrift_port, counter_packets=2000), tmp_path)
    finally:
        if sw is not None:
            sw.terminate()
            try:
                sw.wait(10)
            except subprocess.TimeoutExpired:
                sw.kill()
        tb.close()
