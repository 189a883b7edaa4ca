"""Sending side of one flow: segments a byte stream into MLTCP datagrams, reacts to ACKs, ECN
echoes and CNPs through the congestion-control core (:mod:`mltcp.cc`), retransmits what is lost.

No threads: :func:`run_until` multiplexes any number of flows over one selector, draining every
ACK waiting on a socket per wake-up and sending up to ``burst`` datagrams per flow per pass.
"""

from __future__ import annotations

import array
import errno
import selectors
import socket
import time

import numpy as np

from mltcp.cc import TX_START, make_cc

from . import auth, pattern, sockbuf, wire
from .rtt import RttEstimator
from .scoreboard import Scoreboard, Seg

ECT0 = 0x02
# Rates (DCQCN's st.rate, --line-rate) count whole IP datagrams, as a NIC's rate limiter does.
# (IP, UDP, the MLTCP headers and the MAC; the handshake's key, on a flow's first datagrams only, is
# left out)
WIRE_OVERHEAD = wire.IP_UDP_OVERHEAD + wire.FIXED_LEN + wire.TAG_LEN
RTT_SAMPLES_KEPT = 1 << 20  # 8 MB of samples per flow; at 100 Mb/s about 10 minutes of ACK batches
# ACKs in a row whose cumulative ack is below what was acknowledged before: a receiver's ack never
# goes back (ACKs of one flow take one path), so a run of them means forged ACKs moved snd_una, or
# the receiver lost its state; the flow then fails (``fault``) instead of stalling silently.
STALE_ACKS_FAULT = 64


def build_cc(name: str, line_rate: float | None = None, explicit_iterations: bool = True, **params):
    """make_cc with sane defaults for a real sender.

    * DCQCN's rate parameters are given for 25 Gb/s in the reference; when ``line_rate``
      (bytes/s) is given they are scaled to it unless set explicitly (min rate = R_HAI =
      line/250, R_AI = line/500).
    * MLTCP variants: with ``explicit_iterations`` the sender marks every iteration boundary
      (``iteration_start``), so the tracker runs on marks (``boundary = "mark"``: the idle-gap
      rule off, and ``restart_window`` applies at each marked iteration's first send) unless
      ``min_idle`` or ``boundary`` is given: both rules together would close each iteration twice
      (the first ACK after the compute gap closes an empty one) and learn 0 bytes per iteration.
      Without it, boundaries come from the idle-gap rule alone, as in the paper."""
    if name.startswith("mltcp-") and explicit_iterations and "min_idle" not in params:
        params.setdefault("boundary", "mark")
    if name.endswith("dcqcn") and line_rate:
        params.setdefault("line_rate", line_rate)
        params.setdefault("min_rate", line_rate / 250)
        params.setdefault("rhai", line_rate / 250)
        params.setdefault("rai", line_rate / 500)
    return make_cc(name, **params)


