"""What BMv2's P4Runtime server (PI) does not serve, through its thrift interface instead.

PI v0.1.0 inside ``simple_switch_grpc`` answers a register read with UNIMPLEMENTED ("Register
reads are not supported yet"), so ``MyIngress.job_bytes_ratio`` is read with
``simple_switch_CLI register_read`` (the thrift runtime every BMv2 switch also serves), as the
p4lang tutorials' and p4-utils' controllers do. :func:`read_counters` is
``SwitchConnection.read_counters`` with that fallback: counters over P4Runtime, the register over
P4Runtime where the target serves it (mltcp-switch) and over thrift where it does not.
"""

from __future__ import annotations

import re
import subprocess

import grpc

from mltcp import tools
from mltcp.p4src import names as N

from .client import ControlPlaneError, SwitchConnection, grpc_code
from .counters import CounterSnapshot, bitstring_to_int


def parse_thrift_addr(addr: str | int) -> tuple[str, int]:
    """'host:port', ':port' or a port number -> (host, port)."""
    if isinstance(addr, int):
        return "127.0.0.1", addr
    host, _, port = str(addr).rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"thrift address must be HOST:PORT, got {addr!r}")
    return host or "127.0.0.1", int(port)


def parse_register_dump(text: str, name: str) -> list[int]:
    """The values of ``register_read NAME`` (whole array) in simple_switch_CLI output."""
    m = re.search(re.escape(name) + r"\s*=\s*([0-9,\s]*)", text)
    if m is None:
        err = re.search(r"Error: [^\n]*", text)
        raise ControlPlaneError(f"register {name}: {err.group(0) if err else 'no value in CLI output'}")
    return [int(v) for v in re.split(r"[,\s]+", m.group(1).strip()) if v]


def read_register(thrift: str | int, name: str, cli: str | None = None, timeout: float = 30) -> list[int]:
    """Every cell of register ``name`` of the BMv2 switch whose thrift server is ``thrift``."""

    host, port = parse_thrift_addr(thrift)
    argv = [cli or tools.switch_cli(), "--thrift-ip", host, "--thrift-port", str(port)]
    try:
        r = subprocess.run(argv, input=f"register_read {name}\n", capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ControlPlaneError(f"simple_switch_CLI at {host}:{port}: {e}") from e
    return parse_register_dump(r.stdout + r.stderr, name)


def _unimplemented(e: BaseException) -> bool:
    while e is not None:
        if grpc_code(e) == grpc.StatusCode.UNIMPLEMENTED:
            return True
        e = e.__cause__
    return False


def read_counters(conn: SwitchConnection, thrift: str | int | None = None) -> CounterSnapshot:
    """``conn.read_counters()``; where the P4Runtime server cannot read registers (BMv2's PI),
    the counters over P4Runtime and ``job_bytes_ratio`` over ``thrift`` (an error without it)."""
    try:
        return conn.read_counters()
    except ControlPlaneError as e:
        if not _unimplemented(e):
            raise
        if thrift is None:
            raise ControlPlaneError(
                f"{conn.name}: the P4Runtime server does not read registers "
                "(BMv2's PI); give the switch's thrift address (--thrift "
                "HOST:PORT) to read MyIngress.job_bytes_ratio over thrift"
            ) from e
    snap = conn.read_counters(registers=False)
    for idx, v in enumerate(read_register(thrift, N.R_JOB_BYTES_RATIO)):
        if v:
            snap.job(idx).bytes_ratio_q16 = bitstring_to_int(v.to_bytes(2, "big"), 16)
    return snap
