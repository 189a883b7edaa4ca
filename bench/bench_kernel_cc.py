"""Kernel MLTCP overhead on loopback: iperf3 throughput per congestion control, and the cost of an
explicit iteration mark. Prints measured rates and ratios (needs root, iperf3, clang, bpftool).

    sudo .venv/bin/python bench/bench_kernel_cc.py [--seconds 3]
"""

import argparse
import json
import subprocess
import time

from mltcp.traffic.kernel import loader, maps


def iperf(cc: str, seconds: float, port: int) -> float:
    srv = subprocess.Popen(
        ["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        time.sleep(0.3)
        res = subprocess.run(
            ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-C", cc, "-t", str(seconds), "-J"],
            capture_output=True,
            text=True,
            check=True,
        )
        doc = json.loads(res.stdout)
        assert doc["end"]["sender_tcp_congestion"] == cc, doc["end"]["sender_tcp_congestion"]
        return doc["end"]["sum_sent"]["bits_per_second"]
    finally:
        srv.wait(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--port", type=int, default=5299)
    a = ap.parse_args()
    we_loaded = not set(maps.VARIANTS) <= set(loader.registered())
    if we_loaded:
        loader.load()
    try:
        rates = {cc: iperf(cc, a.seconds, a.port) for cc in ("reno", "mltcp_reno", "cubic", "mltcp_cubic")}
        for cc, r in rates.items():
            print(f"{cc:12s} {r / 1e9:6.2f} Gbit/s over loopback ({a.seconds:g} s iperf3)")
        print(f"mltcp_reno / reno   = {rates['mltcp_reno'] / rates['reno']:.3f}")
        print(f"mltcp_cubic / cubic = {rates['mltcp_cubic'] / rates['cubic']:.3f}")
        with maps.VariantMaps("mltcp_reno") as vm:
            n = 20000
            t = time.perf_counter()
            for _ in range(n):
                vm.mark(40000)
            per = (time.perf_counter() - t) / n
        t = time.perf_counter()
        maps.mark_iteration_start(40000)
        once = time.perf_counter() - t
        print(
            f"mark via open maps (bpf syscall): {per * 1e6:.1f} us; mark_iteration_start() (bpftool lookup): "
            f"{once * 1e3:.1f} ms"
        )
    finally:
        if we_loaded:
            loader.unload()


if __name__ == "__main__":
    main()
