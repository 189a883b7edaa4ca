#!/usr/bin/env python3
"""Throughput and CPU of the userspace MLTCP transport.

1. Event-loop choice: how many 1,472-byte datagrams/s one Python process receives with
   non-blocking sockets + selectors (batched recv_into) versus asyncio datagram endpoints.
CPU figures are each side's process CPU during the transfer (start-up excluded) / transfer time;
the receiver's includes its idle-exit second (cheap: select timeouts).
2. Loopback: `mltcp traffic recv` in one process, `mltcp traffic send` in another, per algorithm.
3. Two network namespaces joined by a veth pair, htb 100mbit + bfifo on the sender side
   (needs root; skipped otherwise): achieved goodput against the 100 Mb/s link, CPU per side.

Prints measured figures only; nothing is asserted (shared, noisy machine).
4. (--competing, root) two jobs through one 100 Mb/s bottleneck: iteration times per algorithm.
    .venv/bin/python bench/bench_transport.py [--quick] [--skip-netns] [--competing] [--only SECTION]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from multiprocessing import Process, Queue

PY = sys.executable
CLI = [PY, "-m", "mltcp.traffic.cli"]
DGRAM = 1472


# -- 1. selectors vs asyncio -------------------------------------------------------------------
def _blaster(port: int, seconds: float):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("127.0.0.1", port))
    buf = b"x" * DGRAM
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(64):
            try:
                s.send(buf)
            except OSError:
                pass


def _rx_selectors(q: Queue, seconds: float):
    import selectors
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("127.0.0.1", 0))
    s.setblocking(False)
    q.put(s.getsockname()[1])
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ)
    buf = bytearray(2048)
    n = 0
    t0 = time.monotonic()
    c0 = time.process_time()
    while time.monotonic() - t0 < seconds:
        if sel.select(0.1):
            while True:
                try:
                    s.recv_into(buf)
                except BlockingIOError:
                    break
                n += 1
    q.put((n / (time.monotonic() - t0), (time.process_time() - c0) / (time.monotonic() - t0)))


def _rx_asyncio(q: Queue, seconds: float):
    import asyncio

    class P(asyncio.DatagramProtocol):
        n = 0

        def datagram_received(self, data, addr):
            P.n += 1

    async def main():
        loop = asyncio.get_running_loop()
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind(("127.0.0.1", 0))
        tr, _ = await loop.create_datagram_endpoint(P, sock=s)
        q.put(s.getsockname()[1])
        t0, c0 = time.monotonic(), time.process_time()
        await asyncio.sleep(seconds)
        q.put((P.n / (time.monotonic() - t0), (time.process_time() - c0) / (time.monotonic() - t0)))
        tr.close()

    asyncio.run(main())


def bench_loops(seconds: float):
    print("== event loop: receive rate of 1472-byte datagrams on loopback (one blasting process)")
    for name, fn in (("selectors + recv_into batch", _rx_selectors), ("asyncio DatagramProtocol", _rx_asyncio)):
        q = Queue()
        rx = Process(target=fn, args=(q, seconds))
        rx.start()
        port = q.get(timeout=10)
        tx = Process(target=_blaster, args=(port, seconds))
        tx.start()
        rate, cpu = q.get(timeout=seconds + 20)
        tx.join()
        rx.join()
        print(f"  {name:30s} {rate:10.0f} datagrams/s  ({rate * DGRAM * 8 / 1e6:7.1f} Mb/s)  receiver CPU {cpu * 100:5.1f}%")


# -- 2./3. transport runs ------------------------------------------------------------------------
def _wait_rusage(proc: subprocess.Popen, timeout: float):
    """Wait for a child and return its (user+sys) CPU seconds (os.wait4)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_utime + ru.ru_stime
        if time.monotonic() > deadline:
            proc.kill()
            pid, status, ru = os.wait4(proc.pid, 0)
            proc.returncode = -9
            return ru.ru_utime + ru.ru_stime
        time.sleep(0.02)


