"""Arms: the named ways of running one scenario that a sweep compares (one summary dict each).

An arm is a function ``(scenario, progress=None) -> summary`` (``progress(sim_t, fraction)``, if
given, is called now and then and may raise to abandon the run): the summary is :func:`mltcp.compare.side`'s (per-job
and overall avg/p99 iteration time, drops, ECN marks, interleaved_at_iteration, ...) plus the ideal
iteration time and the wall time of the run. Every congestion control of :mod:`mltcp.cc` is an
arm of its own name ("reno", "mltcp-reno", "cubic", ...), run in the fast simulator. Other arms
(a centralised reference schedule, say "ref-fifo") register here with :func:`register`; the sweep
(:mod:`mltcp.sweep`) finds them by name and needs no change.
"""

from __future__ import annotations

from typing import Callable

from . import compare
from .cc import ALGORITHMS
from .scenario import Scenario

Arm = Callable[..., dict]


def simulate_cc(sc: Scenario, cc: str, progress=None) -> dict:
    """One run of the fast simulator under ``cc``, summarised as ``mltcp simulate`` reports an arm.
    ``progress(sim_t, fraction)`` is called now and then (it may raise to abandon the run)."""
    from .sim.engine import simulate

    r = simulate(sc, cc, progress=progress)
    s = compare.side(
        sc, cc, r.records, r.drops, r.ecn_marks, getattr(r, "pfc_pause_s", None), getattr(r, "reordered", None)
    )
    s["ideal_iter_s"] = compare.ideal_iter_s(sc)
    s["wall_s"] = round(r.wall_time, 3)
    return s


def _cc_arm(cc: str) -> Arm:
    def arm(sc: Scenario, progress=None) -> dict:
        return simulate_cc(sc, cc, progress)

    arm.__name__ = f"arm_{cc.replace('-', '_')}"
    return arm


ARMS: dict[str, Arm] = {name: _cc_arm(name) for name in ALGORITHMS}


def register(name: str, fn: Arm) -> None:
    """Add an arm: ``fn(scenario, progress=None)`` returning its summary dict."""
    if name in ARMS:
        raise ValueError(f"arm {name!r} is already registered")
    ARMS[name] = fn


def check(name: str) -> None:
    """Raise ValueError naming the known arms if ``name`` is not one."""
    if name not in ARMS:
        raise ValueError(f"unknown arm {name!r} (known: {', '.join(ARMS)})")


def run_arm(sc: Scenario, arm: str, progress=None) -> dict:
    """Run ``sc`` under the arm named ``arm``: its summary (JSON-able)."""
    check(arm)
    return ARMS[arm](sc, progress) if progress is not None else ARMS[arm](sc)


def _reference_arm(name: str) -> Arm:
    def arm(sc: Scenario) -> dict:
        from .reference import reference_side

        s = reference_side(sc, name)
        s["ideal_iter_s"] = compare.ideal_iter_s(sc)
        return s

    arm.__name__ = f"arm_ref_{name}"
    return arm


def _register_references() -> None:
    """The centralized references (mltcp.reference) as arms "ref-fifo", "ref-srf", "ref-cassini", "ref-best"."""
    from .reference import REFERENCES

    for name in REFERENCES:
        ARMS[f"ref-{name}"] = _reference_arm(name)


_register_references()
