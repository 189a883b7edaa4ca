"""Scenario files (TOML): network links, jobs, congestion-control parameters, simulation settings.

Every number the simulator uses comes from here, so the same case can be rerun elsewhere.
Errors name the file and the field (:class:`ScenarioError`; the CLI exits with status 2).
See ``scenarios/*.toml`` and the README for the format.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .cc import ALGORITHMS
from .workload import PROFILES, Job, ring_allreduce_bytes

ECN_MODES = ("none", "step", "red")


class ScenarioError(ValueError):
    def __init__(self, source: str, fieldname: str, msg: str):
        self.source, self.field = source, fieldname
        super().__init__(f"{source}: {fieldname}: {msg}")


@dataclass
class Link:
    name: str
    rate_bps: float                 # bits per second
    delay_s: float                  # one-way propagation delay
    buffer_bytes: float             # drop-tail limit
    ecn: str = "none"               # none | step | red
    ecn_k_bytes: float = 0.0        # step marking threshold
    red_kmin_bytes: float = 0.0
    red_kmax_bytes: float = 0.0
    red_pmax: float = 0.2

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
    host_delay_s: float = 0.0       # added to every round trip (NIC/stack)
    slow_start_after_idle: bool = True  # Linux's default cwnd restart after an idle RTO
    loss_model: str = "packet"      # packet: whole packets, random per flow; fluid: shared by bytes offered
    warmup_iterations: int = 10
    seed: int = 1
    cc: str = "reno"                # base algorithm for --compare
    cc_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    mltcp_params: dict[str, Any] = field(default_factory=dict)
    source: str = "<memory>"

    def base_rtt(self, job: Job) -> float:
        return 2.0 * sum(self.links[n].delay_s for n in job.path) + self.host_delay_s

    def bottleneck_Bps(self, job: Job) -> float:
        return min(self.links[n].rate_Bps for n in job.path)

    def ideal_iter_s(self, job: Job) -> float:
        """The job's iteration time alone on the network: what a perfect interleave gives it."""
        return job.compute_s + job.bytes_per_iter / self.bottleneck_Bps(job) + self.base_rtt(job)


# ---- loading -------------------------------------------------------------------------------------

def builtin_dir() -> Path:
    return Path(str(resources.files("mltcp.scenarios")))


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.toml"))


