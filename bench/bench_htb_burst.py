"""What htb's burst does to a flow that pauses inside its iterations: one kernel mltcp_reno flow
through the emulation's htb + bfifo bottleneck, marked iterations of several sends with gaps
between them (DDP's buckets), and the rate each iteration reached over its busy time (the socket's
bytes over first-to-last ACK less its idle gaps, what the online switch judges). Prints, per htb
burst and gap, the lowest and highest iteration rate (needs root, clang, bpftool, Mininet).

    sudo .venv/bin/python bench/bench_htb_burst.py [--rate-mbit 700] [--busy-loops 2]
"""

import argparse
import multiprocessing
import time

from mltcp.emulation.topologies import default_burst_bytes
from mltcp.traffic.kernel import loader, maps
from mltcp.traffic.kernel.net import KernelNet
from mltcp.traffic.kernel.transport import KernelTransport, Receiver

ITERATIONS, SENDS, SEND_BYTES = 6, 8, 1_000_000


def iteration_rates(d: KernelNet, gap_s: float) -> list[float]:
    """Mbit/s over busy time of each completed iteration of one fresh connection."""
    b = d.receivers[0]
    rx = Receiver("0.0.0.0", 0, ns=d.ns(b))
    tr, rates = None, []
    try:
        with maps.VariantMaps("mltcp_reno") as vm:
            vm.write_config(maps.Config(min_idle=100.0))  # only the marks start iterations
            tr = KernelTransport(d.ip(b), rx.port, cc="mltcp_reno", ns=d.ns(d.senders[0]))
            for i in range(ITERATIONS):
                maps.mark_iteration_start(tr.local_port)
                for k in range(SENDS):
                    if k and gap_s:
                        time.sleep(gap_s)
                    tr.send_iteration(SEND_BYTES, SENDS * i + k)
                time.sleep(0.05)
                s = vm.socket_state(tr.sock)
                if i and s.last_comm_us:
                    rates.append(s.hist[0] * 8 / s.last_comm_us)
    finally:
        if tr:
            tr.close()
        rx.close()
    return rates


def _spin() -> None:
    while True:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate-mbit", type=float, default=700.0)
    ap.add_argument("--buffer-bytes", type=int, default=250_000)
    ap.add_argument("--bursts-ms", default="0.5,1,2,4", help="htb bursts to try, ms of the rate")
    ap.add_argument("--gaps-ms", default="0,15", help="pauses between an iteration's sends")
    ap.add_argument("--busy-loops", type=int, default=0, help="processes spinning beside the run (CPU load)")
    a = ap.parse_args()
    bursts = [float(x) for x in a.bursts_ms.split(",")]
    gaps = [float(x) for x in a.gaps_ms.split(",")]
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(a.busy_loops)]
    loader.load(["mltcp_reno"])
    try:
        for p in spinners:
            p.start()
        print(
            f"{a.rate_mbit:g} Mb/s htb, {a.buffer_bytes} B bfifo, {a.busy_loops} busy loops; iterations of "
            f"{SENDS} x {SEND_BYTES} B; busy-time rate of iterations 2-{ITERATIONS}, Mbit/s (lowest-highest)"
        )
        print("| burst (ms / bytes) | " + " | ".join(f"gap {g:g} ms" for g in gaps) + " |")
        print("|---|" + "---|" * len(gaps))
        for ms in bursts:
            burst = default_burst_bytes(a.rate_mbit, ms / 1e3)
            d = KernelNet(n=1, rate_mbit=a.rate_mbit, buffer_bytes=a.buffer_bytes, burst_bytes=burst).build()
            try:
                cells = [iteration_rates(d, g / 1e3) for g in gaps]
            finally:
                d.destroy()
            print(f"| {ms:g} / {burst} | " + " | ".join(f"{min(r):.0f}-{max(r):.0f}" for r in cells) + " |", flush=True)
    finally:
        for p in spinners:
            p.terminate()
        loader.unload()


if __name__ == "__main__":
    main()
