"""Start/stop a whole software switch: pipeline + ports + P4Runtime server.

In-process: ``start_switch(...)`` returns a :class:`SwitchHandle` (threads in this process).
In a subprocess (what Mininet nodes and the tests use): ``switch_command(...)`` builds the
``mltcp-switch`` command line, ``spawn_switch(...)`` runs it and waits for the gRPC port.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import grpc

from mltcp import nsexec

from ..netns import stop_process
from .dataplane import Dataplane
from .links import LinkConfig
from .p4runtime_server import DEFAULT_MAX_STREAMS, P4RuntimeTarget, TlsConfig, serve
from .pipeline import Pipeline

log = logging.getLogger("mltcp.switch")


@dataclass
class SwitchHandle:
    pipeline: Pipeline
    dataplane: Dataplane
    target: P4RuntimeTarget
    server: grpc.Server
    grpc_address: str

    def stop(self) -> None:
        self.server.stop(grace=0.5).wait(2)
        self.dataplane.stop()
        log.info("switch stopped; port stats %s", self.dataplane.stats())


def grpc_address(host: str, port: int) -> str:
    """host:port for gRPC (an IPv6 literal in brackets)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def start_switch(
    interfaces: dict[int, str],
    links: LinkConfig | dict[int, LinkConfig] | None = None,
    grpc_port: int = 9559,
    grpc_host: str = "127.0.0.1",
    device_id: int = 0,
    tls: TlsConfig | None = None,
    max_streams: int = DEFAULT_MAX_STREAMS,
) -> SwitchHandle:
    """Open the ports, start forwarding threads and the P4Runtime server.

    The pipeline drops every frame until a controller sets a forwarding pipeline config.
    ``links`` is one LinkConfig for all ports or a per-port dict (missing ports: defaults).
    The server listens on loopback unless ``grpc_host`` says otherwise; ``tls`` turns on TLS.
    ``grpc_port`` 0 picks a free port (``handle.grpc_address`` has the one bound).
    """
    sys.setswitchinterval(0.0005)  # egress timing: hand the GIL over quickly
    pipeline = Pipeline()
    target = P4RuntimeTarget(pipeline, device_id=device_id, max_streams=max_streams)
    dp = Dataplane(pipeline, interfaces, links)
    try:
        server = serve(target, grpc_address(grpc_host, grpc_port), tls=tls)
    except BaseException:
        dp.close()
        raise
    dp.start()
    for n, p in sorted(dp.ports.items()):
        c = p.queue.cfg
        log.info(
            "port %d = %s: rate %s, delay %.6gs, buffer %d, loss %g%%, reorder %g%%, duplicate %g%%, seed %d%s%s",
            n,
            p.ifname,
            "unlimited" if c.rate_bps is None else f"{c.rate_bps:.6g} bit/s",
            c.delay_s,
            c.buffer_pkts,
            c.loss_pct,
            c.reorder_pct,
            c.duplicate_pct,
            c.seed,
            f", lossless (PFC, headroom {c.pfc_headroom})" if c.pfc_headroom else "",
            "" if c.priority_pin else ", priority queues unpinned",
        )
    return SwitchHandle(pipeline, dp, target, server, grpc_address(grpc_host, target.port))


def free_tcp_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def switch_command(
    interfaces: dict[int, str],
    grpc_port: int = 9559,
    device_id: int = 0,
    rate: str = "unlimited",
    delay: str = "0",
    buffer: int = 100,
    loss: float = 0.0,
    reorder: float = 0.0,
    duplicate: float = 0.0,
    seed: int = 1,
    port_config: dict[int, str] | None = None,
    grpc_host: str = "127.0.0.1",
    log_level: str = "info",
    stats_file: str | None = None,
    python: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    tls_client_ca: str | None = None,
) -> list[str]:
    """The ``mltcp-switch`` command line (run with this interpreter, so no PATH is needed)."""
    cmd = [
        python or sys.executable,
        "-m",
        "mltcp.emulation.switch_cli",
        "--grpc-port",
        str(grpc_port),
        "--grpc-host",
        grpc_host,
        "--device-id",
        str(device_id),
        "--rate",
        rate,
        "--delay",
        delay,
        "--buffer",
        str(buffer),
        "--loss",
        str(loss),
        "--reorder",
        str(reorder),
        "--duplicate",
        str(duplicate),
        "--seed",
        str(seed),
        "--log-level",
        log_level,
    ]
    if stats_file:
        cmd += ["--stats-file", str(stats_file)]
    for opt, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key), ("--tls-client-ca", tls_client_ca)):
        if path:
            cmd += [opt, str(path)]
    for n, ifname in sorted(interfaces.items()):
        cmd += ["-i", f"{n}@{ifname}"]
    for n, spec in sorted((port_config or {}).items()):
        cmd += ["--port-config", f"{n}:{spec}"]
    return cmd


def wait_grpc(
    address: str,
    timeout: float = 15.0,
    proc: subprocess.Popen | None = None,
    credentials: grpc.ChannelCredentials | None = None,
) -> None:
    """Block until a gRPC server answers on ``address`` (raise if ``proc`` dies first).
    ``credentials``: for a TLS port (the channel must complete the TLS handshake)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"switch exited with code {proc.returncode} before serving {address}")
        ch = grpc.secure_channel(address, credentials) if credentials is not None else grpc.insecure_channel(address)
        try:
            grpc.channel_ready_future(ch).result(timeout=0.5)
            return
        except grpc.FutureTimeoutError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no gRPC server on {address} after {timeout}s") from None
        finally:
            ch.close()


def spawn_switch(
    interfaces: dict[int, str],
    netns: str | None = None,
    grpc_port: int | None = None,
    stderr=None,
    credentials: grpc.ChannelCredentials | None = None,
    **kw,
) -> tuple[subprocess.Popen, int]:
    """Run ``mltcp-switch`` in a subprocess (inside ``ip netns exec NETNS`` if given), wait until
    its P4Runtime port answers and return (process, grpc_port). Stop it with :func:`stop_switch`.
    The readiness probe connects from this process, so with ``netns`` the port is probed through
    ``ip netns exec`` too (a tiny Python probe; plaintext only). With TLS (``tls_cert`` etc. in
    ``kw``) pass channel ``credentials`` the server accepts, for the probe."""
    if grpc_port is None:
        grpc_port = free_tcp_port()
    cmd = switch_command(interfaces, grpc_port=grpc_port, **kw)
    cmd = nsexec.argv(cmd, netns)
    proc = subprocess.Popen(cmd, stderr=stderr, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        if netns:
            probe = [
                sys.executable,
                "-c",
                "import sys; from mltcp.emulation.switch.runtime import wait_grpc; "
                f"wait_grpc('127.0.0.1:{grpc_port}', 15)",
            ]
            r = subprocess.run(nsexec.argv(probe, netns), capture_output=True, timeout=30)
            if r.returncode != 0 or proc.poll() is not None:
                raise RuntimeError(
                    f"switch in netns {netns} did not come up: {r.stderr.decode(errors='replace')[-500:]}"
                )
        else:
            wait_grpc(f"127.0.0.1:{grpc_port}", 15, proc, credentials)
    except BaseException:
        stop_switch(proc, 5)
        raise
    return proc, grpc_port


def stop_switch(proc: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM a spawned switch (it logs its port statistics and exits); SIGKILL after ``grace_s``."""
    stop_process(proc, grace_s)
