"""ptf conformance tests for mltcp.p4 targets (the software switch mltcp-switch, or BMv2).

Run by tests/test_ptf_conformance.py, or by hand:

    ptf --test-dir tests/ptf --interface 1@pv1 --interface 2@pv2 --interface 3@pv3 \\
        --test-params "grpcaddr='127.0.0.1:9559';p4info='p4src/mltcp.p4info.txtpb';devcfg='';target='mltcp-switch'"

Test parameters (``--test-params``, Python literals separated by ';'):
  grpcaddr   P4Runtime address of the target                       (default 127.0.0.1:9559)
  p4info     P4Info text file                                      (required)
  devcfg     device config pushed with it: BMv2 JSON for BMv2, '' for mltcp-switch
  device_id  P4Runtime device id                                   (default 0)
  target     'mltcp-switch' or 'bmv2' (BMv2: the slow port is set with simple_switch_CLI)
  thrift_port  BMv2 thrift port for simple_switch_CLI              (default 9090)
  cli         BMv2: the simple_switch_CLI program                  (default: simple_switch_CLI)
  slow_port  port whose line rate is slow enough that a burst queues up (default 3)
  slow_pps   BMv2 only: queue rate of the slow port in packets/s   (default 50)
  ecn_thresholds  thresholds K to test, e.g. '5,10,20,40'          (default '5,10')
  counter_packets packets per job for the counter test             (default 10000)
  fuzz_count  malformed packets sent by the fuzz test              (default 400)
  seed        RNG seed for the fuzz test                           (default 1)

Ports: 1 = ingress of test traffic, 2 = normal egress, 3 = slow egress (ECN test).
"""

from __future__ import annotations

import logging
import os
import random
import subprocess
import tempfile
import time

import ptf
import ptf.testutils as tu
from ptf.base_tests import BaseTest
from scapy.layers.inet import IP, TCP, UDP, IPOption
from scapy.layers.l2 import Ether
from scapy.packet import fuzz

from mltcp.controlplane.counters import bitstring_to_int
from mltcp.traffic.header import MLTCP, mltcp_ipopt

import p4runtime_sh.shell as sh

IN_PORT, OUT_PORT = 1, 2
SWITCH_MAC = "00:00:00:00:00:fe"
H1_MAC, H2_MAC, H3_MAC = "00:00:00:00:01:01", "00:00:00:00:02:02", "00:00:00:00:03:03"
log = logging.getLogger("mltcp.ptf")


def params() -> dict:
    p = dict(
        grpcaddr="127.0.0.1:9559",
        p4info=None,
        devcfg="",
        device_id=0,
        target="mltcp-switch",
        thrift_port=9090,
        cli="simple_switch_CLI",
        slow_port=3,
        slow_pps=50,
        ecn_thresholds="5,10",
        counter_packets=10000,
        fuzz_count=400,
        seed=1,
    )
    p.update(tu.test_params_get() or {})
    if not p["p4info"]:
        raise ValueError("test param 'p4info' (path of the P4Info text file) is required")
    return p


def mltcp_pkt(dst="10.0.2.2", job=1, ratio=0, tos=1, size=200, sport=40000):
    base = (
        Ether(dst=SWITCH_MAC, src=H1_MAC)
        / IP(src="10.0.1.1", dst=dst, tos=tos, ttl=64)
        / UDP(sport=sport, dport=9199)
        / MLTCP(job_id=job, bytes_ratio=ratio, iteration=1)
    )
    pad = max(0, size - len(base))
    return base / (b"\xab" * pad)


def ipopt_pkt(dst="10.0.2.2", job=1, ratio=0, tos=1, size=200, sport=40000, version=1):
    """Kernel TCP as stamp.bpf.c leaves it: TCP with the 8-byte MLTCP IPv4 option, no shim."""
    opt = bytearray(mltcp_ipopt(job, ratio))
    opt[2] = version << 4 | (opt[2] & 0xF)
    base = (
        Ether(dst=SWITCH_MAC, src=H1_MAC)
        / IP(src="10.0.1.1", dst=dst, tos=tos, ttl=64, options=[IPOption(bytes(opt))])
        / TCP(sport=sport, dport=5001, flags="A")
    )
    pad = max(0, size - len(base))
    return base / (b"\xab" * pad)


