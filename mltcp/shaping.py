"""The one htb + bfifo shaper (tc command lines, pure): a link's rate as an htb class and its
drop-tail buffer as a bfifo under it. Used by the Mininet links (mltcp.emulation.topologies) and
through them by the kernel-TCP experiment (mltcp.traffic.kernel.net)."""

from __future__ import annotations

HTB_CLASS = ["parent", "5:1"]  # where the qdisc under the rate goes


def htb(dev: str, rate_mbit: float, burst_bytes: int | None = None) -> list[list[str]]:
    """Egress of ``dev`` at ``rate_mbit`` (root htb 5:, class 5:1; ``burst_bytes`` as its burst and
    cburst, None: tc's default)."""
    rate = f"{rate_mbit}mbit"
    cls = ["tc", "class", "add", "dev", dev, "parent", "5:", "classid", "5:1", "htb", "rate", rate, "ceil", rate]
    if burst_bytes:
        cls += ["burst", str(burst_bytes), "cburst", str(burst_bytes)]
    return [["tc", "qdisc", "replace", "dev", dev, "root", "handle", "5:", "htb", "default", "1"], cls]


def bfifo(dev: str, parent: list[str], limit_bytes: int) -> list[str]:
    """A drop-tail buffer of ``limit_bytes`` on ``dev`` at ``parent`` (``["root"]`` or :data:`HTB_CLASS`)."""
    return ["tc", "qdisc", "replace", "dev", dev, *parent, "handle", "10:", "bfifo", "limit", str(limit_bytes)]
