"""``mltcp-switch``: the software target for mltcp.p4 (AF_PACKET ports + P4Runtime server).

Example::

    mltcp-switch --grpc-port 9559 --device-id 0 -i 1@veth1 -i 2@veth2 \\
        --rate 100mbit --delay 1ms --buffer 100 --port-config "2:rate=10mbit,loss=1"

The P4Runtime server listens on 127.0.0.1 unless ``--grpc-host`` says otherwise; with
``--tls-cert/--tls-key`` it speaks TLS only, and with ``--tls-client-ca`` it also requires a
client certificate signed by that CA (see docs/security.md). Bad options exit with code 2.
"""

from __future__ import annotations

import ipaddress
import logging
import signal
import ssl
import sys
import threading
from pathlib import Path

import typer

from .switch.links import LinkConfig, parse_link_overrides, parse_rate, parse_time

app = typer.Typer(add_completion=False, help=__doc__)


def _parse_interfaces(specs: list[str]) -> dict[int, str]:
    out: dict[int, str] = {}
    for spec in specs:
        num, sep, ifname = spec.partition("@")
        if not sep or not num.strip().isdigit() or not ifname.strip():
            raise typer.BadParameter(f"{spec!r}: expected PORT@IFNAME, e.g. 1@veth1", param_hint="--interface")
        n = int(num)
        if n >= 512:
            raise typer.BadParameter(f"{spec!r}: port {n} does not fit in bit<9> (0..511)", param_hint="--interface")
        if n in out:
            raise typer.BadParameter(f"port {n} given twice", param_hint="--interface")
        out[n] = ifname.strip()
    return out


def _check_host(host: str) -> str:
    """An IP address or a host name (what gRPC can bind)."""
    h = host.strip().strip("[]")
    try:
        ipaddress.ip_address(h)
        return h
    except ValueError:
        pass
    if (
        h
        and len(h) <= 253
        and all(part and len(part) <= 63 and part.replace("-", "").isalnum() for part in h.split("."))
    ):
        return h
    raise typer.BadParameter(f"{host!r} is not an IP address or host name", param_hint="--grpc-host")


def _tls(cert: Path | None, key: Path | None, client_ca: Path | None):
    """Read and check the TLS files (a usable certificate/key pair) before anything starts."""
    if cert is None and key is None:
        if client_ca is not None:
            raise typer.BadParameter("needs --tls-cert and --tls-key", param_hint="--tls-client-ca")
        return None
    if cert is None or key is None:
        raise typer.BadParameter(
            "give both --tls-cert and --tls-key", param_hint="--tls-cert" if cert is None else "--tls-key"
        )
    data = {}
    for opt, path in (("--tls-cert", cert), ("--tls-key", key), ("--tls-client-ca", client_ca)):
        if path is None:
            continue
        try:
            data[opt] = path.read_bytes()
        except OSError as e:
            raise typer.BadParameter(f"{path}: {e.strerror}", param_hint=opt) from None
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (ssl.SSLError, ValueError) as e:
        raise typer.BadParameter(
            f"{cert} / {key}: not a PEM certificate and its private key ({e})", param_hint="--tls-cert/--tls-key"
        ) from None
    if client_ca is not None:
        try:
            ssl.create_default_context(cafile=str(client_ca))
        except (ssl.SSLError, ValueError) as e:
            raise typer.BadParameter(
                f"{client_ca}: not a PEM CA certificate ({e})", param_hint="--tls-client-ca"
            ) from None
    from .switch.p4runtime_server import TlsConfig

    return TlsConfig(data["--tls-cert"], data["--tls-key"], data.get("--tls-client-ca"))