def run_pair(cc: str, nbytes: int, iterations: int, host: str, port: int, rx_prefix=(), tx_prefix=(),
             line_rate="100mbit", label=""):
    rx = subprocess.Popen([*rx_prefix, *CLI, "recv", "--bind", f"{host}:{port}", "--idle-exit", "1s",
                           "--duration", "120s", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = rx.stderr.readline()
    if not line.startswith("listening"):
        rx.kill()
        raise RuntimeError(f"receiver did not start: {line}{rx.stderr.read()}")
    tx = subprocess.Popen([*tx_prefix, *CLI, "send", "--to", f"{host}:{port}", "--cc", cc, "--bytes", str(nbytes),
                           "--compute", "0", "--iterations", str(iterations), "--line-rate", line_rate,
                           "--json", "--timeout", "60s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_rusage(tx, 180)      # process CPU incl. start-up; the figures below use the run's own
    tx_out, tx_err = tx.stdout.read(), tx.stderr.read()
    _wait_rusage(rx, 30)
    if tx.returncode != 0:
        raise RuntimeError(f"sender failed: {tx_err[-400:]}")
    lines = [json.loads(x) for x in tx_out.splitlines()]
    recs, summary = lines[:-1], lines[-1]["summary"][0]
    t0, t1 = recs[0]["comm_start"], recs[-1]["end"]
    wall = t1 - t0
    rx_lines = [json.loads(x) for x in rx.stdout.read().splitlines()]
    rx_flows, rx_info = rx_lines[:-1], rx_lines[-1]["receiver"]
    ok = bool(rx_flows) and rx_flows[0]["bytes"] == nbytes * iterations and rx_flows[0]["mismatched"] == 0
    goodput = nbytes * iterations * 8 / wall / 1e6
    wire_rate = summary["sent"] * (summary["bytes"] / max(1, summary["sent"] - summary["retransmits"]) + 76) * 8 / wall / 1e6
    print(f"  {label}{cc:12s} goodput {goodput:7.1f} Mb/s  ({summary['sent'] / wall:7.0f} datagrams/s, "
          f"IP {wire_rate:6.1f} Mb/s)  retx {summary['retransmits']:5d}  "
          f"CPU sender {summary['cpu_s'] / wall * 100:5.1f}%  receiver {rx_info['cpu_s'] / wall * 100:5.1f}%  "
          f"{'intact' if ok else 'CORRUPT/INCOMPLETE'}", flush=True)
    return goodput


def bench_loopback(ccs, nbytes, iterations):
    print(f"== loopback: {iterations} x {nbytes / 1e6:.0f} MB, sender and receiver in separate processes "
          f"(DCQCN line rate 1 Gb/s)")
    for cc in ccs:
        run_pair(cc, nbytes, iterations, "127.0.0.1", 29199, line_rate="1gbit")


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def bench_netns(ccs, nbytes, iterations, buffer_bytes=150_000):
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        print("== namespaces: skipped (needs root, ip and tc)")
        return
    pid = os.getpid()
    a, b = f"mbta{pid}", f"mbtb{pid}"
    try:
        sh("ip", "netns", "add", a)
        sh("ip", "netns", "add", b)
        sh("ip", "link", "add", "bta", "netns", a, "type", "veth", "peer", "btb", "netns", b)
        sh("ip", "-n", a, "addr", "add", "10.77.0.1/24", "dev", "bta")
        sh("ip", "-n", b, "addr", "add", "10.77.0.2/24", "dev", "btb")
        for ns, dev in ((a, "bta"), (b, "btb")):
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("tc", "-n", a, "qdisc", "add", "dev", "bta", "root", "handle", "1:", "htb", "default", "10")
        sh("tc", "-n", a, "class", "add", "dev", "bta", "parent", "1:", "classid", "1:10", "htb",
           "rate", "100mbit", "ceil", "100mbit")
        sh("tc", "-n", a, "qdisc", "add", "dev", "bta", "parent", "1:10", "handle", "10:", "bfifo",
           "limit", str(buffer_bytes))
        print(f"== namespaces: veth, htb 100mbit + bfifo {buffer_bytes // 1000} KB on the sender side; "
              f"{iterations} x {nbytes / 1e6:.0f} MB (DCQCN line rate 100 Mb/s)")
        for cc in ccs:
            run_pair(cc, nbytes, iterations, "10.77.0.2", 9199, rx_prefix=("ip", "netns", "exec", b),
                     tx_prefix=("ip", "netns", "exec", a), line_rate="100mbit")
        out = sh("tc", "-n", a, "-s", "qdisc", "show", "dev", "bta").stdout
        drops = [ln.strip() for ln in out.splitlines() if "dropped" in ln]
        print("  qdisc totals:", " | ".join(drops))
    finally:
        for ns in (a, b):
            sh("ip", "netns", "del", ns, check=False)


def bench_competing(ccs, iterations=40, compute="100ms", nbytes="1.25MB"):
    """Two jobs (one process each) through one htb 100mbit bottleneck: 1.25 MB per iteration is
    100 ms alone on the link, so the jobs overlap at ~300 ms per iteration and interleave at 200."""
    if os.geteuid() != 0:
        print("== competing jobs: skipped (needs root)")
        return
    import statistics
    pid = os.getpid()
    a, b = f"mcpa{pid}", f"mcpb{pid}"
    try:
        sh("ip", "netns", "add", a)
        sh("ip", "netns", "add", b)
        sh("ip", "link", "add", "cpa", "netns", a, "type", "veth", "peer", "cpb", "netns", b)
        sh("ip", "-n", a, "addr", "add", "10.79.0.1/24", "dev", "cpa")
        sh("ip", "-n", b, "addr", "add", "10.79.0.2/24", "dev", "cpb")
        for ns, dev in ((a, "cpa"), (b, "cpb")):
            sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("tc", "-n", a, "qdisc", "add", "dev", "cpa", "root", "handle", "1:", "htb", "default", "10")
        sh("tc", "-n", a, "class", "add", "dev", "cpa", "parent", "1:", "classid", "1:10", "htb",
           "rate", "100mbit", "ceil", "100mbit")
        sh("tc", "-n", a, "qdisc", "add", "dev", "cpa", "parent", "1:10", "handle", "10:", "bfifo", "limit", "150000")
        print(f"== competing jobs: 2 jobs x {iterations} iterations, compute {compute}, {nbytes}/iteration, "
              f"htb 100mbit (alone: 200 ms/iteration; fully overlapped: ~300 ms)")
        for cc in ccs:
            rx = [subprocess.Popen(["ip", "netns", "exec", b, *CLI, "recv", "--bind", f"10.79.0.2:{9199 + k}",
                                    "--idle-exit", "2s", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True) for k in range(2)]
            for r in rx:
                r.stderr.readline()
            tx = [subprocess.Popen(["ip", "netns", "exec", a, *CLI, "send", "--to", f"10.79.0.2:{9199 + k}",
                                    "--cc", cc, "--job", str(k + 1), "--bytes", nbytes, "--compute", compute,
                                    "--iterations", str(iterations), "--json", "--start-offset", f"{0.02 * k}s",
                                    "--line-rate", "100mbit"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(2)]
            outs = [t.communicate()[0] for t in tx]
            for r in rx:
                r.communicate()
            for k, o in enumerate(outs):
                lines = [json.loads(x) for x in o.splitlines()]
                recs, summ = lines[:-1], lines[-1]["summary"][0]
                d = [r["end"] - r["start"] for r in recs]
                tail = d[len(d) // 2:]
                print(f"  {cc:12s} job {k + 1}: iteration time mean {statistics.mean(d) * 1e3:6.1f} ms, "
                      f"second half mean {statistics.mean(tail) * 1e3:6.1f} ms, p99 "
                      f"{sorted(d)[int(0.99 * (len(d) - 1))] * 1e3:6.1f} ms; retx {summ['retransmits']}, "
                      f"timeouts {summ['timeouts']}", flush=True)
    finally:
        for ns in (a, b):
            sh("ip", "netns", "del", ns, check=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller transfers")
    ap.add_argument("--skip-netns", action="store_true")
    ap.add_argument("--competing", action="store_true", help="also run two competing jobs")
    ap.add_argument("--only", choices=["loops", "loopback", "netns", "competing"], help="run one section")
    ap.add_argument("--cc", nargs="*", default=["reno", "mltcp-reno", "cubic", "mltcp-cubic", "dcqcn", "mltcp-dcqcn"])
    args = ap.parse_args()
    want = {args.only} if args.only else {"loops", "loopback"} | ({"netns"} if not args.skip_netns else set()) \
        | ({"competing"} if args.competing else set())
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    if "loops" in want:
        bench_loops(1.0 if args.quick else 3.0)
    if "loopback" in want:
        n, it = (5_000_000, 3) if args.quick else (20_000_000, 4)
        bench_loopback(args.cc, n, it)
    if "netns" in want:
        bench_netns(args.cc, 4_000_000 if args.quick else 12_500_000, 3 if args.quick else 4)
    if "competing" in want:
        bench_competing([c for c in args.cc if not c.endswith("dcqcn")])
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
