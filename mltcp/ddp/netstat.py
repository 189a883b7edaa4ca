"""The kernel's TCP counters of this network namespace: why a rank's connections retransmitted.

``/proc/net/snmp`` (``Tcp:``) and ``/proc/net/netstat`` (``TcpExt:``) count per network namespace,
and each rank of an emulated job runs in a namespace of its own, so the difference of two
readings is what that rank's connections did in between: every segment sent again
(``RetransSegs``), split into fast retransmits, retransmission timeouts and tail-loss probes, and
how many of them the peer reported as duplicates (DSACK: the original had arrived, the
retransmission was spurious). Pure parsing apart from :func:`read`.
"""

from __future__ import annotations

from pathlib import Path

COUNTERS = (
    "RetransSegs",  # Tcp: segments sent again, for any reason
    "TCPFastRetrans",  # after three duplicate ACKs or SACKs
    "TCPTimeouts",  # retransmission timeouts
    "TCPLossProbes",  # tail-loss probes (a segment sent again at 2 RTTs without an ACK)
    "TCPSpuriousRTOs",  # timeouts found spurious (F-RTO)
    "TCPDSACKRecvSegs",  # segments the peer reported received twice: spurious retransmissions
)


def parse(*texts: str, counters: tuple[str, ...] = COUNTERS) -> dict[str, int]:
    """The ``counters`` found in /proc/net/snmp or /proc/net/netstat text (header line, then
    value line, per protocol); a counter the kernel does not have is left out."""
    out: dict[str, int] = {}
    for text in texts:
        lines = text.splitlines()
        for head, vals in zip(lines[::2], lines[1::2]):
            proto, _, names = head.partition(":")
            if proto not in ("Tcp", "TcpExt") or not vals.startswith(proto + ":"):
                continue
            for name, value in zip(names.split(), vals.partition(":")[2].split()):
                if name in counters:
                    out[name] = int(value)
    return out


def read(proc_net: str = "/proc/net") -> dict[str, int]:
    """This namespace's counters now."""
    return parse(*(Path(proc_net, f).read_text() for f in ("snmp", "netstat")))


def between(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What was counted from ``before`` to ``after``."""
    return {k: after[k] - before.get(k, 0) for k in after}


def summed(readings: list[dict[str, int]]) -> dict[str, int]:
    """Counter by counter, over several namespaces' differences."""
    out: dict[str, int] = {}
    for r in readings:
        for k, v in r.items():
            out[k] = out.get(k, 0) + v
    return out
