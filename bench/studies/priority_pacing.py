"""Do a port's strict-priority queues share its line rate? BMv2 (simple_switch_grpc
--priority-queues 8) against mltcp-switch, both running mltcp.p4 with priority-by-progress entries.

Issue #15's DCQCN result needs strict priority at one shared port rate: the band ahead is served
first and the band behind waits. This sends N band-0 frames and then N band-15 frames into port 1
as fast as a raw socket can, with the slow egress port 3 limited to RATE packets/s, captures what
leaves port 3 and prints, per target: the aggregate departure rate against RATE, and where the
band-15 frames left (all before the waiting band-0 frames = strict priority).

    sudo .venv/bin/python bench/studies/priority_pacing.py [--frames 60] [--pps 200] [--targets bmv2,mltcp-switch]

Root (veths in the root namespace, removed afterwards), p4c and BMv2 for the bmv2 target.
Prints what it measured; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ETH_P_ALL = 0x0003
DST_MAC = "00:00:00:00:03:03"


def frames(n: int) -> list[bytes]:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from mltcp.traffic.header import MLTCP

    out = []
    for band, job in ((0x0000, 1), (0xF000, 2)):
        for i in range(n):
            p = (
                Ether(dst="00:00:00:00:00:fe", src="00:00:00:00:01:01")
                / IP(src="10.0.1.1", dst="10.0.3.3")
                / UDP(sport=40000 + i, dport=9199)
                / MLTCP(job_id=job, bytes_ratio=band, iteration=1)
            )
            out.append(bytes(p / (b"\xab" * max(0, 200 - len(p)))))
    return out


def capture(ifname: str, until: float, got: list) -> None:
    """(arrival time, MLTCP job id) of every shim frame leaving on ``ifname`` until ``until``."""
    from mltcp.emulation.switch.pipeline import ParseError, parse

    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((ifname, 0))
    s.settimeout(0.2)
    try:
        while time.monotonic() < until:
            try:
                data, addr = s.recvfrom(2048)
            except socket.timeout:
                continue
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            try:
                job = parse(data).job_id
            except ParseError:
                continue
            if job >= 0:
                got.append((time.monotonic(), job))
    finally:
        s.close()


def run_target(target: str, n: int, pps: int, tmp: Path) -> dict:
    from mltcp.emulation.softswitch import policy_spec
    from mltcp.emulation.switch.testbed import Testbed
    from mltcp.progress_policy import from_table

    pol = from_table("priority-by-progress", {"bands": 8, "priority_ecn": "link"})
    progress = {"policy": policy_spec(pol), "ports": [[3, None]]}
    routes = [["10.0.3.0/24", 3, DST_MAC]]
    tb = Testbed("pq")
    proc = None
    try:
        sv1, pv1 = tb.veth(f"{tb.tag}a", f"{tb.tag}b")
        sv3, pv3 = tb.veth(f"{tb.tag}c", f"{tb.tag}d")
        if target == "bmv2":
            from mltcp.emulation import bmv2
            from mltcp import tools

            exe = Path(tools.bmv2_switch(fast=True))
            if b"QueueingLogicPriRL" not in exe.read_bytes():
                return {
                    "target": target,
                    "error": f"{exe} has no priority queues: it was built without "
                    "priority queueing (no QueueingLogicPriRL in the binary, no --priority-queues "
                    "target option), so standard_metadata.priority selects nothing",
                }
            js = bmv2.compiled_program(tmp / "build")
            proc, grpc_port, thrift = bmv2.start_in_netns(
                None, {1: sv1, 3: sv3}, log_path=tmp / "bmv2.log", target_args=("--priority-queues", "8")
            )
            bmv2.program(f"127.0.0.1:{grpc_port}", 0, js, routes, [], progress=progress)
            cli = f"set_queue_rate {pps} 3\nset_queue_depth {4 * n} 3\n"
            subprocess.run(
                [tools.switch_cli(), "--thrift-port", str(thrift)],
                input=cli,
                text=True,
                check=True,
                capture_output=True,
            )
        else:
            from mltcp.emulation.softswitch import program_switch
            from mltcp.emulation.switch.runtime import spawn_switch

            rate_bps = pps * 200 * 8
            log = open(tmp / "switch.log", "w+")
            proc, grpc_port = spawn_switch(
                {1: sv1, 3: sv3}, port_config={3: f"rate={rate_bps}bit,buffer={4 * n}"}, stderr=log
            )
            program_switch(
                {"grpc": f"127.0.0.1:{grpc_port}", "device_id": 0, "routes": routes, "ecn": [], "progress": progress}
            )
        got: list = []
        span = 2 * n / pps + 3.0
        th = threading.Thread(target=capture, args=(pv3, time.monotonic() + span, got))
        th.start()
        time.sleep(0.3)
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((pv1, 0))
        t0 = time.monotonic()
        for f in frames(n):
            s.send(f)
        sent_s = time.monotonic() - t0
        s.close()
        th.join()
    finally:
        if proc is not None:
            if target == "bmv2":
                from mltcp.emulation import bmv2

                bmv2.stop(proc, 5)
            else:
                from mltcp.emulation.switch.runtime import stop_switch

                stop_switch(proc, 10)
        tb.close()
    jobs = [j for _, j in got]
    times = [t for t, _ in got]
    dur = times[-1] - times[0] if len(times) > 1 else 0.0
    last_hi = max((i for i, j in enumerate(jobs) if j == 2), default=-1)
    lo_before = sum(1 for j in jobs[: last_hi + 1] if j == 1)
    hi_t = [t for t, j in got if j == 2]
    hi_rate = (len(hi_t) - 1) / (hi_t[-1] - hi_t[0]) if len(hi_t) > 1 else 0.0
    return {
        "target": target,
        "sent": 2 * n,
        "send_s": round(sent_s, 4),
        "received": len(got),
        "band0": jobs.count(1),
        "band15": jobs.count(2),
        "port_pps": pps,
        "aggregate_pps": round((len(got) - 1) / dur, 1) if dur > 0 else None,
        "band15_pps": round(hi_rate, 1),
        "band0_frames_before_last_band15": lo_before,
        "order": "".join("L" if j == 1 else "H" for j in jobs),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=60, help="frames per band (default 60)")
    ap.add_argument("--pps", type=int, default=200, help="port 3's rate, packets/s (default 200)")
    ap.add_argument("--targets", default="bmv2,mltcp-switch")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("priority_pacing.py: needs root (veths)", file=sys.stderr)
        return 2
    out = []
    with tempfile.TemporaryDirectory(prefix="mltcp-pq-") as d:
        for t in a.targets.split(","):
            r = run_target(t, a.frames, a.pps, Path(d))
            out.append(r)
            if "error" in r and not a.json:
                print(f"{t:13s} not measured: {r['error']}", flush=True)
            elif not a.json:
                print(
                    f"{t:13s} port {a.pps} pps: received {r['received']}/{r['sent']}, aggregate "
                    f"{r['aggregate_pps']} pps ({(r['aggregate_pps'] or 0) / a.pps:.2f}x the port), band 15 at "
                    f"{r['band15_pps']} pps, band-0 frames out before the last band-15 one: "
                    f"{r['band0_frames_before_last_band15']}",
                    flush=True,
                )
                print(f"{'':13s} order: {r['order']}", flush=True)
    if a.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
