"""The MLTCP design space: named configurations of the one hook, and the ranges a tuner searches.

A configuration is a set of scenario-table values for the MLTCP run only: ``mltcp.<key>`` goes to
the scenario's ``[mltcp]`` table (the hook: slope, intercept, scale_decrease, the tracker's
idle_fraction and min_idle_ms) and ``cc_params.<base>.<key>`` to ``[cc_params.<base>]`` (the base
algorithm's own parameters). The baseline always runs the scenario as written, so every number a
trial reports is "this configuration of MLTCP vs the unchanged base algorithm". Nothing here forks
code: each variant is the same ``mltcp-<base>`` class with other parameter values, checked by the
scenario loader like any hand-written file.

A space (built in below, or a TOML file with the same fields) is::

    name = "reno-ai"
    base = "reno"                        # the variant is mltcp-<base>; the baseline is <base>
    description = "..."
    [fixed]                              # values every trial uses
    "mltcp.scale_decrease" = false
    [search]                             # what the tuner samples: low/high (+ log), or choices
    "mltcp.slope" = { low = 0.5, high = 16.0, log = true, default = 4.0 }
    "mltcp.scale_decrease" = { choices = [false, true], default = false }

``default`` is the value of the reference configuration (the public MLTCP defaults; in the
``<base>-default`` spaces the shipped default of :mod:`mltcp.defaults`), which every new study
evaluates first. ``<base>-default`` tunes the shipped default itself: F and the online switch,
over a random suite (``mltcp tune run SUITE_DIR --space reno-default --holdout OTHER_SUITE_DIR``).
"""

from __future__ import annotations

import copy
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import defaults, tomlfile
from .cc import BASES


class SpaceError(ValueError):
    def __init__(self, source: str, fieldname: str, msg: str):
        self.source, self.field = source, fieldname
        super().__init__(f"{source}: {fieldname}: {msg}")


@dataclass(frozen=True)
class Knob:
    """One searched parameter: a float/int range (``log`` for a log scale) or a list of choices."""

    key: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    choices: tuple | None = None
    default: Any = None

    def suggest(self, trial) -> Any:
        if self.choices is not None:
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.integer:
            return trial.suggest_int(self.key, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.key, self.low, self.high, log=self.log)

    def as_dict(self) -> dict:
        if self.choices is not None:
            return {"choices": list(self.choices), "default": self.default}
        d = {"low": self.low, "high": self.high, "log": self.log, "default": self.default}
        if self.integer:
            d["integer"] = True
        return d


@dataclass(frozen=True)
class Space:
    name: str
    base: str
    description: str = ""
    fixed: dict[str, Any] = field(default_factory=dict)
    knobs: tuple[Knob, ...] = ()
    source: str = "<built-in>"

    @property
    def cc(self) -> str:
        return f"mltcp-{self.base}"

    @property
    def signal(self) -> str:
        """What "drops" means for this base: ECN marks for DCQCN (it reacts to CNPs), else losses."""
        return "ecn_marks" if self.base == "dcqcn" else "drops"

    def suggest(self, trial) -> dict[str, Any]:
        """A trial's configuration: the fixed values plus one sample of every knob."""
        return {**self.fixed, **{k.key: k.suggest(trial) for k in self.knobs}}

    def reference(self) -> dict[str, Any]:
        """The reference configuration (each knob at its default), as Optuna params."""
        return {k.key: k.default for k in self.knobs}

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "base": self.base,
            "description": self.description,
            "fixed": dict(self.fixed),
            "search": {k.key: k.as_dict() for k in self.knobs},
        }


# ---- applying a configuration to a scenario's tables -----------------------------------------------


def _check_key(src: str, where: str, key: str, base: str) -> None:
    parts = key.split(".")
    if parts[0] == "mltcp" and len(parts) == 2 and parts[1]:
        return
    if parts[0] == "cc_params" and len(parts) == 3 and parts[2]:
        if parts[1] != base:
            raise SpaceError(src, f"{where}.{key}", f"sets [cc_params.{parts[1]}] but the space's base is {base!r}")
        return
    raise SpaceError(src, f"{where}.{key}", "must be mltcp.<key> or cc_params.<base>.<key>")