def resolve(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        return p
    candidate = builtin_dir() / f"{name_or_path}.toml"
    if candidate.exists():
        return candidate
    raise ScenarioError(name_or_path, "scenario", f"no such file or built-in scenario (built-ins: {', '.join(builtin_names())})")


def load(name_or_path: str) -> Scenario:
    path = resolve(name_or_path)
    src = str(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ScenarioError(src, "file", "not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(src, "toml", str(e)) from None
    return from_dict(data, src)


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
            v = float(v)
        if not isinstance(v, typ) or (typ in (int, float) and isinstance(v, bool)):
            raise ScenarioError(self.src, self.name(key), f"must be {getattr(typ, '__name__', typ)}, got {v!r}")
        if check is not None and not check(v):
            raise ScenarioError(self.src, self.name(key), f"{why} (got {v!r})")
        return v

    def one_of(self, keys: dict[str, float], required: bool = True, check=lambda v: v >= 0, why="must be >= 0"):
        """Exactly one of several unit-suffixed spellings, e.g. rate_gbps / rate_mbps -> base unit."""
        present = [k for k in keys if k in self.t]
        if len(present) > 1:
            raise ScenarioError(self.src, self.name(present[1]), f"give only one of {', '.join(keys)}")
        if not present:
            if required:
                raise ScenarioError(self.src, self.name(next(iter(keys))), f"is required (or one of {', '.join(keys)})")
            return None
        k = present[0]
        return self.get(k, float, check=check, why=why) * keys[k]

    def finish(self) -> None:
        unknown = sorted(set(self.t) - self.used)
        if unknown:
            raise ScenarioError(self.src, self.name(unknown[0]), "unknown field")


def _positive(v):
    return v > 0


def _link(src: str, i: int, t: dict, mss: int) -> list[Link]:
    r = _Reader(src, f"links[{i}]", t)
    name = r.get("name", str)
    count = r.get("count", int, 1, lambda v: v >= 1, "must be >= 1")
    rate = r.one_of({"rate_gbps": 1e9, "rate_mbps": 1e6}, check=_positive, why="must be > 0")
    delay = r.one_of({"delay_us": 1e-6, "delay_ms": 1e-3})
    pkt = float(mss)
    bdp_rtt = 2 * delay  # BDP of this link over its own round trip, for buffer_bdp
    buf = r.one_of({"buffer_pkts": pkt, "buffer_kb": 1e3, "buffer_bdp": rate / 8 * bdp_rtt}, check=_positive, why="must be > 0")
    ecn = r.get("ecn", str, "none", lambda v: v in ECN_MODES, f"must be one of {ECN_MODES}")
    k = r.one_of({"ecn_k_pkts": pkt, "ecn_k_kb": 1e3}, required=ecn == "step") or 0.0
    kmin = r.one_of({"red_kmin_pkts": pkt, "red_kmin_kb": 1e3}, required=ecn == "red") or 0.0
    kmax = r.one_of({"red_kmax_pkts": pkt, "red_kmax_kb": 1e3}, required=ecn == "red") or 0.0
    pmax = r.get("red_pmax", float, 0.2, lambda v: 0 < v <= 1, "must be in (0, 1]")
    if ecn == "red" and kmax <= kmin:
        raise ScenarioError(src, r.name("red_kmax_pkts"), "must be greater than red_kmin")
    r.finish()
    names = [name] if count == 1 else [f"{name}{j}" for j in range(count)]
    return [Link(n, rate, delay, buf, ecn, k, kmin, kmax, pmax) for n in names]


def _jobs(src: str, i: int, t: dict, links: dict[str, Link], defaults: dict) -> list[Job]:
    r = _Reader(src, f"jobs[{i}]", t)
    name = r.get("name", str)
    count = r.get("count", int, 1, lambda v: v >= 1, "must be >= 1")
    share = r.get("share", int, 1, lambda v: v >= 1, "must be >= 1")
    model = r.get("model", str, None, lambda v: v in PROFILES, f"must be one of {', '.join(PROFILES)}")
    workers = r.get("workers", int, 8, lambda v: v >= 2, "must be >= 2")
    compute = r.one_of({"compute_ms": 1e-3, "compute_s": 1.0}, required=model is None)
    if compute is None:
        compute = PROFILES[model].compute_ms * 1e-3
    nbytes = r.one_of({"bytes": 1.0, "comm_mb": 1e6}, required=model is None, check=_positive, why="must be > 0")
    if nbytes is None:
        nbytes = ring_allreduce_bytes(PROFILES[model].model_bytes(), workers)
    offset = r.one_of({"start_offset_ms": 1e-3, "start_offset_s": 1.0}, required=False) or 0.0
    stagger = r.one_of({"stagger_ms": 1e-3}, required=False) or 0.0
    path = r.get("path", list)
    jitter = r.get("jitter", float, 0.0, lambda v: 0 <= v < 1, "must be in [0, 1)")
    sp = r.get("straggler_prob", float, 0.0, lambda v: 0 <= v <= 1, "must be in [0, 1]")
    sd = r.one_of({"straggler_delay_ms": 1e-3}, required=False) or 0.0
    iters = r.get("iterations", int, defaults["iterations"], lambda v: v >= 1, "must be >= 1")
    r.finish()
    jobs = []
    for j in range(count):
        p = [str(x).format(g=j // share, i=j) for x in path]
        for hop in p:
            if hop not in links:
                raise ScenarioError(src, f"jobs[{i}].path", f"unknown link {hop!r} (links: {', '.join(list(links)[:6])}...)")
        jobs.append(Job(name if count == 1 else f"{name}{j}", compute, nbytes, p, offset + j * stagger,
                        jitter, sp, sd, iters, model))
    return jobs


def from_dict(d: dict, src: str = "<memory>") -> Scenario:
    r = _Reader(src, "", d)
    name = r.get("name", str)
    desc = " ".join(r.get("description", str, "").split())
    seed = r.get("seed", int, 1)
    iterations = r.get("iterations", int, 50, lambda v: v >= 1, "must be >= 1")
    warmup = r.get("warmup_iterations", int, 10, lambda v: v >= 0, "must be >= 0")
    cc = r.get("cc", str, "reno", lambda v: v in ("reno", "cubic", "dcqcn"), "must be reno, cubic or dcqcn")
    net = _Reader(src, "network", r.get("network", dict, {}))
    mss = net.get("mss", int, 1448, lambda v: 64 <= v <= 9000, "must be in [64, 9000]")
    step = net.one_of({"step_us": 1e-6}, required=False, check=_positive, why="must be > 0") or 20e-6
    rto = net.one_of({"min_rto_ms": 1e-3}, required=False, check=_positive, why="must be > 0") or 0.2
    host = net.one_of({"host_delay_us": 1e-6}, required=False) or 0.0
    ssai = net.get("slow_start_after_idle", bool, True)
    loss_model = net.get("loss_model", str, "packet", lambda v: v in ("fluid", "packet"), "must be fluid or packet")
    net.finish()
    raw_links = r.get("links", list)
    if not raw_links:
        raise ScenarioError(src, "links", "needs at least one link")
    links: dict[str, Link] = {}
    for i, t in enumerate(raw_links):
        for link in _link(src, i, t, mss):
            if link.name in links:
                raise ScenarioError(src, f"links[{i}].name", f"duplicate link {link.name!r}")
            links[link.name] = link
    raw_jobs = r.get("jobs", list)
    if not raw_jobs:
        raise ScenarioError(src, "jobs", "needs at least one job")
    jobs = [j for i, t in enumerate(raw_jobs) for j in _jobs(src, i, t, links, {"iterations": iterations})]
    if warmup >= min(j.iterations for j in jobs):
        raise ScenarioError(src, "warmup_iterations", "must be smaller than every job's iterations")
    ccr = _Reader(src, "cc_params", r.get("cc_params", dict, {}))
    cc_params = {k: ccr.get(k, dict, {}) for k in ("reno", "cubic", "dcqcn")}
    ccr.finish()
    mr = _Reader(src, "mltcp", r.get("mltcp", dict, {}))
    mltcp = {k: mr.get(k, float) for k in ("slope", "intercept", "idle_fraction") if k in mr.t}
    if "min_idle_ms" in mr.t:
        mltcp["min_idle"] = mr.get("min_idle_ms", float, check=_positive, why="must be > 0") * 1e-3
    if "scale_decrease" in mr.t:
        mltcp["scale_decrease"] = mr.get("scale_decrease", bool)
    mr.finish()
    r.finish()
    return Scenario(name, desc, links, jobs, mss, step, rto, host, ssai, loss_model, warmup, seed, cc, cc_params,
                    mltcp, src)


# ---- congestion-control parameters in scenario units -> constructor arguments -------------------

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
