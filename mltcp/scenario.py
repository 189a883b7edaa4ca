"""Scenario files (TOML): network links, jobs, congestion-control parameters, simulation settings.

Every number the simulator uses comes from here, so the same case can be rerun elsewhere.
Errors name the file and the field (:class:`ScenarioError`; the CLI exits with status 2).
See ``scenarios/*.toml`` and docs/design.md ("The simulator") for the format.
"""

from __future__ import annotations

import ast
import math
import re
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field, fields
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from . import tomlfile
from .cc import ALGORITHMS, BASES
from .progress_policy import PolicyError, ProgressPolicy, from_table as _policy_from_table
from .workload import PROFILES, Job, ps_bytes, ring_allreduce_bytes

ECN_MODES = ("none", "step", "red")

# Range limits, checked before any work starts (docs/hardening-inputs.md has the table and why).
MAX_JOBS = 100_000  # jobs in a scenario, after `count` expansion
MAX_LINKS = 100_000  # links, after `count` expansion
MAX_ITERATIONS = 1_000_000  # per job
MAX_JOB_ITERATIONS = 20_000_000  # summed over jobs: one record each (~2 GB of records at the limit)
MAX_BYTES_PER_ITER = 1e12  # 1 TB per job per iteration (GPT-2 XL on 1000 workers: 12.5 GB)
MIN_RATE_BPS, MAX_RATE_BPS = 1e3, 1e14  # 1 kb/s .. 100 Tb/s
MAX_DELAY_S = 10.0  # one-way link delay
MAX_BUFFER_BYTES = 1e12
MAX_TIME_S = 86_400.0  # compute time, start offsets, stagger, straggler delay: one day
MAX_WORKERS = 1_000_000
MAX_SIM_SLOTS = 1e8  # simulator time slots even at the ideal iteration time (~2 h of CPU)


class ScenarioError(ValueError):
    def __init__(self, source: str, fieldname: str, msg: str):
        self.source, self.field = source, fieldname
        super().__init__(f"{source}: {fieldname}: {msg}")


@dataclass
class Link:
    name: str
    rate_bps: float  # bits per second
    delay_s: float  # one-way propagation delay
    buffer_bytes: float  # drop-tail limit
    ecn: str = "none"  # none | step | red
    ecn_k_bytes: float = 0.0  # step marking threshold
    red_kmin_bytes: float = 0.0
    red_kmax_bytes: float = 0.0
    red_pmax: float = 0.2
    pfc: bool = False  # lossless (PFC): a full queue pauses its senders instead of dropping

    @property
    def rate_Bps(self) -> float:
        return self.rate_bps / 8.0


@dataclass
class Scenario:
    name: str
    description: str
    links: dict[str, Link]
    jobs: list[Job]
    mss: int = 1448
    step_s: float = 20e-6
    min_rto_s: float = 0.2
    host_delay_s: float = 0.0  # added to every round trip (NIC/stack)
    slow_start_after_idle: bool = True  # Linux's default cwnd restart after an idle RTO
    loss_model: str = "packet"  # packet: whole packets, random per flow; fluid: shared by bytes offered
    warmup_iterations: int = 10
    seed: int = 1
    cc: str = "reno"  # base algorithm for --compare
    cc_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    mltcp_params: dict[str, Any] = field(default_factory=dict)
    source: str = "<memory>"
    fabric: Any = None  # the mltcp.fabric.Fabric that made the fabric's links, if any
    switch: ProgressPolicy = field(default_factory=ProgressPolicy)  # in-network policy (switch_policy)
    loss_recovery: str = "linux"  # linux: SACK + RACK-TLP; ns3: SACK only (ns-3 3.44), tail losses wait for the RTO
    nic_backlog_segments: int = (
        0  # whole segments a window may leave waiting for the NIC and still grow (docs/simulator.md)
    )

    def base_rtt(self, job: Job) -> float:
        """Round trip of the job's longest flow path."""
        if job.flow_paths is None:
            return 2.0 * sum(self.links[n].delay_s for n in job.path) + self.host_delay_s
        return 2.0 * max(sum(self.links[n].delay_s for n in p) for p in job.flow_paths) + self.host_delay_s

    def bottleneck_Bps(self, job: Job) -> float:
        """The rate a job's iteration gets alone: its bytes over the time its busiest link needs for
        the share of them that crosses it (the slowest link of a one-flow job's path)."""
        if job.flows == 1:
            return min(self.links[n].rate_Bps for n in job.path)
        load: dict[str, float] = defaultdict(float)
        for p in job.paths():
            for n in set(p):
                load[n] += job.flow_bytes()
        return job.bytes_per_iter / max(b / self.links[n].rate_Bps for n, b in load.items())

    def ideal_iter_s(self, job: Job) -> float:
        """The job's iteration time alone on the network: what a perfect interleave gives it."""
        return job.compute_s + job.bytes_per_iter / self.bottleneck_Bps(job) + self.base_rtt(job)


# ---- loading -------------------------------------------------------------------------------------


def builtin_dir() -> Path:
    return Path(str(resources.files("mltcp.scenarios")))


