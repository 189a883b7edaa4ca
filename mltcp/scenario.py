"""Scenario files (TOML): network links, jobs, congestion-control parameters, simulation settings.

Every number the simulator uses comes from here, so the same case can be rerun elsewhere.
Errors name the file and the field (:class:`ScenarioError`; the CLI exits with status 2).
See ``scenarios/*.toml`` and the README for the format.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .workload import PROFILES, Job, ring_allreduce_bytes

ECN_MODES = ("none", "step", "red")

# Range limits, checked before any work starts (docs/hardening-inputs.md has the table and why).
MAX_JOBS = 100_000              # jobs in a scenario, after `count` expansion
MAX_LINKS = 100_000             # links, after `count` expansion
MAX_ITERATIONS = 1_000_000      # per job
MAX_JOB_ITERATIONS = 20_000_000  # summed over jobs: one record each (~2 GB of records at the limit)
MAX_BYTES_PER_ITER = 1e12       # 1 TB per job per iteration (GPT-2 XL on 1000 workers: 12.5 GB)
MIN_RATE_BPS, MAX_RATE_BPS = 1e3, 1e14   # 1 kb/s .. 100 Tb/s
MAX_DELAY_S = 10.0              # one-way link delay
MAX_BUFFER_BYTES = 1e12
MAX_TIME_S = 86_400.0           # compute time, start offsets, stagger, straggler delay: one day
MAX_WORKERS = 1_000_000
MAX_SIM_SLOTS = 1e8             # simulator time slots even at the ideal iteration time (~2 h of CPU)


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
        data = tomllib.loads(path.read_bytes().decode("utf-8-sig"))
    except FileNotFoundError:
        raise ScenarioError(src, "file", "not found") from None
    except OSError as e:
        raise ScenarioError(src, "file", f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ScenarioError(src, "file", f"not UTF-8 text (byte {e.start})") from None
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

    def one_of(self, keys: dict[str, float], required: bool = True, check=lambda v: v >= 0, why="must be >= 0",
               lo: float | None = None, hi: float | None = None, unit: str = ""):
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


def _link(src: str, i: int, t: dict, mss: int, room: int = MAX_LINKS) -> list[Link]:
    r = _Reader(src, f"links[{i}]", t)
    name = r.get("name", str, check=bool, why="must not be empty")
    count = r.get("count", int, 1, **_upto(1, room))
    rate = r.one_of({"rate_gbps": 1e9, "rate_mbps": 1e6}, check=_positive, why="must be > 0",
                    lo=MIN_RATE_BPS, hi=MAX_RATE_BPS, unit="b/s")
    delay = r.one_of({"delay_us": 1e-6, "delay_ms": 1e-3}, hi=MAX_DELAY_S, unit="s")
    pkt = float(mss)
    bdp_rtt = 2 * delay  # BDP of this link over its own round trip, for buffer_bdp
    buf = r.one_of({"buffer_pkts": pkt, "buffer_kb": 1e3, "buffer_bdp": rate / 8 * bdp_rtt}, check=_positive,
                   why="must be > 0", lo=pkt, hi=MAX_BUFFER_BYTES, unit="bytes (at least one mss-sized packet)")
    ecn = r.get("ecn", str, "none", lambda v: v in ECN_MODES, f"must be one of {ECN_MODES}")
    k = r.one_of({"ecn_k_pkts": pkt, "ecn_k_kb": 1e3}, required=ecn == "step", hi=MAX_BUFFER_BYTES, unit="bytes") or 0.0
    kmin = r.one_of({"red_kmin_pkts": pkt, "red_kmin_kb": 1e3}, required=ecn == "red", hi=MAX_BUFFER_BYTES,
                    unit="bytes") or 0.0
    kmax = r.one_of({"red_kmax_pkts": pkt, "red_kmax_kb": 1e3}, required=ecn == "red", hi=MAX_BUFFER_BYTES,
                    unit="bytes") or 0.0
    pmax = r.get("red_pmax", float, 0.2, lambda v: 0 < v <= 1, "must be in (0, 1]")
    if ecn == "red" and kmax <= kmin:
        raise ScenarioError(src, r.name("red_kmax_pkts"), "must be greater than red_kmin")
    r.finish()
    names = [name] if count == 1 else [f"{name}{j}" for j in range(count)]
    return [Link(n, rate, delay, buf, ecn, k, kmin, kmax, pmax) for n in names]


def _jobs(src: str, i: int, t: dict, links: dict[str, Link], defaults: dict) -> list[Job]:
    r = _Reader(src, f"jobs[{i}]", t)
    name = r.get("name", str, check=bool, why="must not be empty")
    count = r.get("count", int, 1, **_upto(1, defaults.get("room", MAX_JOBS)))
    share = r.get("share", int, 1, **_upto(1, MAX_JOBS))
    model = r.get("model", str, None, lambda v: v in PROFILES, f"must be one of {', '.join(PROFILES)}")
    workers = r.get("workers", int, 8, **_upto(2, MAX_WORKERS))
    compute = r.one_of({"compute_ms": 1e-3, "compute_s": 1.0}, required=model is None, hi=MAX_TIME_S, unit="s")
    if compute is None:
        compute = PROFILES[model].compute_ms * 1e-3
    nbytes = r.one_of({"bytes": 1.0, "comm_mb": 1e6}, required=model is None, check=_positive, why="must be > 0",
                      hi=MAX_BYTES_PER_ITER, unit="bytes per iteration")
    if nbytes is None:
        nbytes = ring_allreduce_bytes(PROFILES[model].model_bytes(), workers)
    offset = r.one_of({"start_offset_ms": 1e-3, "start_offset_s": 1.0}, required=False, hi=MAX_TIME_S, unit="s") or 0.0
    stagger = r.one_of({"stagger_ms": 1e-3}, required=False, hi=MAX_TIME_S, unit="s") or 0.0
    if offset + (count - 1) * stagger > MAX_TIME_S:
        raise ScenarioError(src, r.name("stagger_ms"), f"the last of {count} jobs would start after "
                                                       f"{offset + (count - 1) * stagger:g} s (limit {MAX_TIME_S:g} s)")
    path = r.get("path", list, check=lambda v: v and all(isinstance(x, str) for x in v),
                 why="must be a non-empty list of link names")
    jitter = r.get("jitter", float, 0.0, lambda v: 0 <= v < 1, "must be in [0, 1)")
    sp = r.get("straggler_prob", float, 0.0, lambda v: 0 <= v <= 1, "must be in [0, 1]")
    sd = r.one_of({"straggler_delay_ms": 1e-3}, required=False, hi=MAX_TIME_S, unit="s") or 0.0
    iters = r.get("iterations", int, defaults["iterations"], **_upto(1, MAX_ITERATIONS))
    r.finish()
    jobs = []
    for j in range(count):
        try:
            p = [str(x).format(g=j // share, i=j) for x in path]
        except (KeyError, IndexError, ValueError, AttributeError) as e:
            raise ScenarioError(src, f"jobs[{i}].path", f"bad link name pattern in {path!r} ({e!r}; "
                                                       "only {g} and {i} are replaced)") from None
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
    seed = r.get("seed", int, 1, **_upto(0, 2**63 - 1))
    iterations = r.get("iterations", int, 50, **_upto(1, MAX_ITERATIONS))
    warmup = r.get("warmup_iterations", int, 10, lambda v: v >= 0, "must be >= 0")
    cc = r.get("cc", str, "reno", lambda v: v in ("reno", "cubic", "dcqcn"), "must be reno, cubic or dcqcn")
    net = _Reader(src, "network", r.get("network", dict, {}))
    mss = net.get("mss", int, 1448, lambda v: 64 <= v <= 9000, "must be in [64, 9000]")
    step = net.one_of({"step_us": 1e-6}, required=False, check=_positive, why="must be > 0",
                      lo=1e-7, hi=1e-2, unit="s") or 20e-6
    rto = net.one_of({"min_rto_ms": 1e-3}, required=False, check=_positive, why="must be > 0",
                     hi=60.0, unit="s") or 0.2
    host = net.one_of({"host_delay_us": 1e-6}, required=False, hi=1.0, unit="s") or 0.0
    ssai = net.get("slow_start_after_idle", bool, True)
    loss_model = net.get("loss_model", str, "packet", lambda v: v in ("fluid", "packet"), "must be fluid or packet")
    net.finish()
    raw_links = r.get("links", list)
    if not raw_links:
        raise ScenarioError(src, "links", "needs at least one link")
    links: dict[str, Link] = {}
    for i, t in enumerate(raw_links):
        for link in _link(src, i, t, mss, MAX_LINKS - len(links)):
            if link.name in links:
                raise ScenarioError(src, f"links[{i}].name", f"duplicate link {link.name!r}")
            links[link.name] = link
    raw_jobs = r.get("jobs", list)
    if not raw_jobs:
        raise ScenarioError(src, "jobs", "needs at least one job")
    jobs, origin, names = [], [], set()
    for i, t in enumerate(raw_jobs):
        if len(jobs) >= MAX_JOBS:
            raise ScenarioError(src, f"jobs[{i}]", f"more than {MAX_JOBS} jobs in all")
        new = _jobs(src, i, t, links, {"iterations": iterations, "room": MAX_JOBS - len(jobs)})
        for j in new:
            if j.name in names:
                raise ScenarioError(src, f"jobs[{i}].name", f"duplicate job name {j.name!r}")
            names.add(j.name)
        jobs += new
        origin += [i] * len(new)
    if warmup >= min(j.iterations for j in jobs):
        raise ScenarioError(src, "warmup_iterations", "must be smaller than every job's iterations")
    _check_size(src, jobs, origin, links, step)
    ccr = _Reader(src, "cc_params", r.get("cc_params", dict, {}))
    cc_params = {k: ccr.get(k, dict, {}) for k in ("reno", "cubic", "dcqcn")}
    ccr.finish()
    mr = _Reader(src, "mltcp", r.get("mltcp", dict, {}))
    mltcp = {k: mr.get(k, float, check=ok, why=why) for k, ok, why in (
        ("slope", lambda v: 0 <= v <= 1000, "must be in [0, 1000]"),
        ("intercept", lambda v: 0 < v <= 1000, "must be in (0, 1000]"),
        ("idle_fraction", lambda v: 0 < v <= 1, "must be in (0, 1]")) if k in mr.t}
    if "min_idle_ms" in mr.t:
        mltcp["min_idle"] = mr.get("min_idle_ms", float, check=lambda v: 0 < v <= 1e6,
                                   why="must be in (0, 1e6] ms") * 1e-3
    if "scale_decrease" in mr.t:
        mltcp["scale_decrease"] = mr.get("scale_decrease", bool)
    mr.finish()
    r.finish()
    return Scenario(name, desc, links, jobs, mss, step, rto, host, ssai, loss_model, warmup, seed, cc, cc_params,
                    mltcp, src)


def _check_size(src: str, jobs: list[Job], origin: list[int], links: dict[str, Link], step: float) -> None:
    """Refuse scenarios too big to run before any work starts: records for every job-iteration,
    and simulated slots even if every job ran alone at its ideal iteration time."""
    total = sum(j.iterations for j in jobs)
    if total > MAX_JOB_ITERATIONS:
        raise ScenarioError(src, "iterations", f"{len(jobs)} jobs x their iterations = {total} job-iterations "
                                               f"(limit {MAX_JOB_ITERATIONS}): fewer jobs or iterations")
    worst, where = 0.0, 0
    for k, j in enumerate(jobs):
        alone = j.compute_s + j.bytes_per_iter / min(links[n].rate_Bps for n in j.path) + \
            2.0 * sum(links[n].delay_s for n in j.path) + j.straggler_delay_s * j.straggler_prob
        end = j.start_offset_s + j.iterations * alone
        if end > worst:
            worst, where = end, k
    if worst / step > MAX_SIM_SLOTS:
        j = jobs[where]
        raise ScenarioError(src, f"jobs[{origin[where]}]", f"job {j.name!r} needs at least {worst:.4g} simulated s "
                            f"({j.iterations} iterations) = {worst / step:.3g} slots of {step * 1e6:g} us, over the "
                            f"limit of {MAX_SIM_SLOTS:.0e}: fewer iterations or bytes, a faster link, or a larger "
                            "network.step_us")


# ---- congestion-control parameters in scenario units -> constructor arguments -------------------

_CC_FIELDS = {
    "reno": {"beta": ("beta", 1.0)},
    "cubic": {"c": ("c", 1.0), "beta": ("beta", 1.0), "fast_convergence": ("fast_convergence", None)},
    "dcqcn": {"g": ("g", 1.0), "rai_mbps": ("rai", 1e6 / 8), "rhai_mbps": ("rhai", 1e6 / 8),
              "min_rate_mbps": ("min_rate", 1e6 / 8), "timer_us": ("timer", 1e-6),
              "byte_counter_kb": ("byte_counter", 1e3), "fast_recovery_steps": ("fast_recovery_steps", None),
              "alpha_interval_us": ("alpha_interval", 1e-6)},
}


def cc_kwargs(sc: Scenario, base: str) -> dict[str, Any]:
    """The base algorithm's constructor arguments from ``[cc_params.<base>]`` (scenario units)."""
    out: dict[str, Any] = {}
    for k, v in sc.cc_params.get(base, {}).items():
        if k not in _CC_FIELDS[base]:
            raise ScenarioError(sc.source, f"cc_params.{base}.{k}", f"unknown field (known: {', '.join(_CC_FIELDS[base])})")
        arg, scale = _CC_FIELDS[base][k]
        if scale is None:
            out[arg] = v
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            out[arg] = float(v) * scale
        else:
            raise ScenarioError(sc.source, f"cc_params.{base}.{k}", f"must be a positive number (got {v!r})")
    return out
