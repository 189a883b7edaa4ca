"""Everything `mltcp switch` would write to a switch, checked before the first write.

A topology (or a command line) changes a switch only if, for every switch it names: the P4Info and
device config files exist and parse, every route and ECN threshold resolves to a table, action,
match field and parameter of the P4Info the switch will run (the file pushed with ``--push``,
else the P4Info read back from the switch), and every value fits its field's width. Anything else
is a :class:`~mltcp.controlplane.topology.TopologyError` naming the file and the field
(``topo.toml: switches[0].p4info: nope.txtpb does not exist``), raised before any switch is
written to, so the CLI exits 2 with every switch as it was.

Pure checks apart from :func:`running_index`, which reads a switch's P4Info (a read-only
session: a reader election id, no write).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from p4.config.v1 import p4info_pb2

from mltcp.p4src import P4INFO_PATH
from mltcp.p4src import names as N

from . import entries as E
from .client import PipelineFileError, TlsOptions, connect_switch, read_device_config, read_p4info, reader_election_id
from .topology import SwitchSpec, Topology, TopologyError

# which topology field a P4 name (match field or action parameter) comes from
_FIELD_OF = {
    N.K_IPV4_DST: "prefix",
    N.P_DST_ADDR: "mac",
    N.P_PORT: "port",
    N.K_EGRESS_PORT: "port",
    N.P_THRESHOLD: "threshold",
}


@dataclass(frozen=True)
class SwitchPlan:
    """What will be written to one switch: its P4Info (None: the one it runs, read back),
    device config and entries, all checked."""

    spec: SwitchSpec
    p4info: p4info_pb2.P4Info | None
    device_config: bytes
    entries: tuple


def where(topo: Topology, spec: SwitchSpec) -> str:
    """``switches[i]``: the switch's table in the topology file."""
    return f"switches[{topo.switches.index(spec)}]"


def check_p4info_file(path: Path, src: str, field: str) -> p4info_pb2.P4Info:
    """The P4Info at ``path`` (named by ``src: field``); TopologyError if missing or not one."""
    if not path.exists():
        raise TopologyError(src, field, f"{path.name} does not exist ({path})")
    try:
        return read_p4info(path)
    except PipelineFileError as e:
        raise TopologyError(src, field, str(e)) from None


def check_device_config(path: Path | None, src: str, field: str) -> bytes:
    """The device config's bytes (b"" for none); a ``.json`` config must be a JSON object (BMv2)."""
    if path is None:
        return b""
    if not path.exists():
        raise TopologyError(src, field, f"{path.name} does not exist ({path})")
    try:
        data = read_device_config(path)
    except PipelineFileError as e:
        raise TopologyError(src, field, str(e)) from None
    if path.suffix == ".json":
        try:
            ok = isinstance(json.loads(data.decode("utf-8")), dict)
        except (UnicodeDecodeError, ValueError) as e:
            raise TopologyError(src, field, f"{path}: not a BMv2 JSON device config ({e})") from None
        if not ok:
            raise TopologyError(src, field, f"{path}: not a BMv2 JSON device config (not an object)")
    return data


def _field(err: Exception) -> str:
    text = str(err)
    for name, field in _FIELD_OF.items():
        if name in text:
            return field
    return ""


def build_entries(idx: E.P4InfoIndex, spec: SwitchSpec, src: str, w: str, p4info_name: str) -> tuple:
    """The switch's routes and ECN thresholds as TableEntry messages of ``idx``; a name the
    P4Info lacks or a value wider than its field is a TopologyError naming the entry's field."""
    out = []
    items = [(f"{w}.routes[{i}]", E.route_entry, (r,)) for i, r in enumerate(spec.routes)] + [
        (f"{w}.ecn[{i}]", E.ecn_entry, (e.port, e.threshold)) for i, e in enumerate(spec.ecn)
    ]
    for entry_where, build, args in items:
        try:
            out.append(build(idx, *args))
        except KeyError as e:
            raise TopologyError(src, entry_where, f"{e.args[0]} ({p4info_name})") from None
        except ValueError as e:
            f = _field(e)
            raise TopologyError(src, f"{entry_where}.{f}" if f else entry_where, f"{e} ({p4info_name})") from None
    return tuple(out)


def check_ecn(idx: E.P4InfoIndex, spec: SwitchSpec, port: int, threshold: int | None) -> None:
    """``set-ecn --port P [--threshold K]`` fits the P4Info ``idx`` of switch ``spec``."""
    try:
        E.ecn_entry(idx, port, threshold)
    except (KeyError, ValueError) as e:
        opt = "--threshold" if N.P_THRESHOLD in str(e) else "--port"
        raise TopologyError("command line", opt, f"{e.args[0]} (the P4Info {spec.name} runs)") from None


def running_index(spec: SwitchSpec, timeout: float, tls: TlsOptions | None) -> E.P4InfoIndex:
    """The index of the P4Info the switch runs (read-only session; ControlPlaneError if the
    switch cannot be reached or has no pipeline)."""
    with connect_switch(spec, timeout, retry_timeout=timeout, election_id=reader_election_id(), tls=tls) as conn:
        conn.attach()
        return conn.index


def plan_switch(
    topo: Topology,
    spec: SwitchSpec,
    push: bool,
    timeout: float = 10.0,
    tls: TlsOptions | None = None,
    read_back: bool = True,
) -> SwitchPlan:
    """Check one switch of ``topo``: its files, then its entries against the P4Info it will run
    (the file with ``push``, else the switch's own, read back unless ``read_back`` is False)."""
    src, w = topo.source, where(topo, spec)
    p4info = None
    if spec.p4info is not None:
        p4info = check_p4info_file(spec.p4info, src, f"{w}.p4info")
    elif push:
        p4info = check_p4info_file(Path(P4INFO_PATH), src, f"{w}.p4info (default)")
    config = check_device_config(spec.config, src, f"{w}.config")
    if push or not read_back:
        idx, name = (
            E.index(p4info if p4info is not None else read_p4info(P4INFO_PATH)),
            f"P4Info {spec.p4info or P4INFO_PATH}",
        )
    else:
        idx, name = running_index(spec, timeout, tls), f"the P4Info {spec.name} runs"
    return SwitchPlan(spec, p4info, config, build_entries(idx, spec, src, w, name))


def plan_install(
    topo: Topology,
    specs: list[SwitchSpec],
    push: bool,
    timeout: float = 10.0,
    tls: TlsOptions | None = None,
    read_back: bool = True,
) -> list[SwitchPlan]:
    """:func:`plan_switch` for every switch, all before any is written to."""
    return [plan_switch(topo, s, push, timeout, tls, read_back) for s in specs]
