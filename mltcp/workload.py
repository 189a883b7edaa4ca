"""Workload model: a DNN training job alternates a compute phase and a communication phase.

Data-parallel training with ring all-reduce sends 2(n-1)/n x model bytes per worker per iteration
(REFERENCE.md). Built-in profiles give parameter counts (public model sizes) and a compute time per
iteration; the compute times are illustrative defaults for a single modern GPU at a moderate batch
size, not measurements: set ``compute_ms`` in a scenario to match your cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class ModelProfile:
    name: str
    params_millions: float  # public parameter counts
    compute_ms: float  # illustrative default, see module docstring
    bytes_per_param: int = 4  # fp32 gradients

    def model_bytes(self) -> float:
        return self.params_millions * 1e6 * self.bytes_per_param


PROFILES: dict[str, ModelProfile] = {
    p.name: p
    for p in (
        ModelProfile("vgg16", 138.4, 120.0),
        ModelProfile("vgg19", 143.7, 140.0),
        ModelProfile("resnet50", 25.6, 60.0),
        ModelProfile("densenet121", 8.0, 70.0),
        ModelProfile("bert-large", 340.0, 300.0),
        ModelProfile("gpt2", 124.0, 150.0),  # GPT-2 small
        ModelProfile("gpt2-xl", 1558.0, 900.0),
    )
}


def ps_bytes(model_bytes: float, workers: int) -> float:
    """Bytes a parameter-server iteration moves in all: every worker pushes its gradient to the
    server and pulls the model back (2 x workers flows of model bytes each)."""
    if workers < 1:
        raise ValueError("a parameter server needs at least 1 worker")
    return 2.0 * workers * model_bytes


def ring_allreduce_bytes(model_bytes: float, workers: int) -> float:
    """Bytes each worker sends per iteration in a ring all-reduce: 2(n-1)/n x model bytes."""
    if workers < 2:
        raise ValueError("ring all-reduce needs at least 2 workers")
    return 2.0 * (workers - 1) / workers * model_bytes


@dataclass
class Job:
    """One training job as the network sees it: after each compute phase its ``flows`` flows send
    ``bytes_per_iter`` in all (an equal share each); the iteration ends when every flow has
    delivered its share. ``path`` names the links a flow crosses, in order; ``flow_paths`` (one path
    per flow) overrides it for collectives routed over a topology (ring all-reduce, parameter server);
    ``path`` is then the first flow's path."""

    name: str
    compute_s: float
    bytes_per_iter: float
    path: list[str]
    start_offset_s: float = 0.0
    jitter: float = 0.0  # std-dev of compute time, as a fraction of compute_s
    straggler_prob: float = 0.0  # probability that an iteration's compute is delayed
    straggler_delay_s: float = 0.0  # the extra delay of a straggling iteration
    iterations: int = 50
    model: str | None = None
    extra: dict = field(default_factory=dict)
    flows: int = 1  # parallel flows, each with its own CC state and bytes_ratio
    flow_paths: list[list[str]] | None = None
    compute_series: tuple[float, ...] | None = None  # per-iteration compute times (from a trace), cycled

    def paths(self) -> list[list[str]]:
        """The path of each of the job's flows."""
        if self.flow_paths is not None:
            return [list(p) for p in self.flow_paths]
        return [list(self.path) for _ in range(self.flows)]

    def flow_bytes(self) -> float:
        """Bytes each flow sends per iteration."""
        return self.bytes_per_iter / self.flows

    def compute_times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Compute-phase durations for n iterations (jitter and stragglers drawn from ``rng``): the
        ``compute_series`` of a trace in order (repeated if the job runs longer), else ``compute_s``."""
        if self.compute_series:
            base = np.resize(np.asarray(self.compute_series, dtype=float), n)
        else:
            base = np.full(n, self.compute_s)
        if self.jitter > 0:
            base = base * np.clip(1.0 + self.jitter * rng.standard_normal(n), 0.1, None)
        if self.straggler_prob > 0:
            base = base + (rng.random(n) < self.straggler_prob) * self.straggler_delay_s
        return base

    # What a job's sender needs of it (one flow, its compute model, its count): the fields of the
    # JSON job document handed to the emulation's peers (mltcp.traffic.driver.JobSpec.to_dict).
    SENDER_FIELDS = (
        "name",
        "compute_s",
        "bytes_per_iter",
        "start_offset_s",
        "jitter",
        "straggler_prob",
        "straggler_delay_s",
        "iterations",
    )

    def sender_dict(self) -> dict:
        """The job as its sender runs it (:data:`SENDER_FIELDS`), JSON-able."""
        return {f: getattr(self, f) for f in self.SENDER_FIELDS}

    @classmethod
    def from_sender_dict(cls, d: dict, where: str = "job") -> "Job":
        """Inverse of :meth:`sender_dict`; an unknown or missing field or a wrong type is a
        ValueError naming ``where`` and the field."""
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object, got {type(d).__name__}")
        unknown = sorted(set(d) - set(cls.SENDER_FIELDS))
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
        if "name" not in d or not isinstance(d["name"], str):
            raise ValueError(f"{where}.name: a string is required")
        kw = {}
        for f in cls.SENDER_FIELDS[1:]:
            if f in d:
                v = d[f]
                ok = isinstance(v, int) if f == "iterations" else isinstance(v, (int, float))
                if isinstance(v, bool) or not ok:
                    raise ValueError(f"{where}.{f}: expected a number, got {v!r}")
                kw[f] = v
        return cls(d["name"], kw.pop("compute_s", 0.0), kw.pop("bytes_per_iter", 0), [], **kw)
