"""Ports: AF_PACKET raw sockets on Linux interfaces, driven by two threads.

* ingress thread: poll() over all port sockets, recv each frame, run the pipeline's ingress,
  admit it to the egress port's queue (drop-tail), run egress (ECN marking needs the queue depth
  at enqueue), and put each delivery time on a heap;
* egress thread: sleeps until the earliest delivery time and sends the due frames.

Each frame is queued as of its kernel arrival stamp (SO_TIMESTAMPNS), not as of when the
ingress thread reads it, so the moments this Python process is not scheduled delay frames but
do not take capacity from the emulated link (see ``arrival_time``).

Interfaces must be up. The switch opens them in promiscuous mode and ignores frames it sent
itself; a port's socket never holds another interface's frames (``packet_socket``). Offloads:
the *peers* that send into the switch should have TSO/GSO/GRO off (``disable_offloads``):
super-frames above the MTU cannot be forwarded and are dropped (counted as ``oversize``, with
one warning). Frames whose TCP/UDP checksum the sender left to the NIC
(TX checksum offload on; PACKET_AUXDATA says so) get it finished here (``csum_fixed``).

Lossless strict-priority queues (a port's ``LinkConfig.pfc_headroom`` > 0): a priority queue that
reaches XOFF (its buffer less the headroom) sends an 802.1Qbb PFC pause frame for that priority out
of the port the frame came in on, refreshed every PFC_REFRESH_S; at XON (the buffer less twice the
headroom) a resume frame (quanta 0). The switch's peers must obey them (the userspace transport's
``pfc_ifname``); the headroom takes what they send before they stop.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import logging
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from mltcp import offloads
from mltcp.traffic.pause import MAX_QUANTA, pause_frame

from .links import EgressQueue, LinkConfig
from .pipeline import Pipeline

log = logging.getLogger("mltcp.switch.dataplane")

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_IGNORE_OUTGOING = 23
PACKET_AUXDATA = 8
PACKET_STATISTICS = 6
TP_STATUS_CSUMNOTREADY = 8
PACKET_OUTGOING = 4
MAX_FRAME = 65536
RX_BATCH = 64
SO_TIMESTAMPNS = 35  # SO_TIMESTAMPNS_OLD: struct timespec (CLOCK_REALTIME) of the frame's arrival
AUX_SPACE = socket.CMSG_SPACE(20) + socket.CMSG_SPACE(16)
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
SOCKET_BUFFER = 16 << 20
PFC_REFRESH_S = 0.1  # a pause is sent again this often while its queue stays above XON
PFC_SRC_MAC = bytes.fromhex("024d4c5443fd")  # locally administered; "MLTC" + fd


def complete_l4_checksum(frame: bytes) -> bytes:
    """Finish the TCP/UDP checksum of an IPv4 frame whose sender left it to the NIC
    (CHECKSUM_PARTIAL: the field holds the pseudo-header sum). Other frames come back as is."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return frame
    ihl = (frame[14] & 0x0F) * 4
    proto = frame[23]
    off = {6: 16, 17: 6}.get(proto)
    l4 = 14 + ihl
    end = 14 + int.from_bytes(frame[16:18], "big")
    if off is None or end > len(frame) or end < l4 + off + 2:
        return frame
    seg = frame[l4:end]
    if len(seg) & 1:
        seg += b"\x00"
    # ones'-complement sum of 16-bit words == the big integer modulo 0xFFFF (2**16 = 1 mod 0xFFFF)
    total = int.from_bytes(seg, "big") % 0xFFFF
    csum = (~total & 0xFFFF) if total else 0  # total 0 means the sum was 0xFFFF (or all zero)
    if proto == 17 and csum == 0:
        csum = 0xFFFF
    b = bytearray(frame)
    b[l4 + off : l4 + off + 2] = csum.to_bytes(2, "big")
    return bytes(b)