def apply(raw: dict, config: dict[str, Any]) -> dict:
    """A copy of the scenario's TOML tables with ``config`` written into [mltcp] / [cc_params.*]."""
    out = copy.deepcopy(raw)
    for key, value in config.items():
        parts = key.split(".")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


# ---- reading a space -------------------------------------------------------------------------------


def from_dict(d: dict, src: str = "<memory>") -> Space:
    def need(cond, fieldname, msg):
        if not cond:
            raise SpaceError(src, fieldname, msg)

    need(isinstance(d, dict), "space", "must be a table")
    unknown = sorted(set(d) - {"name", "base", "description", "fixed", "search"})
    need(not unknown, unknown[0] if unknown else "", "unknown field")
    name = d.get("name")
    need(isinstance(name, str) and name, "name", "is required (a string)")
    base = d.get("base")
    need(base in BASES, "base", f"must be one of {', '.join(BASES)} (got {base!r})")
    fixed = d.get("fixed", {})
    need(isinstance(fixed, dict), "fixed", "must be a table")
    for k in fixed:
        _check_key(src, "fixed", k, base)
    search = d.get("search", {})
    need(isinstance(search, dict), "search", "must be a table")
    knobs = []
    for k, spec in search.items():
        _check_key(src, "search", k, base)
        f = f"search.{k}"
        need(k not in fixed, f, "is also in [fixed]")
        need(isinstance(spec, dict), f, "must be a table: {low, high[, log, integer, default]} or {choices[, default]}")
        bad = sorted(set(spec) - {"low", "high", "log", "integer", "choices", "default"})
        need(not bad, f"{f}.{bad[0]}" if bad else f, "unknown field")
        if "choices" in spec:
            ch = spec["choices"]
            need(isinstance(ch, list) and ch, f"{f}.choices", "must be a non-empty list")
            default = spec.get("default", ch[0])
            need(default in ch, f"{f}.default", f"must be one of the choices {ch}")
            knobs.append(Knob(k, choices=tuple(ch), default=default))
            continue
        lo, hi = spec.get("low"), spec.get("high")
        num = (int, float)
        need(isinstance(lo, num) and not isinstance(lo, bool), f"{f}.low", "is required (a number)")
        need(isinstance(hi, num) and not isinstance(hi, bool), f"{f}.high", "is required (a number)")
        need(hi > lo, f"{f}.high", f"must be greater than low ({lo})")
        log = spec.get("log", False)
        integer = spec.get("integer", False)
        need(isinstance(log, bool), f"{f}.log", "must be true or false")
        need(isinstance(integer, bool), f"{f}.integer", "must be true or false")
        need(not log or lo > 0, f"{f}.low", "must be > 0 on a log scale")
        default = spec.get("default", lo)
        need(isinstance(default, num) and lo <= default <= hi, f"{f}.default", f"must be within [{lo}, {hi}]")
        knobs.append(Knob(k, float(lo), float(hi), log, integer, None, int(default) if integer else float(default)))
    return Space(name, base, " ".join(str(d.get("description", "")).split()), dict(fixed), tuple(knobs), src)


def load(name_or_path: str) -> Space:
    """A built-in space by name, or a TOML file."""
    if name_or_path in BUILTIN:
        return from_dict(BUILTIN[name_or_path], f"<built-in {name_or_path}>")
    p = Path(name_or_path)
    if p.suffix != ".toml" and not p.exists():
        raise SpaceError(name_or_path, "--space", f"no such file or built-in space (built-ins: {', '.join(BUILTIN)})")
    try:
        d = tomlfile.loads(p.read_text())
    except FileNotFoundError:
        raise SpaceError(str(p), "file", "not found") from None
    except tomllib.TOMLDecodeError as e:
        raise SpaceError(str(p), "toml", str(e)) from None
    return from_dict(d, str(p))


