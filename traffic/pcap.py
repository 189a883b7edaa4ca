"""pcap files for MLTCP runs (scapy): write, read back into per-iteration records, replay.

* :func:`write_records` writes a synthetic replay of per-iteration records as MLTCP-shimmed UDP
  packets (the userspace transport's header after the shim, payload not stored, like a snaplen
  capture: ``wirelen`` keeps the real size). A sample of ``packets_per_iter`` full-size segments
  stands for each iteration, the first at its first stream byte and the last ending at its last,
  so the seq range gives the bytes; ``drops`` become retransmitted packets and ``marks``
  CE-marked ones, so the records survive the round trip.
* :func:`read_records` derives per-job iteration records from any capture: packets carrying the
  MLTCP shim are grouped by (job id, iteration), the iteration ending at its last data packet or
  the last ACK echoing it, whichever is later; other flows by 5-tuple, a new iteration starting
  after an idle gap. ``start`` of an iteration is the end of the previous one (training computes
  right after communicating); the first iteration's start is its comm_start minus the median
  compute gap of the rest.
* :func:`replay` sends a capture's packets out of an interface (optionally inside a network
  namespace, via ``ip netns exec``) with their original timing.

A capture of a real run: ``tcpdump -i IFACE -s 128 -w run.pcap udp port 9199`` next to
``mltcp traffic send``, then ``mltcp traffic pcap-records run.pcap``.
"""

from __future__ import annotations

import re
import shutil
import socket
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.config import conf
from scapy.utils import PcapReader, PcapWriter, RawPcapReader

from mltcp import nsexec
from mltcp.records import IterationRecord

from .header import FLAG_ACK, FLAG_ITER_START, MLTCP, MLTCP_UDP_PORT, ratio_to_q16
from .transport import wire

DEFAULT_EPOCH = 1_700_000_000.0  # synthetic captures start here (deterministic files)
SHIM_LEN = 12


class PcapError(ValueError):
    pass


def _job_ids(labels) -> dict[str, int]:
    ids, used = {}, set()
    for lab in labels:
        m = re.fullmatch(r"(?:job)?(\d+)", str(lab))
        if m and int(m.group(1)) <= 0xFFFF and int(m.group(1)) not in used:
            ids[lab] = int(m.group(1))
            used.add(ids[lab])
    n = 1
    for lab in sorted(set(labels) - set(ids), key=str):
        while n in used:
            n += 1
        ids[lab] = n
        used.add(n)
    return ids


