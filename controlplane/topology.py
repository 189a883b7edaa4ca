"""Topology files for the control plane: which switches exist, their routes and ECN thresholds.

Pure logic (no network). Format (TOML), see controlplane/topologies/dumbbell.toml::

    [defaults]                     # optional; values every switch inherits
    device_id = 0
    election_id = [1, 0]           # [high, low]
    p4info = "p4src/mltcp.p4info.txtpb"   # optional; relative to the topology file
    config = "build/mltcp.json"           # optional device config (BMv2 JSON)

    [[switches]]
    name = "s1"
    grpc = "127.0.0.1:9559"        # host:port of the switch's P4Runtime server
    device_id = 0                  # optional, else [defaults]

      [[switches.routes]]          # MyIngress.ipv4_lpm entries
      prefix = "10.0.0.3/32"
      port = 3                     # egress port, 0..511
      mac = "00:00:00:00:00:03"    # next-hop (destination) MAC written into the frame

      [[switches.ecn]]             # MyEgress.ecn_threshold entries
      port = 3
      threshold = 20               # queue depth in packets (cells on Tofino), 0..2^19-1

Every error names the file and the field (``file: switches[0].routes[1].port: ...``).
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from mltcp import tomlfile
from mltcp.p4src.names import ECN_TABLE_SIZE, JOB_SLOTS, PORT_BITS, ROUTE_TABLE_SIZE, THRESHOLD_BITS

MAX_PORT = (1 << PORT_BITS) - 1
MAX_THRESHOLD = (1 << THRESHOLD_BITS) - 1
MAX_ROUTES = ROUTE_TABLE_SIZE  # MyIngress.ipv4_lpm size in p4src/mltcp.p4
MAX_ECN = ECN_TABLE_SIZE  # MyEgress.ecn_threshold size (one entry per port)
MAX_JOB_ID = JOB_SLOTS - 1  # job_tx / job_ecn_marks / job_bytes_ratio index
MAX_SWITCHES = 1024
MAX_NAME = 64
MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,%d}$" % MAX_NAME)
# host:port with an ASCII port; the host a DNS name, an IPv4 address or a bracketed IPv6 address
GRPC_RE = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]{1,253}):(?P<port>[0-9]{1,5})$")


class TopologyError(ValueError):
    """A topology is invalid or cannot be had here: a topology file or a command-line value
    (``TopologyError(source, where, problem)``: ``str(err)`` is ``"<file>: <field>: <problem>"``)
    or the parameters of an emulated network (``TopologyError(message)``, raised by
    mltcp.emulation.topologies). The one error type of both."""

    def __init__(self, source: str, where: str = "", problem: str | None = None):
        if problem is None:  # TopologyError(message)
            source, where, problem = "", "", source
        self.source, self.where, self.problem = source, where, problem
        super().__init__(": ".join(x for x in (source, where, problem) if x))


@dataclass(frozen=True)
class Route:
    prefix: str  # normalised "a.b.c.d/len"
    port: int
    mac: str  # lower-case "aa:bb:cc:dd:ee:ff"

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.prefix)


@dataclass(frozen=True)
class EcnThreshold:
    port: int
    threshold: int


@dataclass(frozen=True)
class SwitchSpec:
    name: str
    grpc: str
    device_id: int = 0
    election_id: tuple[int, int] = (1, 0)
    p4info: Path | None = None
    config: Path | None = None
    routes: tuple[Route, ...] = ()
    ecn: tuple[EcnThreshold, ...] = ()


@dataclass(frozen=True)
class Topology:
    source: str
    switches: tuple[SwitchSpec, ...] = field(default_factory=tuple)

    def switch(self, name: str) -> SwitchSpec:
        for s in self.switches:
            if s.name == name:
                return s
        names = ", ".join(s.name for s in self.switches)
        raise TopologyError(self.source, "switches", f"no switch named {name!r} (have: {names})")


# --- field validators (also used by the CLI for command-line values) ------------------------


def check_int(value, src: str, where: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(src, where, f"expected an integer, got {value!r}")
    if not lo <= value <= hi:
        raise TopologyError(src, where, f"must be in [{lo}, {hi}], got {value}")
    return value


def check_port(value, src: str, where: str) -> int:
    return check_int(value, src, where, 0, MAX_PORT)


def check_threshold(value, src: str, where: str) -> int:
    return check_int(value, src, where, 0, MAX_THRESHOLD)


def check_mac(value, src: str, where: str) -> str:
    if not isinstance(value, str) or not MAC_RE.match(value):
        raise TopologyError(src, where, f"expected a MAC address like 00:00:00:00:00:01, got {value!r}")
    return value.lower()


def check_prefix(value, src: str, where: str) -> str:
    if not isinstance(value, str):
        raise TopologyError(src, where, f"expected an IPv4 prefix string, got {value!r}")
    text = value if "/" in value else value + "/32"
    try:
        net = ipaddress.IPv4Network(text, strict=True)
    except ipaddress.NetmaskValueError as e:
        raise TopologyError(src, where, f"bad prefix length in {value!r}: {e}") from None
    except ValueError as e:
        raise TopologyError(src, where, f"not an IPv4 prefix without host bits: {value!r} ({e})") from None
    return str(net)


def check_grpc_addr(value, src: str, where: str) -> str:
    if not isinstance(value, str) or ":" not in value:
        raise TopologyError(src, where, f"expected host:port, got {value!r}")
    m = GRPC_RE.match(value)
    if not m or not 0 < int(m.group("port")) < 65536:
        raise TopologyError(
            src, where, f"expected host:port (a host name, an IPv4 address or [IPv6]) with port 1..65535, got {value!r}"
        )
    return value


def check_election_id(value, src: str, where: str) -> tuple[int, int]:
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**64 for v in value)
        or tuple(value) == (0, 0)
    ):
        raise TopologyError(src, where, f"expected [high, low] (unsigned 64-bit, not [0, 0]), got {value!r}")
    return (value[0], value[1])


def _check_keys(table: dict, allowed: set[str], src: str, where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise TopologyError(
            src,
            f"{where}.{unknown[0]}" if where else unknown[0],
            f"unknown field (allowed: {', '.join(sorted(allowed))})",
        )


def _sub_tables(sw: dict, key: str, fields: tuple[str, ...], src: str, where: str):
    """(where, table) for each ``[[switches.<key>]]`` table of switch ``sw``, each a table with
    exactly the (all required) ``fields``."""
    tables = sw.get(key, [])
    if not isinstance(tables, list):
        raise TopologyError(src, f"{where}.{key}", f"expected [[switches.{key}]] tables")
    limit = {"routes": MAX_ROUTES, "ecn": MAX_ECN}.get(key)
    if limit is not None and len(tables) > limit:
        raise TopologyError(src, f"{where}.{key}", f"{len(tables)} entries, the P4 table holds {limit}")
    for j, t in enumerate(tables):
        tw = f"{where}.{key}[{j}]"
        if not isinstance(t, dict):
            raise TopologyError(src, tw, "expected a table")
        _check_keys(t, set(fields), src, tw)
        for req in fields:
            if req not in t:
                raise TopologyError(src, f"{tw}.{req}", "missing")
        yield tw, t


def _path(value, base: Path, src: str, where: str) -> Path:
    if not isinstance(value, str) or not value or "\0" in value or len(value) > 4096:
        raise TopologyError(src, where, f"expected a file path, got {value!r}")
    p = Path(value)
    return p if p.is_absolute() else (base / p)


# --- parsing -------------------------------------------------------------------------------

_SWITCH_KEYS = {"name", "grpc", "device_id", "election_id", "p4info", "config", "routes", "ecn"}
_DEFAULT_KEYS = {"device_id", "election_id", "p4info", "config"}


def parse_topology(data: dict, source: str = "<topology>", base: Path | None = None) -> Topology:
    """Validate a decoded TOML document. Raises TopologyError naming source and field."""
    base = base or Path.cwd()
    _check_keys(data, {"defaults", "switches"}, source, "")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise TopologyError(source, "defaults", "expected a table")
    _check_keys(defaults, _DEFAULT_KEYS, source, "defaults")
    switches = data.get("switches")
    if not isinstance(switches, list) or not switches:
        raise TopologyError(source, "switches", "expected at least one [[switches]] table")
    if len(switches) > MAX_SWITCHES:
        raise TopologyError(source, "switches", f"{len(switches)} switches, at most {MAX_SWITCHES}")

    out, names, addrs = [], set(), set()
    for i, sw in enumerate(switches):
        w = f"switches[{i}]"
        if not isinstance(sw, dict):
            raise TopologyError(source, w, "expected a table")
        _check_keys(sw, _SWITCH_KEYS, source, w)
        merged = {**defaults, **sw}
        for req in ("name", "grpc"):
            if req not in sw:
                raise TopologyError(source, f"{w}.{req}", "missing")
        name = sw["name"]
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise TopologyError(source, f"{w}.name", f"expected 1..{MAX_NAME} letters/digits/_.- , got {name!r}")
        if name in names:
            raise TopologyError(source, f"{w}.name", f"duplicate switch name {name!r}")
        names.add(name)
        grpc_addr = check_grpc_addr(sw["grpc"], source, f"{w}.grpc")
        device_id = check_int(
            merged.get("device_id", 0),
            source,
            f"{w}.device_id" if "device_id" in sw else "defaults.device_id",
            0,
            2**64 - 1,
        )
        if (grpc_addr, device_id) in addrs:
            raise TopologyError(source, f"{w}.grpc", f"{grpc_addr} device {device_id} used by two switches")
        addrs.add((grpc_addr, device_id))
        eid_where = f"{w}.election_id" if "election_id" in sw else "defaults.election_id"
        election_id = check_election_id(merged.get("election_id", [1, 0]), source, eid_where)
        p4info = config = None
        if "p4info" in merged:
            p4info = _path(merged["p4info"], base, source, f"{w}.p4info" if "p4info" in sw else "defaults.p4info")
        if "config" in merged:
            config = _path(merged["config"], base, source, f"{w}.config" if "config" in sw else "defaults.config")

        routes, prefixes = [], set()
        for rw, r in _sub_tables(sw, "routes", ("prefix", "port", "mac"), source, w):
            prefix = check_prefix(r["prefix"], source, f"{rw}.prefix")
            if prefix in prefixes:
                raise TopologyError(source, f"{rw}.prefix", f"duplicate prefix {prefix}")
            prefixes.add(prefix)
            routes.append(
                Route(prefix, check_port(r["port"], source, f"{rw}.port"), check_mac(r["mac"], source, f"{rw}.mac"))
            )

        ecn, ports = [], set()
        for ew, e in _sub_tables(sw, "ecn", ("port", "threshold"), source, w):
            port = check_port(e["port"], source, f"{ew}.port")
            if port in ports:
                raise TopologyError(source, f"{ew}.port", f"duplicate port {port}")
            ports.add(port)
            ecn.append(EcnThreshold(port, check_threshold(e["threshold"], source, f"{ew}.threshold")))

        out.append(SwitchSpec(name, grpc_addr, device_id, election_id, p4info, config, tuple(routes), tuple(ecn)))
    return Topology(source, tuple(out))


def load_topology(path: Path | str) -> Topology:
    """Read and validate a topology TOML file. Raises TopologyError."""
    path = Path(path)
    src = str(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise TopologyError(src, "", f"cannot read: {e.strerror}") from None
    try:
        data = tomlfile.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise TopologyError(src, "", "not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise TopologyError(src, "", f"invalid TOML: {e}") from None
    return parse_topology(data, src, path.resolve().parent)