def builtin_names() -> list[str]:
    """The shipped scenarios, and the experiments in scenarios/tuned/ as ``tuned/NAME`` (each a
    shipped scenario with the ``[mltcp]`` table tuned on it)."""
    d = builtin_dir()
    return sorted(p.stem for p in d.glob("*.toml")) + sorted(f"tuned/{p.stem}" for p in d.glob("tuned/*.toml"))


def resolve(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        return p
    candidate = builtin_dir() / f"{name_or_path}.toml"
    if candidate.exists():
        return candidate
    raise ScenarioError(
        name_or_path, "scenario", f"no such file or built-in scenario (built-ins: {', '.join(builtin_names())})"
    )


def load(name_or_path: str) -> Scenario:
    return from_dict(*read_tables(name_or_path))


def read_tables(name_or_path: str) -> tuple[dict, str]:
    """A scenario's TOML tables, unchecked, and the file they came from (ScenarioError naming the
    file if it cannot be read or parsed); :func:`from_dict` checks them."""
    path = resolve(name_or_path)
    src = str(path)
    try:
        data = tomlfile.loads(path.read_bytes().decode("utf-8-sig"))
    except FileNotFoundError:
        raise ScenarioError(src, "file", "not found") from None
    except OSError as e:
        raise ScenarioError(src, "file", f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ScenarioError(src, "file", f"not UTF-8 text (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(src, "toml", str(e)) from None
    return data, src


class _Reader:
    """Typed access to one TOML table that reports the dotted field name on error."""

    def __init__(self, src: str, prefix: str, table: Any):
        if not isinstance(table, dict):
            raise ScenarioError(src, prefix, "must be a table")
        self.src, self.prefix, self.t, self.used = src, prefix, table, set()

    def name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def get(self, key: str, typ, default=..., check=None, why: str = ""):
        self.used.add(key)
        if key not in self.t:
            if default is ...:
                raise ScenarioError(self.src, self.name(key), "is required")
            return default
        v = self.t[key]
        if typ is float and isinstance(v, int) and not isinstance(v, bool):
            if abs(v) > 1e300:
                raise ScenarioError(self.src, self.name(key), f"must be a finite number, got {v!r}")
            v = float(v)
        if not isinstance(v, typ) or (typ in (int, float) and isinstance(v, bool)):
            raise ScenarioError(self.src, self.name(key), f"must be {getattr(typ, '__name__', typ)}, got {v!r}")
        if typ is float and not math.isfinite(v):
            raise ScenarioError(self.src, self.name(key), f"must be a finite number, got {v!r}")
        if check is not None and not check(v):
            raise ScenarioError(self.src, self.name(key), f"{why} (got {v!r})")
        return v

    def one_of(
        self,
        keys: dict[str, float],
        required: bool = True,
        check=lambda v: v >= 0,
        why="must be >= 0",
        lo: float | None = None,
        hi: float | None = None,
        unit: str = "",
    ):
        """Exactly one of several unit-suffixed spellings, e.g. rate_gbps / rate_mbps -> base unit;
        ``lo``/``hi`` bound the value in the base unit (``unit`` names it in the message)."""
        present = [k for k in keys if k in self.t]
        if len(present) > 1:
            raise ScenarioError(self.src, self.name(present[1]), f"give only one of {', '.join(keys)}")
        if not present:
            if required:
                raise ScenarioError(self.src, self.name(next(iter(keys))), f"is required (or one of {', '.join(keys)})")
            return None
        k = present[0]
        raw = self.get(k, float, check=check, why=why)
        v = raw * keys[k]
        if (lo is not None and v < lo) or (hi is not None and v > hi) or not math.isfinite(v):
            span = f"in [{_g(lo)}, {_g(hi)}]" if lo is not None else f"<= {_g(hi)}"
            raise ScenarioError(self.src, self.name(k), f"must be {span} {unit} (got {raw!r} = {v:g} {unit})")
        return v

    def finish(self) -> None:
        unknown = sorted(set(self.t) - self.used)
        if unknown:
            raise ScenarioError(self.src, self.name(unknown[0]), "unknown field")


def _positive(v):
    return v > 0


def _g(v) -> str:
    return "none" if v is None else f"{v:g}"


def _upto(lo: int, hi: int) -> dict:
    """check/why for an integer field in [lo, hi]."""
    return dict(check=lambda v: lo <= v <= hi, why=f"must be in [{lo}, {hi}]")


def _link(src: str, i: int, t: dict, mss: int, prefix: str | None = None, room: int = MAX_LINKS) -> list[Link]:
    r = _Reader(src, prefix or f"links[{i}]", t)
    name = r.get("name", str, check=bool, why="must not be empty")
    count = r.get("count", int, 1, **_upto(1, room))
    rate = r.one_of(
        {"rate_gbps": 1e9, "rate_mbps": 1e6},
        check=_positive,
        why="must be > 0",
        lo=MIN_RATE_BPS,
        hi=MAX_RATE_BPS,
        unit="b/s",
    )
    delay = r.one_of({"delay_us": 1e-6, "delay_ms": 1e-3}, hi=MAX_DELAY_S, unit="s")
    pkt = float(mss)
    bdp_rtt = 2 * delay  # BDP of this link over its own round trip, for buffer_bdp
    buf = r.one_of(
        {"buffer_pkts": pkt, "buffer_kb": 1e3, "buffer_bdp": rate / 8 * bdp_rtt},
        check=_positive,
        why="must be > 0",
        lo=1.0,
        hi=MAX_BUFFER_BYTES,
        unit="bytes",
    )
    if buf < pkt * (
        1 - 1e-9
    ):  # a drop-tail buffer that cannot hold one packet drops every packet queued behind another
        key = next(k for k in ("buffer_pkts", "buffer_kb", "buffer_bdp") if k in t)
        raise ScenarioError(
            src, r.name(key), f"the buffer ({buf:g} bytes) must hold at least one packet (network.mss = {mss} bytes)"
        )
    ecn = r.get("ecn", str, "none", lambda v: v in ECN_MODES, f"must be one of {ECN_MODES}")
    k = r.one_of({"ecn_k_pkts": pkt, "ecn_k_kb": 1e3}, required=ecn == "step", hi=MAX_BUFFER_BYTES, unit="bytes") or 0.0
    kmin = (
        r.one_of({"red_kmin_pkts": pkt, "red_kmin_kb": 1e3}, required=ecn == "red", hi=MAX_BUFFER_BYTES, unit="bytes")
        or 0.0
    )
    kmax = (
        r.one_of({"red_kmax_pkts": pkt, "red_kmax_kb": 1e3}, required=ecn == "red", hi=MAX_BUFFER_BYTES, unit="bytes")
        or 0.0
    )
    pmax = r.get("red_pmax", float, 0.2, lambda v: 0 < v <= 1, "must be in (0, 1]")
    if ecn == "red" and kmax <= kmin:
        raise ScenarioError(src, r.name("red_kmax_pkts"), "must be greater than red_kmin")
    pfc = r.get("pfc", bool, False)
    r.finish()
    names = [name] if count == 1 else [f"{name}{j}" for j in range(count)]
    return [Link(n, rate, delay, buf, ecn, k, kmin, kmax, pmax, pfc) for n in names]


def _ddp_job(src: str, i: int, r: _Reader, name: str, links: dict[str, Link], defaults: dict) -> Job:
    """A ``workload = "torch-ddp"`` job (mltcp.ddp.catalog): real DDP ranks in the emulation; for the
    simulator, its GPU time (or measured sim_compute_ms) then the ring all-reduce of its gradients."""
    from .ddp.catalog import read_ddp_fields

    ddp = read_ddp_fields(r)
    offset = r.one_of({"start_offset_ms": 1e-3, "start_offset_s": 1.0}, required=False, hi=MAX_TIME_S, unit="s") or 0.0
    path = r.get(
        "path",
        list,
        ...,
        lambda v: v and all(isinstance(x, str) and x in links for x in v),
        f"must list link names (links: {', '.join(list(links)[:6])})",
    )
    iters = r.get("iterations", int, defaults["iterations"], **_upto(1, MAX_ITERATIONS))
    r.finish()
    return Job(
        name,
        ddp.sim_compute_s(),
        ring_allreduce_bytes(ddp.gradient_bytes(), ddp.ranks),
        list(path),
        offset,
        iterations=iters,
        extra={"ddp": ddp},
    )


def _jobs(src: str, i: int, t: dict, links: dict[str, Link], defaults: dict) -> list[Job]:
    r = _Reader(src, f"jobs[{i}]", t)
    name = r.get("name", str, check=bool, why="must not be empty")
    if (
        r.get("workload", str, "synthetic", lambda v: v in ("synthetic", "torch-ddp"), "must be synthetic or torch-ddp")
        == "torch-ddp"
    ):
        return [_ddp_job(src, i, r, name, links, defaults)]
    count = r.get("count", int, 1, **_upto(1, defaults.get("room", MAX_JOBS)))
    share = r.get("share", int, 1, **_upto(1, MAX_JOBS))
    model = r.get("model", str, None, lambda v: v in PROFILES, f"must be one of {', '.join(PROFILES)}")
    lay = _read_layout(r, src, defaults, model)
    workers = r.get("workers", int, 8, **_upto(2, MAX_WORKERS))
    compute = r.one_of(
        {"compute_ms": 1e-3, "compute_s": 1.0}, required=model is None and lay.trace is None, hi=MAX_TIME_S, unit="s"
    )
    if compute is None:
        compute = lay.trace.compute_s if lay.trace is not None else PROFILES[model].compute_ms * 1e-3
    nbytes = r.one_of(
        {"bytes": 1.0, "comm_mb": 1e6},
        required=model is None and not lay.sized,
        check=_positive,
        why="must be > 0",
        hi=MAX_BYTES_PER_ITER,
        unit="bytes per iteration",
    )
    if nbytes is None and lay.sized:
        nbytes = _layout_bytes(r, lay, model)
    elif nbytes is None:
        nbytes = ring_allreduce_bytes(PROFILES[model].model_bytes(), workers)
    offset = r.one_of({"start_offset_ms": 1e-3, "start_offset_s": 1.0}, required=False, hi=MAX_TIME_S, unit="s") or 0.0
    stagger = r.one_of({"stagger_ms": 1e-3}, required=False, hi=MAX_TIME_S, unit="s") or 0.0
    if offset + (count - 1) * stagger > MAX_TIME_S:
        raise ScenarioError(
            src,
            r.name("stagger_ms"),
            f"the last of {count} jobs would start after {offset + (count - 1) * stagger:g} s (limit {MAX_TIME_S:g} s)",
        )
    path = r.get(
        "path",
        list,
        None if lay.routed else ...,
        check=lambda v: v and all(isinstance(x, str) for x in v),
        why="must be a non-empty list of link names",
    )
    if path is not None and lay.routed:
        raise ScenarioError(src, r.name("path"), "give either path or hosts/paths, not both")
    jitter = r.get("jitter", float, 0.0, lambda v: 0 <= v < 1, "must be in [0, 1)")
    sp = r.get("straggler_prob", float, 0.0, lambda v: 0 <= v <= 1, "must be in [0, 1]")
    sd = r.one_of({"straggler_delay_ms": 1e-3}, required=False, hi=MAX_TIME_S, unit="s") or 0.0
    iters = r.get("iterations", int, defaults["iterations"], **_upto(1, MAX_ITERATIONS))
    r.finish()
    jobs = []
    for j in range(count):
        jname = name if count == 1 else f"{name}{j}"
        if lay.routed:
            p, flows, flow_paths = _place(r, lay, j, j // share, jname, links, defaults)
        else:
            try:
                p = [str(x).format(g=j // share, i=j) for x in path]
            except (KeyError, IndexError, ValueError, AttributeError) as e:
                raise ScenarioError(
                    src,
                    f"jobs[{i}].path",
                    f"bad link name pattern in {path!r} ({e!r}; only {{g}} and {{i}} are replaced)",
                ) from None
            flows, flow_paths = lay.flows or 1, None
            for hop in p:
                if hop not in links:
                    raise ScenarioError(
                        src, f"jobs[{i}].path", f"unknown link {hop!r} (links: {', '.join(list(links)[:6])}...)"
                    )
        jobs.append(
            Job(
                jname,
                compute,
                nbytes,
                p,
                offset + j * stagger,
                jitter,
                sp,
                sd,
                iters,
                model,
                flows=flows,
                flow_paths=flow_paths,
                compute_series=lay.series(iters),
            )
        )
    return jobs


def from_dict(d: dict, src: str = "<memory>") -> Scenario:
    r = _Reader(src, "", d)
    name = r.get("name", str)
    desc = " ".join(r.get("description", str, "").split())
    seed = r.get("seed", int, 1, **_upto(0, 2**63 - 1))
    iterations = r.get("iterations", int, 50, **_upto(1, MAX_ITERATIONS))
    warmup = r.get("warmup_iterations", int, 10, lambda v: v >= 0, "must be >= 0")
    cc = r.get("cc", str, "reno", lambda v: v in BASES, f"must be one of {', '.join(BASES)}")
    net = _Reader(src, "network", r.get("network", dict, {}))
    mss = net.get("mss", int, 1448, lambda v: 64 <= v <= 9000, "must be in [64, 9000]")
    step = (
        net.one_of({"step_us": 1e-6}, required=False, check=_positive, why="must be > 0", lo=1e-7, hi=1e-2, unit="s")
        or 20e-6
    )
    rto = net.one_of({"min_rto_ms": 1e-3}, required=False, check=_positive, why="must be > 0", hi=60.0, unit="s") or 0.2
    host = net.one_of({"host_delay_us": 1e-6}, required=False, hi=1.0, unit="s") or 0.0
    ssai = net.get("slow_start_after_idle", bool, True)
    loss_model = net.get("loss_model", str, "packet", lambda v: v in ("fluid", "packet"), "must be fluid or packet")
    recovery = net.get("loss_recovery", str, "linux", lambda v: v in ("linux", "ns3"), "must be linux or ns3")
    backlog = net.get("nic_backlog_segments", int, 0, lambda v: 0 <= v <= 64, "must be in [0, 64]")
    net.finish()
    fab, links = _fabric(src, r, mss, seed)
    raw_links = r.get("links", list, [] if fab else ...)
    if not raw_links and not fab:
        raise ScenarioError(src, "links", "needs at least one link")
    for i, t in enumerate(raw_links):
        for link in _link(src, i, t, mss, room=MAX_LINKS - len(links)):
            if link.name in links:
                raise ScenarioError(src, f"links[{i}].name", f"duplicate link {link.name!r}")
            links[link.name] = link
    raw_jobs = r.get("jobs", list)
    if not raw_jobs:
        raise ScenarioError(src, "jobs", "needs at least one job")
    ctx = {"iterations": iterations, "fabric": fab, "base_dir": _base_dir(src)}
    jobs, origin, names = [], [], set()
    for i, t in enumerate(raw_jobs):
        if len(jobs) >= MAX_JOBS:
            raise ScenarioError(src, f"jobs[{i}]", f"more than {MAX_JOBS} jobs in all")
        new = _jobs(src, i, t, links, {**ctx, "room": MAX_JOBS - len(jobs)})
        for j in new:
            if j.name in names:
                raise ScenarioError(src, f"jobs[{i}].name", f"duplicate job name {j.name!r}")
            names.add(j.name)
        jobs += new
        origin += [i] * len(new)
    if warmup >= min(j.iterations for j in jobs):
        raise ScenarioError(src, "warmup_iterations", "must be smaller than every job's iterations")
    _check_size(src, jobs, origin, links, step, host)
    ccr = _Reader(src, "cc_params", r.get("cc_params", dict, {}))
    cc_params = {k: ccr.get(k, dict, {}) for k in BASES}
    ccr.finish()
    mr = _Reader(src, "mltcp", r.get("mltcp", dict, {}))
    mltcp = _hook_params(src, mr)
    mr.finish()
    policy = _switch_policy(src, r, links)
    r.finish()
    sc = Scenario(
        name, desc, links, jobs, mss, step, rto, host, ssai, loss_model, warmup, seed, cc, cc_params, mltcp, src
    )
    sc.fabric = fab[0] if fab else None
    sc.switch = policy
    sc.loss_recovery = recovery
    sc.nic_backlog_segments = backlog
    return sc


def _switch_policy(src: str, r: _Reader, links: dict[str, Link]) -> ProgressPolicy:
    """``switch_policy`` and its ``[switch]`` parameters (mltcp.progress_policy)."""
    name = r.get("switch_policy", str, "off")
    table = r.get("switch", dict, {})
    try:
        pol = _policy_from_table(name, table)
    except PolicyError as e:
        raise ScenarioError(src, e.field, str(e).split(": ", 1)[1]) from None
    for n in pol.links or ():
        if n not in links:
            raise ScenarioError(src, "switch.links", f"unknown link {n!r}")
    if pol.name == "ecn-by-progress":
        on = [links[n] for n in (pol.links or links)]
        if not any(lk.ecn != "none" for lk in on):
            raise ScenarioError(
                src,
                "switch_policy",
                'ecn-by-progress scales the links\' ECN thresholds: give a policy link ecn = "step" or "red"',
            )
    return pol


# ---- fabrics, multi-flow jobs, collectives and traces ----------------------------------------------
# [fabric] builds a leaf-spine or fat-tree's links (mltcp.fabric); a job's hosts, pattern, flows,
# paths and trace fields place its flows on it (or on explicit links) and size them.

PATTERNS = ("ring", "ps")
MAX_FLOWS = 10_000  # per job
MAX_JOB_BYTES = 1e12  # per job per iteration, all flows (as for bytes)
TRACE_RATES = (1e3, 1e14)  # trace line rate bounds, b/s
_FABRIC_SHAPE = {"leaf-spine": ("leaves", "spines", "hosts_per_leaf"), "fat-tree": ("k",)}
_TEMPLATE = re.compile(r"\{([^{}]*)\}")
_ARITH = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.Load,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.FloorDiv,
    ast.Mod,
    ast.USub,
    ast.UAdd,
)


def _base_dir(src: str) -> Path:
    p = Path(src)
    return p.parent if p.is_file() else Path.cwd()


def _fabric(src: str, r: _Reader, mss: int, seed: int):
    """``[fabric]``: ((Fabric, ecmp seed), its links by name), or (None, {}) without one."""
    t = r.get("fabric", dict, None)
    if t is None:
        return None, {}
    from . import fabric as fabmod

    f = _Reader(src, "fabric", t)
    kind = f.get("kind", str, check=lambda v: v in _FABRIC_SHAPE, why=f"must be one of {', '.join(_FABRIC_SHAPE)}")
    shape = {k: f.get(k, int) for k in _FABRIC_SHAPE[kind]}
    for other in {k for ks in _FABRIC_SHAPE.values() for k in ks} - set(shape):
        if other in t:
            raise ScenarioError(src, f.name(other), f"is not a field of a {kind} fabric")
    try:
        fab = fabmod.fat_tree(**shape) if kind == "fat-tree" else fabmod.leaf_spine(**shape)
    except fabmod.FabricError as e:
        named = next((k for k in shape if str(e).startswith(k)), next(iter(shape)))
        raise ScenarioError(src, f.name(named), str(e)) from None
    ecmp_seed = f.get("ecmp_seed", int, seed, lambda v: 0 <= v < 2**63, "must be in [0, 2^63)")
    up = f.one_of(
        {"uplink_rate_gbps": 1e9, "uplink_rate_mbps": 1e6}, required=False, check=_positive, why="must be > 0"
    )
    link_t = {
        k: v
        for k, v in t.items()
        if k not in set(shape) | {"kind", "ecmp_seed", "uplink_rate_gbps", "uplink_rate_mbps"}
    }
    (host_proto,) = _link(src, 0, {"name": "fabric", **link_t}, mss, prefix="fabric")
    up_proto = host_proto
    if up is not None:
        up_t = {k: v for k, v in link_t.items() if k not in ("rate_gbps", "rate_mbps")}
        (up_proto,) = _link(src, 0, {"name": "fabric", "rate_mbps": up / 1e6, **up_t}, mss, prefix="fabric")
    f.used.update(link_t)
    f.finish()
    rest = {
        tier: [getattr(proto, fl.name) for fl in fields(Link)][1:]
        for tier, proto in (("host", host_proto), ("fabric", up_proto))
    }
    links = {name: Link(name, *rest[tier]) for name, tier in fab.links()}
    return (fab, ecmp_seed), links


def _template(src: str, fieldname: str, text: str, names: tuple[str, ...]):
    """A host-name template such as ``h{2*g+1}`` or ``h{(g + H // 2) % H}``: integer arithmetic
    (+ - * // %) on ``names`` inside braces. Returns a function of the names' values."""
    parts: list = []
    pos = 0
    for m in _TEMPLATE.finditer(text):
        parts.append(text[pos : m.start()])
        expr = m.group(1).strip()
        try:
            tree = ast.parse(expr, mode="eval")
        except SyntaxError:
            raise ScenarioError(src, fieldname, f"bad expression {{{expr}}} in {text!r}") from None
        for node in ast.walk(tree):
            if not (
                isinstance(node, _ARITH)
                or (isinstance(node, ast.Name) and node.id in names)
                or (isinstance(node, ast.Constant) and type(node.value) is int)
            ):
                raise ScenarioError(
                    src,
                    fieldname,
                    f"{{{expr}}} in {text!r}: only whole numbers, {', '.join(names)} and + - * // % are allowed",
                )
        parts.append(compile(tree, "<template>", "eval"))
        pos = m.end()
    parts.append(text[pos:])
    if any(isinstance(p, str) and ("{" in p or "}" in p) for p in parts):
        raise ScenarioError(src, fieldname, f"unbalanced braces in {text!r}")

    def render(env: dict) -> str:
        try:
            return "".join(p if isinstance(p, str) else str(eval(p, {"__builtins__": {}}, env)) for p in parts)
        except ZeroDivisionError:
            raise ScenarioError(src, fieldname, f"{text!r}: division by zero") from None

    return render


@lru_cache(maxsize=32)
def _trace_profile(path: str, mtime_ns: int, size: int, rate: float, shared: bool):
    from .traffic.traces import load_profile

    return load_profile(path, rate, shared_link=shared)


@dataclass
class _Layout:
    """A [[jobs]] entry's new fields: how its flows are placed and, for traces, sized and timed."""

    flows: int | None = None
    pattern: str | None = None
    hosts: list | None = None  # host-name templates
    server: Any = None  # template (ps)
    paths: list | None = None  # per-flow link-name lists (str.format templates, as path)
    trace: Any = None  # mltcp.traffic.traces.TraceProfile
    gradient: float | None = None  # bytes of one gradient (patterns)
    model: str | None = None
    trace_skip: int = 0  # replay the trace's compute times from this iteration on

    @property
    def routed(self) -> bool:
        return self.hosts is not None or self.paths is not None

    @property
    def sized(self) -> bool:
        """Bytes come from the trace or the pattern (not from bytes/comm_mb)."""
        return self.trace is not None or (self.pattern is not None and (self.gradient is not None or bool(self.model)))

    def n_flows(self) -> int | None:
        if self.pattern == "ring":
            return len(self.hosts)
        if self.pattern == "ps":
            return 2 * len(self.hosts)
        if self.paths is not None:
            return len(self.paths)
        return self.flows

    def series(self, iterations: int):
        if self.trace is None:
            return None
        c = self.trace.compute_times
        k = self.trace_skip
        return tuple(float(c[(k + n) % len(c)]) for n in range(min(len(c), iterations)))


def _read_layout(r: _Reader, src: str, ctx: dict, model: str | None) -> _Layout:
    lay = _Layout(model=model)
    size = lambda v: 1 <= len(v) <= MAX_FLOWS  # noqa: E731
    lay.flows = r.get("flows", int, None, lambda v: 1 <= v <= MAX_FLOWS, f"must be in [1, {MAX_FLOWS}]")
    lay.pattern = r.get("pattern", str, None, lambda v: v in PATTERNS, f"must be one of {', '.join(PATTERNS)}")
    hosts = r.get("hosts", list, None, size, f"needs 1 to {MAX_FLOWS} hosts")
    server = r.get("server", str, None)
    paths = r.get("paths", list, None, size, f"needs 1 to {MAX_FLOWS} paths")
    gradient = r.one_of({"gradient_bytes": 1.0, "gradient_mb": 1e6}, required=False, check=_positive, why="must be > 0")
    if gradient is not None and not gradient <= MAX_JOB_BYTES:
        k = next(k for k in ("gradient_bytes", "gradient_mb") if k in r.t)
        raise ScenarioError(src, r.name(k), f"must be at most {MAX_JOB_BYTES:g} bytes (got {gradient:g})")
    trace = r.get("trace", str, None)
    if "trace_line_rate" in r.t:
        raise ScenarioError(
            src, r.name("trace_line_rate"), "give it with its unit: trace_line_rate_gbps or trace_line_rate_mbps"
        )
    rate = r.one_of(
        {"trace_line_rate_gbps": 1e9, "trace_line_rate_mbps": 1e6},
        required=trace is not None,
        check=lambda v: 0 < v < float("inf"),
        why="must be > 0",
    )
    if rate is not None and not TRACE_RATES[0] <= rate <= TRACE_RATES[1]:
        k = next(k for k in ("trace_line_rate_gbps", "trace_line_rate_mbps") if k in r.t)
        raise ScenarioError(src, r.name(k), f"must be in [{TRACE_RATES[0]:g}, {TRACE_RATES[1]:g}] b/s (got {rate:g})")
    if rate is not None and trace is None:
        k = next(k for k in ("trace_line_rate_gbps", "trace_line_rate_mbps") if k in r.t)
        raise ScenarioError(src, r.name(k), "goes with trace (the rate the trace was measured at)")
    shared = r.get("trace_shared_link", bool, False)
    lay.trace_skip = r.get("trace_skip", int, 0, lambda v: 0 <= v <= 10**9, "must be in [0, 1e9]")
    if "trace_skip" in r.t and trace is None:
        raise ScenarioError(src, r.name("trace_skip"), "goes with trace")
    fab = ctx.get("fabric")
    names = ("i", "g", "H") if fab else ("i", "g")
    if hosts is not None:
        if fab is None:
            raise ScenarioError(
                src, r.name("hosts"), "hosts are placed on a fabric: add a [fabric] table (or give path / paths)"
            )
        if not all(isinstance(h, str) for h in hosts):
            raise ScenarioError(src, r.name("hosts"), "must be a list of host names (strings)")
        lay.hosts = [_template(src, r.name("hosts"), h, names) for h in hosts]
    if paths is not None:
        if hosts is not None:
            raise ScenarioError(src, r.name("paths"), "give either hosts or paths, not both")
        if not all(isinstance(p, list) and p and all(isinstance(x, str) for x in p) for p in paths):
            raise ScenarioError(src, r.name("paths"), "must be a list of paths, each a non-empty list of link names")
        lay.paths = paths
    if lay.pattern is not None:
        if lay.hosts is None:
            raise ScenarioError(src, r.name("pattern"), f"pattern = {lay.pattern!r} needs hosts on a [fabric]")
        if "workers" in r.t:
            raise ScenarioError(src, r.name("workers"), "with a pattern the workers are the hosts: leave workers out")
        if lay.pattern == "ring" and len(lay.hosts) < 2:
            raise ScenarioError(src, r.name("hosts"), "a ring needs at least 2 hosts")
        if lay.flows is not None and lay.flows != lay.n_flows():
            raise ScenarioError(
                src,
                r.name("flows"),
                f"pattern = {lay.pattern!r} over {len(lay.hosts)} hosts has "
                f"{lay.n_flows()} flows, not {lay.flows} (leave flows out)",
            )
    elif lay.hosts is not None and len(lay.hosts) != 2:
        raise ScenarioError(
            src,
            r.name("hosts"),
            'without a pattern, hosts = [source, destination] (or pattern = "ring" / "ps" for a collective)',
        )
    if (server is not None) != (lay.pattern == "ps"):
        raise ScenarioError(
            src,
            r.name("server" if server is not None else "pattern"),
            'server (the parameter server\'s host) goes with pattern = "ps", and only with it',
        )
    if server is not None:
        lay.server = _template(src, r.name("server"), server, names)
    if lay.paths is not None and lay.flows is not None and lay.flows != len(lay.paths):
        raise ScenarioError(src, r.name("flows"), f"{len(lay.paths)} paths are {len(lay.paths)} flows, not {lay.flows}")
    if gradient is not None and lay.pattern is None:
        raise ScenarioError(
            src,
            r.name("gradient_mb" if "gradient_mb" in r.t else "gradient_bytes"),
            'the gradient sizes a pattern\'s flows: give pattern = "ring" or "ps" (or bytes)',
        )
    lay.gradient = gradient
    if trace is not None:
        lay.trace = _load_trace(r, src, ctx, trace, rate, shared)
        if lay.trace_skip >= lay.trace.iterations:
            raise ScenarioError(src, r.name("trace_skip"), f"the trace has {lay.trace.iterations} iterations")
        want = lay.n_flows()
        if want is None:
            lay.flows = lay.trace.flows
        elif want != lay.trace.flows:
            what = r.name("hosts") if lay.pattern else r.name("paths" if lay.paths is not None else "flows")
            raise ScenarioError(
                src, what, f"gives {want} flows, but the trace has {lay.trace.flows} flows per iteration"
            )
    return lay


def _load_trace(r: _Reader, src: str, ctx: dict, trace: str, rate: float, shared: bool):
    from .traffic.traces import TraceError

    p = Path(trace)
    if not p.is_absolute():
        p = ctx["base_dir"] / p
    try:
        st = p.stat()
        prof = _trace_profile(str(p), st.st_mtime_ns, st.st_size, rate, shared)
    except FileNotFoundError:
        raise ScenarioError(
            src, r.name("trace"), f"{p}: no such file (a relative path is taken from the scenario's folder)"
        ) from None
    except TraceError as e:
        raise ScenarioError(src, r.name("trace"), str(e)) from None
    if not 0 < prof.bytes_per_iter <= MAX_JOB_BYTES:
        raise ScenarioError(
            src,
            r.name("trace"),
            f"{p}: {prof.bytes_per_iter:g} bytes per iteration (must be > 0 and at most {MAX_JOB_BYTES:g})",
        )
    return prof


def _layout_bytes(r: _Reader, lay: _Layout, model: str | None) -> float:
    """Bytes per iteration (all flows) when the trace or a pattern sizes the job."""
    if lay.trace is not None:
        return float(lay.trace.bytes_per_iter)
    grad = lay.gradient if lay.gradient is not None else PROFILES[model].model_bytes()
    n = len(lay.hosts)
    total = n * ring_allreduce_bytes(grad, n) if lay.pattern == "ring" else ps_bytes(grad, n)
    if total > MAX_JOB_BYTES:
        raise ScenarioError(
            r.src,
            r.name("hosts"),
            f"{lay.pattern} over {n} hosts moves {total:g} bytes per iteration, more than {MAX_JOB_BYTES:g}",
        )
    return total


def _place(r: _Reader, lay: _Layout, j: int, g: int, jname: str, links: dict, ctx: dict):
    """(first path, flows, per-flow paths) of job number ``j`` of the entry."""
    src = r.src
    if lay.paths is not None:
        fps = [[str(x).format(g=g, i=j) for x in p] for p in lay.paths]
        for p in fps:
            for hop in p:
                if hop not in links:
                    raise ScenarioError(src, r.name("paths"), f"unknown link {hop!r}")
        return fps[0], len(fps), fps
    fab, seed = ctx["fabric"]
    env = {"i": j, "g": g, "H": fab.n_hosts}
    hosts = [h(env) for h in lay.hosts]
    from .fabric import FabricError

    try:
        for h in hosts:
            fab.host_index(h)
        if len(set(hosts)) != len(hosts):
            raise FabricError(f"a host appears twice ({', '.join(hosts)})")
    except FabricError as e:
        raise ScenarioError(src, r.name("hosts"), f"job {jname}: {e}") from None
    if lay.pattern == "ring":
        pairs = [(hosts[f], hosts[(f + 1) % len(hosts)]) for f in range(len(hosts))]
    elif lay.pattern == "ps":
        server = lay.server(env)
        try:
            fab.host_index(server)
        except FabricError as e:
            raise ScenarioError(src, r.name("server"), f"job {jname}: {e}") from None
        if server in hosts:
            raise ScenarioError(src, r.name("server"), f"job {jname}: the server {server} is also a worker")
        pairs = [(h, server) for h in hosts] + [(server, h) for h in hosts]
    else:
        pairs = [(hosts[0], hosts[1])] * (lay.flows or 1)
    fps = [fab.ecmp_path(s, d, seed, jname, f) for f, (s, d) in enumerate(pairs)]
    return fps[0], len(fps), fps


def _check_size(
    src: str, jobs: list[Job], origin: list[int], links: dict[str, Link], step: float, host: float = 0.0
) -> None:
    """Refuse scenarios too big to run before any work starts: records for every job-iteration,
    and simulated slots even if every job ran alone at its ideal iteration time."""
    total = sum(j.iterations for j in jobs)
    if total > MAX_JOB_ITERATIONS:
        raise ScenarioError(
            src,
            "iterations",
            f"{len(jobs)} jobs x their iterations = {total} job-iterations "
            f"(limit {MAX_JOB_ITERATIONS}): fewer jobs or iterations",
        )
    worst, where = 0.0, 0
    probe = Scenario("", "", links, jobs, host_delay_s=host)
    for k, j in enumerate(jobs):
        alone = probe.ideal_iter_s(j) + j.straggler_delay_s * j.straggler_prob
        end = j.start_offset_s + j.iterations * alone
        if end > worst:
            worst, where = end, k
    if worst / step > MAX_SIM_SLOTS:
        j = jobs[where]
        raise ScenarioError(
            src,
            f"jobs[{origin[where]}]",
            f"job {j.name!r} needs at least {worst:.4g} simulated s "
            f"({j.iterations} iterations) = {worst / step:.3g} slots of {step * 1e6:g} us, over the "
            f"limit of {MAX_SIM_SLOTS:.0e}: fewer iterations or bytes, a faster link, or a larger "
            "network.step_us",
        )


# ---- congestion-control parameters in scenario units -> constructor arguments -------------------


def _hook_params(src, mr) -> dict[str, Any]:
    """``[mltcp]``: the keys, units and checks are the MLTCP hook's :class:`mltcp.cc.Param`
    declarations (:func:`mltcp.cc.mltcp.hook_fields`); a DCQCN-only key is ignored by Reno/CUBIC."""
    from .cc.mltcp import hook_fields

    fields = hook_fields()
    out: dict[str, Any] = {}
    for k in list(mr.t):
        if k not in fields:
            continue  # mr.finish() names it as unknown
        prm = fields[k]
        want = {bool: bool, int: int, str: str}.get(prm.kind, float)
        v = mr.get(k, want)
        try:
            if prm.kind is float and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ValueError(f"must be a number (got {v!r})")
            val = float(v) * prm.scale if prm.kind is float else prm.from_scenario(v)
            msg = prm.refuse(val)
            if msg:
                raise ValueError(msg)
        except ValueError as e:
            raise ScenarioError(src, f"mltcp.{k}", str(e)) from None
        out[prm.name] = val
    return out


def cc_kwargs(sc: Scenario, base: str) -> dict[str, Any]:
    """The base algorithm's constructor arguments from ``[cc_params.<base>]`` (scenario units).

    The accepted fields, their units and defaults are the :class:`mltcp.cc.Param` declarations on
    the algorithm class (``ALGORITHMS[base].scenario_fields()``)."""
    fields = ALGORITHMS[base].scenario_fields()
    out: dict[str, Any] = {}
    for k, v in sc.cc_params.get(base, {}).items():
        if k not in fields:
            raise ScenarioError(sc.source, f"cc_params.{base}.{k}", f"unknown field (known: {', '.join(fields)})")
        try:
            out[fields[k].name] = fields[k].from_scenario(v)
        except ValueError as e:
            raise ScenarioError(sc.source, f"cc_params.{base}.{k}", str(e)) from None
    return out