def expect_forwarded(pkt, dst_mac, ce=False):
    """What ipv4_forward(dst_mac, port) makes of ``pkt``: src MAC = old dst MAC, TTL-1, checksum."""
    exp = pkt.copy()
    exp[Ether].src = exp[Ether].dst
    exp[Ether].dst = dst_mac
    exp[IP].ttl -= 1
    if ce:
        exp[IP].tos |= 3
    exp[IP].chksum = None
    return Ether(bytes(exp))


class MltcpTest(BaseTest):
    """Connect with p4runtime-shell, push the pipeline (fresh state per test), helpers."""

    def setUp(self):
        BaseTest.setUp(self)
        self.dataplane = ptf.dataplane_instance
        self.dataplane.flush()
        self.p = params()
        devcfg = self.p["devcfg"]
        self._tmp = None
        if not devcfg:
            fd, self._tmp = tempfile.mkstemp(suffix=".bin")
            os.close(fd)
            devcfg = self._tmp
        sh.setup(
            device_id=self.p["device_id"],
            grpc_addr=self.p["grpcaddr"],
            election_id=(0, 1),
            config=sh.FwdPipeConfig(self.p["p4info"], devcfg),
            verbose=False,
        )

    def tearDown(self):
        sh.teardown()
        if self._tmp:
            os.unlink(self._tmp)
        BaseTest.tearDown(self)

    # -- control plane helpers (p4runtime-shell)
    def route(self, prefix: str, mac: str, port: int) -> None:
        te = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.ipv4_forward")
        te.match["hdr.ipv4.dstAddr"] = prefix
        te.action["dstAddr"] = mac
        te.action["port"] = str(port)
        te.insert()

    def ecn_threshold(self, port: int, k: int, update: str = "insert") -> None:
        te = sh.TableEntry("MyEgress.ecn_threshold")(action="MyEgress.set_ecn_threshold")
        te.match["standard_metadata.egress_port"] = str(port)
        te.action["threshold"] = str(k)
        getattr(te, update)()

    def progress_ecn(self, port: int, band: int, k: int, op: str = "insert") -> None:
        te = sh.TableEntry("MyEgress.progress_ecn")(action="MyEgress.set_progress_ecn")
        te.match["standard_metadata.egress_port"] = str(port)
        te.match["meta.progress_band"] = str(band)
        te.action["threshold"] = str(k)
        getattr(te, op)()

    def slow_bmv2_port(self, port: int, depth: int = 400) -> None:
        """BMv2: the slow port's queue rate (slow_pps) and depth, with simple_switch_CLI (the
        software switch gets them on its command line)."""
        if self.p["target"] == "bmv2":
            cli = f"set_queue_rate {self.p['slow_pps']} {port}\nset_queue_depth {depth} {port}\n"
            subprocess.run(
                [self.p["cli"], "--thrift-port", str(self.p["thrift_port"])],
                input=cli,
                text=True,
                check=True,
                capture_output=True,
            )

    def counter(self, name: str, index: int) -> tuple[int, int]:
        c = sh.CounterEntry(name)
        c.index = index
        (e,) = list(c.read())
        d = e.data.msg()
        return d.packet_count, d.byte_count

    def register(self, name: str, index: int) -> int:
        """Read one register cell (p4runtime-shell 0.0.6 has no RegisterEntry: raw Entity)."""
        from p4.v1 import p4runtime_pb2

        ent = p4runtime_pb2.Entity()
        (reg_id,) = [r.preamble.id for r in sh.context.p4info.registers if r.preamble.name == name]
        ent.register_entry.register_id = reg_id
        ent.register_entry.index.index = index
        try:
            (rep,) = list(sh.client.read_one(ent))
        except Exception as e:  # grpc.RpcError while iterating the reply stream
            code = getattr(e, "code", lambda: None)()
            if self.p["target"] != "bmv2" or code is None or code.name != "UNIMPLEMENTED":
                raise
            # BMv2's PI cannot read registers: the thrift interface can (mltcp.controlplane.bmv2)
            from mltcp.controlplane.bmv2 import read_register

            return read_register(self.p["thrift_port"], name, cli=self.p["cli"])[index]
        data = rep.entities[0].register_entry.data
        return bitstring_to_int(data.bitstring, 16)

    def wait_counter(self, name: str, index: int, packets: int, timeout: float = 10.0) -> tuple[int, int]:
        """Poll until the counter reaches ``packets`` (the data path lags the sender) or timeout."""
        end = time.monotonic() + timeout
        while True:
            got = self.counter(name, index)
            if got[0] >= packets or time.monotonic() > end:
                return got
            time.sleep(0.05)

    def send_raw(self, port: int, frames: list[bytes], pace_every: int = 0, pause: float = 0.0) -> None:
        """Send frames; every ``pace_every`` frames sleep ``pause`` s so the target keeps up.
        BMv2 is far slower than a socket can send: there, at most ~2000 frames/s."""
        if self.p["target"] == "bmv2" and pace_every:
            pace_every, pause = 20, max(pause, 0.01)
        for i, f in enumerate(frames):
            self.dataplane.send(0, port, f)
            if pace_every and i % pace_every == pace_every - 1:
                time.sleep(pause)


