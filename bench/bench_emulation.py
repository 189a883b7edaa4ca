#!/usr/bin/env python3
"""Emulated MLTCP vs its base algorithm, and the kernel-TCP baseline peer (needs root, Mininet).

1. `two-jobs` rescaled to --rate-mbps (time dilation: same bytes and packets per round trip,
   longer times), per transport: the base algorithm, then its MLTCP variant. Prints avg/p99
   iteration time, speedups, where the jobs interleave, drops, and emulated/simulated time.
   The kernel MLTCP arm runs only if the BPF algorithm `mltcp_reno` is registered.
2. Baseline peer: 2 long-lived flows with kernel reno, kernel cubic and the userspace Reno:
   per-flow goodput, Jain's index, and userspace/kernel Reno throughput.

Prints measured figures only; nothing is asserted (shared, noisy machine).
    sudo .venv/bin/python bench/bench_emulation.py [--iterations 40] [--link-mode htb|switch|auto]
        [--rate-mbps 100] [--delay-ms D] [--peer-seconds 10] [--skip-peer] [--no-sim]
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="two-jobs")
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--rate-mbps", type=float, default=100.0)
    ap.add_argument("--delay-ms", type=float, default=None)
    ap.add_argument("--link-mode", default="htb")
    ap.add_argument("--peer-seconds", type=float, default=10.0)
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--no-sim", action="store_true")
    a = ap.parse_args()

    from mininet.log import setLogLevel

    from mltcp import scenario as scn
    from mltcp.emulation.baseline import baseline_peer
    from mltcp.emulation.netns import have_mininet_prereqs
    from mltcp.emulation.peers import kernel_cc_name, udp_available
    from mltcp.emulation.plan import EmulationError, plan_from_scenario, rescale
    from mltcp.emulation.runner import run_experiment

    why = have_mininet_prereqs()
    if why:
        print(f"bench_emulation: skipped ({why})")
        return 0
    setLogLevel("error")
    sc = rescale(scn.load(a.scenario), a.rate_mbps, a.delay_ms, a.iterations, None, dilate=True)
    print(
        f"{sc.name} at {a.rate_mbps:g} Mb/s (time-dilated), {a.iterations} iterations, link mode {a.link_mode}, "
        f"ideal iteration {sum(sc.ideal_iter_s(j) for j in sc.jobs) / len(sc.jobs):.3f} s"
    )
    print(
        f"{'transport':9} {'arm':12} {'avg s':>7} {'p99 s':>7} {'drops':>6} {'conv@':>6} {'inter@':>6} {'emu/sim':>8}"
    )
    transports = []
    if udp_available():
        transports.append("udp")
    transports.append("kernel")
    for tr in transports:
        compare = True
        if tr == "kernel":
            try:
                kernel_cc_name("reno", True)
            except EmulationError as e:
                print(f"kernel    (MLTCP arm skipped: {str(e).splitlines()[0][:70]}...)")
                compare = False
        try:
            d = run_experiment(sc, "reno", compare, tr, a.link_mode, with_sim=not a.no_sim)
        except EmulationError as e:  # e.g. the BPF algorithm unloaded by another process meanwhile
            print(f"{tr:9} failed: {e}")
            continue
        for arm in ("baseline", "mltcp"):
            s = d.get(arm)
            if not s:
                continue
            sim = (d.get("sim_vs_emu") or {}).get(arm) or {}
            ratio = sum(sim.values()) / len(sim) if sim and "error" not in sim else float("nan")
            print(
                f"{tr:9} {s['cc']:12} {s['avg_iter_s']:7.3f} {s['p99_iter_s']:7.3f} {int(s['drops']):6d} "
                f"{str(s['converged_at_iteration']):>6} {str(s['interleaved_at_iteration']):>6} {ratio:8.2f}"
            )
        if compare:
            print(f"{tr:9} speedup avg {d['speedup_avg']:.3f}, p99 {d['speedup_p99']:.3f}")
        sys.stdout.flush()
    if not a.skip_peer:
        plan = plan_from_scenario(sc, "dumbbell")
        doc = baseline_peer(plan.bottleneck, None, seconds=a.peer_seconds, link_mode=a.link_mode)
        print(f"\nlong-lived flows, {plan.bottleneck.rate_mbps:g} Mb/s, {a.peer_seconds:g} s")
        for r in doc["fairness"]:
            print(
                f"  {r['label']:15} {' / '.join(f'{x:5.1f}' for x in r['flows_mbps'])} Mb/s  total "
                f"{r['total_mbps']:6.1f}  Jain {r['jain']:.3f}  retrans {r['retransmissions']}"
            )
        if "userspace_vs_kernel_reno_throughput" in doc:
            print(f"  userspace / kernel reno throughput: {doc['userspace_vs_kernel_reno_throughput']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
