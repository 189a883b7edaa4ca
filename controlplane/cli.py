"""`mltcp switch ...`: drive mltcp.p4 switches over P4Runtime.

Targets: either one switch (``--grpc host:port --device-id N``) or the switches of a topology
file (``--topology FILE [--switch NAME]``). Exit codes: 0 ok, 1 P4Runtime/connection failure,
2 bad input (topology, P4Info or TLS file, or option value; the message names the file and
field). With several switches a failure names the switch, what it holds and which switches were
done or not attempted. TLS: ``--tls-ca`` (and ``--tls-cert/--tls-key`` for a server that wants
client certificates), or the MLTCP_TLS_CA / MLTCP_TLS_CERT / MLTCP_TLS_KEY variables.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.live import Live

from mltcp.console import error_exit, out
from mltcp.p4src import P4INFO_PATH

from . import preflight
from .client import (
    DEFAULT_GRPC,
    ControlPlaneError,
    InstallError,
    PipelineFileError,
    TlsOptions,
    connect_switch,
    reader_election_id,
)
from .install import install_topology
from .bmv2 import parse_thrift_addr, read_counters
from .counters import CounterSnapshot, to_json, to_table
from .topology import (
    MAX_JOB_ID,
    SwitchSpec,
    TopologyError,
    check_election_id,
    check_grpc_addr,
    check_port,
    check_threshold,
    load_topology,
)

app = typer.Typer(
    help="P4Runtime control plane for the MLTCP P4 switch (mltcp.p4).", no_args_is_help=True, add_completion=False
)


@app.callback()
def _setup(verbose: bool = typer.Option(False, "--verbose", "-v", help="log P4Runtime reconnects in detail")):
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("mltcp.controlplane").setLevel(logging.INFO if verbose else logging.WARNING)


GrpcOpt = typer.Option(None, "--grpc", help=f"P4Runtime server host:port [default: {DEFAULT_GRPC}]")
DeviceOpt = typer.Option(0, "--device-id", help="P4Runtime device id")
ElectionOpt = typer.Option(None, "--election-id", help="HIGH,LOW (default 1,0 for writers; 0,<pid> for readers)")
TopoOpt = typer.Option(None, "--topology", "-t", help="topology TOML file", exists=False)
SwitchOpt = typer.Option(None, "--switch", "-s", help="only this switch of the topology")
TimeoutOpt = typer.Option(10.0, "--timeout", min=0.0, help="seconds to wait for the server")
TlsCaOpt = typer.Option(
    None, "--tls-ca", envvar="MLTCP_TLS_CA", help="PEM CA of the switch's TLS certificate (turns TLS on)"
)
TlsCertOpt = typer.Option(
    None, "--tls-cert", envvar="MLTCP_TLS_CERT", help="PEM client certificate (for a switch that requires one)"
)
TlsKeyOpt = typer.Option(None, "--tls-key", envvar="MLTCP_TLS_KEY", help="PEM private key of --tls-cert")


def _tls(ca: Optional[Path], cert: Optional[Path], key: Optional[Path]) -> Optional[TlsOptions]:
    if ca is None and cert is None and key is None:
        return None
    if (cert is None) != (key is None):
        raise TopologyError(
            "command line", "--tls-cert" if cert is None else "--tls-key", "give both --tls-cert and --tls-key"
        )
    for path, opt in ((ca, "--tls-ca"), (cert, "--tls-cert"), (key, "--tls-key")):
        if path is not None and not path.is_file():
            raise TopologyError(str(path), opt, "file not found")
    return TlsOptions(ca, cert, key)


def _each(specs: list[SwitchSpec], fn, what: str) -> None:
    """Run fn(spec) for each switch; a failure names the switch and the ones done / left."""
    for k, spec in enumerate(specs):
        try:
            fn(spec)
        except ControlPlaneError as e:
            if len(specs) == 1 or isinstance(e, PipelineFileError):
                raise
            done = ", ".join(s.name for s in specs[:k]) or "none"
            left = ", ".join(s.name for s in specs[k + 1 :]) or "none"
            raise ControlPlaneError(
                f"{what} failed on switch {spec.name}: {e} | done: {done} | not attempted: {left}"
            ) from e


ThriftOpt = typer.Option(
    None,
    "--thrift",
    help="BMv2 only: the switch's thrift HOST:PORT, to read registers that its P4Runtime server (PI) cannot",
)


def _election(value: Optional[str]) -> Optional[tuple[int, int]]:
    if value is None:
        return None
    try:
        parts = [int(x) for x in value.split(",")]
    except ValueError:
        raise TopologyError("command line", "--election-id", f"expected HIGH,LOW, got {value!r}")
    return check_election_id(parts, "command line", "--election-id")


def _targets(grpc: Optional[str], device_id: int, topology: Optional[Path], switch: Optional[str]) -> list[SwitchSpec]:
    if topology is not None:
        if grpc is not None:
            raise TopologyError("command line", "--grpc", "give either --grpc or --topology")
        topo = load_topology(topology)
        return [topo.switch(switch)] if switch else list(topo.switches)
    if switch is not None:
        raise TopologyError("command line", "--switch", "needs --topology")
    addr = check_grpc_addr(grpc or DEFAULT_GRPC, "command line", "--grpc")
    return [SwitchSpec(name=addr, grpc=addr, device_id=device_id)]


def _run(fn):
    """Map library errors to exit codes."""
    try:
        return fn()
    except TopologyError as e:
        raise error_exit(code=2, msg=str(e))
    except PipelineFileError as e:
        raise error_exit(code=2, msg=str(e))
    except ControlPlaneError as e:
        raise error_exit(code=1, msg=str(e))


@app.command()
def push(
    p4info: Path = typer.Option(P4INFO_PATH, "--p4info", help="P4Info text file"),
    config: Optional[Path] = typer.Option(
        None, "--config", help="device config: BMv2 JSON (p4c -o); omit for the software switch"
    ),
    grpc: Optional[str] = GrpcOpt,
    device_id: int = DeviceOpt,
    election_id: Optional[str] = ElectionOpt,
    topology: Optional[Path] = TopoOpt,
    switch: Optional[str] = SwitchOpt,
    timeout: float = TimeoutOpt,
    tls_ca: Optional[Path] = TlsCaOpt,
    tls_cert: Optional[Path] = TlsCertOpt,
    tls_key: Optional[Path] = TlsKeyOpt,
):
    """Push the pipeline (P4Info + device config) to the switch(es)."""

    def go():
        tls = _tls(tls_ca, tls_cert, tls_key)
        eid = _election(election_id)
        specs = _targets(grpc, device_id, topology, switch)
        topo = load_topology(topology) if topology is not None else None
        # every file is checked before the first switch is touched, named by where it came from
        for spec in specs:
            if spec.p4info is not None:
                preflight.check_p4info_file(spec.p4info, str(topology), f"{preflight.where(topo, spec)}.p4info")
            else:
                preflight.check_p4info_file(p4info, "command line", "--p4info")
            if spec.config is not None:
                preflight.check_device_config(spec.config, str(topology), f"{preflight.where(topo, spec)}.config")
            else:
                preflight.check_device_config(config, "command line", "--config")

        def one(spec: SwitchSpec) -> None:
            with connect_switch(spec, timeout, election_id=eid, tls=tls) as conn:
                # a topology's own p4info/config wins over the defaults
                conn.push_pipeline(spec.p4info or p4info, spec.config or config)
            out.print(f"pushed pipeline to {spec.name} ({spec.grpc}, device {spec.device_id})")

        _each(specs, one, "push")

    _run(go)


@app.command()
def install(
    topology_file: Path = typer.Argument(..., metavar="TOPOLOGY", help="topology TOML file"),
    switch: Optional[str] = SwitchOpt,
    do_push: bool = typer.Option(False, "--push", help="push the pipeline first"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the entries without connecting"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable summary"),
    timeout: float = TimeoutOpt,
    tls_ca: Optional[Path] = TlsCaOpt,
    tls_cert: Optional[Path] = TlsCertOpt,
    tls_key: Optional[Path] = TlsKeyOpt,
):
    """Install routes (MyIngress.ipv4_lpm) and ECN thresholds (MyEgress.ecn_threshold)."""

    def go():
        topo = load_topology(topology_file)
        specs = [topo.switch(switch)] if switch else list(topo.switches)
        tls = _tls(tls_ca, tls_cert, tls_key)
        # every file, name and width is checked (against the P4Info each switch will run) before
        # the first write, by install_topology: a bad topology exits 2 with every switch as it was
        if dry_run:
            summary = []
            for plan in preflight.plan_install(topo, specs, push=do_push, read_back=False):
                spec, tes = plan.spec, plan.entries
                summary.append(
                    {
                        "switch": spec.name,
                        "grpc": spec.grpc,
                        "routes": len(spec.routes),
                        "ecn_thresholds": len(spec.ecn),
                        "entries": [str(te) for te in tes],
                    }
                )
                if not as_json:
                    out.rule(f"{spec.name} ({spec.grpc}, device {spec.device_id})")
                    for te in tes:
                        out.print(str(te), highlight=False)
            if as_json:
                print(json.dumps({"dry_run": True, "switches": summary}, sort_keys=True))
            return

        def done(r: dict) -> None:
            if not as_json:
                out.print(
                    f"{r['switch']}: {r['routes']} routes, {r['ecn_thresholds']} ECN "
                    f"thresholds{' (pipeline pushed)' if do_push else ''}"
                )

        try:
            results = install_topology(topo, push=do_push, only=switch, timeout=timeout, tls=tls, on_switch=done)
        except InstallError as e:
            if as_json:
                print(
                    json.dumps(
                        {
                            "dry_run": False,
                            "switches": e.done,
                            "failed": dict(e.partial, switch=e.failed),
                            "not_attempted": e.left,
                        },
                        sort_keys=True,
                    )
                )
            raise
        if as_json:
            print(json.dumps({"dry_run": False, "switches": results}, sort_keys=True))

    _run(go)


@app.command("set-ecn")
def set_ecn(
    port: int = typer.Option(..., "--port", help="egress port"),
    threshold: Optional[int] = typer.Option(None, "--threshold", help="queue depth in packets (cells on Tofino)"),
    off: bool = typer.Option(False, "--off", help="remove the port's threshold (no marking)"),
    grpc: Optional[str] = GrpcOpt,
    device_id: int = DeviceOpt,
    election_id: Optional[str] = ElectionOpt,
    topology: Optional[Path] = TopoOpt,
    switch: Optional[str] = SwitchOpt,
    timeout: float = TimeoutOpt,
    tls_ca: Optional[Path] = TlsCaOpt,
    tls_cert: Optional[Path] = TlsCertOpt,
    tls_key: Optional[Path] = TlsKeyOpt,
):
    """Set (or with --off remove) the ECN marking threshold of one egress port."""

    def go():
        check_port(port, "command line", "--port")
        if off == (threshold is not None):
            raise TopologyError("command line", "--threshold", "give --threshold N or --off")
        if threshold is not None:
            check_threshold(threshold, "command line", "--threshold")
        eid = _election(election_id)
        tls = _tls(tls_ca, tls_cert, tls_key)
        specs = _targets(grpc, device_id, topology, switch)
        for spec in specs:  # the port and threshold fit each switch's P4Info, before any write
            preflight.check_ecn(preflight.running_index(spec, timeout, tls), spec, port, threshold)

        def one(spec: SwitchSpec) -> None:
            with connect_switch(spec, timeout, election_id=eid, tls=tls) as conn:
                conn.attach()
                if off:
                    had = conn.clear_ecn_threshold(port)
                    out.print(f"{spec.name}: port {port}: ECN marking off{'' if had else ' (was not set)'}")
                else:
                    conn.set_ecn_threshold(port, threshold)
                    out.print(f"{spec.name}: port {port}: ECN threshold {threshold}")

        _each(specs, one, "set-ecn")

    _run(go)


def _thrift(value: Optional[str]) -> Optional[str]:
    if value is None:
        return None
    try:
        parse_thrift_addr(value)
    except ValueError as e:
        raise TopologyError("command line", "--thrift", str(e))
    return value


def _job_filter(jobs: Optional[list[int]]) -> Optional[set[int]]:
    if not jobs:
        return None
    for j in jobs:
        if not 0 <= j <= MAX_JOB_ID:
            raise TopologyError("command line", "--job", f"must be in [0, {MAX_JOB_ID}], got {j}")
    return set(jobs)


@app.command()
def counters(
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    job: Optional[list[int]] = typer.Option(None, "--job", help="only these job ids"),
    grpc: Optional[str] = GrpcOpt,
    device_id: int = DeviceOpt,
    election_id: Optional[str] = ElectionOpt,
    topology: Optional[Path] = TopoOpt,
    switch: Optional[str] = SwitchOpt,
    timeout: float = TimeoutOpt,
    tls_ca: Optional[Path] = TlsCaOpt,
    tls_cert: Optional[Path] = TlsCertOpt,
    tls_key: Optional[Path] = TlsKeyOpt,
    thrift: Optional[str] = ThriftOpt,
):
    """Per-job counters: job_tx packets/bytes, job_ecn_marks, bytes_ratio; parse_errors."""

    def go():
        only = _job_filter(job)
        eid = _election(election_id) or reader_election_id()
        tls = _tls(tls_ca, tls_cert, tls_key)
        snaps = []
        for spec in _targets(grpc, device_id, topology, switch):
            with connect_switch(spec, timeout, election_id=eid, tls=tls) as conn:
                conn.attach()
                snaps.append(read_counters(conn, _thrift(thrift)))
        if as_json:
            print(to_json(snaps, only))
        else:
            out.print(to_table(snaps, only))

    _run(go)


@app.command()
def watch(
    interval: float = typer.Option(1.0, "--interval", "-i", help="seconds between polls"),
    count: int = typer.Option(0, "--count", "-n", help="stop after N polls (0: until Ctrl-C)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON line per poll"),
    job: Optional[list[int]] = typer.Option(None, "--job", help="only these job ids"),
    grpc: Optional[str] = GrpcOpt,
    device_id: int = DeviceOpt,
    election_id: Optional[str] = ElectionOpt,
    topology: Optional[Path] = TopoOpt,
    switch: Optional[str] = SwitchOpt,
    timeout: float = TimeoutOpt,
    retry_timeout: float = typer.Option(
        60.0, "--retry-timeout", help="keep reconnecting this long after the target goes away"
    ),
    tls_ca: Optional[Path] = TlsCaOpt,
    tls_cert: Optional[Path] = TlsCertOpt,
    tls_key: Optional[Path] = TlsKeyOpt,
    thrift: Optional[str] = ThriftOpt,
):
    """Poll the counters; reconnects with backoff when the target restarts."""

    def go():
        if interval <= 0:
            raise TopologyError("command line", "--interval", "must be > 0")
        if count < 0:
            raise TopologyError("command line", "--count", "must be >= 0")
        only = _job_filter(job)
        eid = _election(election_id) or reader_election_id()
        specs = _targets(grpc, device_id, topology, switch)
        if len(specs) != 1:
            raise TopologyError(str(topology), "--switch", "watch follows one switch: pick one with --switch")
        spec = specs[0]
        conn = connect_switch(spec, timeout, retry_timeout, election_id=eid, tls=_tls(tls_ca, tls_cert, tls_key))
        n = 0
        try:
            conn.attach(wait=True)

            def poll() -> CounterSnapshot:
                return read_counters(conn, _thrift(thrift))

            if as_json:
                while True:
                    print(to_json([poll()], only), flush=True)
                    n += 1
                    if count and n >= count:
                        break
                    time.sleep(interval)
            else:
                with Live(to_table([poll()], only), console=out, auto_refresh=False) as live:
                    n = 1
                    while not count or n < count:
                        time.sleep(interval)
                        live.update(to_table([poll()], only), refresh=True)
                        n += 1
        except KeyboardInterrupt:
            pass
        finally:
            conn.close()

    _run(go)


def main() -> None:  # pragma: no cover - entry for `python -m mltcp.controlplane.cli`
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