class Forwarding(MltcpTest):
    """LPM forwarding with MAC rewrite, TTL decrement and checksum; misses are dropped."""

    def runTest(self):
        self.route("10.0.2.0/24", H2_MAC, OUT_PORT)
        self.route("10.0.2.128/25", H3_MAC, self.p["slow_port"])
        pkt = mltcp_pkt(dst="10.0.2.2", tos=0)
        tu.send_packet(self, IN_PORT, pkt)
        tu.verify_packet(self, expect_forwarded(pkt, H2_MAC), OUT_PORT)
        tu.verify_no_other_packets(self)
        # plain UDP, longest prefix towards the slow port
        udp = Ether(dst=SWITCH_MAC, src=H1_MAC) / IP(src="10.0.1.1", dst="10.0.2.200") / UDP(dport=5001) / (b"p" * 64)
        tu.send_packet(self, IN_PORT, udp)
        tu.verify_packet(self, expect_forwarded(udp, H3_MAC), self.p["slow_port"], timeout=5)
        tu.verify_no_other_packets(self)
        # a miss takes the default action (drop); so does non-IPv4
        tu.send_packet(self, IN_PORT, mltcp_pkt(dst="192.168.7.7"))
        tu.send_packet(self, IN_PORT, Ether(dst=SWITCH_MAC, src=H1_MAC, type=0x88B5) / (b"\x00" * 50))
        tu.verify_no_other_packets(self)
        # the IPv4 checksum of what came out is valid (independent check with scapy)
        tu.send_packet(self, IN_PORT, pkt)
        res = tu.dp_poll(self, port_number=OUT_PORT, timeout=2)
        self.assertIsInstance(res, self.dataplane.PollSuccess)
        got = Ether(res.packet)
        chk = got[IP].chksum
        got[IP].chksum = None
        self.assertEqual(chk, Ether(bytes(got))[IP].chksum)


class TtlExpiry(MltcpTest):
    """RFC 1812 5.3.1: a router does not forward a packet with TTL 0 or 1 (no wrap to 255);
    TTL 2 leaves with 1. The job counter sees all three (it counts before the TTL check)."""

    def runTest(self):
        self.route("10.0.2.0/24", H2_MAC, OUT_PORT)
        for ttl in (0, 1):
            pkt = mltcp_pkt(job=11)
            pkt[IP].ttl = ttl
            tu.send_packet(self, IN_PORT, pkt)
        tu.verify_no_other_packets(self)
        ok = mltcp_pkt(job=11)
        ok[IP].ttl = 2
        tu.send_packet(self, IN_PORT, ok)
        tu.verify_packet(self, expect_forwarded(ok, H2_MAC), OUT_PORT)
        tu.verify_no_other_packets(self)
        self.assertEqual(self.wait_counter("MyIngress.job_tx", 11, 3)[0], 3)
        print("TTL dropped 2 (TTL 0 and 1), forwarded TTL 2 as 1", flush=True)


