"""Kernel MLTCP overhead on loopback: iperf3 throughput per congestion control, and the cost of an
explicit iteration mark. Prints measured rates and ratios (needs root, iperf3, clang, bpftool).

    sudo .venv/bin/python bench/bench_kernel_cc.py [--seconds 3]
"""

import argparse
import json
import subprocess
import time

from mltcp.traffic.kernel import bpfsys, loader, maps


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


def _per_call_s(fn, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def mark_costs(port: int = 40000, n: int = 2000) -> None:
    """What one iteration mark costs: the map syscalls alone, and a mark that revalidates the
    cached maps (as every mark_iteration_start does once per REVALIDATE_S), against a walk over
    every map in the system (how revalidation used to look for a reload)."""
    maps.mark_iteration_start(port, ["mltcp_reno"])  # opens and caches the maps
    vm = maps._cached("mltcp_reno")
    plain = _per_call_s(lambda: vm.mark(port), n)

    def revalidating_mark():
        maps._open_maps["mltcp_reno"] = (vm, float("-inf"))  # the interval has passed
        maps.mark_iteration_start(port, ["mltcp_reno"])

    revalidating = _per_call_s(revalidating_mark, n // 10)
    walk = _per_call_s(lambda: maps.find_maps("mltcp_reno"), n // 10)
    print(f"mark via open maps (2 bpf syscalls): {plain * 1e6:.1f} us")
    print(f"mark that revalidates the cache (maps newer than ours walked): {revalidating * 1e6:.1f} us")
    print(f"walk over all {len(bpfsys.map_ids())} maps in the system: {walk * 1e6:.1f} us")
    print(f"revalidating mark / full walk = {revalidating / walk:.3f}")


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
        mark_costs()
    finally:
        if we_loaded:
            loader.unload()


if __name__ == "__main__":
    main()