def read_ancillary(anc) -> tuple[bool, float | None]:
    """(checksum left to the NIC, kernel arrival stamp in CLOCK_REALTIME seconds or None) from
    the ancillary data of one ``recvmsg`` on a port socket."""
    csum_pending, stamp = False, None
    for level, kind, data in anc:
        if level == SOL_PACKET and kind == PACKET_AUXDATA:
            csum_pending = bool(struct.unpack_from("I", data)[0] & TP_STATUS_CSUMNOTREADY)
        elif level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = struct.unpack_from("qq", data)
            stamp = sec + nsec * 1e-9
    return csum_pending, stamp


def arrival_time(stamp: float | None, now: float, real_minus_mono: float, window: float = 1.0) -> float:
    """The monotonic time a frame stamped ``stamp`` (CLOCK_REALTIME) arrived, if plausible, else now.

    The link serves frames from when they arrived, not from when the ingress thread got to them:
    a moment the switch is not scheduled then delays frames (they leave in a burst once it runs
    again) but takes no capacity from the link. Serving from ``now`` instead loses the link's
    time for every such moment, which builds a standing queue, and drops, behind a sender paced
    at the line rate. Stamps older than ``window`` or from the future (clock steps) are ignored."""
    if stamp is None:
        return now
    t = stamp - real_minus_mono
    return t if now - window < t <= now else now