class EcnOnset(MltcpTest):
    """A burst into the slow port: CE marks start when the queue depth reaches K, not before."""

    def runTest(self):
        slow = self.p["slow_port"]
        self.slow_bmv2_port(slow)
        self.route("10.0.3.0/24", H3_MAC, slow)
        ks = [int(k) for k in str(self.p["ecn_thresholds"]).split(",")]
        marks_total = 0
        for n, k in enumerate(ks):
            self.ecn_threshold(slow, k, "insert" if n == 0 else "modify")
            burst = [mltcp_pkt(dst="10.0.3.3", job=5, tos=2, size=200, sport=41000 + i) for i in range(k + 8)]
            self.send_raw(IN_PORT, [bytes(b) for b in burst])
            marked = []
            for i, b in enumerate(burst):
                res = tu.dp_poll(self, port_number=slow, timeout=10)
                self.assertIsInstance(res, self.dataplane.PollSuccess, f"K={k}: packet {i} missing")
                got = Ether(res.packet)
                self.assertEqual(got[UDP].sport, 41000 + i, "reordered")
                marked.append(got[IP].tos & 3 == 3)
            first = marked.index(True) if True in marked else None
            print(
                f"ECN-ONSET K={k} first_marked_index={first} "
                f"queue_depth_at_first_mark={None if first is None else first - 1} "
                f"marked={sum(marked)}/{len(marked)}",
                flush=True,
            )
            self.assertIsNotNone(first, f"K={k}: no CE mark in a burst of {len(burst)}")
            self.assertTrue(not any(marked[:k]), f"K={k}: CE before the queue reached K: {marked}")
            self.assertLessEqual(first, k + 2, f"K={k}: first CE at packet {first}")
            self.assertTrue(all(marked[first:]), f"K={k}: marks stop while the queue grows: {marked}")
            marks_total += sum(marked)
            self.assertEqual(self.wait_counter("MyEgress.job_ecn_marks", 5, marks_total)[0], marks_total)
        # non-ECT packets are never marked
        burst = [mltcp_pkt(dst="10.0.3.3", job=6, tos=0, sport=42000 + i) for i in range(ks[0] + 4)]
        self.send_raw(IN_PORT, [bytes(b) for b in burst])
        for i in range(len(burst)):
            res = tu.dp_poll(self, port_number=slow, timeout=10)
            self.assertIsInstance(res, self.dataplane.PollSuccess)
            self.assertEqual(Ether(res.packet)[IP].tos & 3, 0)
        self.assertEqual(self.counter("MyEgress.job_ecn_marks", 6)[0], 0)
        tu.verify_no_other_packets(self)


