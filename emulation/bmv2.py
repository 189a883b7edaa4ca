"""BMv2 ``simple_switch_grpc`` running mltcp.p4: in a namespace (tests, ptf, bench) or as a
Mininet switch (link mode ``bmv2``), programmed over P4Runtime by the project's control plane.

The switch starts without a program (``--no-p4``); the P4Info and the p4c-compiled BMv2 JSON are
pushed with SetForwardingPipelineConfig, as the p4lang tutorials and p4-utils do. Each egress
port's queue is shaped with ``simple_switch_CLI``: ``set_queue_rate`` (packets per second) and
``set_queue_depth`` (packets), which is the queue ``standard_metadata.enq_qdepth`` reports, so
mltcp.p4's queue-depth ECN marking is real. BMv2 has no link delay.

Binaries come from :mod:`mltcp.tools`: the ``fast/bin`` build (no logging macros, -O3) unless
``debug`` asks for ``bin/`` with its per-packet log (``--log-file``). Only the PIDs started here
are ever stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from mltcp import nsexec, offloads, tools

from .netns import stop_process

FRAME_BYTES = 1514  # a full-sized Ethernet frame: the unit of a rate given in Mb/s


def switch_argv(
    interfaces: dict[int, str],
    grpc_port: int,
    thrift_port: int,
    device_id: int = 0,
    log_path: str | Path | None = None,
    debug: bool = False,
    pcap_dir: str | Path | None = None,
    target_args: tuple[str, ...] = (),
) -> list[str]:
    """simple_switch_grpc's command line (pure apart from finding the binary); ``target_args``
    go after ``--`` with the gRPC address (e.g. ``("--priority-queues", "8")``)."""
    exe = tools.bmv2_switch(fast=not debug)
    # the notifications socket defaults to /tmp/bmv2-<device id>-...: one per instance instead
    ipc = f"ipc://{tempfile.gettempdir()}/mltcp-bmv2-{os.getpid()}-{thrift_port}-notifications.ipc"
    argv = [
        exe,
        "--device-id",
        str(device_id),
        "--thrift-port",
        str(thrift_port),
        "--no-p4",
        "--notifications-addr",
        ipc,
    ]
    for n, ifname in sorted(interfaces.items()):
        argv += ["-i", f"{n}@{ifname}"]
    if debug and log_path:
        argv += ["--log-file", str(Path(log_path).with_suffix("")), "--log-flush"]
    if pcap_dir:
        argv += ["--pcap", str(pcap_dir)]
    return argv + ["--", "--grpc-server-addr", f"127.0.0.1:{grpc_port}", *target_args]


def queue_rate_pps(rate_mbps: float, frame_bytes: int = FRAME_BYTES) -> int:
    """set_queue_rate's value for a link of ``rate_mbps`` carrying full-sized frames."""
    return max(1, round(rate_mbps * 1e6 / 8 / frame_bytes))


def queue_commands(port_queues: dict[int, tuple[int | None, int | None]]) -> str:
    """simple_switch_CLI input: {port: (pps or None, depth in packets or None)}."""
    lines = []
    for port, (pps, depth) in sorted(port_queues.items()):
        if depth is not None:
            lines.append(f"set_queue_depth {int(depth)} {port}")
        if pps is not None:
            lines.append(f"set_queue_rate {int(pps)} {port}")
    return "".join(l + "\n" for l in lines)


def run_cli(thrift_port: int, commands: str, netns: str | None = None, timeout: float = 30) -> str:
    """Feed ``commands`` to simple_switch_CLI on ``thrift_port``; raises with its output on error."""
    argv = [tools.switch_cli(), "--thrift-port", str(thrift_port)]
    argv = nsexec.argv(argv, netns)
    r = subprocess.run(argv, input=commands, capture_output=True, text=True, timeout=timeout)
    out = r.stdout + r.stderr
    if r.returncode != 0 or "Error" in out or "Invalid" in out:
        raise RuntimeError(f"simple_switch_CLI (thrift {thrift_port}) failed on {commands!r}: {out[-800:]}")
    return out


