"""Throw-away namespaces and veth pairs for exercising the switch (tests, ptf, bench).

Everything is created with ``ip`` and removed by :meth:`Testbed.close` (also on errors): deleting
a namespace deletes the veths inside it; veths left in the root namespace are deleted by name.
Names carry the creator's pid so concurrent runs do not collide.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from mltcp import nsexec, offloads


class TestbedError(RuntimeError):
    __test__ = False  # not a pytest test class


def run(
    *cmd: str, ns: str | None = None, check: bool = True, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """``cmd`` (inside ``ip netns exec NS`` when ``ns``); :class:`TestbedError` with its output
    if it fails and ``check``."""
    full = nsexec.argv(cmd, ns)
    res = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise TestbedError(f"{' '.join(full)}: {res.stderr.strip() or res.stdout.strip()}")
    return res


def have_root_netns() -> str | None:
    """None if namespaces/veths can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, AF_PACKET)"
    if shutil.which("ip") is None:
        return "iproute2 'ip' not found"
    return None


def _sysctl(key: str, value: str, netns: str | None) -> None:
    run("sysctl", "-qw", f"{key}={value}", ns=netns, check=False)


class Testbed:
    """Namespaces and veth pairs; use as a context manager."""

    __test__ = False  # not a pytest test class

    def __init__(self, tag: str = "sw") -> None:
        self.tag = f"{tag}{os.getpid() % 100000}"
        self.namespaces: list[str] = []
        self.root_links: list[str] = []

    def __enter__(self) -> "Testbed":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def netns(self, name: str) -> str:
        full = f"{self.tag}{name}"
        run("ip", "netns", "add", full)
        self.namespaces.append(full)
        run("ip", "link", "set", "lo", "up", ns=full)
        _sysctl("net.ipv6.conf.all.disable_ipv6", "1", full)
        _sysctl("net.ipv6.conf.default.disable_ipv6", "1", full)
        return full

    def veth(
        self, a: str, b: str, ns_a: str | None = None, ns_b: str | None = None, offloads_off: bool = True
    ) -> tuple[str, str]:
        """Create veth a<->b (names used as given: keep them <= 15 chars), move the ends into
        the namespaces, bring them up with IPv6 off and (by default) offloads off."""
        run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        if ns_a is None or ns_b is None:
            self.root_links.append(a if ns_a is None else b)
        for name, ns in ((a, ns_a), (b, ns_b)):
            if ns:
                run("ip", "link", "set", name, "netns", ns)
            _sysctl(f"net.ipv6.conf.{name}.disable_ipv6", "1", ns)
            if offloads_off:
                offloads.disable(name, ns)
            run("ip", "link", "set", name, "up", ns=ns)
        return a, b

    def addr(self, ifname: str, cidr: str, netns: str | None = None) -> None:
        run("ip", "addr", "add", cidr, "dev", ifname, ns=netns)

    def run(
        self, netns: str | None, *cmd: str, check: bool = False, timeout: float | None = None
    ) -> subprocess.CompletedProcess:
        return run(*cmd, ns=netns, check=check, timeout=timeout)

    def close(self) -> None:
        for link in self.root_links:
            run("ip", "link", "del", link, check=False)
        for ns in reversed(self.namespaces):
            run("ip", "netns", "del", ns, check=False)
        self.root_links.clear()
        self.namespaces.clear()