class ProgressEcn(MltcpTest):
    """In-network MLTCP, ecn-by-progress: progress_ecn gives an MLTCP packet the threshold of its
    (port, bytes_ratio[15:12]) entry in place of the port's; no_progress_ecn (priority_ecn = off)
    leaves its band unmarked; without an entry, or once the entries are deleted (policy off), the
    port's threshold applies again."""

    def _burst(self, ratio: int, n: int, sport: int, ipopt: bool = False) -> list[bool]:
        slow = self.p["slow_port"]
        make, l4 = (ipopt_pkt, TCP) if ipopt else (mltcp_pkt, UDP)
        burst = [make(dst="10.0.3.3", job=7, tos=2, size=200, ratio=ratio, sport=sport + i) for i in range(n)]
        self.send_raw(IN_PORT, [bytes(b) for b in burst])
        marked = []
        for i in range(n):
            res = tu.dp_poll(self, port_number=slow, timeout=10)
            self.assertIsInstance(res, self.dataplane.PollSuccess, f"ratio {ratio:#x}: packet {i} missing")
            got = Ether(res.packet)
            self.assertEqual(got[l4].sport, sport + i, "reordered")
            marked.append(got[IP].tos & 3 == 3)
        return marked

    def runTest(self):
        slow = self.p["slow_port"]
        self.slow_bmv2_port(slow)
        self.route("10.0.3.0/24", H3_MAC, slow)
        port_k, behind_k, ahead_k, n = 10, 4, 40, 18
        self.ecn_threshold(slow, port_k)
        self.progress_ecn(slow, 0, behind_k)  # bytes_ratio < 1/16: marked early
        self.progress_ecn(slow, 15, ahead_k)  # bytes_ratio >= 15/16: marked late
        cases = [(0x0000, behind_k), (0x0FFF, behind_k), (0x8000, port_k), (0xF000, None), (0xFFFF, None)]
        for c, (ratio, k) in enumerate(cases):
            marked = self._burst(ratio, n, 43000 + 100 * c)
            first = marked.index(True) if True in marked else None
            print(
                f"PROGRESS-ECN ratio={ratio:#06x} band={ratio >> 12} expected_K={k} first_marked_index={first} "
                f"marked={sum(marked)}/{n}",
                flush=True,
            )
            if k is None:
                self.assertFalse(any(marked), f"ratio {ratio:#x}: marked below its threshold {ahead_k}: {marked}")
            else:
                self.assertIsNotNone(first, f"ratio {ratio:#x}: no mark (K={k})")
                self.assertTrue(not any(marked[:k]), f"ratio {ratio:#x}: CE before K={k}: {marked}")
                self.assertLessEqual(first, k + 2, f"ratio {ratio:#x}: first CE at {first}, K={k}")
        # the same bands from the MLTCP IPv4 option (kernel TCP, no shim)
        behind = self._burst(0x0000, n, 43700, ipopt=True)
        ahead = self._burst(0xFFFF, n, 43800, ipopt=True)
        first = behind.index(True) if True in behind else None
        print(f"PROGRESS-ECN-IPOPT behind first_marked_index={first} ahead marked={sum(ahead)}/{n}", flush=True)
        self.assertTrue(first is not None and not any(behind[:behind_k]) and first <= behind_k + 2, behind)
        self.assertFalse(any(ahead), f"IPv4 option, band 15 marked: {ahead}")
        # priority_ecn = off: no_progress_ecn on band 8, whose packets the port's threshold marked
        te = sh.TableEntry("MyEgress.progress_ecn")(action="MyEgress.no_progress_ecn")
        te.match["standard_metadata.egress_port"] = str(slow)
        te.match["meta.progress_band"] = "8"
        te.insert()
        marked = self._burst(0x8000, n, 43900)
        print(f"PROGRESS-ECN-NOMARK ratio=0x8000 band=8 marked={sum(marked)}/{n}", flush=True)
        self.assertFalse(any(marked), f"no_progress_ecn: band 8 marked: {marked}")
        # policy off: the entries deleted, every band gets the port's threshold again
        for band in (0, 8, 15):
            te = sh.TableEntry("MyEgress.progress_ecn")
            te.match["standard_metadata.egress_port"] = str(slow)
            te.match["meta.progress_band"] = str(band)
            te.delete()
        for c, ratio in enumerate((0x0000, 0x8000, 0xFFFF)):
            marked = self._burst(ratio, n, 44000 + 100 * c)
            first = marked.index(True) if True in marked else None
            print(f"PROGRESS-ECN-OFF ratio={ratio:#06x} first_marked_index={first}", flush=True)
            self.assertIsNotNone(first)
            self.assertTrue(not any(marked[:port_k]) and first <= port_k + 2, f"off, ratio {ratio:#x}: {marked}")
        tu.verify_no_other_packets(self)


class ProgressContest(MltcpTest):
    """ecn-by-progress with a contest window (progress_contest): band 0's early threshold applies
    only while another job's packet passed the port within the window; a job alone, before any
    other job came or once the window has passed since the last change, gets the port's."""

    def _burst(self, lead_job: int | None, n: int, sport: int) -> list[bool]:
        """Optionally one band-15 packet of ``lead_job``, then ``n`` band-0 packets of job 7; the
        CE bits of the job-7 packets, in order."""
        slow = self.p["slow_port"]
        frames = []
        if lead_job is not None:
            frames.append(mltcp_pkt(dst="10.0.3.3", job=lead_job, tos=2, size=200, ratio=0xFFFF, sport=sport - 1))
        frames += [mltcp_pkt(dst="10.0.3.3", job=7, tos=2, size=200, ratio=0x0000, sport=sport + i) for i in range(n)]
        self.send_raw(IN_PORT, [bytes(f) for f in frames])
        marked = []
        for i in range(len(frames)):
            res = tu.dp_poll(self, port_number=slow, timeout=10)
            self.assertIsInstance(res, self.dataplane.PollSuccess, f"packet {i} missing")
            got = Ether(res.packet)
            if got[MLTCP].job_id == 7:
                marked.append(got[IP].tos & 3 == 3)
        return marked

    def runTest(self):
        slow = self.p["slow_port"]
        self.slow_bmv2_port(slow)
        self.route("10.0.3.0/24", H3_MAC, slow)
        port_k, behind_k, n, window_s = 10, 4, 16, 1.0
        self.ecn_threshold(slow, port_k)
        self.progress_ecn(slow, 0, behind_k)
        te = sh.TableEntry("MyEgress.progress_contest")(action="MyEgress.set_contest_window")
        te.match["standard_metadata.egress_port"] = str(slow)
        te.action["window"] = str(int(window_s * 1e6))
        te.insert()
        cases = [("alone", None, port_k), ("after-job-9", 9, behind_k)]
        for c, (name, lead, k) in enumerate(cases):
            marked = self._burst(lead, n, 45000 + 100 * c)
            first = marked.index(True) if True in marked else None
            print(
                f"PROGRESS-CONTEST {name} expected_K={k} first_marked_index={first} marked={sum(marked)}/{n}",
                flush=True,
            )
            self.assertIsNotNone(first, f"{name}: no mark (K={k})")
            # the lead packet queues ahead of job 7's: its burst sees one more packet
            self.assertTrue(not any(marked[: k - (1 if lead else 0)]), f"{name}: CE before K={k}: {marked}")
            self.assertLessEqual(first, k + 2, f"{name}: first CE at {first}, K={k}")
        time.sleep(window_s + 0.5)  # the window passes: job 7 alone again
        marked = self._burst(None, n, 45300)
        first = marked.index(True) if True in marked else None
        print(f"PROGRESS-CONTEST expired expected_K={port_k} first_marked_index={first}", flush=True)
        self.assertTrue(first is not None and not any(marked[:port_k]) and first <= port_k + 2, marked)
        tu.verify_no_other_packets(self)