class FlowSender:
    """One reliable flow over a connected UDP socket."""

    def __init__(
        self,
        dest: tuple[str, int],
        cc,
        job_id: int = 0,
        payload: int = wire.DEFAULT_PAYLOAD,
        min_rto: float = 0.2,
        burst: int = 16,
        max_window: int = 16 << 20,
        ecn: bool = True,
        clock=time.monotonic,
        bind: tuple[str, int] | None = None,
        reo_wnd: float | None = None,
        explicit_iterations: bool = True,
        min_pto: float = 0.01,
        idle_restart: bool = True,
        nic_rate: float | None = None,
        nic_burst: int = 12,
        nic_wake: int = 2,
        rcv_window: int = wire.RCV_WINDOW,
        pause=None,
        authenticate: bool = True,
        psk: bytes | None = None,
    ):
        if not 0 < payload <= 65000:
            raise ValueError(f"payload must be in 1..65000 bytes, got {payload}")
        # Authenticated datagrams (traffic.transport.auth): a MAC on every datagram, keyed with
        # the PSK-derived connection key, or with a random one this flow sends in clear until an
        # authenticated ACK shows the receiver has it. They follow the payload (wire.DEFAULT_PAYLOAD
        # leaves room for both in a 1500-byte IP datagram).
        self.authenticate = authenticate or psk is not None
        self.send_key = self.authenticate and psk is None
        self.wire_overhead = WIRE_OVERHEAD if self.authenticate else WIRE_OVERHEAD - wire.TAG_LEN
        if not payload <= rcv_window < 1 << 32:
            raise ValueError(f"rcv_window must be in payload..2^32-1 bytes, got {rcv_window}")
        # never more than ``rcv_window`` bytes past snd_una: what the receiver takes (wire.RCV_WINDOW)
        self.rcv_window = rcv_window
        self.fault: str | None = None  # why the flow cannot go on (ACKs that cannot be true)
        self._stale = 0  # ACKs in a row with ack < snd_una
        self.dest, self.cc, self.job_id, self.payload = dest, cc, job_id, payload
        self.burst, self.max_window, self.clock = burst, max_window, clock
        self.reo_wnd = reo_wnd
        self.pause = pause  # a traffic.pause.PauseListener: the link's PFC (lossless)
        self.explicit_iterations = explicit_iterations
        self.idle_restart = idle_restart
        self.last_send = None  # time of the last datagram sent
        self._tx_start_mark = None  # last_send of the idle period TX_START was given for
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if ecn:
            self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, ECT0)
        sockbuf.grow(self.sock, rcv=4 << 20)
        if bind:
            self.sock.bind(bind)
        self.sock.connect(dest)
        self.sock.setblocking(False)
        self.conn_id = wire.new_conn_id()  # 48 random bits: what an off-path spoofer must guess
        self.key = (
            auth.psk_conn_key(psk, self.conn_id)
            if psk is not None
            else auth.new_conn_key()
            if self.authenticate
            else b""
        )
        now = clock()
        self.t0 = now
        self.st = cc.new_state(n=1, mss=payload, now=now)
        self.rate_based = not cc.window_based
        # an explicit reordering window is the flow's tolerance: RACK alone finds losses (RFC 8985
        # 6.2), without the three-duplicate-ACK rule that any reordering by 3 segments trips
        self.sb = Scoreboard() if reo_wnd is None else Scoreboard(dupthresh=1 << 30)
        self.rtt = RttEstimator(min_rto=min_rto, max_rto=max(60.0, min_rto))  # a dilated run stretches min_rto
        self.rto_start: float | None = None  # when the retransmission timer was armed
        self.min_pto = min_pto  # tail loss probe: floor of 2 x SRTT
        self.tlp_out = False  # a probe is outstanding
        self.last_progress = now  # last send of new data or delivery
        self.recovery_end = -1  # no further reduction until snd_una passes this
        self.cwnd_limited = False  # the window, not the application, limited sending
        self.app_end = 0  # bytes the application has queued so far
        self.iteration = 0
        self.iter_start_seq = 0
        self.iter_bytes = 0
        self.crc = 0  # CRC-32 of the stream as first sent
        self.ratio_q = 0
        # NIC rate (bytes/s of whole IP datagrams) for every algorithm, window-based ones too: a
        # host's NIC never puts more than its line rate on the wire, so a window opening after an
        # ACK leaves as a paced train instead of a burst at memory speed (as the simulator's
        # per-flow NIC credit). Bursts of at most ``nic_burst`` datagrams: 12 (1.4 ms at 100 Mb/s)
        # lets a sender that was descheduled for a moment catch up, as a NIC's transmit ring
        # would, instead of leaving the link idle (with 6, a lone job's phase took 1-11 % longer
        # than the model's; with 12, 0.5-3 %).
        if nic_rate is not None and nic_rate <= 0:
            raise ValueError(f"nic_rate must be > 0 bytes/s, got {nic_rate}")
        if nic_burst < 1:
            raise ValueError(f"nic_burst must be >= 1, got {nic_burst}")
        if not 1 <= nic_wake <= nic_burst:
            raise ValueError(f"nic_wake must be in 1..nic_burst, got {nic_wake}")
        # A paced sender sleeps until ``nic_wake`` datagrams' worth of budget has built up: one
        # wake-up per datagram (120 us at 100 Mb/s) costs a Python event loop more than the
        # datagram's time on the wire, and a late wake-up loses the rate once the bucket is full.
        self.nic_rate, self.nic_burst, self.nic_wake = nic_rate, nic_burst, nic_wake
        self.tokens = float(payload + self.wire_overhead) * (burst if nic_rate is None else min(burst, nic_burst))
        self.last_fill = now
        self.blocked_until = 0.0  # socket buffer full: wait for writability
        self._rbuf = bytearray(2048)
        self._mask = np.ones(1, dtype=bool)
        self._acked = np.zeros(1)
        self._rttv = np.zeros(1)
        self.stats = dict(
            sent=0,
            retransmits=0,
            acks=0,
            ece=0,
            cnp=0,
            loss_events=0,
            ecn_events=0,
            timeouts=0,
            send_drops=0,
            bad=0,
            ce_marks=0,
            tlp=0,
            idle_restarts=0,
            forged=0,
        )
        self.rto_log: list[dict] = []  # state at the first timeouts (diagnosis)
        self.rtt_samples = array.array("d")  # the first RTT_SAMPLES_KEPT samples (rtt_percentiles)

    # -- application ---------------------------------------------------------------------------
    def enqueue(self, nbytes: int, iteration: int) -> int:
        """Queue one iteration's bytes; returns the stream offset that marks them delivered."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        if self.explicit_iterations:
            self.cc.iteration_start(self.st, self._mask)
        self.iteration = iteration
        self.iter_start_seq = self.app_end
        self.iter_bytes = nbytes
        self.app_end += nbytes
        return self.app_end

    def delivered(self, target: int) -> bool:
        return self.sb.snd_una >= target

    # -- time helpers ------------------------------------------------------------------------
    def _us(self, t: float) -> int:
        return int((t - self.t0) * 1e6) & wire.U32

    def _echo_time(self, tsecr: int, now: float) -> float:
        return now - (((self._us(now) - tsecr) & wire.U32) / 1e6)

    # -- receive path ------------------------------------------------------------------------
    def drain(self, now: float, limit: int = 512) -> None:
        """Process every ACK waiting on the socket, then apply one CC update for the batch."""
        sock, buf = self.sock, self._rbuf
        delivered, lost, ece, cnp, ce, rtt_sample, n = 0, 0, False, 0, 0, -1.0, 0
        sb, reo = self.sb, self.reo_wnd
        if reo is None:
            reo = self.rtt.min_rtt / 4 if self.rtt.srtt is not None else 0.0
        while n < limit:
            try:
                nb = sock.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionRefusedError:
                n += 1
                continue  # ICMP port unreachable: receiver not up yet; the RTO retries
            n += 1
            try:
                p = wire.decode(buf, nb)
            except wire.WireError:
                self.stats["bad"] += 1
                continue
            if not p.flags & wire.FLAG_ACK or p.conn_id != self.conn_id:
                self.stats["bad"] += 1
                continue
            if self.authenticate:
                if p.mac_off < 0 or not auth.verify(self.key, buf, p.mac_off):
                    self.stats["forged"] += 1  # not from the receiver that holds our key
                    continue
                self.send_key = False  # the receiver has the key: stop sending it
            if p.ack > sb.snd_nxt:
                # acknowledges bytes this flow never sent: someone else put data into the stream
                self.stats["bad"] += 1
                if self.fault is None:
                    self.fault = (
                        f"the receiver acknowledged byte {p.ack} but only {sb.snd_nxt} were sent: "
                        "datagrams spoofed with this flow's address and conn_id reached it"
                    )
                continue
            if p.ack < sb.snd_una:
                self._stale += 1
                if self._stale >= STALE_ACKS_FAULT and self.fault is None:
                    self.fault = (
                        f"{self._stale} ACKs in a row acknowledge only {p.ack} of the {sb.snd_una} bytes "
                        "acknowledged before: forged ACKs, or the receiver restarted"
                    )
            else:
                self._stale = 0
            self.stats["acks"] += 1
            echo = self._echo_time(p.tsecr, now)
            res = sb.on_ack(p.ack, p.sacks, echo, reo)
            delivered += res.delivered
            lost += res.lost
            if res.delivered:
                rtt_sample = now - echo
                self.tlp_out = False
                self.last_progress = now
            if res.advanced:
                self.rto_start = now if sb.outstanding else None
            self.stats["ce_marks"] += p.ce_count
            ce += p.ce_count
            if p.flags & wire.FLAG_ECE:
                ece = True
                self.stats["ece"] += 1
            if p.flags & wire.FLAG_CNP:
                cnp += 1
                self.stats["cnp"] += 1
        if not n:
            return
        st, cc = self.st, self.cc
        if rtt_sample >= 0:
            self.rtt.sample(rtt_sample)
            if len(self.rtt_samples) < RTT_SAMPLES_KEPT:
                self.rtt_samples.append(rtt_sample)
        if delivered:
            self._acked[0] = delivered
            self._rttv[0] = self.rtt.latest
            cc.pkts_acked(st, self._acked, self._rttv, now)  # RTT, the MLTCP tracker: always
            cc.in_ack_event(st, self._acked, min(ce * self.payload, delivered), self._rttv, now)  # DCTCP's alpha
            # As Linux (tcp_may_raise_cwnd, tcp_is_cwnd_limited / RFC 7661) and the simulator: the
            # window grows only outside recovery/CWR and when the window limited the sender.
            if self.cwnd_limited and sb.snd_una >= self.recovery_end:
                cc.cong_avoid(st, self._acked, now)
        if lost or (ece and not self.rate_based):
            if sb.snd_una >= self.recovery_end:  # one reduction per round trip
                kind = "loss" if lost else "ecn"
                cc.on_congestion(st, self._mask, kind, now)
                self.stats["loss_events" if lost else "ecn_events"] += 1
                self.recovery_end = sb.snd_nxt
        if cnp and self.rate_based:
            for _ in range(cnp):
                cc.on_cnp(st, self._mask, now)
        if st.cwnd[0] > self.max_window:
            st.cwnd[0] = self.max_window
        self._update_ratio()

    def _update_ratio(self) -> None:
        tr = self.st.tracker
        if tr is not None:
            r = float(tr.bytes_ratio[0])
        elif self.iter_bytes:
            r = (self.sb.snd_una - self.iter_start_seq) / self.iter_bytes
        else:
            r = 0.0
        self.ratio_q = wire.ratio_q16(r)

    # -- send path -------------------------------------------------------------------------------
    def _send(self, seg: Seg, now: float, retx: bool) -> bool:
        flags = wire.FLAG_ITER_START if seg.first else 0
        tflags = wire.T_RETX | wire.T_DATA if retx else wire.T_DATA
        if self.authenticate:
            tflags |= wire.T_AUTH | (wire.T_KEY if self.send_key else 0)
        head = wire.encode(
            flags, self.job_id, seg.iteration, self.ratio_q, self.conn_id, seg.seq, 0, self._us(now), 0, seg.len, tflags
        )
        dgram = head + pattern.chunk(seg.seq, seg.len)
        if self.authenticate:
            dgram = auth.seal(dgram, self.key, self.send_key)
        try:
            self.sock.send(dgram)
        except (BlockingIOError, InterruptedError):
            self.blocked_until = now + 5e-3  # run_until also wakes us when writable
            return False
        except OSError as e:
            if e.errno not in (errno.ENOBUFS, errno.ECONNREFUSED):
                raise
            self.stats["send_drops"] += 1  # dropped by the local qdisc: like a loss on the path
        self.stats["sent"] += 1
        return True

    def service(self, now: float) -> float:
        """Timers, then send what window/pacing allow. Returns when to be called again."""
        sb, st = self.sb, self.st
        wake = float("inf")
        # Retransmission timeout.
        if self.rto_start is not None and sb.outstanding:
            deadline = self.rto_start + self.rtt.rto
            if now >= deadline:
                if len(self.rto_log) < 8:  # what the flow looked like when its timer fired
                    self.rto_log.append(
                        dict(
                            t=round(now - self.t0, 4),
                            snd_una=sb.snd_una,
                            snd_nxt=sb.snd_nxt,
                            inflight=len(sb.inflight),
                            inflight_bytes=sb.inflight_bytes,
                            lost_pending=sb.lost_pending,
                            cwnd=round(float(st.cwnd[0])),
                            tlp_out=self.tlp_out,
                            idle=round(now - self.last_progress, 4),
                            rto=round(self.rtt.rto, 4),
                        )
                    )
                n = sb.on_rto()
                self.stats["timeouts"] += 1
                self.cc.on_timeout(st, self._mask, now)
                self.rtt.backoff()
                self.recovery_end = sb.snd_nxt
                self.rto_start = now
                if n == 0 and not sb.lost_pending:  # nothing in flight: resend the first hole
                    sb.mark_first_lost()
            wake = self.rto_start + self.rtt.rto
        if self.rate_based:
            self.cc.on_timer(st, now)
        if now < self.blocked_until:
            return min(wake, self.blocked_until)
        if self.pause is not None and self.pause.paused(now):  # the NIC is paused (PFC): nothing leaves
            return min(wake, self.pause.until, now + PAUSE_POLL_S)
        # Tail loss probe (RFC 8985 7): no progress for max(2 SRTT, min_pto) with data in flight
        # and nothing known lost -> resend the most recently sent segment, so that a lost tail
        # is found by SACK/RACK instead of the retransmission timeout.
        if not self.tlp_out and sb.inflight and self.rtt.srtt is not None and not sb.lost_pending:
            pto_at = self.last_progress + max(2 * self.rtt.srtt, self.min_pto)
            if now >= pto_at:
                seg = sb.inflight[next(reversed(sb.inflight))]
                if self._send(seg, now, True):
                    sb.sent(seg, now)
                    self.stats["retransmits"] += 1
                    self.stats["tlp"] += 1
                    self.tlp_out = True
            elif self.rto_start is None or pto_at < self.rto_start + self.rtt.rto:
                wake = min(wake, pto_at)
        # First send with nothing in flight (CA_EVENT_TX_START, once per idle period): the CC
        # core's restart after idle (RFC 2861, Linux tcp_cwnd_restart: a window-based flow idle
        # for longer than an RTO halves its window per RTO, down to the initial window), then the
        # algorithm's own reaction (CUBIC moves its epoch by the idle time).
        if (
            self.last_send is not None
            and self._tx_start_mark != self.last_send
            and not sb.outstanding
            and sb.snd_nxt < self.app_end
        ):
            self._tx_start_mark = self.last_send
            restarted = self.cc.cwnd_event(
                st, TX_START, now, idle=now - self.last_send, rto=self.rtt.rto, restart=self.idle_restart
            )
            self.stats["idle_restarts"] += int(restarted[0])
        # How much may go out now.
        paced = self.rate_based or self.nic_rate is not None
        need = self.payload + self.wire_overhead
        rate = self._pace_rate()
        if paced:
            cap = float(need) * (self.burst if self.nic_rate is None else min(self.burst, self.nic_burst))
            self.tokens = min(cap, self.tokens + (now - self.last_fill) * rate)
            self.last_fill = now
        window = self.max_window if self.rate_based else max(float(st.cwnd[0]), float(self.payload))
        sent_bytes = 0
        token_limited = False
        for _ in range(self.burst):
            if paced and self.tokens < need:
                token_limited = True
                break
            seg = sb.next_lost()
            if seg is not None:
                if sb.inflight_bytes + seg.len > window and sb.inflight_bytes > 0:
                    break
                if not self._send(seg, now, True):
                    break
                sb.pop_lost()
                sb.sent(seg, now)
                self.stats["retransmits"] += 1
            else:
                if sb.snd_nxt >= self.app_end:
                    break
                length = min(self.payload, self.app_end - sb.snd_nxt)
                if sb.inflight_bytes + length > window and sb.inflight_bytes > 0:
                    break
                if sb.snd_nxt + length - sb.snd_una > self.rcv_window:
                    break  # past the receiver's window: it would refuse the segment
                seq = sb.snd_nxt
                # the first segment at or after the start of an iteration carries ITER_START
                seg = Seg(seq, length, self.iteration, seq == self.iter_start_seq)
                if not self._send(seg, now, False):
                    break
                sb.segs[seq] = seg
                sb.snd_nxt = seg.end
                sb.sent(seg, now)
                self.last_progress = now
                self.crc = pattern.zlib.crc32(pattern.chunk(seq, length), self.crc)
            sent_bytes += seg.len + self.wire_overhead
            self.last_send = now
            if paced:
                self.tokens -= seg.len + self.wire_overhead
            if self.rto_start is None:
                self.rto_start = now
        if sent_bytes and self.rate_based:
            self._acked[0] = sent_bytes
            self.cc.on_sent(st, self._acked, now)
        if not self.rate_based:
            cw, inflight = float(st.cwnd[0]), sb.inflight_bytes
            self.cwnd_limited = cw < 2 * inflight if cw < float(st.ssthresh[0]) else inflight >= cw - self.payload
        if self.rto_start is not None and sb.outstanding:
            wake = min(wake, self.rto_start + self.rtt.rto)
        has_work = sb.lost_pending or sb.snd_nxt < self.app_end
        if has_work:
            if self.rate_based or token_limited:
                want = need if self.rate_based else need * self.nic_wake
                if self.tokens < need:  # NIC/rate budget exhausted: come back when it refills
                    wake = min(wake, now + (want - self.tokens) / rate)
                else:
                    wake = now
            elif sent_bytes and sb.inflight_bytes < window:
                wake = now  # burst exhausted, window still open: come back right away
        if self.rate_based and sb.outstanding:
            wake = min(wake, now + getattr(self.cc, "timer", 1e-3))
        return wake

    def rtt_percentiles(self, qs=(10, 50, 90)) -> dict[str, float] | None:
        """RTT percentiles in ms over the samples kept (None before the first sample)."""
        if not self.rtt_samples:
            return None
        v = np.percentile(np.frombuffer(self.rtt_samples, dtype=np.float64), qs) * 1e3
        return {f"p{q}": round(float(x), 3) for q, x in zip(qs, v)}

    def _pace_rate(self) -> float:
        """Bytes/s the token bucket refills at: DCQCN's rate and/or the NIC rate."""
        if self.rate_based:
            r = max(float(self.st.rate[0]), 1.0)
            return min(r, self.nic_rate) if self.nic_rate is not None else r
        return self.nic_rate if self.nic_rate is not None else float("inf")

    def close(self) -> None:
        self.sock.close()


