"""`mltcp switch` CLI end to end against the software switch, with real packets.

Two hosts in namespaces, mltcp-switch on the veth ends in the root namespace, the CLI pushes
the pipeline and installs a topology file, scapy sends MLTCP packets (some malformed), and
`counters --json` must report exactly what was sent. Needs root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from typer.testing import CliRunner

from mltcp.controlplane.cli import app

pytestmark = [pytest.mark.integration, pytest.mark.root]

PY = sys.executable


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.fixture
def testbed(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces and veth ports")
    try:
        from mltcp.emulation.switch.runtime import spawn_switch, stop_switch
    except ImportError as e:
        pytest.skip(f"software switch not available: {e}")
    tag = f"cpt{os.getpid() % 100000}"
    ns = {1: f"{tag}a", 2: f"{tag}b"}
    sw_if = {1: f"{tag}s1", 2: f"{tag}s2"}
    host_if = {1: f"{tag}h1", 2: f"{tag}h2"}
    proc = None
    state: dict = {}
    try:
        for p in (1, 2):
            _run("ip", "netns", "add", ns[p])
            _run("ip", "link", "add", sw_if[p], "type", "veth", "peer", "name", host_if[p])
            _run("ip", "link", "set", host_if[p], "netns", ns[p])
            _run("ip", "link", "set", sw_if[p], "up")
            _run("ip", "-n", ns[p], "link", "set", host_if[p], "address", f"02:00:00:00:77:0{p}")
            _run("ip", "-n", ns[p], "addr", "add", f"10.77.0.{p}/24", "dev", host_if[p])
            _run("ip", "-n", ns[p], "link", "set", host_if[p], "up")
        proc, port = spawn_switch(
            {1: sw_if[1], 2: sw_if[2]}, grpc_host="127.0.0.1", log_level="warning", stderr=subprocess.DEVNULL
        )
        topo = tmp_path / "topo.toml"
        topo.write_text(
            textwrap.dedent(f"""
            [[switches]]
            name = "sw"
            grpc = "127.0.0.1:{port}"
              [[switches.routes]]
              prefix = "10.77.0.1/32"
              port = 1
              mac = "02:00:00:00:77:01"
              [[switches.routes]]
              prefix = "10.77.0.2/32"
              port = 2
              mac = "02:00:00:00:77:02"
              [[switches.ecn]]
              port = 2
              threshold = 0
        """)
        )
        state["proc"] = proc

        def crash_and_restart() -> None:
            """kill -9 the switch, start a fresh one on the same port and interfaces."""
            state["proc"].kill()
            state["proc"].wait()
            state["proc"], _ = spawn_switch(
                {1: sw_if[1], 2: sw_if[2]},
                grpc_port=port,
                grpc_host="127.0.0.1",
                log_level="warning",
                stderr=subprocess.DEVNULL,
            )

        yield {
            "ns": ns,
            "host_if": host_if,
            "addr": f"127.0.0.1:{port}",
            "topo": topo,
            "crash_and_restart": crash_and_restart,
        }
    finally:
        if state.get("proc") is not None:
            stop_switch(state["proc"], 5)
        elif proc is not None:
            stop_switch(proc, 5)
        for p in (1, 2):
            subprocess.run(["ip", "netns", "del", ns[p]], capture_output=True)
            subprocess.run(["ip", "link", "del", sw_if[p]], capture_output=True)


SENDER = """
import sys
from scapy.all import Ether, IP, UDP, sendp
from mltcp.traffic.header import MLTCP, ratio_to_q16
iface = sys.argv[1]
base = Ether(src="02:00:00:00:77:01", dst="02:00:00:00:77:fe") / IP(src="10.77.0.1",
                                                                   dst="10.77.0.2", tos=1)
good = base / UDP(sport=5000, dport=9199) / MLTCP(job_id=5, iteration=2,
                                                  bytes_ratio=ratio_to_q16(0.75)) / (b"x" * 100)
sendp([good] * 20, iface=iface, verbose=0)
sendp(base / UDP(sport=9199, dport=5000) / MLTCP(job_id=6, bytes_ratio=ratio_to_q16(0.25)),
      iface=iface, verbose=0)
sendp(base / UDP(sport=5000, dport=9199) / MLTCP(version=3, job_id=5), iface=iface, verbose=0)
trunc = bytes(base / UDP(sport=5000, dport=9199) / MLTCP(job_id=5))[:14 + 20 + 8 + 5]
sendp(Ether(trunc), iface=iface, verbose=0)
"""


def test_cli_against_software_switch(testbed):
    runner = CliRunner()
    res = runner.invoke(app, ["install", str(testbed["topo"]), "--push", "--json", "--timeout", "20"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["switches"][0]["routes"] == 2
    res = runner.invoke(app, ["set-ecn", "--grpc", testbed["addr"], "--port", "1", "--threshold", "5"])
    assert res.exit_code == 0, res.output

    subprocess.run(
        ["ip", "netns", "exec", testbed["ns"][1], PY, "-c", SENDER, testbed["host_if"][1]],
        check=True,
        capture_output=True,
        timeout=60,
    )

    want = {5: (20, 20 * (14 + 20 + 8 + 12 + 100), 20, 49151), 6: (1, 14 + 20 + 8 + 12, 1, 16384)}
    deadline = time.monotonic() + 20  # the switch forwards asynchronously
    while True:
        res = runner.invoke(app, ["counters", "--grpc", testbed["addr"], "--json"])
        assert res.exit_code == 0, res.output
        sw = json.loads(res.output)["switches"][0]
        got = {j["job_id"]: (j["tx_packets"], j["tx_bytes"], j["ecn_marks"], j["bytes_ratio_q16"]) for j in sw["jobs"]}
        if (got == want and sw["parse_errors"] == 2) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    # ECN threshold 0 on port 2: every ECT(1) packet towards h2 is marked
    assert got == want
    assert sw["parse_errors"] == 2  # bad version + truncated shim, both dropped


def test_held_connection_restores_routes_after_kill_9(testbed):
    """Issue 12: after kill -9 and a restart, the held connection re-pushed the pipeline,
    reported success, and the table was empty. Now the routes and thresholds come back and
    packets are forwarded again."""
    from mltcp.controlplane.client import connect
    from mltcp.controlplane.topology import Route

    with connect(testbed["addr"], timeout=20, retry_timeout=30) as sw:
        sw.push_pipeline()
        sw.install_routes(
            [Route("10.77.0.1/32", 1, "02:00:00:00:77:01"), Route("10.77.0.2/32", 2, "02:00:00:00:77:02")]
        )
        sw.set_ecn_threshold(2, 0)
        testbed["crash_and_restart"]()
        before = sw.read_counters()  # reconnects, re-pushes, replays
        assert sw.reconnects >= 1 and before.jobs[5].tx_packets == 0
        assert sw.verify() == []
        assert len(sw.read_table("MyIngress.ipv4_lpm")) == 2
        subprocess.run(
            ["ip", "netns", "exec", testbed["ns"][1], PY, "-c", SENDER, testbed["host_if"][1]],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 20
        while True:
            snap = sw.read_counters()
            if snap.jobs[5].ecn_marks == 20 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        # forwarded towards h2 (port 2) and marked there: the restored routes and threshold
        assert snap.jobs[5].tx_packets == 20 and snap.jobs[5].ecn_marks == 20
