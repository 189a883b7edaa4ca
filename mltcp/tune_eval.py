"""Evaluating one MLTCP configuration on a set of scenarios (pure logic around the simulator).

A *case* is one scenario at one seed (optionally cut to fewer iterations). A configuration's score
on a case compares the MLTCP run (the space's ``mltcp-<base>`` with the configuration written into
the scenario's tables) with the base algorithm on the scenario as written:

* ``speedup_avg`` = baseline avg iteration time / MLTCP's, ``speedup_p99`` likewise;
* ``signal_ratio`` = (MLTCP's drops + 1) / (baseline's drops + 1): ECN marks instead of drops
  for DCQCN. Below 1: fewer than the baseline. The +1 keeps a loss-free baseline finite.

Over a training set the speedup objectives are geometric means over cases (ratios compose by
multiplication, so a 2x gain and a 2x loss cancel); the drops objective is the worst case's ratio
(default) or the geometric mean (:func:`aggregate`).
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import compare, tomlfile
from .scenario import Scenario, ScenarioError, from_dict, resolve
from .tune_space import apply

OBJECTIVES = ("speedup_avg", "speedup_p99", "signal_ratio")
DIRECTIONS = ("maximize", "maximize", "minimize")


@dataclass(frozen=True)
class Case:
    label: str  # "two-jobs@seed1"
    source: str  # the file it came from
    raw: dict  # the scenario's TOML tables, seed and iteration overrides applied

    def key(self, cc: str) -> str:
        """Identifies a baseline run: the label plus a digest of exactly what was simulated."""
        digest = hashlib.sha1(json.dumps([self.raw, cc], sort_keys=True, default=str).encode()).hexdigest()[:12]
        return f"{self.label}:{cc}:{digest}"

    def scenario(self, config: dict[str, Any] | None = None) -> Scenario:
        return from_dict(apply(self.raw, config) if config else self.raw, self.source)

    def as_dict(self) -> dict:
        return {"label": self.label, "source": self.source, "raw": self.raw}

    @staticmethod
    def from_json(d: dict) -> "Case":
        return Case(d["label"], d["source"], d["raw"])


def suite_files(names: Sequence[str]) -> list[str]:
    """``names`` with each folder replaced by its ``*.toml`` files, sorted (a suite written by
    ``mltcp scenarios generate``); a folder with none is a ScenarioError."""
    out = []
    for name in names:
        p = Path(name)
        if not p.is_dir():
            out.append(name)
            continue
        files = sorted(p.glob("*.toml"))
        if not files:
            raise ScenarioError(str(p), "folder", "holds no scenario files (*.toml)")
        out += [str(f) for f in files]
    return out


def make_cases(
    names: Sequence[str], seeds: Sequence[int], iterations: int | None = None, warmup: int | None = None
) -> list[Case]:
    """One case per scenario and seed; a folder stands for its scenario files (a random suite);
    raises ScenarioError naming the scenario and field."""
    out = []
    for name in suite_files(names):
        path = resolve(name)
        try:
            raw = tomlfile.loads(path.read_text())
        except FileNotFoundError:
            raise ScenarioError(str(path), "file", "not found") from None
        except tomllib.TOMLDecodeError as e:
            raise ScenarioError(str(path), "toml", str(e)) from None
        if iterations is not None:
            raw["iterations"] = iterations
            for j in raw.get("jobs", []):
                if isinstance(j, dict):
                    j.pop("iterations", None)
            if warmup is None:
                raw["warmup_iterations"] = min(int(raw.get("warmup_iterations", 10)), iterations // 4)
        if warmup is not None:
            raw["warmup_iterations"] = warmup
        base_name = raw.get("name", path.stem)
        for s in seeds:
            r = dict(raw, seed=int(s))
            case = Case(f"{base_name}@seed{s}", str(path), r)
            case.scenario()  # validate now: the error names the file and the field
            out.append(case)
    return out


def check_space(space, cases: Sequence[Case]) -> None:
    """Every configuration the space can produce (reference and each knob's ends) must be a valid
    scenario for every case: else SpaceError naming the space and the key."""
    from .tune_space import SpaceError

    configs = [{**space.fixed, **space.reference()}]
    for k in space.knobs:
        for v in k.choices if k.choices is not None else (k.low, k.high):
            configs.append({**space.fixed, **space.reference(), k.key: int(v) if k.integer else v})
    for case in cases:
        for cfg in configs:
            try:
                case.scenario(cfg)
            except ScenarioError as e:
                raise SpaceError(space.source, e.field, f"{case.label} refuses it: {e}") from None


def run_case(case: Case, cc: str, config: dict[str, Any] | None = None, progress=None) -> dict:
    """Simulate one case with ``cc`` (config written into the scenario for MLTCP runs only);
    ``progress(sim_t, fraction)`` is called now and then (it may raise to abandon the run)."""
    from .sim.engine import simulate

    sc = case.scenario(config)
    r = simulate(sc, cc, progress=progress)
    s = compare.side(sc, cc, r.records, r.drops, r.ecn_marks)
    s["wall_s"] = round(r.wall_time, 3)
    s["ideal_iter_s"] = compare.ideal_iter_s(sc)
    return s


def score(base: dict, ml: dict, signal: str) -> dict:
    return {
        "speedup_avg": _ratio(base["avg_iter_s"], ml["avg_iter_s"]),
        "speedup_p99": _ratio(base["p99_iter_s"], ml["p99_iter_s"]),
        "signal_ratio": (ml[signal] + 1.0) / (base[signal] + 1.0),
    }


def _ratio(a: float, b: float) -> float:
    return float(a / b) if b > 0 and math.isfinite(a) and math.isfinite(b) else float("nan")


def gmean(xs: Sequence[float]) -> float:
    xs = [x for x in xs]
    if not xs or any(not (x > 0) for x in xs):
        return float("nan")
    return float(math.exp(sum(math.log(x) for x in xs) / len(xs)))


SIGNAL_AGGREGATES = ("worst", "gmean")


def aggregate(scores: Sequence[dict], signal: str = "worst") -> dict:
    """Objectives over a set of cases: the speedups' geometric means, and the drops (marks) ratio
    of the worst case (``signal="worst"``: no case may drop more than its baseline) or its
    geometric mean (``"gmean"``: big reductions in one case may pay for increases in another).
    Both, and the worst case of every ratio, are kept alongside."""
    out = {k: gmean([s[k] for s in scores]) for k in OBJECTIVES}
    out["gmean_signal_ratio"] = out["signal_ratio"]
    out["worst_speedup_avg"] = min(s["speedup_avg"] for s in scores)
    out["worst_speedup_p99"] = min(s["speedup_p99"] for s in scores)
    out["worst_signal_ratio"] = max(s["signal_ratio"] for s in scores)
    if signal == "worst":
        out["signal_ratio"] = out["worst_signal_ratio"]
    return out


# ---- Pareto front ----------------------------------------------------------------------------------


def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str] = DIRECTIONS) -> bool:
    """a is at least as good as b in every objective and better in one."""
    better = False
    for x, y, d in zip(a, b, directions):
        if d == "minimize":
            x, y = -x, -y
        if x < y:
            return False
        if x > y:
            better = True
    return better


def pareto_front(points: Sequence[Sequence[float]], directions: Sequence[str] = DIRECTIONS) -> list[int]:
    """Indices of the points no other point dominates (duplicates all kept)."""
    return [
        i for i, p in enumerate(points) if not any(dominates(q, p, directions) for j, q in enumerate(points) if j != i)
    ]


def pick(points: Sequence[Sequence[float]], front: Sequence[int]) -> int | None:
    """The configuration to ship from a front: among the points with no more drops (marks) than
    the baseline (signal_ratio <= 1), the best geometric mean of the avg and p99 speedups; if no
    point has that, the best of that mean over the whole front."""
    if not front:
        return None
    ok = [i for i in front if points[i][2] <= 1.0] or list(front)
    return max(ok, key=lambda i: (math.sqrt(points[i][0] * points[i][1]), -points[i][2]))