# ---- the built-in design space ---------------------------------------------------------------------
# The hook's knobs (mltcp/cc/mltcp.py, all settable in [mltcp]): slope, intercept, F's shape (linear,
# capped, convex: cap, exponent), scale_decrease and its two ends, the tracker's idle_fraction,
# min_idle_ms, idle_gap (last / min2), boundary (idle / mark), history, and DCQCN's dcqcn_f_* flags.

_F = {
    "mltcp.slope": {"low": 0.25, "high": 32.0, "log": True, "default": 4.0},
    "mltcp.intercept": {"low": 0.02, "high": 2.0, "log": True, "default": 0.25},
}
_TRACKER = {
    "mltcp.idle_fraction": {"low": 0.2, "high": 0.98, "default": 0.9},
    "mltcp.min_idle_ms": {"low": 0.1, "high": 5.0, "log": True, "default": 1.0},
}
_DECREASE = {"mltcp.scale_decrease": {"choices": [False, True], "default": False}}

_SHAPE = {
    "mltcp.shape": {"choices": ["linear", "capped", "convex"], "default": "linear"},
    "mltcp.cap": {"low": 1.0, "high": 16.0, "log": True, "default": 4.0},
    "mltcp.exponent": {"low": 0.5, "high": 4.0, "log": True, "default": 2.0},
}
_TRACKER2 = {
    **_TRACKER,
    "mltcp.idle_gap": {"choices": ["last", "min2"], "default": "last"},
    "mltcp.boundary": {"choices": ["idle", "mark"], "default": "idle"},
}
_DCQCN_AT = {
    f"mltcp.dcqcn_f_{k}": {"choices": [d, not d], "default": d}
    for k, d in (("rai", True), ("rhai", True), ("recovery", False), ("steps", False), ("timer", False))
}

