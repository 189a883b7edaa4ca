"""Network namespaces for kernel-TCP runs: senders -> router (htb + bfifo bottleneck) -> receiver.

Built with iproute2/tc/ethtool through subprocess; :func:`in_netns` moves the calling thread into
a namespace (setns) so sockets created inside it live there while the Python process stays one
process (BPF socket storage can then be read by socket fd). Everything is removed by
:meth:`Dumbbell.destroy`, also after a partial build.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import struct
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from mltcp import offloads, shaping

from . import loader
from .delayline import DelayLine


def build_ecn_marker(rate_mbit: float, k_pkts: int, limit_bytes: int) -> Path:
    """ecn_mark.bpf.c compiled for this bottleneck (its numbers are constants), into the cache."""
    rate_bps, k_bytes = round(rate_mbit * 1e6), k_pkts * 1514
    out = loader.cache_dir() / f"ecn_mark-{rate_bps}-{k_bytes}-{limit_bytes}.bpf.o"
    src = loader.source_dir() / "ecn_mark.bpf.c"
    if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    loader.build([])      # vmlinux.h into the cache directory
    arch = {"x86_64": "x86", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    p = subprocess.run(["clang", "-O2", "-g", "-target", "bpf", f"-D__TARGET_ARCH_{arch}", "-I", str(out.parent),
                        f"-DRATE_BPS={rate_bps}ULL", f"-DK_BYTES={k_bytes}", f"-DLIMIT_BYTES={limit_bytes}",
                        "-c", str(src), "-o", str(out)], capture_output=True, text=True)
    if p.returncode != 0:
        raise NetnsError(f"ECN marker: clang failed on {src}:\n{p.stderr.strip()}")
    return out

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(RuntimeError):
    pass


def run(*cmd: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    full = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    res = subprocess.run(full, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise NetnsError(f"{' '.join(full)}: {res.stderr.strip() or res.stdout.strip()}")
    return res


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise NetnsError(f"setns: {os.strerror(err)}")



@contextlib.contextmanager
def in_netns(name: str | None):
    """Run the body with the current thread in namespace ``name`` (None: stay where we are)."""
    if name is None:
        yield
        return
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    home = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


@dataclass
class Dumbbell:
    """``n`` sender namespaces and one receiver behind a router whose link to the receiver is the
    bottleneck: htb at ``rate_mbit`` with a bfifo of ``buffer_bytes`` (drop-tail). With
    ``delay_us`` > 0 a wire namespace sits between router and receiver: :mod:`.delayline` copies each
    frame across after ``delay_us`` in each direction (base RTT = 2 x delay_us).

    Addresses: sender i is 10.77.i.2 (i from 1), receiver 10.77.100.2.
    """

    n: int = 2
    rate_mbit: float = 100.0
    buffer_bytes: int = 150_000
    delay_us: int = 0
    min_rto_ms: int = 0               # > 0: the senders' route rto_min (Linux default 200 ms)
    idle_restart: bool = True         # the senders' net.ipv4.tcp_slow_start_after_idle (RFC 2861)
    ecn_k_pkts: int = 0               # > 0: CE at >= K full frames queued (ecn_mark.bpf.c), tcp_ecn=1
    tag: str = field(default_factory=lambda: f"mk{os.getpid()}")
    namespaces: list[str] = field(default_factory=list)
    wire: DelayLine | None = None

    @property
    def senders(self) -> list[str]:
        return [f"{self.tag}s{i}" for i in range(1, self.n + 1)]

    @property
    def router(self) -> str:
        return f"{self.tag}r"

    @property
    def receiver(self) -> str:
        return f"{self.tag}d"

    @property
    def wire_ns(self) -> str:
        return f"{self.tag}w"

    receiver_ip = "10.77.100.2"

    def sender_ip(self, i: int) -> str:
        return f"10.77.{i + 1}.2"

    def _veth(self, a_ns: str, a_if: str, b_ns: str, b_if: str, a_ip: str | None, b_ip: str | None) -> None:
        run("ip", "link", "add", a_if, "netns", a_ns, "type", "veth", "peer", "name", b_if, "netns", b_ns)
        for ns, ifc, ip in ((a_ns, a_if, a_ip), (b_ns, b_if, b_ip)):
            if ip:
                run("ip", "addr", "add", ip, "dev", ifc, ns=ns)
            run("ip", "link", "set", ifc, "up", ns=ns)
            # Segments of one MSS on the wire, so the bfifo limit counts real packets; through the
            # delay line also full checksums (it copies frames, a partial checksum would stay wrong).
            run(*offloads.ethtool_args(ifc, checksum=self.delay_us > 0), ns=ns, check=False)

    def build(self) -> "Dumbbell":
        if os.geteuid() != 0:
            raise NetnsError("network namespaces need root")
        if not 1 <= self.n <= 50:
            raise NetnsError(f"n must be 1..50, got {self.n}")
        try:
            for ns in [*self.senders, self.router, self.receiver] + ([self.wire_ns] if self.delay_us > 0 else []):
                run("ip", "netns", "add", ns)
                self.namespaces.append(ns)
                run("ip", "link", "set", "lo", "up", ns=ns)
            run("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=self.router)
            for i, s in enumerate(self.senders):
                self._veth(s, "eth0", self.router, f"eth{i + 1}", f"{self.sender_ip(i)}/24", f"10.77.{i + 1}.1/24")
                rto = ["rto_min", f"{self.min_rto_ms}ms"] if self.min_rto_ms > 0 else []
                if not self.idle_restart:
                    run("sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=0", ns=s)
                run("ip", "route", "add", "default", "via", f"10.77.{i + 1}.1", *rto, ns=s)
            if self.delay_us > 0:
                self._veth(self.wire_ns, "wr", self.router, "ethd", None, "10.77.100.1/24")
                self._veth(self.wire_ns, "wd", self.receiver, "eth0", None, f"{self.receiver_ip}/24")
                self.wire = DelayLine(self.wire_ns, "wr", "wd", self.delay_us).start()
            else:
                self._veth(self.receiver, "eth0", self.router, "ethd", f"{self.receiver_ip}/24", "10.77.100.1/24")
            run("ip", "route", "add", "default", "via", "10.77.100.1", ns=self.receiver)
            self.shape(self.router, "ethd", self.rate_mbit, self.buffer_bytes)
            if self.ecn_k_pkts > 0:
                self._mark_ecn()
        except BaseException:
            self.destroy()
            raise
        return self

    @staticmethod
    def shape(ns: str, dev: str, rate_mbit: float, buffer_bytes: int) -> None:
        for cmd in [*shaping.htb(dev, rate_mbit), shaping.bfifo(dev, shaping.HTB_CLASS, buffer_bytes)]:
            run(*cmd, ns=ns)

    def _mark_ecn(self) -> None:
        obj = build_ecn_marker(self.rate_mbit, self.ecn_k_pkts, self.buffer_bytes)
        run("tc", "qdisc", "add", "dev", "ethd", "clsact", ns=self.router)
        run("tc", "filter", "add", "dev", "ethd", "egress", "bpf", "direct-action", "obj", str(obj), "sec", "tc",
            ns=self.router)
        for ns in [*self.senders, self.receiver]:
            run("sysctl", "-qw", "net.ipv4.tcp_ecn=1", ns=ns)

    def ecn_stats(self) -> dict[str, int] | None:
        """The marker's counters (frames seen, marked CE), or None without ECN."""
        if self.ecn_k_pkts <= 0:
            return None
        out = run("tc", "filter", "show", "dev", "ethd", "egress", ns=self.router).stdout
        m = re.search(r" id (\d+) ", out)
        if not m:
            raise NetnsError(f"ECN marker not found on the router: {out!r}")
        prog = json.loads(run("bpftool", "prog", "show", "id", m.group(1), "--json").stdout)
        raw = json.loads(run("bpftool", "map", "lookup", "id", str(prog["map_ids"][0]), "key", "0", "0", "0", "0",
                             "--json").stdout)
        val = bytes(int(b, 16) for b in raw["value"])
        _, _, marked, seen = struct.unpack("<4Q", val[:32])
        return {"marked": marked, "seen": seen}

    def bottleneck_stats(self) -> str:
        return run("tc", "-s", "qdisc", "show", "dev", "ethd", ns=self.router).stdout

    def destroy(self) -> None:
        if self.wire is not None:
            self.wire.stop()
        for ns in reversed(self.namespaces):
            run("ip", "netns", "del", ns, check=False)
        self.namespaces.clear()

    def __enter__(self) -> "Dumbbell":
        return self.build()

    def __exit__(self, *exc) -> None:
        self.destroy()


def leftover_namespaces(tag: str) -> list[str]:
    p = Path("/run/netns")
    return sorted(x.name for x in p.iterdir() if x.name.startswith(tag)) if p.exists() else []
