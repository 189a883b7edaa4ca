"""Segmentation and checksum offloads off on an interface: one place for every caller.

Queues in the emulation and the test beds must hold wire-sized packets (a 64 kB GSO burst counted
as one packet makes drop-tail and ECN coarse), and a switch that forwards in userspace or in BMv2
must get finished checksums (``tx off``: a veth hands partial checksums along, which such a
switch forwards unfinished, and the receiver then drops every UDP datagram).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess

from . import nsexec

SEGMENTATION = ("tso", "gso", "gro")


def ethtool_args(ifname: str, checksum: bool = True) -> list[str]:
    """``ethtool -K IF [tx off] tso off gso off gro off``; ``checksum``: TX checksum offload too."""
    feats = (("tx",) if checksum else ()) + SEGMENTATION
    return ["ethtool", "-K", ifname] + [w for f in feats for w in (f, "off")]


def shell_command(ifname: str, checksum: bool = True) -> str:
    """The same as one shell line for Mininet's ``node.cmd`` (errors ignored: a missing feature
    on an interface is not a failure)."""
    return shlex.join(ethtool_args(ifname, checksum)) + " >/dev/null 2>&1"


def disable(ifname: str, netns: str | None = None, checksum: bool = True, check: bool = False) -> bool:
    """Run it (inside ``ip netns exec NS`` when ``netns``); True if ethtool succeeded. Without
    ethtool on the machine: False, or FileNotFoundError with ``check``."""
    if shutil.which("ethtool") is None:
        if check:
            raise FileNotFoundError("ethtool is not installed (Debian package ethtool)")
        return False
    cmd = nsexec.argv(ethtool_args(ifname, checksum), netns)
    return subprocess.run(cmd, check=check, capture_output=True).returncode == 0


def ready_switch_ports(sw) -> dict[int, str]:
    """For a Mininet switch whose data plane runs in a process (mltcp-switch, BMv2): bring each of
    its ports up and turn offloads off on both ends of each port's link. Returns
    {port number: interface name}, the switch process's port map."""
    interfaces = {}
    for intf in sw.intfList():
        if intf.name == "lo" or intf not in sw.ports:
            continue
        interfaces[sw.ports[intf]] = intf.name
        sw.cmd(f"ip link set {shlex.quote(intf.name)} up")
        sw.cmd(shell_command(intf.name))
        link = getattr(intf, "link", None)
        if link is not None:
            peer = link.intf2 if link.intf1 is intf else link.intf1
            peer.node.cmd(shell_command(peer.name))
    return interfaces
