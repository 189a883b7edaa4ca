#!/usr/bin/env python3
"""Throughput and CPU of the userspace MLTCP transport.

1. Event-loop choice: how many 1,472-byte datagrams/s one Python process receives with
   non-blocking sockets + selectors (batched recv_into) versus asyncio datagram endpoints.
CPU figures are each side's process CPU during the transfer (start-up excluded) / transfer time;
the receiver's includes its idle-exit second (cheap: select timeouts).
2. Loopback: `mltcp traffic recv` in one process, `mltcp traffic send` in another, per algorithm.
3. Network namespaces with an htb 100mbit + bfifo bottleneck, once on the senders' own veth
   and once in a forwarding namespace between them (needs root; skipped otherwise): achieved
   goodput against the 100 Mb/s link, CPU per side.

Prints measured figures only; nothing is asserted (shared, noisy machine).
4. (--competing, root) two jobs through one 100 Mb/s bottleneck (router namespace): iteration
   times per algorithm.
5. (--only mac) the cost of authenticated datagrams: loopback throughput with the MAC off, with the
   handshake key and with a PSK, A/B interleaved in one run (receiver in its own process, Reno,
   no rate limit: CPU-bound, so the ratio is the MAC's CPU cost at its largest).
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
        print(
            f"  {name:30s} {rate:10.0f} datagrams/s  ({rate * DGRAM * 8 / 1e6:7.1f} Mb/s)  receiver CPU "
            f"{cpu * 100:5.1f}%"
        )


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


def run_pair(
    cc: str,
    nbytes: int,
    iterations: int,
    host: str,
    port: int,
    rx_prefix=(),
    tx_prefix=(),
    line_rate="100mbit",
    label="",
):
    rx = subprocess.Popen(
        [*rx_prefix, *CLI, "recv", "--bind", f"{host}:{port}", "--idle-exit", "1s", "--duration", "120s", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = rx.stderr.readline()
    if not line.startswith("listening"):
        rx.kill()
        raise RuntimeError(f"receiver did not start: {line}{rx.stderr.read()}")
    tx = subprocess.Popen(
        [
            *tx_prefix,
            *CLI,
            "send",
            "--to",
            f"{host}:{port}",
            "--cc",
            cc,
            "--bytes",
            str(nbytes),
            "--compute",
            "0",
            "--iterations",
            str(iterations),
            "--line-rate",
            line_rate,
            "--json",
            "--timeout",
            "60s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_rusage(tx, 180)  # process CPU incl. start-up; the figures below use the run's own
    tx_out, tx_err = tx.stdout.read(), tx.stderr.read()
    _wait_rusage(rx, 30)
    if tx.returncode != 0:
        raise RuntimeError(f"sender failed: {tx_err[-400:]}")
    tx_doc = json.loads(tx_out)
    recs, summary = tx_doc["records"], tx_doc["summary"][0]
    t0, t1 = recs[0]["comm_start"], recs[-1]["end"]
    wall = t1 - t0
    rx_doc = json.loads(rx.stdout.read())
    rx_flows, rx_info = rx_doc["flows"], rx_doc["receiver"]
    ok = bool(rx_flows) and rx_flows[0]["bytes"] == nbytes * iterations and rx_flows[0]["mismatched"] == 0
    goodput = nbytes * iterations * 8 / wall / 1e6
    wire_rate = (
        summary["sent"] * (summary["bytes"] / max(1, summary["sent"] - summary["retransmits"]) + 76) * 8 / wall / 1e6
    )
    print(
        f"  {label}{cc:12s} goodput {goodput:7.1f} Mb/s  ({summary['sent'] / wall:7.0f} datagrams/s, "
        f"IP {wire_rate:6.1f} Mb/s)  retx {summary['retransmits']:5d}  "
        f"CPU sender {summary['cpu_s'] / wall * 100:5.1f}%  receiver {rx_info['cpu_s'] / wall * 100:5.1f}%  "
        f"{'intact' if ok else 'CORRUPT/INCOMPLETE'}",
        flush=True,
    )
    return goodput


def bench_loopback(ccs, nbytes, iterations):
    print(
        f"== loopback: {iterations} x {nbytes / 1e6:.0f} MB, sender and receiver in separate processes "
        f"(DCQCN line rate 1 Gb/s)"
    )
    for cc in ccs:
        run_pair(cc, nbytes, iterations, "127.0.0.1", 29199, line_rate="1gbit")


def _mac_receiver(mode: str, q: Queue, done):
    from mltcp.traffic.transport import Receiver

    psk = b"k" * 32 if mode == "psk" else None
    with Receiver(("127.0.0.1", 0), authenticate=mode != "off", psk=psk) as rx:
        rx.start()
        q.put(rx.addr)
        done.wait(300)
        q.put(sum(f.delivered for f in rx.flows.values()))


def _mac_run(mode: str, nbytes: int) -> float:
    """Goodput (bytes/s) of one ``nbytes`` transfer over loopback in ``mode`` (off, handshake, psk)."""
    from multiprocessing import Event

    from mltcp.traffic.transport import UdpTransport

    q, done = Queue(), Event()
    p = Process(target=_mac_receiver, args=(mode, q, done), daemon=True)
    p.start()
    try:
        addr = q.get(timeout=30)
        psk = b"k" * 32 if mode == "psk" else None
        with UdpTransport([addr], cc="reno", timeout=120, authenticate=mode != "off", psk=psk) as tx:
            tx.send_iteration(1_000_000, 0)  # warm up (and the handshake)
            t0 = time.monotonic()
            tx.send_iteration(nbytes, 1)
            wall = time.monotonic() - t0
        done.set()
        if q.get(timeout=30) != nbytes + 1_000_000:
            raise RuntimeError(f"{mode}: the receiver did not get every byte")
        return nbytes / wall
    finally:
        done.set()
        p.join(10)


def bench_mac(nbytes: int, rounds: int):
    print(f"== MAC cost: loopback, Reno, {rounds} rounds of {nbytes / 1e6:.0f} MB per mode, A/B interleaved")
    got = {m: [] for m in ("off", "handshake", "psk")}
    for _ in range(rounds):
        for m in got:
            got[m].append(_mac_run(m, nbytes))
    med = {m: sorted(v)[len(v) // 2] for m, v in got.items()}
    for m, v in got.items():
        print(
            f"  {m:9s} goodput median {med[m] * 8 / 1e6:7.1f} Mb/s  (runs: "
            f"{', '.join(f'{x * 8 / 1e6:.0f}' for x in v)})",
            flush=True,
        )
    print(
        f"  throughput ratio MAC on / off: handshake {med['handshake'] / med['off']:.3f}, "
        f"psk {med['psk'] / med['off']:.3f}",
        flush=True,
    )


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


class Topology:
    """Namespaces for the bench: senders in `a`, receivers in `b`, joined by veth pairs.

    router=False: a--b, the htb 100mbit + bfifo bottleneck on a's egress (the senders' own
    qdisc: a full queue pushes back on their sockets, like TSQ). router=True: a--r--b, the
    bottleneck on the forwarding namespace r's egress towards b (a switch: no back-pressure)."""

    def __init__(self, tag: str, router: bool, rate="100mbit", buffer_bytes=150_000, mtu: int = 1500):
        self.pid = os.getpid()
        self.router, self.rate, self.buffer, self.mtu = router, rate, buffer_bytes, mtu
        self.a, self.r, self.b = (f"m{tag}{x}{self.pid}" for x in "arb")
        self.tag = tag

    def __enter__(self):
        a, r, b, t = self.a, self.r, self.b, self.tag
        try:
            for ns in (a, b) + ((r,) if self.router else ()):
                sh("ip", "netns", "add", ns)
                sh("ip", "-n", ns, "link", "set", "lo", "up")
            if not self.router:
                sh("ip", "link", "add", f"{t}a", "netns", a, "type", "veth", "peer", f"{t}b", "netns", b)
                sh("ip", "-n", a, "addr", "add", "10.77.0.1/24", "dev", f"{t}a")
                sh("ip", "-n", b, "addr", "add", "10.77.0.2/24", "dev", f"{t}b")
                for ns, dev in ((a, f"{t}a"), (b, f"{t}b")):
                    sh("ip", "-n", ns, "link", "set", dev, "mtu", str(self.mtu), "up")
                self.dst, self.qns, self.qdev = "10.77.0.2", a, f"{t}a"
            else:
                sh("ip", "link", "add", f"{t}a", "netns", a, "type", "veth", "peer", f"{t}r1", "netns", r)
                sh("ip", "link", "add", f"{t}r2", "netns", r, "type", "veth", "peer", f"{t}b", "netns", b)
                for ns, dev, addr in (
                    (a, f"{t}a", "10.77.1.1/24"),
                    (r, f"{t}r1", "10.77.1.2/24"),
                    (r, f"{t}r2", "10.77.2.1/24"),
                    (b, f"{t}b", "10.77.2.2/24"),
                ):
                    sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
                    sh("ip", "-n", ns, "link", "set", dev, "mtu", str(self.mtu), "up")
                sh("ip", "-n", a, "route", "add", "default", "via", "10.77.1.2")
                sh("ip", "-n", b, "route", "add", "default", "via", "10.77.2.1")
                sh("ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
                self.dst, self.qns, self.qdev = "10.77.2.2", r, f"{t}r2"
            sh("tc", "-n", self.qns, "qdisc", "add", "dev", self.qdev, "root", "handle", "1:", "htb", "default", "10")
            sh(
                "tc",
                "-n",
                self.qns,
                "class",
                "add",
                "dev",
                self.qdev,
                "parent",
                "1:",
                "classid",
                "1:10",
                "htb",
                "rate",
                self.rate,
                "ceil",
                self.rate,
            )
            sh(
                "tc",
                "-n",
                self.qns,
                "qdisc",
                "add",
                "dev",
                self.qdev,
                "parent",
                "1:10",
                "handle",
                "10:",
                "bfifo",
                "limit",
                str(self.buffer),
            )
        except BaseException:
            self.__exit__()
            raise
        return self

    def describe(self):
        where = "router namespace (a--r--b)" if self.router else "sender side (a--b)"
        mtu = f", MTU {self.mtu}" if self.mtu != 1500 else ""
        return f"htb {self.rate} + bfifo {self.buffer // 1000} KB on the {where}{mtu}"

    def qdisc_drops(self):
        out = sh("tc", "-n", self.qns, "-s", "qdisc", "show", "dev", self.qdev).stdout
        return [ln.strip() for ln in out.splitlines() if "dropped" in ln][-1:]

    def __exit__(self, *exc):
        for ns in (self.a, self.r, self.b):
            sh("ip", "netns", "del", ns, check=False)


def _can_netns(what):
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        print(f"== {what}: skipped (needs root, ip and tc)")
        return False
    return True


def bench_netns(ccs, nbytes, iterations):
    if not _can_netns("namespaces"):
        return
    for router in (False, True):
        with Topology("bt", router) as topo:
            print(f"== namespaces: {topo.describe()}; {iterations} x {nbytes / 1e6:.1f} MB (DCQCN line rate 100 Mb/s)")
            for cc in ccs:
                run_pair(
                    cc,
                    nbytes,
                    iterations,
                    topo.dst,
                    9199,
                    rx_prefix=("ip", "netns", "exec", topo.b),
                    tx_prefix=("ip", "netns", "exec", topo.a),
                    line_rate="100mbit",
                )
            print("  bottleneck qdisc totals:", " | ".join(topo.qdisc_drops()))


def bench_competing(ccs, iterations=60, compute="100ms", nbytes="1.25MB", offsets=(0.0, 0.02)):
    """Two jobs (one process each) through one 100 Mb/s bottleneck in a router namespace:
    1.25 MB per iteration is 100 ms alone on the link, so the jobs overlap at ~300 ms per
    iteration and interleave at 200. Jumbo frames (MTU 9000, 8,900-byte payloads) cut the packet
    rate six-fold, so that CPU scheduling on a busy machine disturbs the timing less."""
    if not _can_netns("competing jobs"):
        return
    import statistics

    with Topology("cp", True, mtu=9000) as topo:
        print(
            f"== competing jobs: 2 jobs x {iterations} iterations, compute {compute}, {nbytes}/iteration, "
            f"{topo.describe()} (alone: 200 ms/iteration; fully overlapped: ~300 ms)"
        )
        for off in offsets:
            for cc in ccs:
                rx = [
                    subprocess.Popen(
                        [
                            "ip",
                            "netns",
                            "exec",
                            topo.b,
                            *CLI,
                            "recv",
                            "--bind",
                            f"{topo.dst}:{9199 + k}",
                            "--idle-exit",
                            "2s",
                            "--json",
                        ],
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                    for k in range(2)
                ]
                for r in rx:
                    r.stderr.readline()
                tx = [
                    subprocess.Popen(
                        [
                            "ip",
                            "netns",
                            "exec",
                            topo.a,
                            *CLI,
                            "send",
                            "--to",
                            f"{topo.dst}:{9199 + k}",
                            "--cc",
                            cc,
                            "--job",
                            str(k + 1),
                            "--bytes",
                            nbytes,
                            "--compute",
                            compute,
                            "--iterations",
                            str(iterations),
                            "--json",
                            "--start-offset",
                            f"{off * k}s",
                            "--line-rate",
                            "100mbit",
                            "--payload",
                            "8900",
                        ],
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                    for k in range(2)
                ]
                outs = [t.communicate()[0] for t in tx]
                for r in rx:
                    r.communicate()
                for k, o in enumerate(outs):
                    doc = json.loads(o)
                    recs, summ = doc["records"], doc["summary"][0]
                    d = [r["end"] - r["start"] for r in recs]
                    tail = d[len(d) // 2 :]
                    print(
                        f"  offset {off * 1e3:3.0f} ms  {cc:12s} job {k + 1}: iteration mean "
                        f"{statistics.mean(d) * 1e3:6.1f} ms, first 5 {statistics.mean(d[:5]) * 1e3:6.1f} ms, "
                        f"second half {statistics.mean(tail) * 1e3:6.1f} ms, p99 "
                        f"{sorted(d)[int(0.99 * (len(d) - 1))] * 1e3:6.1f} ms; retx {summ['retransmits']}, "
                        f"timeouts {summ['timeouts']}",
                        flush=True,
                    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller transfers")
    ap.add_argument("--skip-netns", action="store_true")
    ap.add_argument("--competing", action="store_true", help="also run two competing jobs")
    ap.add_argument("--only", choices=["loops", "loopback", "netns", "competing", "mac"], help="run one section")
    ap.add_argument("--cc", nargs="*", default=["reno", "mltcp-reno", "cubic", "mltcp-cubic", "dcqcn", "mltcp-dcqcn"])
    args = ap.parse_args()
    want = (
        {args.only}
        if args.only
        else {"loops", "loopback", "mac"}
        | ({"netns"} if not args.skip_netns else set())
        | ({"competing"} if args.competing else set())
    )
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    if "loops" in want:
        bench_loops(1.0 if args.quick else 3.0)
    if "loopback" in want:
        n, it = (5_000_000, 3) if args.quick else (20_000_000, 4)
        bench_loopback(args.cc, n, it)
    if "mac" in want:
        bench_mac(10_000_000 if args.quick else 30_000_000, 3 if args.quick else 5)
    if "netns" in want:
        bench_netns(args.cc, 4_000_000 if args.quick else 12_500_000, 3 if args.quick else 4)
    if "competing" in want:
        bench_competing([c for c in args.cc if not c.endswith("dcqcn")])
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