@app.command()
def run(
    interface: list[str] = typer.Option(..., "--interface", "-i", help="PORT@IFNAME, repeatable"),
    grpc_port: int = typer.Option(9559, min=0, max=65535, help="P4Runtime gRPC port (0: any free port, logged)"),
    grpc_host: str = typer.Option(
        "127.0.0.1", help="address to listen on (0.0.0.0: every interface; then use TLS with client certificates)"
    ),
    device_id: int = typer.Option(0, min=0, max=2**64 - 1, help="P4Runtime device id (uint64)"),
    rate: str = typer.Option("unlimited", help="egress line rate per port: 100mbit, 1gbit, unlimited"),
    delay: str = typer.Option("0", help="propagation delay per port: 1ms, 200us"),
    buffer: int = typer.Option(100, min=1, max=1_000_000, help="egress buffer in packets (drop-tail)"),
    loss: float = typer.Option(0.0, help="loss percent on the wire (seeded)"),
    reorder: float = typer.Option(0.0, help="reorder percent (held back by --reorder-gap)"),
    reorder_gap: str = typer.Option("1ms", help="extra delay of a reordered packet"),
    duplicate: float = typer.Option(0.0, help="duplicate percent"),
    seed: int = typer.Option(1, min=0, max=2**32 - 1, help="RNG seed of the impairments (port N uses seed+N)"),
    port_config: list[str] = typer.Option(
        [],
        "--port-config",
        help="per-port override PORT:key=value,... (rate, delay, buffer, loss, reorder, duplicate, reorder-gap, seed)",
    ),
    log_level: str = typer.Option("info", help="debug, info, warning"),
    stats_file: str = typer.Option("", help="on exit, write per-port statistics here as JSON"),
    tls_cert: Path = typer.Option(None, "--tls-cert", help="PEM server certificate (chain): serve P4Runtime over TLS"),
    tls_key: Path = typer.Option(None, "--tls-key", help="PEM private key of --tls-cert"),
    tls_client_ca: Path = typer.Option(
        None, "--tls-client-ca", help="PEM CA: require client certificates it signed (mutual TLS)"
    ),
    max_streams: int = typer.Option(
        32, min=1, max=4096, help="StreamChannel streams served at once (more are refused with RESOURCE_EXHAUSTED)"
    ),
) -> None:
    """Run the switch until SIGTERM or SIGINT."""
    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        raise typer.BadParameter(f"{log_level!r}: expected debug, info, warning or error", param_hint="--log-level")
    logging.basicConfig(
        stream=sys.stderr, level=level, format="%(asctime)s mltcp-switch %(levelname)s %(name)s: %(message)s"
    )
    grpc_host = _check_host(grpc_host)
    tls = _tls(tls_cert, tls_key, tls_client_ca)
    if stats_file:
        folder = Path(stats_file).resolve().parent
        if not folder.is_dir():
            raise typer.BadParameter(f"{stats_file}: folder {folder} does not exist", param_hint="--stats-file")
    ifaces = _parse_interfaces(interface)
    try:
        base = LinkConfig(
            rate_bps=parse_rate(rate),
            delay_s=parse_time(delay),
            buffer_pkts=buffer,
            loss_pct=loss,
            reorder_pct=reorder,
            duplicate_pct=duplicate,
            reorder_gap_s=parse_time(reorder_gap),
            seed=seed,
        )
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    links = {n: base.with_(seed=seed + n) for n in ifaces}
    for spec in port_config:
        num, sep, rest = spec.partition(":")
        if not sep or not num.strip().isdigit() or int(num) not in ifaces:
            raise typer.BadParameter(
                f"{spec!r}: expected PORT:key=value,... for a port given with --interface", param_hint="--port-config"
            )
        try:
            links[int(num)] = parse_link_overrides(rest, links[int(num)])
        except ValueError as e:
            raise typer.BadParameter(f"{spec!r}: {e}", param_hint="--port-config") from None

    from .switch.runtime import start_switch  # heavy imports after argument checks

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        handle = start_switch(
            ifaces,
            links,
            grpc_port=grpc_port,
            grpc_host=grpc_host,
            device_id=device_id,
            tls=tls,
            max_streams=max_streams,
        )
    except (OSError, ValueError) as e:
        typer.echo(f"mltcp-switch: {e}", err=True)
        raise typer.Exit(1) from None
    logging.getLogger("mltcp.switch").info(
        "ready: P4Runtime on %s, device %d%s", handle.grpc_address, device_id, ", TLS" if tls else ""
    )
    while not stop.wait(1.0):
        pass
    handle.stop()
    if stats_file:
        import json
        import os

        tmp = f"{stats_file}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({str(k): v for k, v in handle.dataplane.stats().items()}, f, indent=1)
        os.replace(tmp, stats_file)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
