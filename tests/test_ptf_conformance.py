"""Run the ptf conformance suite (tests/ptf/mltcp_conformance.py) against both targets of
mltcp.p4: the software switch ``mltcp-switch`` and BMv2 ``simple_switch_grpc`` (p4c-compiled
mltcp.p4, programmed over P4Runtime). Every ptf test runs on both: where they differ, one of
them is wrong.

Layout per target: one network namespace holds three veth pairs sv1-3 <-> pv1-3, the switch
(ports 1-3 on sv1-3; port 3 slow for the ECN test: mltcp-switch by its port config, BMv2 by
simple_switch_CLI set_queue_rate/set_queue_depth) and ptf (ports 1-3 on pv1-3). Everything is
removed afterwards, also on failure. p4c and BMv2 are found by mltcp.tools (MLTCP_P4TOOLS, the
checkout's .tools/p4tools, PATH); without them the BMv2 half skips with the reason printed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mltcp import tools
from mltcp.emulation.switch.runtime import spawn_switch, stop_switch
from mltcp.emulation.switch.testbed import Testbed, have_root_netns

ROOT = Path(__file__).resolve().parents[1]
PTF_DIR = ROOT / "tests" / "ptf"
P4INFO = ROOT / "p4src" / "mltcp.p4info.txtpb"
PTF = Path(sys.executable).with_name("ptf")
SLOW_PORT_CONFIG = "rate=100kbit,buffer=400"  # 200-byte frames: 16 ms each, a burst queues up
TARGETS = ("mltcp-switch", "bmv2")
PTF_TESTS = (
    "Forwarding",
    "TtlExpiry",
    "EcnOnset",
    "ProgressEcn",
    "ProgressContest",
    "JobCounters",
    "IpOptionProgress",
    "MalformedHeaders",
)

_why = have_root_netns()
if _why is None and not PTF.exists() and shutil.which("ptf") is None:
    _why = "ptf is not installed"
pytestmark = [pytest.mark.integration, pytest.mark.root, pytest.mark.skipif(_why is not None, reason=_why or "")]
if _why:
    print(f"test_ptf_conformance skipped: {_why}")


def _ptf_bin() -> str:
    return str(PTF) if PTF.exists() else shutil.which("ptf")


def _software(ns: str, tmp: Path):
    log = open(tmp / "switch.log", "w+")
    proc, port = spawn_switch(
        {1: "sv1", 2: "sv2", 3: "sv3"}, netns=ns, grpc_host="127.0.0.1", port_config={3: SLOW_PORT_CONFIG}, stderr=log
    )
    return proc, dict(grpcaddr=f"127.0.0.1:{port}", devcfg="", target="mltcp-switch")


def _bmv2(ns: str, tmp: Path):
    from mltcp.emulation.bmv2 import start_in_netns

    js = tools.compile_v1model(ROOT / "p4src" / "mltcp.p4", tmp / "build")
    proc, grpc_port, thrift_port = start_in_netns(
        ns, {1: "sv1", 2: "sv2", 3: "sv3"}, log_path=tmp / "simple_switch_grpc.log"
    )
    return proc, dict(
        grpcaddr=f"127.0.0.1:{grpc_port}",
        devcfg=str(js),
        target="bmv2",
        thrift_port=thrift_port,
        cli=tools.switch_cli(),
    )


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory):
    """(namespace, ptf test params) of one running target, on its own namespace and veths."""
    if not P4INFO.exists():
        pytest.skip(f"{P4INFO} not committed yet")
    name = request.param
    if name == "bmv2":
        why = tools.why_missing("p4c-bm2-ss", "simple_switch_grpc", "simple_switch_CLI")
        if why:
            print(f"test_ptf_conformance[bmv2] skipped: {why}")
            pytest.skip(why)
    tmp = tmp_path_factory.mktemp(name)
    tb = Testbed("pt" + ("b" if name == "bmv2" else "s"))
    proc = None
    try:
        ns = tb.netns("n")
        for i in (1, 2, 3):
            tb.veth(f"sv{i}", f"pv{i}", ns, ns)
        proc, p = (_bmv2 if name == "bmv2" else _software)(ns, tmp)
        yield ns, dict(p, p4info=str(P4INFO), slow_port=3)
    finally:
        if proc is not None:
            stop_switch(proc, 10)
        tb.close()


def run_ptf(ns: str, test: str, params: dict, tmp: Path, timeout: float = 240) -> str:
    tp = ";".join(f"{k}={v!r}" for k, v in params.items())
    cmd = [
        "ip",
        "netns",
        "exec",
        ns,
        _ptf_bin(),
        "--test-dir",
        str(PTF_DIR),
        "--interface",
        "1@pv1",
        "--interface",
        "2@pv2",
        "--interface",
        "3@pv3",
        "--log-file",
        str(tmp / f"ptf-{test}.log"),
        "--test-params",
        tp,
        f"mltcp_conformance.{test}",
    ]
    r = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    out = r.stdout + r.stderr
    print(out[-4000:])
    assert r.returncode == 0, f"ptf {test} on {params['target']} failed (rc {r.returncode}):\n{out[-3000:]}"
    return out


EXTRA = {
    "EcnOnset": dict(ecn_thresholds="5,10,20"),
    "JobCounters": dict(counter_packets=1000),
    "MalformedHeaders": dict(fuzz_count=400),
}


@pytest.mark.parametrize("test", PTF_TESTS)
def test_ptf(target, tmp_path, test):
    ns, p = target
    out = run_ptf(ns, test, dict(p, **EXTRA.get(test, {})), tmp_path)
    # each test prints what it measured: the run must have reached it
    if test == "EcnOnset":
        onsets = dict(re.findall(r"ECN-ONSET K=(\d+) first_marked_index=(\d+)", out))
        assert set(onsets) == {"5", "10", "20"}
    elif test == "JobCounters":
        assert "JOB-COUNTERS" in out
    elif test == "MalformedHeaders":
        assert "FUZZ sent 400" in out
    elif test == "ProgressEcn":
        assert len(re.findall(r"PROGRESS-ECN ratio=", out)) == 5 and len(re.findall(r"PROGRESS-ECN-OFF", out)) == 3
        assert "PROGRESS-ECN-NOMARK ratio=0x8000 band=8 marked=0/" in out
        assert re.search(r"PROGRESS-ECN-IPOPT behind first_marked_index=\d+ ahead marked=0/", out)
    elif test == "ProgressContest":
        assert re.search(r"PROGRESS-CONTEST alone expected_K=10 first_marked_index=\d+", out)
        assert re.search(r"PROGRESS-CONTEST after-job-9 expected_K=4 first_marked_index=\d+", out)
        assert re.search(r"PROGRESS-CONTEST expired expected_K=10 first_marked_index=\d+", out)
    elif test == "IpOptionProgress":
        assert "IPOPT job_tx[5]=(3, " in out
    elif test == "TtlExpiry":
        assert "TTL dropped 2" in out


def test_every_ptf_test_is_run():
    """The list above is the suite: a new class in tests/ptf must be added to it."""
    src = (PTF_DIR / "mltcp_conformance.py").read_text()
    classes = set(re.findall(r"^class (\w+)\(MltcpTest\)", src, re.M))
    assert classes == set(PTF_TESTS)