def write_records(
    records,
    path,
    packets_per_iter: int = 8,
    epoch: float = DEFAULT_EPOCH,
    job_ids: dict | None = None,
    payload: int = wire.DEFAULT_PAYLOAD,
    dst: str = "10.0.1.1",
    nano: bool = False,
) -> int:
    """Synthetic capture of ``records``; returns the number of packets written."""
    if packets_per_iter < 1:
        raise ValueError("packets_per_iter must be >= 1")
    labels = sorted({r.job for r in records}, key=str)
    ids = dict(job_ids) if job_ids else _job_ids(labels)
    missing = [lab for lab in labels if lab not in ids]
    if missing:
        raise ValueError(f"no job id for {missing}")
    pkts = []
    seqs: dict[str, int] = defaultdict(int)
    for r in sorted(records, key=lambda r: (r.comm_start, str(r.job), r.iteration)):
        jid = ids[r.job]
        nbytes = int(r.bytes)
        marks, drops = int(r.marks), int(r.drops)
        n = max(1, min(packets_per_iter, nbytes) if nbytes else 1, marks)
        bounds = [seqs[r.job] + (nbytes * k) // n for k in range(n + 1)]
        span = r.end - r.comm_start
        step = span / max(1, n + drops - 1)
        slots = []
        for k in range(n):  # a sample of full-size segments; the last one ends the iteration
            length = min(payload, bounds[k + 1] - bounds[k])
            seq = bounds[k] if k < n - 1 else bounds[n] - length
            slots.append((seq, length, k == 0, False))
        for k in range(drops):  # retransmissions of the first segments
            s = slots[k % n]
            slots.append((s[0], s[1], s[2], True))
        slots.sort(key=lambda s: (s[0], s[3]))
        for idx, (seq, length, first, retx) in enumerate(slots):
            t = r.comm_start + (span if idx == len(slots) - 1 else step * idx)
            ratio = (seq + length - seqs[r.job]) / nbytes if nbytes else 1.0
            shim = MLTCP(
                flags=FLAG_ITER_START if first else 0,
                job_id=jid,
                iteration=int(r.iteration),
                bytes_ratio=ratio_to_q16(min(1.0, ratio)),
            )
            tflags = wire.T_DATA | (wire.T_RETX if retx else 0)
            head = wire.encode(
                0, jid, int(r.iteration), 0, jid, seq, 0, int((t - r.comm_start) * 1e6), 0, length, tflags
            )[wire.SHIM_LEN :]
            tos = 0x03 if idx < marks else 0x02
            p = (
                Ether(src="02:00:00:00:00:%02x" % (jid & 0xFF), dst="02:00:00:00:01:01")
                / IP(src=f"10.0.{(jid >> 8) & 0xFF}.{(jid & 0xFF) or 254}", dst=dst, tos=tos)
                / UDP(sport=40000 + (jid % 20000), dport=MLTCP_UDP_PORT)
                / shim
                / Raw(head)
            )
            p.time = epoch + t
            p.wirelen = len(p) + length  # the payload bytes are not stored (snaplen-style)
            pkts.append(p)
        seqs[r.job] += nbytes
    pkts.sort(key=lambda p: float(p.time))
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        w = PcapWriter(str(tmp), linktype=1, nano=nano, sync=False)
        for p in pkts:
            w.write(p)
        w.close()
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return len(pkts)


def _payload_len(pkt, l4) -> int:
    """Transport payload bytes on the wire (from wirelen when the capture was truncated)."""
    wirelen = getattr(pkt, "wirelen", None) or len(pkt)
    captured_before = len(pkt) - len(l4.payload)
    return max(0, wirelen - captured_before)


DLT_EN10MB = 1  # Ethernet
_IPV4 = b"\x08\x00"


class _Header(NamedTuple):
    src: str
    dst: str
    proto: int
    sport: int
    dport: int
    payload: int  # transport payload bytes, from the IP total length (right under a snaplen)
    ce: bool


def _ethernet_ipv4(frame: bytes) -> _Header | None:
    """The IPv4 TCP/UDP header fields of an Ethernet frame, read in place (scapy's dissection is
    ~100x slower and a capture of a DDP run holds about a million packets); None for anything
    else, which then goes through scapy."""
    if len(frame) < 34 or frame[12:14] != _IPV4 or frame[14] >> 4 != 4:
        return None
    ihl = (frame[14] & 0x0F) * 4
    proto = frame[23]
    l4 = 14 + ihl
    if proto not in (6, 17) or len(frame) < l4 + (13 if proto == 6 else 8):
        return None
    total = int.from_bytes(frame[16:18], "big")
    hdr = (frame[l4 + 12] >> 4) * 4 if proto == 6 else 8
    sport, dport = int.from_bytes(frame[l4 : l4 + 2], "big"), int.from_bytes(frame[l4 + 2 : l4 + 4], "big")
    return _Header(
        socket.inet_ntoa(frame[26:30]),
        socket.inet_ntoa(frame[30:34]),
        proto,
        sport,
        dport,
        max(0, total - ihl - hdr),
        (frame[15] & 0x3) == 0x3,
    )


def _frames(reader):
    """(time, wire length, link type, frame bytes) of each packet of a RawPcapReader (pcap or pcapng)."""
    nano = getattr(reader, "nano", False)
    for frame, m in reader:
        if hasattr(m, "sec"):
            yield m.sec + m.usec / (1e9 if nano else 1e6), m.wirelen, reader.linktype, frame
        else:
            yield ((m.tshigh << 32) + m.tslow) / m.tsresol, m.wirelen, m.linktype, frame


class _Group:
    __slots__ = ("first", "last", "bytes", "marks", "drops", "ranges", "seen")

    def __init__(self, t):
        self.first = self.last = t
        self.bytes = self.marks = self.drops = 0
        self.ranges: dict[int, list[int]] = {}  # conn -> [min seq, max end]
        self.seen: set = set()


def read_records(
    path, epoch: float | None = None, idle_gap: float | None = None, job_names: dict | None = None, ports=()
) -> list[IterationRecord]:
    """Per-job iteration records from a capture (see module docstring). The shim is recognised
    on UDP port 9199 and on any of ``ports`` (for runs on other ports). Times are seconds after
    ``epoch`` (Unix time; default the first packet), and packets before it are left out (a run's
    setup)."""
    ports = set(ports)
    path = Path(path)
    if not path.exists():
        raise PcapError(f"{path}: no such file")
    shim_groups: dict[tuple, _Group] = {}
    acks: dict[tuple, float] = {}
    flows: dict[tuple, list] = defaultdict(list)  # 5-tuple -> [(t, bytes, ce)]
    t_first = None

    def dissected(pkt, t) -> None:  # through scapy: the shim, other link types
        ip = pkt.getlayer(IP)
        if ip is None:
            return
        ce = (ip.tos & 0x3) == 0x3
        m = pkt.getlayer(MLTCP)
        if m is None and ports:
            udp = pkt.getlayer(UDP)
            if udp is not None and (udp.sport in ports or udp.dport in ports):
                raw = bytes(udp.payload)
                if len(raw) >= SHIM_LEN and raw[0] >> 4 == 1:
                    m = MLTCP(raw)
        if m is not None and m.version == 1:
            key = (m.job_id, m.iteration)
            if int(m.flags) & FLAG_ACK:  # the iteration ends when its last byte is acked
                acks[key] = max(acks.get(key, t), t)
                return
            g = shim_groups.get(key)
            if g is None:
                g = shim_groups[key] = _Group(t)
            g.first, g.last = min(g.first, t), max(g.last, t)
            g.marks += ce
            body = bytes(m.payload)
            if len(body) >= wire.HDR_LEN:
                conn, seq, _ack, _tv, _te, length, tflags, _n, _ce, _r = wire.HDR.unpack_from(body, 0)
                if tflags & wire.T_DATA:
                    r = g.ranges.setdefault(conn, [seq, seq + length])
                    r[0], r[1] = min(r[0], seq), max(r[1], seq + length)
                    if (conn, seq) in g.seen:
                        g.drops += 1
                    g.seen.add((conn, seq))
                    return
            g.bytes += max(0, _payload_len(pkt, pkt[UDP]) - SHIM_LEN)
            return
        l4 = pkt.getlayer(UDP) or pkt.getlayer(TCP)
        if l4 is None:
            return
        n = _payload_len(pkt, l4)
        if n:
            flows[(ip.src, l4.sport, ip.dst, l4.dport, ip.proto)].append((t, n, ce))

    shim_ports = ports | {MLTCP_UDP_PORT}
    try:
        reader = RawPcapReader(str(path))
    except Exception as e:  # scapy raises Scapy_Exception for non-pcap input
        raise PcapError(f"{path}: not a pcap file ({e})") from None
    with reader:
        for t, wirelen, linktype, frame in _frames(reader):
            if epoch is not None and t < epoch:
                continue
            if t_first is None:
                t_first = t
            h = _ethernet_ipv4(frame) if linktype == DLT_EN10MB else None
            if h is None or (h.proto == 17 and (h.sport in shim_ports or h.dport in shim_ports)):
                pkt = conf.l2types.num2layer.get(linktype, Raw)(frame)
                pkt.wirelen = wirelen
                dissected(pkt, t)
            elif h.payload:
                flows[(h.src, h.sport, h.dst, h.dport, h.proto)].append((t, h.payload, h.ce))
    t0 = (t_first or 0.0) if epoch is None else epoch
    names = job_names or {}
    out: list[IterationRecord] = []
    per_job: dict = defaultdict(list)
    for (jid, it), g in shim_groups.items():
        nbytes = (sum(e - s for s, e in g.ranges.values()) / len(g.ranges)) if g.ranges else g.bytes
        end = max(g.last, acks.get((jid, it), g.last))
        per_job[names.get(jid, f"job{jid}")].append([it, g.first - t0, end - t0, nbytes, g.drops, g.marks])
    for key, pk in flows.items():
        pk.sort()
        gaps = [b[0] - a[0] for a, b in zip(pk, pk[1:])]
        thr = idle_gap if idle_gap is not None else max(1e-3, 20 * statistics.median(gaps)) if gaps else 1.0
        label = f"{key[0]}:{key[1]}>{key[2]}:{key[3]}"
        cur = None
        it = 0
        for k, (t, n, ce) in enumerate(pk):
            if cur is None or t - cur[2] - t0 > thr:
                if cur is not None:
                    per_job[label].append(cur)
                    it += 1
                cur = [it, t - t0, t - t0, 0, 0, 0]
            cur[2] = t - t0
            cur[3] += n
            cur[5] += ce
        if cur is not None:
            per_job[label].append(cur)
    for label, rows in per_job.items():
        rows.sort()
        gaps = [b[1] - a[2] for a, b in zip(rows, rows[1:])]
        first_gap = statistics.median(gaps) if gaps else 0.0
        for k, (it, cs, end, nbytes, drops, marks) in enumerate(rows):
            start = rows[k - 1][2] if k else cs - first_gap
            out.append(IterationRecord(label, int(it), start, cs, end, float(nbytes), float(drops), float(marks)))
    out.sort(key=lambda r: (str(r.job), r.iteration))
    return out


def replay_packets(
    path, iface: str, realtime: bool = True, pad: bool = True, count: int | None = None, max_frame: int = 1514
) -> int:
    """Send the capture's packets out of ``iface`` (in this process's namespace); returns how many.
    ``pad`` restores truncated packets to their wire length (zeros), up to ``max_frame`` bytes."""
    from scapy.sendrecv import sendp

    pkts = []
    with PcapReader(str(path)) as reader:
        for pkt in reader:
            if pad:
                wl = min(max_frame, getattr(pkt, "wirelen", None) or len(pkt))
                if wl > len(pkt):
                    t = pkt.time
                    pkt = pkt.__class__(bytes(pkt) + bytes(wl - len(pkt)))
                    pkt.time = t
            pkts.append(pkt)
            if count is not None and len(pkts) >= count:
                break
    if not pkts:
        return 0
    sendp(pkts, iface=iface, realtime=realtime, verbose=False)
    return len(pkts)


def replay(
    path, iface: str, netns: str | None = None, realtime: bool = True, pad: bool = True, count: int | None = None
) -> int:
    """:func:`replay_packets`, run inside network namespace ``netns`` when given."""
    if netns is None:
        return replay_packets(path, iface, realtime, pad, count)
    if shutil.which("ip") is None:
        raise RuntimeError("replay in a namespace needs iproute2's `ip`")
    code = (
        "import sys; from mltcp.traffic.pcap import replay_packets; "
        "print(replay_packets(sys.argv[1], sys.argv[2], sys.argv[3] == '1', sys.argv[4] == '1', "
        "None if sys.argv[5] == '-' else int(sys.argv[5])))"
    )
    cmd = nsexec.argv(
        [
            sys.executable,
            "-c",
            code,
            str(Path(path).resolve()),
            iface,
            "1" if realtime else "0",
            "1" if pad else "0",
            "-" if count is None else str(count),
        ],
        netns,
    )
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"replay in netns {netns} failed: {res.stderr.strip()[-500:]}")
    return int(res.stdout.strip().splitlines()[-1])
