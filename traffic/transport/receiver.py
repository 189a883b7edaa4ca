"""Receiving side: one UDP socket, any number of flows (keyed by peer address and conn_id).

Per datagram: read the ECN codepoint (IP_RECVTOS ancillary data), put the payload in order,
check it against the sender's pattern, and ACK: every ``ack_every`` in-order datagrams, at once
for out-of-order or duplicate data or a due CNP, and at the end of every receive batch.
A CE mark sets ECE on the next ACK; a CE mark also makes the ACK a CNP, at most one per
``cnp_interval`` (50 us) per flow, for the rate-based (DCQCN) senders. ACKs echo the job id,
iteration and bytes_ratio of the latest data, so a switch's per-job state is the same whichever
direction it sees.

Defensive by construction (docs/hardening-inputs.md): every datagram is decoded strictly; data is
checked against the sender's pattern *before* it is taken (a segment whose bytes are not the
pattern at its offset is dropped and counted in ``mismatched``, so it can never be delivered);
only data inside the receive window is taken; out-of-order bytes held are bounded per flow and for
the whole receiver; the number of flows and of iterations tracked per flow are capped.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
import zlib
from dataclasses import dataclass, field

from . import auth, pattern, sockbuf, wire
from .reassembly import Reassembly

CE = 0x03


@dataclass
class IterationSeen:
    iteration: int
    first: float
    last: float
    bytes: int = 0


@dataclass
class FlowReceiver:
    peer: tuple
    conn_id: int
    job_id: int
    created: float
    ra: Reassembly = field(default_factory=Reassembly)
    crc: int = 0
    delivered: int = 0
    datagrams: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    mismatched: int = 0  # bytes dropped because they were not the pattern at their offset
    refused: int = 0  # datagrams outside the receive window / over the buffer budget
    ce: int = 0
    ce_since_ack: int = 0
    pending: int = 0
    last_tsval: int = 0
    last_iteration: int = 0
    last_ratio: int = 0  # Q0.16 bytes_ratio of the latest data, echoed in ACKs
    last_cnp: float = float("-inf")
    cnp_due: bool = False
    cnps: int = 0
    acks: int = 0
    last_rx: float = 0.0
    iterations: dict = field(default_factory=dict)
    key: bytes = b""  # the connection key every datagram's MAC is checked with
    forged: int = 0  # datagrams of this flow dropped because their MAC did not verify

    def summary(self) -> dict:
        return dict(
            peer=f"{self.peer[0]}:{self.peer[1]}",
            conn_id=self.conn_id,
            job=self.job_id,
            bytes=self.delivered,
            crc32=self.crc,
            datagrams=self.datagrams,
            duplicates=self.duplicates,
            out_of_order=self.out_of_order,
            mismatched=self.mismatched,
            refused=self.refused,
            forged=self.forged,
            ce=self.ce,
            cnps=self.cnps,
            acks=self.acks,
            iterations=len(self.iterations),
        )


MAX_FLOWS = 16384  # flows one receiver keeps state for
MAX_HELD = 256 << 20  # out-of-order bytes held over all flows
MAX_ITERATIONS_TRACKED = 1 << 20  # per flow


class Receiver:
    def __init__(
        self,
        bind: tuple[str, int] = ("0.0.0.0", wire.MLTCP_UDP_PORT),
        ack_every: int = 2,
        cnp_interval: float = 50e-6,
        verify: bool = True,
        clock=time.monotonic,
        track_iterations: bool = True,
        window: int = wire.RCV_WINDOW,
        max_flows: int = MAX_FLOWS,
        max_held: int = MAX_HELD,
        authenticate: bool = True,
        psk: bytes | None = None,
    ):
        if not 1 <= window < 1 << 32:
            raise ValueError(f"window must be in 1..2^32-1 bytes (SACK offsets are 32-bit), got {window}")
        if max_flows < 1 or max_held < 0:
            raise ValueError(f"max_flows must be >= 1 and max_held >= 0, got {max_flows}, {max_held}")
        self.window, self.max_flows, self.max_held = window, max_flows, max_held
        self.held = 0  # out-of-order bytes held over all flows
        self.refused_flows = 0  # datagrams that would have opened a flow past max_flows
        # every datagram's MAC checked before anything else (traffic.transport.auth); with a PSK
        # the keys are derived from it, else each flow's key is the one its first datagram sent
        self.authenticate, self.psk = authenticate or psk is not None, psk
        self.unauthenticated = 0  # datagrams of no flow whose MAC (or key) did not verify
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sockbuf.grow(self.sock, rcv=8 << 20)
        self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        self.sock.bind(bind)
        self.sock.setblocking(False)
        self.addr = self.sock.getsockname()
        self.ack_every, self.cnp_interval, self.verify = ack_every, cnp_interval, verify
        self.clock, self.track = clock, track_iterations
        self.t0 = clock()
        self.flows: dict[tuple, FlowReceiver] = {}
        self.bad = 0
        self._buf = bytearray(65536)
        self._view = memoryview(self._buf)
        self._anc = socket.CMSG_SPACE(4)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- core --------------------------------------------------------------------------------
    def _ack(self, f: FlowReceiver, now: float) -> None:
        flags = wire.FLAG_ACK
        if f.ce_since_ack:
            flags |= wire.FLAG_ECE
        if f.cnp_due:
            flags |= wire.FLAG_CNP
            f.cnp_due = False
            f.cnps += 1
        head = wire.encode(
            flags,
            f.job_id,
            f.last_iteration,
            f.last_ratio,
            f.conn_id,
            0,
            f.ra.rcv_nxt,
            int((now - self.t0) * 1e6),
            f.last_tsval,
            0,
            0,
            f.ce_since_ack,
            f.ra.sack_blocks(wire.MAX_SACK),
        )
        if f.key:
            head = auth.seal(head, f.key)
        try:
            self.sock.sendto(head, f.peer)
        except (BlockingIOError, InterruptedError, OSError):
            pass  # an ACK lost locally is like an ACK lost on the path
        f.ce_since_ack = 0
        f.pending = 0
        f.acks += 1

    def drain(self, now: float, limit: int = 1024) -> int:
        """Handle every datagram waiting (up to ``limit``); returns how many."""
        sock, view, anc = self.sock, self._view, self._anc
        touched = {}
        n = 0
        while n < limit:
            try:
                nb, ancdata, _fl, peer = sock.recvmsg_into([view], anc)
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionRefusedError:
                continue
            n += 1
            tos = 0
            for lvl, typ, data in ancdata:
                if lvl == socket.IPPROTO_IP and typ == socket.IP_TOS and data:
                    tos = data[0]
            self.handle(view, nb, peer, tos, now, touched)
        for f in touched.values():
            if f.pending:
                self._ack(f, now)
        return n

    def handle(self, buf, nb: int, peer: tuple, tos: int, now: float, touched: dict | None = None) -> None:
        """One datagram (``nb`` bytes of ``buf``) from ``peer`` with IP TOS ``tos``. Never raises
        on content: anything malformed counts in ``bad``. ``touched`` collects flows that owe an
        ACK at the end of the batch (None: ACK them now)."""
        batch = touched if touched is not None else {}
        try:
            p = wire.decode(buf, nb)
        except wire.WireError:
            self.bad += 1
            return
        if not p.tflags & wire.T_DATA or p.flags & wire.FLAG_ACK:
            self.bad += 1
            return
        payload = buf[p.payload_off : p.payload_off + p.length]
        key = (peer, p.conn_id)
        f = self.flows.get(key)
        conn_key = b""
        if self.authenticate:
            # the MAC first: a datagram that does not verify is never looked at again
            conn_key = (
                f.key if f is not None else auth.psk_conn_key(self.psk, p.conn_id) if self.psk is not None else p.key
            )
            if p.mac_off < 0 or not conn_key or not auth.verify(conn_key, buf, p.mac_off):
                if f is not None:
                    f.forged += 1
                else:
                    self.unauthenticated += 1
                return
        if self.verify and not pattern.matches(p.seq, payload):
            # not the sender's bytes at this offset: never taken (so never delivered), no flow
            # opened, no ACK, no timestamp echoed and no CE mark counted for it
            if f is not None:
                f.mismatched += len(payload)
            else:
                self.bad += 1
            return
        if f is None:
            if len(self.flows) >= self.max_flows:
                self.refused_flows += 1
                return
            f = self.flows[key] = FlowReceiver(
                peer, p.conn_id, p.job_id, now, Reassembly(window=self.window), key=conn_key
            )
        batch[key] = f
        f.datagrams += 1
        f.last_rx = now
        f.last_tsval = p.tsval
        immediate = False
        if tos & 0x3 == CE:
            f.ce += 1
            f.ce_since_ack += 1
            if now - f.last_cnp >= self.cnp_interval:
                f.cnp_due = True
                f.last_cnp = now
                immediate = True
        before = f.ra.rcv_nxt
        f.last_iteration = p.iteration
        f.last_ratio = p.ratio_q16
        if p.seq != before:
            immediate = True
            if p.seq > before:
                f.out_of_order += 1
        ra = f.ra
        held0, refused0 = ra.held_bytes, ra.refused
        if p.seq > before and self.held + len(payload) > self.max_held:
            ra.refused += 1  # the receiver's whole buffer budget is used
            out, dup = [], False
        else:
            out, dup = ra.add(p.seq, payload)
        self.held += ra.held_bytes - held0
        if ra.refused != refused0:
            f.refused += 1
        if dup:
            f.duplicates += 1
        off = before
        for chunk in out:
            f.crc = zlib.crc32(chunk, f.crc)
            off += len(chunk)
        f.delivered = ra.rcv_nxt
        if self.track and off > before:
            it = f.iterations.get(p.iteration)
            if it is None and len(f.iterations) < MAX_ITERATIONS_TRACKED:
                it = f.iterations[p.iteration] = IterationSeen(p.iteration, now, now)
            if it is not None:
                it.last = now
                it.bytes += off - before
        f.pending += 1
        if immediate or f.pending >= self.ack_every or touched is None:
            self._ack(f, now)

    # -- running -----------------------------------------------------------------------------
    def serve(self, stop: threading.Event | None = None, idle_exit: float | None = None) -> None:
        """Receive until ``stop`` is set (or nothing arrived for ``idle_exit`` seconds after data)."""
        stop = stop or self._stop
        sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ)
        last = None
        try:
            while not stop.is_set():
                if sel.select(0.05):
                    self.drain(self.clock())
                    last = self.clock()
                elif idle_exit is not None and last is not None and self.clock() - last > idle_exit:
                    return
        finally:
            sel.close()

    def start(self) -> "Receiver":
        """Serve in a background thread (tests, single-process demos)."""
        self._thread = threading.Thread(target=self.serve, name="mltcp-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def close(self) -> None:
        self.stop()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def summary(self) -> list[dict]:
        return [f.summary() for f in self.flows.values()]