class JobCounters(MltcpTest):
    """job_tx counts exactly the MLTCP packets and bytes sent per job; job_bytes_ratio is the last."""

    def runTest(self):
        self.route("10.0.2.0/24", H2_MAC, OUT_PORT)
        n = int(self.p["counter_packets"])
        jobs = {3: 150, 17: 300, 1000: 600}  # job -> frame size
        frames = []
        for job, size in jobs.items():
            frames += [bytes(mltcp_pkt(job=job, size=size, ratio=(i * 7) % 65536)) for i in range(n)]
        random.Random(self.p["seed"]).shuffle(frames)
        # non-MLTCP traffic and a job id beyond the counter must not disturb the counts
        frames += [bytes(mltcp_pkt(job=4000))] * 10
        frames += [bytes(Ether(dst=SWITCH_MAC) / IP(dst="10.0.2.2") / UDP(dport=5555) / (b"u" * 80))] * 10
        t0 = time.monotonic()
        self.send_raw(IN_PORT, frames, pace_every=500, pause=0.002)
        dt = time.monotonic() - t0
        results = {}
        for job, size in jobs.items():
            results[job] = self.wait_counter("MyIngress.job_tx", job, n, timeout=30)
        print(
            f"JOB-COUNTERS sent {n} per job in {dt:.2f}s: "
            + ", ".join(
                f"job {j}: {p} pkts {b} bytes (sent {n} pkts {n * jobs[j]} bytes)" for j, (p, b) in results.items()
            ),
            flush=True,
        )
        for job, size in jobs.items():
            self.assertEqual(results[job], (n, n * size), f"job {job}")
        every = list(sh.CounterEntry("MyIngress.job_tx").read())
        self.assertEqual(sum(e.data.msg().packet_count for e in every), n * len(jobs))
        # job_bytes_ratio holds the bytes_ratio of each job's last packet (in sending order)
        last = {}
        shim = 14 + 20 + 8
        for f in frames:
            if f[12:14] == b"\x08\x00" and f[23] == 17 and f[shim - 6 : shim - 4] == b"\x23\xef":
                last[int.from_bytes(f[shim + 2 : shim + 4], "big")] = int.from_bytes(f[shim + 8 : shim + 10], "big")
        for job in jobs:
            self.assertEqual(self.register("MyIngress.job_bytes_ratio", job), last[job], f"job {job}")
        self.dataplane.flush()


