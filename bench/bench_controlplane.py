"""Control-plane timings against the project's software switch (mltcp-switch) on loopback gRPC.

Measures: connect + pipeline push, route installation rate (one P4Runtime Write per entry,
insert-or-modify as `mltcp switch install` does), a full counter read (job_tx, job_ecn_marks,
parse_errors, job_bytes_ratio: 3 x 1024 + 1 entries), and the time until an operation
succeeds again after the switch process is restarted (includes the switch's own start-up).

Needs root (veth ports for the switch). Usage:
    sudo .venv/bin/python bench/bench_controlplane.py [--routes 500] [--reads 20]
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import statistics
import subprocess
import sys
import time

from mltcp.controlplane.client import connect
from mltcp.controlplane.topology import Route


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routes", type=int, default=500)
    ap.add_argument("--reads", type=int, default=20)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_controlplane: needs root for the switch's veth ports; skipped")
        return 0
    from mltcp.emulation.switch.runtime import spawn_switch

    tag = f"cpb{os.getpid()}"
    veths = [(f"{tag}a{i}", f"{tag}b{i}") for i in (1, 2)]
    procs = []
    try:
        for a, b in veths:
            sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            sh("ip", "link", "set", a, "up")
            sh("ip", "link", "set", b, "up")
        ifaces = {1: veths[0][0], 2: veths[1][0]}
        proc, port = spawn_switch(ifaces, grpc_host="127.0.0.1", log_level="warning", stderr=subprocess.DEVNULL)
        procs.append(proc)
        addr = f"127.0.0.1:{port}"

        t0 = time.perf_counter()
        conn = connect(addr, timeout=15, retry_timeout=60)
        t1 = time.perf_counter()
        conn.push_pipeline()
        t2 = time.perf_counter()
        print(
            f"connect (arbitration): {1e3 * (t1 - t0):.1f} ms; pipeline push + P4Info "
            f"read-back: {1e3 * (t2 - t1):.1f} ms"
        )

        base = int(ipaddress.IPv4Address("10.128.0.0"))
        routes = [
            Route(f"{ipaddress.IPv4Address(base + i)}/32", 1 + i % 2, "00:00:00:00:00:01") for i in range(args.routes)
        ]
        t0 = time.perf_counter()
        conn.install_routes(routes)
        dt = time.perf_counter() - t0
        print(f"install {len(routes)} routes: {dt:.2f} s = {len(routes) / dt:.0f} entries/s")
        t0 = time.perf_counter()
        conn.install_routes(routes[:100])  # already there: INSERT fails, MODIFY follows
        dt = time.perf_counter() - t0
        print(f"re-install 100 existing routes (insert -> modify): {100 / dt:.0f} entries/s")

        times = []
        for _ in range(args.reads):
            t0 = time.perf_counter()
            conn.read_counters()
            times.append(time.perf_counter() - t0)
        print(
            f"full counter read (3x1024 counter + 1024 register entries): median "
            f"{1e3 * statistics.median(times):.1f} ms, max {1e3 * max(times):.1f} ms "
            f"over {args.reads}"
        )

        proc.terminate()
        proc.wait(10)
        t0 = time.perf_counter()
        proc2, _ = spawn_switch(
            ifaces, grpc_port=port, grpc_host="127.0.0.1", log_level="warning", stderr=subprocess.DEVNULL
        )
        procs.append(proc2)
        t_up = time.perf_counter() - t0
        conn.read_counters()  # reconnects, re-pushes, reads
        t_ok = time.perf_counter() - t0
        print(
            f"after restart: switch serving gRPC after {t_up:.2f} s; read_counters "
            f"succeeded {t_ok:.2f} s after the restart began ({conn.reconnects} reconnect)"
        )
        conn.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
        for a, _ in veths:
            subprocess.run(["ip", "link", "del", a], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
