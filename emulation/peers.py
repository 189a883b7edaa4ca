"""The job peers inside the emulated hosts, seen from the runner: their command lines, the kernel
settings they need (TCP_CONGESTION name, per-route minimum RTO), and their supervision (one
:class:`Peer` per subprocess, its stdout JSON lines on a shared queue, a common start epoch)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time

from . import netns
from .plan import TRANSPORTS, EmulationError, JobPlan, nic_rate_mbps

PEER_MODULES = {"kernel": "mltcp.emulation.kernel_peer", "udp": "mltcp.emulation.udp_peer"}


def peer_commands(job: JobPlan, transport: str, run: str = "", t0: float = 0.0) -> tuple[list[str], list[str]]:
    """(receiver argv, sender argv) for one job; ``run`` tags the peers' command lines. The sender
    reads its job from one JSON document on stdin (:func:`sender_doc`, written by :class:`Peer`)."""
    if transport not in PEER_MODULES:
        raise EmulationError(f"unknown transport {transport!r}; choose from {', '.join(TRANSPORTS)}")
    if transport == "udp" and not udp_available():
        raise EmulationError(
            "--transport udp needs the userspace transport (mltcp.traffic.transport), "
            "which is not importable in this checkout"
        )
    m = [sys.executable, "-m", PEER_MODULES[transport]]
    tag = ["--run", run] if run else []
    return [*m, "recv", *tag, "--port", str(job.port), "--t0", repr(t0)], [*m, "send", *tag, "--spec", "-"]


def sender_doc(job: JobPlan, transport: str, cc: str, t0: float = -1.0) -> dict:
    """The JSON document a job's sender runs from (:func:`mltcp.emulation.peer_io.read_send_doc`):
    the job's :class:`~mltcp.traffic.driver.JobSpec`, where to send, the congestion control, the
    run's epoch (< 0: sent on stdin once every sender is ready) and the transport's settings."""
    doc = {"spec": job.spec.to_dict(), "host": job.dst_ip, "port": job.port, "cc": cc, "t0": t0}
    if transport == "kernel":
        if job.line_rate_mbps > 0 and os.environ.get("MLTCP_KERNEL_PACING", "1") != "0":
            # paced like a NIC of the link's rate, as the udp sender and the model (docs/kernel.md)
            doc["nic_rate_mbps"] = job.line_rate_mbps
        return doc
    doc.update(line_rate_mbps=job.line_rate_mbps, min_rto_s=job.min_rto_s, idle_restart=job.idle_restart)
    params = dict(job.dcqcn) if cc.endswith("dcqcn") else dict(job.dctcp) if cc.endswith("dctcp") else {}
    params.update(udp_hook_params(job.hook, cc))
    if params:
        doc["cc_params"] = params
    if job.line_rate_mbps > 0:
        doc["nic_rate_mbps"] = nic_rate_mbps(job.line_rate_mbps)
    return doc


# [mltcp] knobs the userspace sender does not take from the scenario: it marks every iteration
# itself (explicit boundaries, the idle rule off), and min_idle is a time --dilate would stretch
TRACKER_KNOBS = ("min_idle", "idle_fraction", "idle_gap", "boundary")


def udp_hook_params(hook: dict, cc: str) -> dict:
    """The scenario's ``[mltcp]`` settings that ``cc``'s MLTCP variant takes on the userspace
    transport (F's shape, the decrease, history, DCQCN's ``dcqcn_f_*``); {} for a base algorithm."""
    from mltcp.cc import ALGORITHMS

    if not cc.startswith("mltcp-") or cc not in ALGORITHMS:
        return {}
    known = ALGORITHMS[cc].params
    return {k: v for k, v in hook.items() if k in known and k not in TRACKER_KNOBS}


def udp_available() -> bool:
    """Whether the userspace MLTCP transport (mltcp.traffic.transport) can be imported: False when
    a third-party module it needs is missing; an error in the package itself is raised, not hidden."""
    import importlib

    try:
        importlib.import_module("mltcp.traffic.transport.transport")
        importlib.import_module("mltcp.traffic.transport.receiver")
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] == "mltcp":
            raise
        return False
    return True


def kernel_cc_name(cc: str, mltcp: bool) -> str:
    """Kernel TCP_CONGESTION name for an arm; MLTCP needs the BPF struct_ops algorithm registered."""
    if not mltcp:
        if cc == "dctcp":
            from mltcp.traffic.kernel.base_cc import kernel_name

            return kernel_name(cc)  # registered by the arm that runs it (run_arm)
        if cc not in ("reno", "cubic"):
            raise EmulationError(f"kernel transport supports --cc reno, cubic or dctcp, not {cc}")
        return cc
    if cc not in ("reno", "cubic"):
        raise EmulationError(f"kernel TCP has MLTCP variants of reno and cubic only, not of {cc}")
    avail = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    for name in (f"mltcp_{cc}", f"bpf_mltcp_{cc}"):
        if name in avail:
            return name
    raise EmulationError(
        f"kernel MLTCP-{cc} is not registered (tcp_available_congestion_control: "
        f"{' '.join(avail)}); load the BPF congestion control from traffic/kernel first"
    )


_ROUTE_FLAGS = {"linkdown", "dead", "offload", "trap", "offload_failed", "rt_offload", "rt_trap"}


def route_rto_commands(route_lines: str, min_rto_s: float) -> list[str]:
    """``ip route change`` lines that give every route in ``ip route show`` output the minimum RTO
    ``min_rto_s`` (Linux's per-route ``rto_min``): kernel TCP then times out, and restarts its
    window after idle, on the scenario's (possibly dilated) RTO instead of its fixed 200 ms."""
    out = []
    for line in route_lines.splitlines():
        toks = [t for t in line.split() if t not in _ROUTE_FLAGS]
        if not toks or toks[0] in ("broadcast", "local", "multicast", "unreachable", "blackhole", "prohibit"):
            continue
        if "rto_min" in toks:  # replace an existing value
            i = toks.index("rto_min")
            del toks[i : i + 2]
        out.append("ip route change " + " ".join(toks) + f" rto_min {max(1, round(min_rto_s * 1e3))}ms")
    return out


def set_kernel_min_rto(hosts, min_rto_s: float) -> None:
    """:func:`route_rto_commands` applied in each Mininet host of ``hosts``."""
    for h in hosts:
        for cmd in route_rto_commands(h.cmd("ip -4 route show"), min_rto_s):
            res = h.cmd(cmd + " 2>&1; echo rc=$?")
            if not res.rstrip().endswith("rc=0"):
                raise EmulationError(f"{h.name}: '{cmd}' failed: {res.strip()}")


class Peer:
    """A subprocess in a host whose stdout JSON lines are pushed onto a shared queue; ``doc`` (a
    sender's job document, :func:`sender_doc`) goes to its stdin as one line first."""

    def __init__(
        self, node, argv: list[str], tag: str, q: queue.Queue, cleanup: netns.Cleanup, doc: dict | None = None
    ):
        self.tag = tag
        self.proc = cleanup.add_proc(
            node.popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
            )
        )
        if doc is not None:  # the sender's job document: one line on its stdin
            self.proc.stdin.write(json.dumps(doc) + "\n")
            self.proc.stdin.flush()
        self.err: list[str] = []
        threading.Thread(target=self._read_out, args=(q,), daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self, q):
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                q.put((self.tag, json.loads(line)))
            except json.JSONDecodeError:
                q.put((self.tag, {"type": "text", "text": line}))
        q.put((self.tag, {"type": "eof"}))

    def _read_err(self):
        for line in self.proc.stderr:
            self.err.append(line.rstrip())

    def why(self) -> str:
        """The end of its stderr for an error message: the last 3 lines, after the last line that
        names an error where that is earlier (a traceback ends in its frames, the cause is above)."""
        named = [line for line in self.err[:-3] if "Error" in line or "error:" in line]
        return " | ".join(named[-1:] + self.err[-3:])

    def go(self, t0: float) -> None:
        """Hand the run's start epoch to a peer waiting after its ready line."""
        self.proc.stdin.write(f"{t0!r}\n")
        self.proc.stdin.flush()