class IpOptionProgress(MltcpTest):
    """The MLTCP IPv4 option (IHL 7, kind 94, length 8) counts like a shim: job_tx, job_bytes_ratio;
    it is forwarded intact. Another 8-byte option is skipped (forwarded, not counted); the option
    with version != 1 is a parser error."""

    def runTest(self):
        self.route("10.0.2.0/24", H2_MAC, OUT_PORT)
        pkt = ipopt_pkt(job=5, ratio=0x1234, size=300)
        for _ in range(3):
            tu.send_packet(self, IN_PORT, pkt)
            tu.verify_packet(self, expect_forwarded(pkt, H2_MAC), OUT_PORT)
        got = self.wait_counter("MyIngress.job_tx", 5, 3)
        ratio = self.register("MyIngress.job_bytes_ratio", 5)
        other = (
            Ether(dst=SWITCH_MAC, src=H1_MAC)
            / IP(src="10.0.1.1", dst="10.0.2.2", ttl=64, options=[IPOption(b"\x44\x08\x05\x00" + bytes(4))])
            / TCP(sport=1, dport=2)
            / (b"o" * 50)
        )
        tu.send_packet(self, IN_PORT, other)
        tu.verify_packet(self, expect_forwarded(other, H2_MAC), OUT_PORT)
        before = self.counter("MyIngress.parse_errors", 0)[0]
        tu.send_packet(self, IN_PORT, ipopt_pkt(job=6, version=2))
        errors = self.wait_counter("MyIngress.parse_errors", 0, before + 1)[0] - before
        total = sum(e.data.msg().packet_count for e in sh.CounterEntry("MyIngress.job_tx").read())
        print(f"IPOPT job_tx[5]={got} bytes_ratio={ratio:#06x} parse_errors+{errors} job_tx_total={total}", flush=True)
        self.assertEqual(got, (3, 3 * len(pkt)))
        self.assertEqual(ratio, 0x1234)
        self.assertEqual(errors, 1)
        self.assertEqual(total, 3)  # neither the other option nor the bad version counted
        tu.verify_no_other_packets(self)


class MalformedHeaders(MltcpTest):
    """Scapy-fuzzed and truncated headers: counted in parse_errors, dropped, target survives."""

    def _malformed(self, rng: random.Random) -> list[bytes]:
        good = bytes(mltcp_pkt(job=9))
        out = []
        for _ in range(int(self.p["fuzz_count"])):
            kind = rng.randrange(5)
            if kind == 0:  # truncated inside IPv4, UDP or the shim
                out.append(good[: rng.randrange(14, 14 + 20 + 8 + 12)])
            elif kind == 1:  # fuzzed shim with a wrong version
                v = rng.choice([0] + list(range(2, 16)))
                sh_ = fuzz(MLTCP(version=v))
                out.append(
                    bytes(
                        Ether(dst=SWITCH_MAC)
                        / IP(dst="10.0.2.2", frag=0, flags=0)
                        / UDP(sport=rng.randrange(1, 65536), dport=9199)
                        / sh_
                    )
                )
            elif kind == 2:  # fuzzed IPv4 header with IHL < 5
                ip = fuzz(IP(ihl=rng.randrange(0, 5), version=4, dst="10.0.2.2"))
                out.append(bytes(Ether(dst=SWITCH_MAC) / ip / (b"\x00" * rng.randrange(0, 40))))
            elif kind == 3:  # IPv4 options announced but cut short
                ihl = rng.randrange(6, 16)
                hdr = bytes(IP(dst="10.0.2.2", options=b"\x01" * ((ihl - 5) * 4)))
                out.append(bytes(Ether(dst=SWITCH_MAC, type=0x0800)) + hdr[: rng.randrange(20, ihl * 4)])
            else:  # truncated TCP
                tcp = bytes(Ether(dst=SWITCH_MAC) / IP(dst="10.0.2.2", frag=0, flags=0) / fuzz(TCP()))
                out.append(tcp[: rng.randrange(14 + 20, 14 + 20 + 20)])
        return out

    def runTest(self):
        self.route("10.0.2.0/24", H2_MAC, OUT_PORT)
        bad = self._malformed(random.Random(self.p["seed"]))
        before = self.counter("MyIngress.parse_errors", 0)[0]
        self.send_raw(IN_PORT, bad, pace_every=200, pause=0.002)
        got = self.wait_counter("MyIngress.parse_errors", 0, before + len(bad))[0] - before
        print(f"FUZZ sent {len(bad)} malformed packets, parse_errors +{got}", flush=True)
        self.assertEqual(got, len(bad))
        tu.verify_no_other_packets(self)
        self.assertEqual(self.counter("MyIngress.job_tx", 9)[0], 0)
        # still alive: forwards a good packet and answers P4Runtime
        pkt = mltcp_pkt(job=9)
        tu.send_packet(self, IN_PORT, pkt)
        tu.verify_packet(self, expect_forwarded(pkt, H2_MAC), OUT_PORT)
        tu.verify_no_other_packets(self)
        self.assertEqual(self.counter("MyIngress.job_tx", 9)[0], 1)
