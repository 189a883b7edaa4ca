"""Run a scenario under a base algorithm and its MLTCP variant and summarise both (pure logic; the
runner that produces records is passed in, so the simulator and the emulator share this)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from . import metrics
from .records import IterationRecord
from .scenario import Scenario, ScenarioError


def link_sharing(sc: Scenario) -> dict[str, set[str]]:
    """job -> the jobs it shares at least one link with (who it can collide with)."""
    on_link: dict[str, set[str]] = defaultdict(set)
    used = {j.name: {h for p in j.paths() for h in p} for j in sc.jobs}  # every flow's links
    for j in sc.jobs:
        for h in used[j.name]:
            on_link[h].add(j.name)
    return {j.name: set().union(*(on_link[h] for h in used[j.name])) - {j.name} for j in sc.jobs}


def side(
    sc: Scenario,
    cc: str,
    records: list[IterationRecord],
    drops: float,
    marks: float,
    pfc_pause_s: float | None = None,
    reordered: float | None = None,
) -> dict:
    """One arm's summary. ``pfc_pause_s`` (flow-seconds paused by lossless links) is reported when
    the scenario has a ``pfc`` link, ``reordered`` (packets delivered after later ones of their
    flow by strict-priority band queues) when the simulator gives it."""
    s = metrics.summary(records, sc.warmup_iterations)
    out = {
        "cc": cc,
        **s,
        "drops": round(float(drops), 1),
        "ecn_marks": round(float(marks), 1),
        "converged_at_iteration": metrics.converged_at(records, link_sharing(sc)),
        "interleaved_at_iteration": metrics.interleaved_at(records, link_sharing(sc)),
        "per_job_avg_iter_s": metrics.per_job_avg(records, sc.warmup_iterations),
    }
    if any(lk.pfc for lk in sc.links.values()):
        out["pfc_pause_s"] = round(float(pfc_pause_s or 0.0), 6)
    if reordered is not None and sc.switch.name == "priority-by-progress":
        out["reordered"] = round(float(reordered), 1)
    return out


def ideal_iter_s(sc: Scenario) -> float:
    return sum(sc.ideal_iter_s(j) for j in sc.jobs) / len(sc.jobs)


def report(sc: Scenario, baseline: dict, mltcp: dict | None) -> dict:
    """The report of ``mltcp simulate`` and ``mltcp emulate``: ``baseline`` is the arm of the
    congestion control asked for, ``mltcp`` its MLTCP variant (None without ``--compare``)."""
    out = {
        "scenario": sc.name,
        "source": sc.source,
        "jobs": len(sc.jobs),
        "warmup_iterations": sc.warmup_iterations,
        "baseline": baseline,
    }
    if mltcp is not None:
        out["mltcp"] = mltcp
        out["speedup_avg"] = round(metrics.speedup(baseline["avg_iter_s"], mltcp["avg_iter_s"]), 4)
        out["speedup_p99"] = round(metrics.speedup(baseline["p99_iter_s"], mltcp["p99_iter_s"]), 4)
        out["converged_at_iteration"] = mltcp["converged_at_iteration"]
    else:  # the same keys either way: no MLTCP arm is null
        out["mltcp"] = out["speedup_avg"] = out["speedup_p99"] = None
        out["converged_at_iteration"] = baseline["converged_at_iteration"]
    out["ideal_iter_s"] = round(ideal_iter_s(sc), 6)
    return out


def policy_arms(sc: Scenario, cc: str) -> dict[str, tuple[Scenario, str]]:
    """``--compare-policy``'s two runs of ``cc``, label -> (scenario, cc): the scenario through a
    plain switch (``switch_policy = "off"``, its ECN thresholds as written), then as written."""
    if sc.switch.name == "off":
        raise ScenarioError(
            sc.source,
            "switch_policy",
            "is off: --compare-policy compares a plain switch with the "
            "scenario's policy (ecn-by-progress or priority-by-progress)",
        )
    plain = dataclasses.replace(sc, switch=dataclasses.replace(sc.switch, name="off"))
    return {f"{cc}+off": (plain, cc), f"{cc}+{sc.switch.name}": (sc, cc)}


def policy_report(arms: dict[str, tuple[Scenario, str]], results: dict) -> dict:
    """The report of ``--compare-policy`` in ``--compare``'s shape: ``baseline`` is the plain switch,
    ``mltcp`` the scenario's ``switch_policy`` (each arm names its ``switch_policy``); ``results``
    label -> the simulator's result for each of :func:`policy_arms`."""
    sides = []
    for label, (s, cc) in arms.items():
        r = results[label]
        sides.append(
            side(s, cc, r.records, r.drops, r.ecn_marks, getattr(r, "pfc_pause_s", None), getattr(r, "reordered", None))
            | {"switch_policy": s.switch.name}
        )
    return report(arms[list(arms)[-1]][0], sides[0], sides[1])


def mltcp_name(base: str) -> str:
    return f"mltcp-{base}"