def packet_socket(ifname: str) -> socket.socket:
    """A raw AF_PACKET socket that receives the frames of ``ifname`` only, from its first moment.

    ``socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL))`` receives the frames of *every* interface
    from the moment it exists, and those that arrive before ``bind`` narrows it to one interface
    stay queued (packet(7)): a port would take other links' frames for its own. So: protocol 0
    (no frames at all), then bind to the interface for all protocols."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        s.bind((ifname, ETH_P_ALL))  # Python puts the protocol into network order itself
    except BaseException:
        s.close()
        raise
    return s


def open_port_socket(ifname: str) -> socket.socket:
    """A non-blocking raw socket bound to ``ifname`` (promiscuous, own frames ignored)."""
    try:
        ifindex = socket.if_nametoindex(ifname)
    except OSError:
        raise OSError(f"interface {ifname!r} does not exist") from None
    s = packet_socket(ifname)
    try:
        mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
        s.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        try:
            s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError:  # kernel < 4.20: filtered by pkttype in the receive loop
            pass
        s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)  # tells us about unfinished checksums
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # arrival times (see arrival_time)
        # big buffers absorb the moments this process is not scheduled; the *FORCE variants
        # (root) go beyond net.core.rmem_max/wmem_max (212 KB by default, ~90 full frames)
        for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:
                s.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER)
            except OSError:
                s.setsockopt(socket.SOL_SOCKET, plain, SOCKET_BUFFER)
        s.setblocking(False)
    except BaseException:
        s.close()
        raise
    return s


def disable_offloads(ifname: str, netns: str | None = None) -> None:
    """ethtool -K IF tx off tso off gso off gro off (optionally inside ``ip netns exec NS``)."""
    offloads.disable(ifname, netns, check=True)


def _mtu(ifname: str) -> int:
    try:
        with open(f"/sys/class/net/{ifname}/mtu") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1500


@dataclass
class PortStats:
    rx: int = 0
    rx_bytes: int = 0
    tx: int = 0
    tx_bytes: int = 0
    tx_errors: int = 0
    ecn_marked: int = 0
    csum_fixed: int = 0  # frames whose TCP/UDP checksum the switch finished (peer offload on)
    oversize: int = 0  # GSO/GRO super-frames above the MTU: dropped
    rx_socket_drops: int = 0  # frames the kernel dropped because the switch did not read in time
    pfc_pause_sent: int = 0  # lossless priority queues: PFC pause frames sent for this egress port's queues
    pfc_resume_sent: int = 0  # ... and resume (quanta 0) frames


@dataclass
class Port:
    number: int
    ifname: str
    sock: socket.socket
    queue: EgressQueue
    stats: PortStats = field(default_factory=PortStats)
    max_frame: int = 1514
    pending: int = 0  # frames of this port on the egress heap or being sent by the egress thread
    tx_busy: bool = False  # strict priority: a frame is on the line (its end is on the egress heap)


class Dataplane:
    """Forward between ``interfaces`` (port number -> ifname) through ``pipeline``."""

    def __init__(
        self,
        pipeline: Pipeline,
        interfaces: dict[int, str],
        links: dict[int, LinkConfig] | LinkConfig | None = None,
        clock=time.monotonic,
    ) -> None:
        if not interfaces:
            raise ValueError("no interfaces given")
        self.pipeline = pipeline
        self.clock = clock
        base = links if isinstance(links, LinkConfig) else LinkConfig()
        per_port = links if isinstance(links, dict) else {}
        self.ports: dict[int, Port] = {}
        try:
            for num, ifname in interfaces.items():
                if not 0 <= num < 511:
                    raise ValueError(f"port number {num} not in 0..510 (bit<9>, 511 = drop)")
                cfg = per_port.get(num, base)
                self.ports[num] = Port(
                    num, ifname, open_port_socket(ifname), EgressQueue(cfg), max_frame=_mtu(ifname) + 18
                )  # + Ethernet and VLAN tag
        except BaseException:
            self.close()
            raise
        self._by_fd = {p.sock.fileno(): p for p in self.ports.values()}
        self._heap: list = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._running = False
        self._threads: list[threading.Thread] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self.no_route = 0
        # strict priority: (port, job id) -> [priority its waiting frames are in, how many wait]
        self._pins: dict[tuple[int, int], list[int]] = {}
        # lossless priority queues (LinkConfig.pfc_headroom): (egress port, priority) -> {ingress
        # port paused: when its pause frame was sent}; a queue with nothing paused has no entry
        self._paused: dict[tuple[int, int], dict[int, float]] = {}

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._running = True
        self._threads = [
            threading.Thread(target=self._ingress_loop, name="sw-ingress", daemon=True),
            threading.Thread(target=self._egress_loop, name="sw-egress", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._running = False
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=5)
        self._threads = []
        self.close()

    def close(self) -> None:
        for p in self.ports.values():
            if p.sock.fileno() >= 0:
                self._socket_drops(p)
            p.sock.close()
        for s in (getattr(self, "_wake_r", None), getattr(self, "_wake_w", None)):
            if s is not None:
                s.close()

    # ------------------------------------------------------------------ data path
    def process(self, frame: bytes, in_port: int, now: float) -> None:
        """Ingress + queueing + egress for one received frame (called by the ingress thread)."""
        pipe = self.pipeline
        if not pipe.active:
            return
        res = pipe.ingress(frame, in_port)
        if res is None:
            return
        port = self.ports.get(res.port)
        if port is None:  # routed to a port this switch does not have
            self.no_route += 1
            return
        n = len(res.buf)
        q = port.queue
        if pipe.progress_priority:  # priority-by-progress entries: strict priority at the port
            self._enqueue_priority(port, res, n, now, in_port)
            return
        depth = q.admit(now, n)
        if depth is None:
            return
        if pipe.egress(res, depth, now):
            port.stats.ecn_marked += 1
        times = q.schedule(now, n)
        if not times:
            return
        buf = bytes(res.buf)
        with self._cond:
            if port.pending == 0 and times[-1] <= now:
                # due already (unshaped, no delay) and nothing of this port in flight: send it
                # here, saving the egress thread a wake-up; FIFO order per port is kept
                direct = True
            else:
                direct = False
                heap = self._heap
                head = heap[0][0] if heap else None
                for t in times:
                    heapq.heappush(heap, (t, next(self._seq), port, buf))
                port.pending += len(times)
                if head is None or times[0] < head:
                    self._cond.notify()
        if direct:
            for _ in times:
                self._send(port, buf)

    def _enqueue_priority(self, port: Port, res, n: int, now: float, in_port: int = -1) -> None:
        """Strict priority: the frame waits in its priority's queue; it is timed when the line
        takes it (_start_tx), not on arrival. A job's frame goes where frames of that job still
        wait, and to its own priority only once none do (priority_pin: a job that moves up a band
        does not overtake its own frames, which its receiver would take for loss). With
        ``pfc_headroom`` the queues are lossless: a queue at its XOFF depth pauses the port the
        frame came in on (a PFC frame for that priority), and _start_tx resumes it."""
        q = port.queue
        cfg = q.cfg
        job = res.parsed.job_id
        pinned = job >= 0 and cfg.priority_pin
        with self._cond:
            key = (port.number, job)
            pin = self._pins.get(key) if pinned else None
            prio = pin[0] if pin is not None and pin[1] > 0 else res.priority
            depth = q.admit_priority(now, prio)
            if depth is None:
                return
            if self.pipeline.egress(res, depth, now):
                port.stats.ecn_marked += 1
            if pinned:
                self._pins[key] = [prio, (pin[1] if pin is not None else 0) + 1]
            q.push(prio, n, (bytes(res.buf), key if pinned else None), now)
            if cfg.pfc_headroom and in_port in self.ports and q.prio_depth(prio) >= cfg.buffer_pkts - cfg.pfc_headroom:
                sent = self._paused.get((port.number, prio), {}).get(in_port, -1e9)
                if now - sent > PFC_REFRESH_S:
                    self._pfc(port, prio, in_port, MAX_QUANTA, now)
            if not port.tx_busy:
                self._start_tx(port, now)

    def _pfc(self, port: Port, prio: int, in_port: int, quanta: int, now: float) -> None:
        """(Holding ``_cond``.) A PFC frame for ``prio`` out of ``in_port``, for ``port``'s queue:
        pause (``quanta`` > 0; refreshed every PFC_REFRESH_S while the queue stays above XON) or
        resume (0)."""
        self._send(self.ports[in_port], pause_frame(PFC_SRC_MAC, quanta, 1 << prio))
        key = (port.number, prio)
        if quanta:
            self._paused.setdefault(key, {})[in_port] = now
            port.stats.pfc_pause_sent += 1
        else:
            paused = self._paused.get(key, {})
            paused.pop(in_port, None)
            if not paused:  # nothing paused for this queue: no check at its departures
                self._paused.pop(key, None)
            port.stats.pfc_resume_sent += 1

    def _pfc_departure(self, port: Port, now: float) -> None:
        """(Holding ``_cond``.) After a frame left ``port``: resume the ports paused for a queue
        now at or below XON (buffer - 2 x headroom), refresh the other pauses."""
        cfg = port.queue.cfg
        xon = max(0, cfg.buffer_pkts - 2 * cfg.pfc_headroom)
        for (pnum, prio), paused in list(self._paused.items()):
            if pnum != port.number:
                continue
            low = port.queue.prio_depth(prio) <= xon
            for in_port, sent in list(paused.items()):
                if low:
                    self._pfc(port, prio, in_port, 0, now)
                elif now - sent > PFC_REFRESH_S:
                    self._pfc(port, prio, in_port, MAX_QUANTA, now)

    def _start_tx(self, port: Port, now: float) -> None:
        """(Holding ``_cond``.) Put the next strict-priority frame of ``port`` on its line if the
        line is free at ``now``: its deliveries and the end of its transmission go on the egress
        heap, where that end starts the next one. With the line still busy (frames timed before
        the entries came), the heap gets a wake-up for when it frees."""
        q = port.queue
        heap = self._heap
        head = heap[0][0] if heap else None
        nxt = q.next_frame(now)
        if nxt is None:
            port.tx_busy = bool(q.waiting())
            if not port.tx_busy:
                return
            first = q.line_free_at()
            heapq.heappush(heap, (first, next(self._seq), port, None))
        else:
            done, times, (buf, key) = nxt
            if key is not None:
                pin = self._pins[key]
                pin[1] -= 1
                if pin[1] == 0:  # none of that job's frames wait: it may change priority
                    del self._pins[key]
            if self._paused:
                self._pfc_departure(port, now)
            for t in times:
                heapq.heappush(heap, (t, next(self._seq), port, buf))
            port.pending += len(times)
            heapq.heappush(heap, (done, next(self._seq), port, None))
            port.tx_busy = True
            first = min(times + [done])
        if head is None or first < head:
            self._cond.notify()

    @staticmethod
    def _send(port: Port, buf: bytes) -> None:
        try:
            port.sock.send(buf)
            port.stats.tx += 1
            port.stats.tx_bytes += len(buf)
        except OSError:
            port.stats.tx_errors += 1

    def _ingress_loop(self) -> None:
        poller = select.poll()
        for fd in self._by_fd:
            poller.register(fd, select.POLLIN)
        poller.register(self._wake_r.fileno(), select.POLLIN)
        by_fd = self._by_fd
        clock = self.clock
        stamped = clock is time.monotonic  # kernel stamps only make sense on the real clock
        real_minus_mono = 0.0
        while self._running:
            try:
                events = poller.poll(500)
            except InterruptedError:
                continue
            real_minus_mono = time.time() - time.monotonic()  # follows NTP steps
            batch: list[tuple[float, int, int, bytes]] = []
            for fd, _ev in events:
                port = by_fd.get(fd)
                if port is None:
                    continue
                sock = port.sock
                st = port.stats
                for _ in range(RX_BATCH):
                    try:
                        frame, anc, _flags, addr = sock.recvmsg(MAX_FRAME, AUX_SPACE)
                    except BlockingIOError:
                        break
                    except OSError as e:  # interface went down or away: the error is one-shot
                        if not self._running:
                            return
                        if e.errno not in (errno.ENETDOWN, errno.ENXIO, errno.ENODEV):
                            log.error("port %d (%s): receive failed: %s", port.number, port.ifname, e)
                        break
                    if addr[2] == PACKET_OUTGOING:
                        continue
                    st.rx += 1
                    st.rx_bytes += len(frame)
                    csum_pending, stamp = read_ancillary(anc)
                    if csum_pending:
                        frame = complete_l4_checksum(frame)
                        st.csum_fixed += 1
                    if len(frame) > port.max_frame:
                        st.oversize += 1
                        if st.oversize == 1:
                            log.warning(
                                "port %d (%s): %d-byte frame above the MTU dropped: turn "
                                "off TSO/GSO/GRO on the peer (ethtool -K PEER tso off gso "
                                "off gro off)",
                                port.number,
                                port.ifname,
                                len(frame),
                            )
                        continue
                    now = clock()
                    if stamped:
                        now = arrival_time(stamp, now, real_minus_mono)
                    batch.append((now, len(batch), port.number, frame))
            # Frames from all ports in the order they arrived, as a switch's input arbiter would
            # see them. Port by port (poll order), the first port's frames would always take the
            # queue's free slots and the other ports' frames would find it full: a fixed
            # drop bias against one sender whenever both send faster than the line.
            if len(events) > 1:
                batch.sort()
            for now, _i, number, frame in batch:
                try:
                    self.process(frame, number, now)
                except Exception:  # the pipeline must never take the switch down
                    log.exception("dropping a frame that made the pipeline fail")

    def _egress_loop(self) -> None:
        cond = self._cond
        heap = self._heap
        clock = self.clock
        while self._running:
            due = []
            with cond:
                while self._running:
                    if not heap:
                        cond.wait(0.5)
                        continue
                    now = clock()
                    t = heap[0][0]
                    if t > now:
                        cond.wait(t - now)
                        continue
                    while heap and heap[0][0] <= now:
                        ev = heapq.heappop(heap)
                        if ev[3] is None:  # a strict-priority line is free: its next frame, from then
                            self._start_tx(ev[2], ev[0])
                        else:
                            due.append(ev)
                    break
            for _t, _s, port, buf in due:
                self._send(port, buf)
            if due:
                with cond:  # only now may the ingress thread send this port's frames directly
                    for _t, _s, port, _b in due:
                        port.pending -= 1

    def _socket_drops(self, p: Port) -> None:
        try:  # reading PACKET_STATISTICS resets the kernel's counters: accumulate
            _pkts, drops = struct.unpack("II", p.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
            p.stats.rx_socket_drops += drops
        except OSError:  # socket already closed
            pass

    def stats(self) -> dict[int, dict]:
        out = {}
        for n, p in self.ports.items():
            self._socket_drops(p)
            q = p.queue
            out[n] = dict(
                vars(p.stats),
                ifname=p.ifname,
                enqueued=q.enqueued,
                dropped=q.dropped,
                lost=q.lost,
                duplicated=q.duplicated,
                reordered=q.reordered,
            )
        return out
