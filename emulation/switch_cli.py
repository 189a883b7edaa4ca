"""``mltcp-switch``: the software target for mltcp.p4 (AF_PACKET ports + P4Runtime server).

Example::

    mltcp-switch --grpc-port 9559 --device-id 0 -i 1@veth1 -i 2@veth2 \\
        --rate 100mbit --delay 1ms --buffer 100 --port-config "2:rate=10mbit,loss=1"
"""

from __future__ import annotations

import logging
import signal
import sys
import threading

import typer

from .switch.links import LinkConfig, parse_link_overrides, parse_rate, parse_time

app = typer.Typer(add_completion=False, help=__doc__)


def _parse_interfaces(specs: list[str]) -> dict[int, str]:
    out: dict[int, str] = {}
    for spec in specs:
        num, sep, ifname = spec.partition("@")
        if not sep or not num.strip().isdigit() or not ifname.strip():
            raise typer.BadParameter(f"{spec!r}: expected PORT@IFNAME, e.g. 1@veth1",
                                     param_hint="--interface")
        n = int(num)
        if n in out:
            raise typer.BadParameter(f"port {n} given twice", param_hint="--interface")
        out[n] = ifname.strip()
    return out


@app.command()
def run(
    interface: list[str] = typer.Option(..., "--interface", "-i", help="PORT@IFNAME, repeatable"),
    grpc_port: int = typer.Option(9559, help="P4Runtime gRPC port"),
    grpc_host: str = typer.Option("0.0.0.0", help="address to listen on"),
    device_id: int = typer.Option(0, help="P4Runtime device id"),
    rate: str = typer.Option("unlimited", help="egress line rate per port: 100mbit, 1gbit, unlimited"),
    delay: str = typer.Option("0", help="propagation delay per port: 1ms, 200us"),
    buffer: int = typer.Option(100, help="egress buffer in packets (drop-tail)"),
    loss: float = typer.Option(0.0, help="loss percent on the wire (seeded)"),
    reorder: float = typer.Option(0.0, help="reorder percent (held back by --reorder-gap)"),
    reorder_gap: str = typer.Option("1ms", help="extra delay of a reordered packet"),
    duplicate: float = typer.Option(0.0, help="duplicate percent"),
    seed: int = typer.Option(1, help="RNG seed of the impairments (port N uses seed+N)"),
    port_config: list[str] = typer.Option(
        [], "--port-config", help="per-port override PORT:key=value,... "
        "(rate, delay, buffer, loss, reorder, duplicate, reorder-gap, seed)"),
    log_level: str = typer.Option("info", help="debug, info, warning"),
    stats_file: str = typer.Option("", help="on exit, write per-port statistics here as JSON"),
) -> None:
    """Run the switch until SIGTERM or SIGINT."""
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, log_level.upper(), logging.INFO),
                        format="%(asctime)s mltcp-switch %(levelname)s %(name)s: %(message)s")
    ifaces = _parse_interfaces(interface)
    try:
        base = LinkConfig(rate_bps=parse_rate(rate), delay_s=parse_time(delay), buffer_pkts=buffer,
                          loss_pct=loss, reorder_pct=reorder, duplicate_pct=duplicate,
                          reorder_gap_s=parse_time(reorder_gap), seed=seed)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    links = {n: base.with_(seed=seed + n) for n in ifaces}
    for spec in port_config:
        num, sep, rest = spec.partition(":")
        if not sep or not num.strip().isdigit() or int(num) not in ifaces:
            raise typer.BadParameter(f"{spec!r}: expected PORT:key=value,... for a port given "
                                     "with --interface", param_hint="--port-config")
        try:
            links[int(num)] = parse_link_overrides(rest, links[int(num)])
        except ValueError as e:
            raise typer.BadParameter(f"{spec!r}: {e}", param_hint="--port-config") from None

    from .switch.runtime import start_switch  # heavy imports after argument checks

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        handle = start_switch(ifaces, links, grpc_port=grpc_port, grpc_host=grpc_host,
                              device_id=device_id)
    except (OSError, ValueError) as e:
        typer.echo(f"mltcp-switch: {e}", err=True)
        raise typer.Exit(1) from None
    logging.getLogger("mltcp.switch").info("ready: P4Runtime on %s, device %d",
                                           handle.grpc_address, device_id)
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
