"""A capture of one emulated link: tcpdump on a root-namespace interface while a run goes on.

Headers only (``snaplen`` bytes of each frame; the wire length is kept, so
``mltcp traffic pcap-records`` still counts every payload byte), TCP only. The process is
registered with the run's :class:`netns.Cleanup`, so it goes whatever happens; at the end it is
stopped with SIGTERM so it flushes the file, and the packets the kernel dropped before tcpdump
read them are reported (a capture that lost packets under-counts bytes, not iterations).
"""

from __future__ import annotations

import contextlib
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

from . import netns
from .plan import EmulationError

SNAPLEN = 96  # Ethernet + IPv4 + TCP with options
BUFFER_KIB = 32768  # the capture's kernel buffer: a few seconds at 1 Gb/s of headers


@contextlib.contextmanager
def capture(intf: str, path: Path, cl: netns.Cleanup, snaplen: int = SNAPLEN):
    """tcpdump on ``intf`` (root namespace) into ``path`` while the block runs. Yields a dict
    that holds ``kernel_dropped`` once the block is done."""
    if shutil.which("tcpdump") is None:
        raise EmulationError("--pcap needs tcpdump (scripts/install-system.sh installs it)")
    path = Path(path)
    argv = ["tcpdump", "-i", intf, "-s", str(snaplen), "-B", str(BUFFER_KIB), "-w", str(path), "-n", "tcp"]
    proc = cl.add_proc(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    _wait_listening(proc, intf)
    stats: dict = {"file": str(path), "interface": intf, "kernel_dropped": None}
    try:
        yield stats
    finally:
        netns.stop_process(proc, grace_s=10)
        stats["kernel_dropped"] = kernel_dropped(proc.stderr.read() if proc.stderr else "")


def _wait_listening(proc: subprocess.Popen, intf: str, timeout_s: float = 10.0) -> None:
    """Block until tcpdump says it is listening (its first stderr line), or fail with its words."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.2)
        if ready:
            line = proc.stderr.readline()
            if "listening on" in line:
                return
            if not line and proc.poll() is not None:
                break
        elif proc.poll() is not None:
            break
    netns.stop_process(proc, grace_s=2)
    rest = proc.stderr.read() if proc.stderr else ""
    raise EmulationError(f"tcpdump on {intf} did not start: {rest.strip()[-500:] or 'no output'}")


def kernel_dropped(stderr: str) -> int | None:
    """The 'N packets dropped by kernel' of tcpdump's exit statistics (None if absent)."""
    m = re.search(r"(\d+) packets? dropped by kernel", stderr)
    return int(m.group(1)) if m else None
