#!/usr/bin/env python3
"""Throughput of the two targets of mltcp.p4 between two namespaces: the software switch
(mltcp-switch) and BMv2 simple_switch_grpc (p4c-compiled, fast/bin/ build unless --bmv2-debug).

Topology: h1 (netns) --veth-- [switch port 1 | switch port 2] --veth-- h2 (netns); the switch
runs as a subprocess in the root namespace, programmed over P4Runtime by mltcp.controlplane.
iperf3 measures UDP with 1500-byte IP packets (1514-byte frames) at a few offered loads and one
TCP flow, through each target in turn on the same veths. Prints received Mb/s and pps, the
switch's CPU time per packet and (both targets) the BMv2 / mltcp-switch ratio of one run.
Needs root.

    sudo .venv/bin/python bench/bench_switch.py [--target both|mltcp-switch|bmv2] [--seconds 5]
                                                [--loads 100,150,200,400] [--rate unlimited]

``--conformance`` instead runs the ptf conformance tests (tests/ptf) as measurements: ECN onset
for K = 5, 10, 20, 40 (queue depth at the first CE mark), per-job counters vs sent for
3 jobs x 10,000 packets, and N fuzzed/truncated packets vs parse_errors.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
P4INFO = ROOT / "p4src" / "mltcp.p4info.txtpb"


def mac_of(ns: str, ifname: str) -> str:
    out = subprocess.run(
        ["ip", "-n", ns, "-j", "link", "show", ifname], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out)[0]["address"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def iperf(tb, client_ns, server_ip, args: list[str], seconds: float) -> dict:
    r = tb.run(client_ns, "iperf3", "-c", server_ip, "-J", "-t", str(seconds), *args, timeout=seconds + 30)
    if r.returncode != 0:
        raise RuntimeError(f"iperf3 failed: {r.stdout[-800:]} {r.stderr[-400:]}")
    return json.loads(r.stdout)


def _start_target(target: str, s1: str, s2: str, rate: str, tmp: str, debug: bool):
    """(process, stop function) of a programmed switch on ports 1 = s1, 2 = s2."""
    if target == "bmv2":
        from mltcp.emulation import bmv2

        proc, gport, _ = bmv2.start_in_netns(None, {1: s1, 2: s2}, log_path=Path(tmp) / "bmv2.log", debug=debug)
        return proc, f"127.0.0.1:{gport}", lambda: bmv2.stop(proc)
    from mltcp.emulation.switch.runtime import spawn_switch, stop_switch

    log = open(Path(tmp) / "switch.log", "w+")
    proc, port = spawn_switch({1: s1, 2: s2}, grpc_host="127.0.0.1", rate=rate, stderr=log)
    return proc, f"127.0.0.1:{port}", lambda: stop_switch(proc, 10)


def _program(target: str, grpc_addr: str, routes: list) -> None:
    """mltcp.p4 and two routes, with the project's control plane (a child process)."""
    if target == "bmv2":
        from mltcp.emulation import bmv2

        bmv2.program(grpc_addr, 0, bmv2.compiled_program(), routes, [])
        return
    spec = json.dumps({"grpc": grpc_addr, "device_id": 0, "routes": routes, "ecn": []})
    subprocess.run(
        [sys.executable, "-m", "mltcp.emulation.softswitch", spec], check=True, capture_output=True, timeout=120
    )


