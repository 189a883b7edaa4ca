"""Where a kernel MLTCP run loses: the issue-14 case (two jobs, 100 Mb/s, 2 ms RTT, 50 kB buffer,
2.5 MB per iteration, 200 ms compute) with the BPF trace ring on every socket and the bottleneck's
backlog/drops polled, both arms on one network. Prints, per arm: retransmissions against the
bottleneck's drops, drops and backlog while one job / both / none is communicating, and for the
variant the incumbent's share of the link in overlaps and the goodput of solo phases.
Needs root (as `mltcp kernel experiment`). docs/kernel.md, section 5, gives what it measured.

    sudo nice -n -5 .venv/bin/python bench/studies/kernel_diag.py [--variant mltcp_cubic] [--nic-cap] [--out tr.json]
"""

import argparse
import dataclasses
import json
import re
import threading
import time

import numpy as np
from mininet.log import setLogLevel

from mltcp.traffic.kernel import loader
from mltcp.traffic.kernel.experiment import BASELINES, Case, run_once
from mltcp.traffic.kernel.maps import EV_ACK, Config, VariantMaps
from mltcp.traffic.kernel.net import KernelNet


def polled_run(d: KernelNet, case: Case, cc: str) -> dict:
    port, polls, stop = d.bottleneck, [], threading.Event()

    def poll():
        while not stop.is_set():
            out = port.node.cmd(f"tc -s qdisc show dev {port.name}")
            m = re.search(r"bfifo.*?dropped (\d+).*?backlog (\d+)b", out, re.S)
            if m:
                polls.append((time.monotonic(), int(m.group(1)), int(m.group(2))))
            time.sleep(0.001)

    th = threading.Thread(target=poll)
    th.start()
    try:
        t0 = time.monotonic()
        r = run_once(d, case, cc)
    finally:
        stop.set()
        th.join()
    r["polls"] = [(t - t0, dr, bl) for t, dr, bl in polls]
    return r


def by_activity(r: dict) -> None:
    p = np.array(r["polls"])
    t, dr, bl = p[:, 0], p[:, 1], p[:, 2]
    iv = {j: [(x["comm_start"], x["end"]) for x in r["records"] if x["job"] == j] for j in "AB"}
    a, b = ({j: np.array([any(s <= x <= e for s, e in iv[j]) for x in t]) for j in "AB"}[j] for j in "AB")
    ddr = np.diff(dr, prepend=dr[0])
    print(
        f"  retransmissions {r['retransmits']}, bottleneck drops {int(dr[-1] - dr[0])} "
        f"(polled every {np.median(np.diff(t)) * 1e3:.1f} ms)"
    )
    for name, m in (("one job", a ^ b), ("both", a & b), ("none", ~(a | b))):
        if m.any():
            print(
                f"  {name:8s} {m.mean():5.1%} of the time, backlog median {np.median(bl[m]):6.0f} B, "
                f"drops {ddr[m].sum():.0f}"
            )


def variant_view(r: dict, events: list[dict], nbytes: int, rate_bps: float) -> None:
    recs = r["records"]
    acks = [e for e in events if e["kind"] == EV_ACK]
    ports = list(dict.fromkeys(e["port"] for e in acks))
    if len(ports) < 2:
        print("  trace: fewer than two sockets traced")
        return
    P = dict(zip("AB", ports))  # job A starts first
    a0 = min(x["comm_start"] for x in recs if x["job"] == "A" and x["iteration"] == 0)
    off = acks[0]["ts_ns"] / 1e9 - a0 - 0.0022  # first ACK about one RTT after A's first send
    T = {j: np.array([e["ts_ns"] / 1e9 - off for e in acks if e["port"] == P[j]]) for j in "AB"}
    done = {j: np.array([e["iter_acked"] for e in acks if e["port"] == P[j]]) for j in "AB"}
    cwnd = {j: np.array([e["cwnd_in"] for e in acks if e["port"] == P[j]]) for j in "AB"}
    by = {(x["job"], x["iteration"]): x for x in recs}
    iv = {j: [(x["comm_start"], x["end"]) for x in recs if x["job"] == j] for j in "AB"}
    shares, solo = [], []
    for x in recs:
        j = x["job"]
        o = "B" if j == "A" else "A"
        for oi in (x["iteration"] - 1, x["iteration"]):  # the other job's phase it joins
            y = by.get((o, oi))
            if y and y["comm_start"] < x["comm_start"] < y["end"] and y["end"] - x["comm_start"] > 0.015:
                k = np.searchsorted(T[o], x["comm_start"])
                if 0 < k < len(T[o]):
                    shares.append((nbytes - done[o][k - 1]) * 8 / ((y["end"] - x["comm_start"]) * rate_bps))
        s, e = x["comm_start"] + 0.006, x["end"] - 0.003
        for os_, oe in iv[o]:
            if os_ < s < oe:
                s = oe
            if s < os_ < e:
                e = os_
        k0, k1 = np.searchsorted(T[j], s), np.searchsorted(T[j], e)
        if e - s >= 0.03 and k1 > k0 + 2:
            solo.append(((done[j][k1 - 1] - done[j][k0]) * 8 / (T[j][k1 - 1] - T[j][k0]), cwnd[j][k0]))
    if shares:
        print(f"  incumbent's share of the link in overlaps > 15 ms: mean {np.mean(shares):.0%} (n={len(shares)})")
    if solo:
        g = np.array(solo)
        print(
            f"  solo goodput: median {np.median(g[:, 0]) / 1e6:.1f} Mb/s over {len(g)} phases "
            f"(range {g[:, 0].min() / 1e6:.0f}-{g[:, 0].max() / 1e6:.0f})"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", default="mltcp_reno", choices=sorted(BASELINES))
    ap.add_argument("--iterations", type=int, default=18, help="the trace ring holds about 18 of this case")
    ap.add_argument("--nic-cap", action="store_true")
    ap.add_argument("--out", help="write records, polls and the trace as JSON")
    a = ap.parse_args()
    setLogLevel("error")
    case = Case(
        buffer_bytes=50_000,
        nbytes=2_500_000,
        compute_s=0.2,
        iterations=a.iterations,
        warmup=4,
        offset_s=0.01,
        delay_ms=1,
        idle_restart=False,
        variant=a.variant,
    )
    cfg = Config(trace_all=True, nic_cap=a.nic_cap)
    we_loaded = a.variant not in loader.registered()
    if we_loaded:
        loader.load([a.variant], config=cfg)
    d = KernelNet(n=2, rate_mbit=case.link_mbit, buffer_bytes=case.buffer_bytes, delay_us=1000, idle_restart=False)
    doc = {}
    try:
        with VariantMaps(a.variant) as vm:
            vm.write_config(cfg)
            vm.reset_trace()
        d.build()
        for cc in (BASELINES[a.variant], a.variant):
            doc[cc] = polled_run(d, case, cc)
        with VariantMaps(a.variant) as vm:
            doc["trace"] = [dataclasses.asdict(e) for e in vm.read_trace()]
            doc["stats"] = vm.stats()
            vm.write_config(Config())
    finally:
        d.destroy()
        if we_loaded:
            loader.unload([a.variant])
    for cc in (BASELINES[a.variant], a.variant):
        print(f"{cc}: avg {doc[cc]['avg_iter_s']:.3f} s, p99 {doc[cc]['p99_iter_s']:.3f} s")
        by_activity(doc[cc])
    variant_view(doc[a.variant], doc["trace"], case.nbytes, case.payload_mbit * 1e6)
    print(f"BPF counters: {doc['stats']}; trace events {len(doc['trace'])}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f)


if __name__ == "__main__":
    main()