def _wait_ports(grpc_port: int, thrift_port: int, proc: subprocess.Popen, netns: str | None, timeout: float) -> None:
    probe = (
        "import socket, sys, time\n"
        f"end = time.monotonic() + {timeout!r}\n"
        f"for port in ({grpc_port}, {thrift_port}):\n"
        "    while True:\n"
        "        try:\n"
        "            socket.create_connection(('127.0.0.1', port), 0.5).close(); break\n"
        "        except OSError:\n"
        "            if time.monotonic() > end: sys.exit(f'port {port} closed')\n"
        "            time.sleep(0.05)\n"
    )
    argv = [sys.executable, "-c", probe]
    argv = nsexec.argv(argv, netns)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 10)
    if r.returncode != 0 or proc.poll() is not None:
        raise RuntimeError(f"simple_switch_grpc did not come up (rc {proc.poll()}): {r.stderr.strip()}")


def stop(proc: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM our simple_switch_grpc; SIGKILL after ``grace_s``; remove its IPC socket."""
    stop_process(proc, grace_s)
    ipc = getattr(proc, "mltcp_ipc", None)
    if ipc:
        try:
            os.unlink(ipc)
        except OSError:
            pass


def start_in_netns(
    netns: str | None,
    interfaces: dict[int, str],
    log_path: str | Path | None = None,
    device_id: int = 0,
    debug: bool = False,
    timeout: float = 20,
    pcap_dir: str | Path | None = None,
    target_args: tuple[str, ...] = (),
) -> tuple[subprocess.Popen, int, int]:
    """Start simple_switch_grpc on ``interfaces`` (inside ``netns`` if given) with its gRPC and
    thrift servers on free ports of 127.0.0.1 there; returns (process, grpc port, thrift port)."""
    from mltcp.emulation.switch.runtime import free_tcp_port

    grpc_port, thrift_port = free_tcp_port(), free_tcp_port()
    while thrift_port == grpc_port:
        thrift_port = free_tcp_port()
    argv = switch_argv(interfaces, grpc_port, thrift_port, device_id, log_path, debug, pcap_dir, target_args)
    argv = nsexec.argv(argv, netns)
    log = open(log_path, "w") if log_path else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        proc.mltcp_ipc = next(a for a in argv if a.startswith("ipc://"))[len("ipc://") :]
    finally:
        if log_path:
            log.close()
    try:
        _wait_ports(grpc_port, thrift_port, proc, netns, timeout)
    except BaseException:
        stop(proc, 5)
        raise
    return proc, grpc_port, thrift_port


# --------------------------------------------------------------------------- the compiled program

_compiled: dict[str, Path] = {}


def compiled_program(out_dir: str | Path | None = None) -> Path:
    """mltcp.p4 compiled for BMv2 (p4c-bm2-ss), once per process (the JSON path)."""
    from mltcp.p4src import P4_PATH

    key = str(out_dir or "")
    if key not in _compiled or not _compiled[key].is_file():
        d = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="mltcp-bmv2-"))
        _compiled[key] = tools.compile_v1model(P4_PATH, d)
    return _compiled[key]


def program(
    grpc_addr: str,
    device_id: int,
    config: str | Path,
    routes,
    ecn,
    timeout_s: float = 120.0,
    progress: dict | None = None,
) -> None:
    """Push mltcp.p4 (P4Info + BMv2 JSON) and the tables with mltcp.controlplane, in a child
    process (p4runtime-shell keeps global state and stream threads)."""
    spec = json.dumps(
        {
            "grpc": grpc_addr,
            "device_id": device_id,
            "config": str(config),
            "routes": routes,
            "ecn": ecn,
            "progress": progress,
        }
    )
    r = subprocess.run(
        [sys.executable, "-m", "mltcp.emulation.bmv2", spec], capture_output=True, text=True, timeout=timeout_s
    )
    if r.returncode != 0:
        raise RuntimeError(f"programming simple_switch_grpc at {grpc_addr} failed: {r.stderr.strip()[-800:]}")


def _program_one(spec: dict) -> None:
    from mltcp.controlplane.client import connect

    from .softswitch import apply_progress_policy
    from mltcp.controlplane.topology import Route

    with connect(spec["grpc"], device_id=spec["device_id"]) as sw:
        sw.push_pipeline(config_path=spec["config"])
        sw.install_routes([Route(p, int(port), mac) for p, port, mac in spec["routes"]])
        for port, k in spec["ecn"]:
            sw.set_ecn_threshold(int(port), int(k))
        apply_progress_policy(sw, spec)


def read_stats(grpc_addr: str, thrift_port: int, device_id: int = 0, timeout_s: float = 60.0) -> dict:
    """{"ecn_marks": total of MyEgress.job_ecn_marks, "tx_packets": of MyIngress.job_tx,
    "parse_errors": ...} read with mltcp.controlplane (a child process, read-only election id;
    the register over thrift)."""
    code = (
        "import json, sys\n"
        "from mltcp.controlplane.client import connect, reader_election_id\n"
        "from mltcp.controlplane.bmv2 import read_counters\n"
        f"with connect({grpc_addr!r}, device_id={device_id}, election_id=reader_election_id()) as sw:\n"
        "    sw.attach()\n"
        f"    s = read_counters(sw, {thrift_port})\n"
        "print(json.dumps({'ecn_marks': sum(j.ecn_marks for j in s.jobs.values()),\n"
        "                  'tx_packets': sum(j.tx_packets for j in s.jobs.values()),\n"
        "                  'parse_errors': s.parse_errors}))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    if r.returncode != 0:
        raise RuntimeError(f"reading counters of {grpc_addr} failed: {r.stderr.strip()[-800:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- Mininet switch

try:
    from mininet.node import Switch as _MnSwitch
except ImportError:  # pragma: no cover - Mininet absent: the namespace helpers above still work
    _MnSwitch = object


class Bmv2Switch(_MnSwitch):
    """simple_switch_grpc as a Mininet switch (root namespace, like Open vSwitch; Mininet port
    numbers = P4 ports).

    Before ``net.start()`` the builder sets ``queues`` ({port: (pps, depth)}), ``routes``
    ([prefix, port, mac]) and ``ecn`` ([port, K]); ``start()`` then runs the switch, shapes the
    queues with simple_switch_CLI and programs mltcp.p4 over P4Runtime. ``stop()`` reads the
    ECN-mark counters (``stats``), then stops only this switch's process.

    Parameters (``addSwitch(name, cls=Bmv2Switch, **params)``): device_id (0), log_dir (logs
    and, with pcap=True, per-port pcaps are kept there; default: a temp folder removed at stop),
    debug (the bin/ build with a per-packet log instead of fast/bin/).
    """

    def __init__(
        self,
        name,
        device_id: int = 0,
        log_dir: str | None = None,
        pcap: bool = False,
        debug: bool = False,
        topo=None,
        **params,
    ):
        super().__init__(name, **params)
        self.topo = topo  # an emulated topology: queues, routes and ECN are taken from it in start()
        self.device_id = device_id
        self.keep_logs = log_dir is not None
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix=f"bmv2-{name}-"))
        self.pcap = pcap
        self.debug = debug
        self.queues: dict[int, tuple[int | None, int | None]] = {}
        self.routes: list = []
        self.ecn: list = []
        self.progress: dict | None = None
        self.proc: subprocess.Popen | None = None
        self.grpc_port = self.thrift_port = 0
        self.stats: dict = {}

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def log_file(self) -> str:
        return str(self.log_dir / f"{self.name}.log")

    def defaultDpid(self, dpid=None):  # no OpenFlow datapath
        try:
            return super().defaultDpid(dpid)
        except Exception:
            return "0" * 16

    def start(self, _controllers) -> None:
        if self.topo is not None:
            configure(self, self.topo)
        # ports up; TX checksum offload off on both ends: a veth hands a partial checksum along,
        # which the switch would forward unfinished (the receiver then drops every UDP datagram)
        interfaces = offloads.ready_switch_ports(self)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        pcaps = self.log_dir / f"{self.name}-pcap" if self.pcap else None
        if pcaps:
            pcaps.mkdir(exist_ok=True)
        self.proc, self.grpc_port, self.thrift_port = start_in_netns(
            None, interfaces, log_path=self.log_file, device_id=self.device_id, debug=self.debug, pcap_dir=pcaps
        )
        if self.queues:
            run_cli(self.thrift_port, queue_commands(self.queues))
        program(self.grpc_address, self.device_id, compiled_program(), self.routes, self.ecn, progress=self.progress)

    def stop(self, deleteIntfs: bool = True) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.stats = read_stats(self.grpc_address, self.thrift_port, self.device_id)
            except Exception as e:  # the run's result must not be lost to a failed read
                self.stats = {"error": str(e)}
            stop(self.proc, 10)
        self.proc = None
        if not self.keep_logs:
            import shutil

            shutil.rmtree(self.log_dir, ignore_errors=True)
        super().stop(deleteIntfs)


if __name__ == "__main__":  # python -m mltcp.emulation.bmv2 '<json spec>'
    _program_one(json.loads(sys.argv[1]))


# --------------------------------------------------------------------------- link mode ``bmv2``


def switch_class(log_dir: str | Path | None = None, pcap: bool = False):
    """Bmv2Switch with the run's log folder (logs kept there; per-port pcaps with ``pcap``)."""
    import functools

    if pcap and log_dir is None:
        raise ValueError("per-port pcaps need a folder to keep them in (--switch-logs DIR)")
    return functools.partial(Bmv2Switch, log_dir=str(log_dir) if log_dir else None, pcap=pcap)


def use_shim_port(jobs) -> bool:
    """Every job to UDP port 9199, where mltcp.p4 parses the MLTCP shim, so BMv2 counts its
    packets (job_tx) and ECN marks (job_ecn_marks) per job. Only when no two jobs share a
    receiver host (each receiver binds the port); True if done."""
    from mltcp.traffic.transport.wire import MLTCP_UDP_PORT

    if len({j.receiver for j in jobs}) != len(jobs):
        return False
    for j in jobs:
        j.port = MLTCP_UDP_PORT
    return True


def configure(sw: Bmv2Switch, topo) -> None:
    """Before the switch runs (its start()): queue shaping (rate in packets/s of full-sized
    frames, depth in packets) per port from the links' options, routes and ECN thresholds."""
    from .softswitch import _linked_ports, port_params, switch_tables

    queues = {}
    for intf, port in _linked_ports(sw):
        p = port_params(intf)
        if p is None or (p.rate_mbps is None and p.buffer_bytes is None):
            continue
        queues[port] = (
            None if p.rate_mbps is None else queue_rate_pps(p.rate_mbps),
            None if p.buffer_bytes is None else max(1, p.buffer_bytes // 1500),
        )  # whole packets
    tables = switch_tables(topo, sw)
    sw.queues, sw.routes, sw.ecn = queues, tables["routes"], tables["ecn"]
    sw.progress = tables.get("progress")


def collect_stats(switches) -> int:
    """ECN marks (MyEgress.job_ecn_marks, all jobs) the stopped BMv2 switches read at stop."""
    marks = 0
    for sw in switches:
        if "error" in sw.stats:
            raise RuntimeError(f"{sw.name}: reading its counters at stop failed: {sw.stats['error']}")
        marks += int(sw.stats.get("ecn_marks", 0))
    return marks


def estimated_drops(records, peer_stats: dict) -> int:
    """Packets lost on the path, as the senders saw them: BMv2 keeps no queue-drop counter a
    controller can read. The userspace senders' retransmissions minus their tail-loss probes
    (a probe retransmits without a loss); else (kernel TCP) the records' retransmissions."""
    if peer_stats:
        return sum(int(f.get("retransmits", 0)) - int(f.get("tlp", 0)) for flows in peer_stats.values() for f in flows)
    return sum(int(r.drops) for r in records)