def measure(target: str, a, tb, h1, h2, s1, e1, s2, e2) -> list[dict]:
    """The iperf3 runs through one target; one row per run."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, grpc_addr, stop = _start_target(target, s1, s2, a.rate, tmp, a.bmv2_debug)
        try:
            _program(target, grpc_addr, [["10.0.2.2/32", 2, mac_of(h2, e2)], ["10.0.1.1/32", 1, mac_of(h1, e1)]])
            srv = subprocess.Popen(
                ["ip", "netns", "exec", h2, "iperf3", "-s"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            time.sleep(0.5)
            try:
                r = tb.run(h1, "ping", "-c", "3", "-i", "0.2", "10.0.2.2")
                if r.returncode != 0:
                    raise RuntimeError(f"no ping through {target}: {r.stdout[-400:]}")
                for load in (float(x) for x in a.loads.split(",")):
                    c0 = cpu_seconds(proc.pid)
                    j = iperf(tb, h1, "10.0.2.2", ["-u", "-b", f"{load}M", "-l", "1472"], a.seconds)
                    cpu = cpu_seconds(proc.pid) - c0
                    s = j["end"]["sum"]
                    recv_bps = s["bits_per_second"] * (1 - s["lost_percent"] / 100)
                    rows.append(
                        dict(
                            target=target,
                            test=f"udp {load:g}M",
                            mbps=recv_bps / 1e6,
                            pps=(s["packets"] - s["lost_packets"]) / s["seconds"],
                            loss=f"{s['lost_percent']:.2f} %",
                            us_per_pkt=cpu / max(1, s["packets"]) * 1e6,
                        )
                    )
                if a.tcp:
                    c0 = cpu_seconds(proc.pid)
                    j = iperf(tb, h1, "10.0.2.2", ["-M", "1448"], a.seconds)
                    cpu = cpu_seconds(proc.pid) - c0
                    bps = j["end"]["sum_received"]["bits_per_second"]
                    pkts = bps / 8 / 1500 * a.seconds * 1.5  # data segments + about one ACK per two
                    rows.append(
                        dict(
                            target=target,
                            test="tcp 1 flow",
                            mbps=bps / 1e6,
                            pps=bps / 8 / 1500,
                            loss=f"retr {j['end']['sum_sent'].get('retransmits', 0)}",
                            us_per_pkt=cpu / pkts * 1e6,
                        )
                    )
            finally:
                srv.terminate()
                srv.wait(5)
        finally:
            stop()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", default="unlimited", help="mltcp-switch egress rate (default unlimited)")
    ap.add_argument("--loads", default="100,150,200", help="UDP offered loads in Mb/s")
    ap.add_argument("--tcp", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument(
        "--target",
        choices=("both", "mltcp-switch", "bmv2"),
        default="both",
        help="which switch(es) to measure; both: the same runs through each, one after the other, and their ratio",
    )
    ap.add_argument("--bmv2-debug", action="store_true", help="BMv2's bin/ build (logging) instead of fast/bin/")
    ap.add_argument("--conformance", action="store_true", help="run the ptf measurements instead")
    ap.add_argument("--ecn-thresholds", default="5,10,20,40")
    ap.add_argument("--counter-packets", type=int, default=10000)
    ap.add_argument("--fuzz-count", type=int, default=2000)
    a = ap.parse_args()
    if a.conformance:
        return conformance(a)

    from mltcp import tools
    from mltcp.emulation.switch.testbed import Testbed, have_root_netns

    why = have_root_netns()
    if why:
        print(f"bench_switch: skipped: {why}")
        return 0
    targets = ["mltcp-switch", "bmv2"] if a.target == "both" else [a.target]
    if "bmv2" in targets:
        why = tools.why_missing("p4c-bm2-ss", "simple_switch_grpc")
        if why:
            print(f"bench_switch: BMv2 skipped: {why}")
            targets.remove("bmv2")
        else:
            exe = tools.bmv2_switch(fast=not a.bmv2_debug)
            print(f"BMv2: {exe}")
    pid = os.getpid() % 100000
    with Testbed("bsw") as tb:
        h1, h2 = tb.netns("h1"), tb.netns("h2")
        s1, e1 = tb.veth(f"bs{pid}a", f"bh{pid}a")
        s2, e2 = tb.veth(f"bs{pid}b", f"bh{pid}b")
        subprocess.run(["ip", "link", "set", e1, "netns", h1], check=True)
        subprocess.run(["ip", "link", "set", e2, "netns", h2], check=True)
        for ns, dev, ip, peer_net, peer_ip in (
            (h1, e1, "10.0.1.1/24", "10.0.2.0/24", "10.0.2.2"),
            (h2, e2, "10.0.2.2/24", "10.0.1.0/24", "10.0.1.1"),
        ):
            tb.run(ns, "ethtool", "-K", dev, "tx", "off", "tso", "off", "gso", "off", "gro", "off")
            for cmd in (
                ["addr", "add", ip, "dev", dev],
                ["link", "set", dev, "up"],
                ["route", "add", peer_net, "dev", dev],
                ["neigh", "add", peer_ip, "lladdr", "02:00:00:00:00:fe", "dev", dev],
            ):
                subprocess.run(["ip", "-n", ns] + cmd, check=True)
        print(
            f"mltcp-switch rate {a.rate}; {os.cpu_count()} cores; {a.seconds:g} s per run; "
            f"load average before: {os.getloadavg()[0]:.2f}"
        )
        rows = []
        for t in targets:
            rows += measure(t, a, tb, h1, h2, s1, e1, s2, e2)
        print(f"{'target':<14}{'test':<14}{'recv Mb/s':>11}{'recv pps':>10}{'loss':>13}{'switch us/pkt':>15}")
        for r in rows:
            print(
                f"{r['target']:<14}{r['test']:<14}{r['mbps']:>11.1f}{r['pps']:>10.0f}{r['loss']:>13}"
                f"{r['us_per_pkt']:>15.1f}"
            )
        if len(targets) == 2:
            print("BMv2 / mltcp-switch received Mb/s, same run:")
            by = {(r["target"], r["test"]): r for r in rows}
            for test in dict.fromkeys(r["test"] for r in rows):
                a_, b_ = by.get(("mltcp-switch", test)), by.get(("bmv2", test))
                if a_ and b_ and a_["mbps"] > 0:
                    print(f"  {test:<14}{b_['mbps'] / a_['mbps']:>6.2f}x")
        print(f"(load average after: {os.getloadavg()[0]:.2f})")
    return 0


def conformance(a) -> int:
    """Run tests/ptf/mltcp_conformance.py against the software switch and print its measurements."""
    import re

    from mltcp.emulation.switch.runtime import spawn_switch, stop_switch
    from mltcp.emulation.switch.testbed import Testbed, have_root_netns

    why = have_root_netns()
    if why:
        print(f"bench_switch --conformance: skipped: {why}")
        return 0
    ptf = str(Path(sys.executable).with_name("ptf"))
    rc = 0
    with Testbed("bcf") as tb, tempfile.TemporaryDirectory() as tmp:
        ns = tb.netns("n")
        for i in (1, 2, 3):
            tb.veth(f"sv{i}", f"pv{i}", ns, ns)
        log = open(Path(tmp) / "switch.log", "w+")
        proc, port = spawn_switch(
            {1: "sv1", 2: "sv2", 3: "sv3"},
            netns=ns,
            grpc_host="127.0.0.1",
            port_config={3: "rate=100kbit,buffer=400"},
            stderr=log,
        )
        try:
            params = dict(
                grpcaddr=f"127.0.0.1:{port}",
                p4info=str(P4INFO),
                devcfg="",
                slow_port=3,
                ecn_thresholds=a.ecn_thresholds,
                counter_packets=a.counter_packets,
                fuzz_count=a.fuzz_count,
            )
            tp = ";".join(f"{k}={v!r}" for k, v in params.items())
            for test in ("EcnOnset", "JobCounters", "MalformedHeaders"):
                r = subprocess.run(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        ptf,
                        "--test-dir",
                        str(ROOT / "tests" / "ptf"),
                        "--interface",
                        "1@pv1",
                        "--interface",
                        "2@pv2",
                        "--interface",
                        "3@pv3",
                        "--log-file",
                        str(Path(tmp) / "ptf.log"),
                        "--test-params",
                        tp,
                        f"mltcp_conformance.{test}",
                    ],
                    capture_output=True,
                    text=True,
                    env=dict(os.environ, PYTHONPATH=str(ROOT)),
                    timeout=600,
                )
                lines = [ln for ln in r.stdout.splitlines() if re.match(r"(ECN-ONSET|JOB-COUNTERS|FUZZ)", ln)]
                print(f"{test}: {'PASS' if r.returncode == 0 else 'FAIL'}")
                for ln in lines:
                    print("  " + ln)
                if r.returncode != 0:
                    rc = 1
                    print((r.stdout + r.stderr)[-2000:])
        finally:
            stop_switch(proc, 10)
    return rc


if __name__ == "__main__":
    sys.exit(main())
