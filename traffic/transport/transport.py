"""The job-facing transport: one flow per peer, ``send_iteration`` blocks until delivered."""

from __future__ import annotations

import time
from dataclasses import dataclass

from . import wire
from .sender import FlowSender, build_cc, run_until


@dataclass
class SendResult:
    iteration: int
    bytes: int  # per flow
    flows: int
    retransmits: int
    timeouts: int
    duration: float
    marks: int = 0  # CE-marked datagrams (echoed by the receiver)


class TransportError(RuntimeError):
    """A transfer that did not complete."""


class TransportTimeout(TransportError):
    """Not delivered in time (receiver down, path broken)."""


class TransportFault(TransportError):
    """The peer's answers cannot be true for this flow (spoofed data or ACKs, a restarted receiver):
    the transfer stops loudly instead of reporting bytes as delivered."""


def parse_hostport(s: str, default_port: int = wire.MLTCP_UDP_PORT, allow_zero: bool = False) -> tuple[str, int]:
    """'HOST:PORT' (or 'HOST', port 9199) -> (host, port); port 0 (any) only with allow_zero."""
    host, _, port = s.rpartition(":")
    if not host:
        host, port = s, str(default_port)
    try:
        p = int(port)
    except ValueError:
        raise ValueError(f"bad address {s!r}: port {port!r} is not a number") from None
    if not (0 if allow_zero else 1) <= p < 65536:
        raise ValueError(f"bad address {s!r}: port {p} out of range")
    return host, p


class UdpTransport:
    """A job's flows to its peers over the userspace MLTCP transport.

    ``cc`` is a name for :func:`mltcp.cc.make_cc` (any of ``mltcp.cc.ALGORITHMS``); ``cc_params``
    go to it; ``line_rate`` (bytes/s) scales DCQCN's rate parameters. ``explicit_iterations``:
    tell the MLTCP tracker where iterations start (default) or let it find them by idle gaps.
    ``nic_rate`` (bytes/s of IP datagrams): pace every flow at this line rate (a NIC's), window-based
    algorithms too; None sends window-limited bursts at memory speed. ``pause`` (a
    :class:`mltcp.traffic.pause.PauseListener`) stops every flow while the link is paused (PFC);
    ``reo_wnd`` (s) overrides RACK's reordering window. ``psk`` (bytes, the receiver's too) keys
    every datagram's MAC; without it each flow sends its own key in its first datagrams
    (docs/security.md); ``authenticate=False`` sends no MAC (only for a receiver that takes none).
    Every flow carries
    ``bytes`` per iteration (the per-flow size of the public traces).
    """

    def __init__(
        self,
        peers,
        cc: str = "reno",
        job_id: int = 0,
        cc_params: dict | None = None,
        line_rate: float | None = None,
        payload: int = wire.DEFAULT_PAYLOAD,
        min_rto: float = 0.2,
        ecn: bool = True,
        burst: int = 16,
        clock=time.monotonic,
        timeout: float | None = None,
        max_window: int = 16 << 20,
        explicit_iterations: bool = True,
        idle_restart: bool = True,
        nic_rate: float | None = None,
        pause=None,
        reo_wnd: float | None = None,
        psk: bytes | None = None,
        authenticate: bool = True,
    ):
        if isinstance(peers, (str, tuple)):
            peers = [peers]
        dests = [parse_hostport(p) if isinstance(p, str) else tuple(p) for p in peers]
        if not dests:
            raise ValueError("need at least one peer")
        self.cc_name, self.clock, self.timeout = cc, clock, timeout
        self.flows = [
            FlowSender(
                d,
                build_cc(cc, line_rate=line_rate, explicit_iterations=explicit_iterations, **(cc_params or {})),
                job_id=job_id,
                payload=payload,
                min_rto=min_rto,
                ecn=ecn,
                burst=burst,
                clock=clock,
                max_window=max_window,
                explicit_iterations=explicit_iterations,
                idle_restart=idle_restart,
                nic_rate=nic_rate,
                pause=pause,
                reo_wnd=reo_wnd,
                psk=psk,
                authenticate=authenticate,
            )
            for d in dests
        ]

    def send_iteration(self, nbytes: int, iteration: int) -> SendResult:
        t0 = self.clock()
        r0 = self.retransmits
        to0 = sum(f.stats["timeouts"] for f in self.flows)
        m0 = sum(f.stats["ce_marks"] for f in self.flows)
        targets = [f.enqueue(int(nbytes), iteration) for f in self.flows]
        ok = run_until(
            self.flows,
            lambda: any(f.fault for f in self.flows) or all(f.sb.snd_una >= t for f, t in zip(self.flows, targets)),
            clock=self.clock,
            timeout=self.timeout,
        )
        faults = [f"flow {k} to {f.dest[0]}:{f.dest[1]}: {f.fault}" for k, f in enumerate(self.flows) if f.fault]
        if faults:
            raise TransportFault(f"iteration {iteration}: " + "; ".join(faults))
        if not ok:
            now = self.clock()
            state = "; ".join(
                f"flow {k}: acked {f.sb.snd_una - (t - int(nbytes))} of {int(nbytes)}, "
                f"{f.stats['timeouts']} timeouts, rto {f.rtt.rto:.3f} s, "
                f"last progress {now - f.last_progress:.2f} s ago"
                for k, (f, t) in enumerate(zip(self.flows, targets))
                if f.sb.snd_una < t
            )
            raise TransportTimeout(
                f"iteration {iteration}: {nbytes} bytes not delivered within "
                f"{self.timeout} s (is the receiver running?) [{state}]"
            )
        return SendResult(
            iteration,
            int(nbytes),
            len(self.flows),
            self.retransmits - r0,
            sum(f.stats["timeouts"] for f in self.flows) - to0,
            self.clock() - t0,
            sum(f.stats["ce_marks"] for f in self.flows) - m0,
        )

    @property
    def retransmits(self) -> int:
        return sum(f.stats["retransmits"] for f in self.flows)

    def stats(self) -> list[dict]:
        out = []
        for f in self.flows:
            d = dict(f.stats)
            d.update(
                dest=f"{f.dest[0]}:{f.dest[1]}",
                conn_id=f.conn_id,
                crc32=f.crc,
                bytes=f.sb.snd_una,
                cwnd=float(f.st.cwnd[0]),
                rate=float(f.st.rate[0]),
                srtt=f.rtt.srtt,
                rto=f.rtt.rto,
                rto_log=f.rto_log,
                rtt_ms=f.rtt_percentiles(),
            )
            out.append(d)
        return out

    def close(self) -> None:
        for f in self.flows:
            f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