BUILTIN: dict[str, dict] = {
    "reno-hook": {
        "base": "reno",
        "description": "reno-full plus F's shape and the tracker's boundary "
        "(idle / mark) and idle-gap rule (last / min2).",
        "search": {
            **_F,
            **_SHAPE,
            **_TRACKER2,
            **_DECREASE,
            "cc_params.reno.beta": {"low": 0.2, "high": 0.5, "default": 0.5},
        },
    },
    "cubic-hook": {
        "base": "cubic",
        "description": "cubic-growth plus F's shape, the tracker's boundary "
        "and idle-gap rule, CUBIC's beta for the MLTCP flows.",
        "search": {
            **_F,
            **_SHAPE,
            **_TRACKER2,
            **_DECREASE,
            "cc_params.cubic.beta": {"low": 0.5, "high": 0.9, "default": 0.7},
        },
    },
    "dcqcn-hook": {
        "base": "dcqcn",
        "description": "where F applies in DCQCN (R_AI, R_HAI, fast recovery, "
        "stage thresholds, timer/byte counter), F's shape and the tracker's boundary.",
        "search": {**_F, **_SHAPE, **_TRACKER2, **_DCQCN_AT},
    },
    "reno-ai": {
        "base": "reno",
        "description": "F scales Reno's additive increase only (the public MLTCP-Reno).",
        "fixed": {"mltcp.scale_decrease": False},
        "search": {**_F, **_TRACKER},
    },
    "reno-md": {
        "base": "reno",
        "description": "F scales the additive increase and the decrease "
        "((0.8 - 0.6 r) / 0.5 x beta: 0.2..0.8 of the window removed).",
        "fixed": {"mltcp.scale_decrease": True},
        "search": {**_F, **_TRACKER},
    },
    "reno-full": {
        "base": "reno",
        "description": "reno-ai or reno-md, plus Reno's own decrease beta "
        "for the MLTCP flows (the baseline keeps the scenario's).",
        "search": {**_F, **_TRACKER, **_DECREASE, "cc_params.reno.beta": {"low": 0.2, "high": 0.5, "default": 0.5}},
    },
    "cubic-growth": {
        "base": "cubic",
        "description": "F scales CUBIC's growth toward W(t) and the Reno-friendly estimate (what the hook does today).",
        "fixed": {"mltcp.scale_decrease": False},
        "search": {**_F, **_TRACKER},
    },
    "cubic-full": {
        "base": "cubic",
        "description": "cubic-growth plus the scaled decrease and CUBIC's "
        "C, beta and fast convergence for the MLTCP flows.",
        "search": {
            **_F,
            **_TRACKER,
            **_DECREASE,
            "cc_params.cubic.c": {"low": 0.05, "high": 4.0, "log": True, "default": 0.4},
            "cc_params.cubic.beta": {"low": 0.5, "high": 0.9, "default": 0.7},
            "cc_params.cubic.fast_convergence": {"choices": [True, False], "default": True},
        },
    },
    "dcqcn-rate": {
        "base": "dcqcn",
        "description": "F scales DCQCN's R_AI / R_HAI target-rate steps (what the hook does today).",
        "fixed": {"mltcp.scale_decrease": False},
        "search": {**_F, **_TRACKER},
    },
    "dcqcn-full": {
        "base": "dcqcn",
        "description": "dcqcn-rate plus the scaled (alpha/2) decrease and "
        "DCQCN's own R_AI, R_HAI, timer, byte counter, g and fast-recovery steps for the MLTCP flows.",
        "search": {
            **_F,
            **_TRACKER,
            **_DECREASE,
            "cc_params.dcqcn.rai_mbps": {"low": 5.0, "high": 500.0, "log": True, "default": 50.0},
            "cc_params.dcqcn.rhai_mbps": {"low": 10.0, "high": 1000.0, "log": True, "default": 100.0},
            "cc_params.dcqcn.timer_us": {"low": 50.0, "high": 2000.0, "log": True, "default": 900.0},
            "cc_params.dcqcn.byte_counter_kb": {"low": 100.0, "high": 20000.0, "log": True, "default": 10000.0},
            "cc_params.dcqcn.g": {"low": 1 / 1024, "high": 1 / 16, "log": True, "default": 1 / 256},
            "cc_params.dcqcn.fast_recovery_steps": {"low": 1, "high": 8, "integer": True, "default": 5},
        },
    },
}
_SHIPPED = {  # the shipped default's knobs (mltcp.defaults), each default at the shipped value
    "mltcp.slope": {"low": 0.25, "high": 8.0, "log": True, "default": defaults.SLOPE},
    "mltcp.intercept": {"low": 0.02, "high": 1.0, "log": True, "default": defaults.INTERCEPT},
    "mltcp.contended_above": {"low": 1.05, "high": 2.0, "default": defaults.CONTENDED_ABOVE},
    "mltcp.trial": {"choices": [2, 4, 8], "default": defaults.TRIAL},
    "mltcp.hold_max": {"choices": [8, 16, 32, 64], "default": defaults.HOLD_MAX},
}


def _above_bdp(base: str) -> dict:
    """The window-based bases' ``above_bdp_gain`` knob, its default at the base's shipped value."""
    return {"mltcp.above_bdp_gain": {"low": 0.25, "high": 1.0, "default": defaults.above_bdp_gain(base)}}


for _b in ("reno", "cubic", "dctcp", "dcqcn"):
    BUILTIN[f"{_b}-default"] = {
        "base": _b,
        "description": "the shipped default (mltcp/defaults.py): F and the online switch"
        + ("" if _b == "dcqcn" else ", and above_bdp_gain")
        + "; trial 0 is the default as shipped.",
        "fixed": {"mltcp.adaptive": True, "mltcp.scale_decrease": False},
        "search": {**_SHIPPED, **({} if _b == "dcqcn" else _above_bdp(_b))},
    }
for _n, _d in BUILTIN.items():
    _d["name"] = _n