def messages(q: queue.Queue, timeout_s: float, what, poll_s: float = 1.0):
    """(tag, message) from the peers' queue as they come, until the caller stops; after
    ``timeout_s`` an EmulationError saying ``what()``."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise EmulationError(what())
        try:
            item = q.get(timeout=min(left, poll_s))
        except queue.Empty:
            continue
        yield item


def start_together(senders: dict, q: queue.Queue, timeout_s: float, lead_s: float = 0.3) -> float:
    """Wait for every sender's ready line, then give them all one start epoch; returns it.
    Messages other than ready that arrive meanwhile go back on the queue."""
    waiting = {p.tag for p in senders.values()}
    held = []
    incoming = messages(
        q, timeout_s, lambda: f"peers not ready after {timeout_s:.0f} s: {', '.join(sorted(waiting))}", poll_s=0.5
    )
    for tag, msg in incoming if waiting else ():
        if msg["type"] == "ready":
            waiting.discard(tag)
            if not waiting:
                break
        elif msg["type"] == "eof" and tag in waiting:
            p = next(p for p in senders.values() if p.tag == tag)
            p.proc.wait(timeout=5)
            raise EmulationError(f"{tag} exited {p.proc.returncode} before it was ready: {p.why()}")
        else:
            held.append((tag, msg))
    for item in held:
        q.put(item)
    t0 = time.time() + lead_s
    for p in senders.values():
        p.go(t0)
    return t0
