"""Propagation delay for the kernel dumbbell without netem: ``delayline.c``, a two-port wire.

This kernel has no netem, fq or etf, and the Python switch (mltcp-switch) cannot forward 100 Mb/s
while the machine is loaded (docs/kernel.md). ``delayline`` is a small C program in its own
namespace between the router and the receiver: every frame is copied across after a fixed delay
in each direction (AF_PACKET), so the base RTT is twice the delay plus the stack's few tens of
microseconds, and rate and buffer stay in the kernel (htb + bfifo on the router).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

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
    """``delayline IF_A IF_B DELAY_US`` running in namespace ``ns`` (start() waits for it)."""

    def __init__(self, ns: str, if_a: str, if_b: str, delay_us: int, nice: int = -10, rt_priority: int = 10):
        if delay_us < 0:
            raise DelayLineError(f"delay line: delay must be >= 0 us, got {delay_us}")
        self.ns, self.if_a, self.if_b, self.delay_us, self.nice = ns, if_a, if_b, int(delay_us), nice
        self.rt_priority = rt_priority    # SCHED_FIFO (chrt) when > 0: it sleeps in ppoll between frames
        self.proc: subprocess.Popen | None = None
        self.stats_path = Path(f"/tmp/mltcp-delayline-{ns}.stats")
        self.stats: dict[str, int] | None = None

    def start(self) -> "DelayLine":
        binary = build()
        sched = (["chrt", "-f", str(self.rt_priority)] if self.rt_priority > 0 and shutil.which("chrt")
                 else ["nice", "-n", str(self.nice)])
        cmd = ["ip", "netns", "exec", self.ns, *sched, str(binary), self.if_a, self.if_b,
               str(self.delay_us), str(self.stats_path)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            self.stop()
            raise DelayLineError(f"delay line in {self.ns} did not start: {line!r} {err.strip()}")
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
