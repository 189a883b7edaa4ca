"""Propagation delay for the kernel dumbbell without netem: ``delayline.c``, a two-port wire.

This kernel has no netem, fq or etf, and the Python switch (mltcp-switch) cannot forward 100 Mb/s
while the machine is loaded (docs/kernel.md). ``delayline`` is a small C program in its own
namespace between the bottleneck switch and the receivers' switch (:class:`DelayLineSwitch`, node
``w`` of the emulation's dumbbell): every frame is copied across after a fixed delay in each
direction (AF_PACKET), so the base RTT is twice the delay plus the stack's few tens of
microseconds, and rate and buffer stay in the kernel (htb + bfifo on the bottleneck switch's port).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from mininet.node import Switch

from . import loader


class DelayLineError(RuntimeError):
    pass


def build(cc: str = "gcc") -> Path:
    """Compile delayline.c into the BPF cache directory (rebuilt only when the source is newer)."""
    src = loader.source_dir() / "delayline.c"
    out = loader.cache_dir() / "delayline"
    if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    if shutil.which(cc) is None:
        raise DelayLineError(f"delay line: no C compiler {cc!r} to build {src}")
    out.parent.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([cc, "-O2", "-Wall", "-o", str(out), str(src)], capture_output=True, text=True)
    if p.returncode != 0:
        raise DelayLineError(f"delay line: {cc} failed on {src}:\n{p.stderr.strip()}")
    return out


class DelayLine:
    """``delayline IF_A IF_B DELAY_US`` started by ``popen`` (a Mininet node's, to run in its
    namespace; default: here); start() waits for it."""

    def __init__(
        self, if_a: str, if_b: str, delay_us: int, popen=subprocess.Popen, nice: int = -10, rt_priority: int = 10
    ):
        if delay_us < 0:
            raise DelayLineError(f"delay line: delay must be >= 0 us, got {delay_us}")
        self.if_a, self.if_b, self.delay_us, self.nice, self.popen = if_a, if_b, int(delay_us), nice, popen
        self.rt_priority = rt_priority  # SCHED_FIFO (chrt) when > 0: it sleeps in ppoll between frames
        self.proc: subprocess.Popen | None = None
        self.stats_path = Path(f"/tmp/mltcp-delayline-{if_a}.stats")
        self.stats: dict[str, int] | None = None

    def start(self) -> "DelayLine":
        binary = build()
        sched = (
            ["chrt", "-f", str(self.rt_priority)]
            if self.rt_priority > 0 and shutil.which("chrt")
            else ["nice", "-n", str(self.nice)]
        )
        cmd = [*sched, str(binary), self.if_a, self.if_b, str(self.delay_us), str(self.stats_path)]
        self.proc = self.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            self.stop()
            raise DelayLineError(f"delay line {self.if_a}-{self.if_b} did not start: {line!r} {err.strip()}")
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        for _ in range(20):
            if self.stats_path.exists():
                break
            time.sleep(0.01)
        if self.stats_path.exists():
            v = [int(x) for x in self.stats_path.read_text().split()]
            self.stats = dict(zip(("forwarded_ab", "forwarded_ba", "overflow", "late_max_us", "errors"), v))
            os.unlink(self.stats_path)


class DelayLineSwitch(Switch):
    """A Mininet switch of two ports joined by a :class:`DelayLine` in its own namespace: the
    emulation dumbbell's ``delay_node`` (mltcp.emulation.topologies.Dumbbell). :attr:`line` keeps
    the delay line's counters after the net stops."""

    def __init__(self, name, delay_us: int = 0, **params):
        params["inNamespace"] = True
        super().__init__(name, **params)
        self.delay_us = int(delay_us)
        self.line: DelayLine | None = None

    def defaultDpid(self, dpid=None):  # no datapath
        return dpid or "0" * 16

    def start(self, _controllers):
        ports = [i.name for i in self.intfList() if i.name != "lo"]
        if len(ports) != 2:
            raise DelayLineError(f"delay line {self.name}: needs two ports, has {ports}")
        for port in ports:
            self.cmd(f"ip link set {port} up")
        self.line = DelayLine(*ports, self.delay_us, popen=self.popen).start()

    def stop(self, deleteIntfs=True):
        if self.line is not None:
            self.line.stop()
        super().stop(deleteIntfs)