PAUSE_POLL_S = 0.0005  # while paused, look for the resume frame this often


def run_until(flows: list[FlowSender], done, clock=time.monotonic, timeout: float | None = None) -> bool:
    """Drive ``flows`` until ``done()`` is true (returns True) or ``timeout`` seconds pass (False).

    One selector for all flows: readable -> drain ACKs; a flow whose socket buffer was full is
    also watched for writability (the kernel reports it once half the buffer is free) instead of
    being polled."""
    # epoll/poll time out in whole milliseconds (Python rounds the timeout up), which caps a paced
    # sender at one bucket per millisecond (6 datagrams: 72 Mb/s); select() sleeps in microseconds.
    paced = any(f.rate_based or f.nic_rate is not None for f in flows)
    sel = selectors.SelectSelector() if paced and len(flows) < 256 else selectors.DefaultSelector()
    events = {}
    for f in flows:
        sel.register(f.sock, selectors.EVENT_READ, f)
        events[f] = selectors.EVENT_READ
    try:
        start = clock()
        while True:
            now = clock()
            for f in flows:
                f.drain(now)
            if done():
                return True
            if timeout is not None and now - start > timeout:
                return False
            wake = min(f.service(now) for f in flows)
            if done():
                return True
            for f in flows:
                want = selectors.EVENT_READ | (selectors.EVENT_WRITE if f.blocked_until > now else 0)
                if want != events[f]:
                    sel.modify(f.sock, want, f)
                    events[f] = want
            delay = wake - clock()
            if delay > 0:
                if timeout is not None:
                    delay = min(delay, max(0.0, start + timeout - clock()) + 1e-3)
                for key, mask in sel.select(min(delay, 1.0)):
                    if mask & selectors.EVENT_WRITE:
                        key.data.blocked_until = 0.0
    finally:
        sel.close()
