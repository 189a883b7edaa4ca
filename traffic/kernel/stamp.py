"""The MLTCP IPv4 option on kernel TCP senders: stamp.bpf.c on a host's interface (tc egress).

Hosts keep their own congestion control; the option tells a progress-aware switch
(``switch_policy``) each segment's job and bytes_ratio (docs/CONTRACTS.md, docs/in-network.md).
:func:`install` prepares the interface: its MTU lowered by the option's 8 bytes (TCP then picks
an MSS that leaves room), segmentation offloads off (as on every emulated interface; TCP's GSO
super-packets still reach tc egress, and the program keeps their segment size), then the program
attached. :func:`stats` reads its counters.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from mltcp import offloads
from mltcp.traffic.header import IPOPT_LEN

from . import tcprog

ETH_HLEN = 14
STATS = ("stamped", "no_room", "failed", "iterations", "retrans")


@dataclass(frozen=True)
class StampConfig:
    """``job_id`` in every option; the tracker's iteration boundary is an idle gap (between
    segments with new bytes) longer than max(``min_idle_s``, ``idle_fraction`` x the previous
    boundary gap); ``link_mtu`` the MTU the stamped packets must fit."""

    job_id: int
    min_idle_s: float = 0.001
    idle_fraction: float = 0.9
    link_mtu: int = 1500

    def __post_init__(self):
        checks = {
            "job_id": 0 <= self.job_id <= 0xFFFF,
            "min_idle_s": 0 < self.min_idle_s <= 60,
            "idle_fraction": 0 <= self.idle_fraction <= 4,
            "link_mtu": 576 <= self.link_mtu <= 9000,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"stamper: bad {', '.join(f'{k}={getattr(self, k)!r}' for k in bad)}")


def build(cfg: StampConfig) -> Path:
    return tcprog.build(
        "stamp.bpf.c",
        {
            "JOB_ID": cfg.job_id,
            "MIN_IDLE_NS": f"{round(cfg.min_idle_s * 1e9)}ULL",
            "IDLE_FRAC_Q10": round(cfg.idle_fraction * 1024),
            "MAX_FRAME": cfg.link_mtu + ETH_HLEN,
        },
    )


def install(ns: str, dev: str, cfg: StampConfig) -> None:
    """Stamp the TCP segments leaving ``dev`` in network namespace ``ns`` (a file: see tcprog)."""
    obj = build(cfg)
    tcprog.in_ns(ns, ["ip", "link", "set", "dev", dev, "mtu", str(cfg.link_mtu - IPOPT_LEN)])
    tcprog.in_ns(ns, offloads.ethtool_args(dev, checksum=False))
    tcprog.attach(ns, dev, obj)


def stats(ns: str, dev: str) -> dict[str, int]:
    val = tcprog.array_map(ns, dev, "stamp_stats")
    return dict(zip(STATS, struct.unpack(f"<{len(STATS)}Q", val[: 8 * len(STATS)])))
