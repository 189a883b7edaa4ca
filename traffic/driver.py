"""Job driver: run a training job's compute/communicate loop over a real transport.

Each iteration sleeps for the job's compute time (with the jitter and straggler model of
:class:`mltcp.workload.Job`), then calls ``transport.send_iteration(nbytes, iteration)``, which
blocks until the bytes are delivered, and records an :class:`mltcp.records.IterationRecord`
(``drops`` = retransmitted segments, ``marks`` = CE-marked datagrams, when the transport reports them).
Works with any object that has ``send_iteration`` (the userspace UDP transport, kernel TCP, fakes).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from mltcp.records import IterationRecord
from mltcp.workload import Job


@dataclass
class JobSpec:
    """A job as a sender runs it: its workload (one :class:`mltcp.workload.Job`, the same object
    the scenario and the simulator use), the job id its shim carries, where its flows go and the
    seed of its compute-time draws. It travels to the emulation's peers as one JSON document
    (:meth:`to_dict` / :meth:`from_dict`)."""

    job: Job
    job_id: int = 0
    peers: list = field(default_factory=list)
    seed: int | None = None

    def __post_init__(self):
        for f in ("compute_s", "bytes_per_iter", "jitter", "straggler_prob", "straggler_delay_s", "start_offset_s"):
            v = getattr(self.job, f)
            if not v >= 0:
                raise ValueError(f"job {self.job_id}: {f} must be >= 0, got {v!r}")
        if self.job.straggler_prob > 1:
            raise ValueError(f"job {self.job_id}: straggler_prob must be <= 1, got {self.job.straggler_prob}")
        if not 0 <= self.job_id <= 0xFFFF:
            raise ValueError(f"job_id must fit the shim's 16 bits, got {self.job_id}")

    @classmethod
    def of(
        cls,
        job_id: int,
        compute_s: float,
        bytes_per_iter: int,
        peers=(),
        seed: int | None = None,
        name: str | None = None,
        **workload,
    ) -> "JobSpec":
        """A spec from the workload's numbers (``workload``: the other :class:`Job` fields)."""
        return cls(Job(name or f"job{job_id}", compute_s, bytes_per_iter, [], **workload), job_id, list(peers), seed)

    @property
    def label(self) -> str:
        return self.job.name

    @property
    def bytes_per_iter(self) -> int:
        return int(round(self.job.bytes_per_iter))

    def compute_times(self, n: int, rng: np.random.Generator | None = None) -> np.ndarray:
        rng = rng if rng is not None else np.random.default_rng(self.seed)
        return self.job.compute_times(rng, n)

    def to_dict(self) -> dict:
        return {"job": self.job.sender_dict(), "job_id": self.job_id, "peers": list(self.peers), "seed": self.seed}

    @classmethod
    def from_dict(cls, d: dict, where: str = "spec") -> "JobSpec":
        """Inverse of :meth:`to_dict`; a bad document is a ValueError naming ``where`` and the field."""
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object, got {type(d).__name__}")
        unknown = sorted(set(d) - {"job", "job_id", "peers", "seed"})
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
        job_id, seed, peers = d.get("job_id", 0), d.get("seed"), d.get("peers", [])
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise ValueError(f"{where}.job_id: expected an integer, got {job_id!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"{where}.seed: expected an integer or null, got {seed!r}")
        if not isinstance(peers, list):
            raise ValueError(f"{where}.peers: expected a list, got {peers!r}")
        return cls(Job.from_sender_dict(d.get("job"), f"{where}.job"), job_id, peers, seed)


def run_job(
    job: JobSpec,
    transport,
    iterations: int,
    clock=time.monotonic,
    sleep=time.sleep,
    epoch: float | None = None,
    rng: np.random.Generator | None = None,
    on_record=None,
) -> list[IterationRecord]:
    """Run ``iterations`` compute+communicate iterations, the first at ``epoch + start_offset_s``;
    times in the records are ``clock() - epoch`` (epoch defaults to the clock when run_job starts)."""
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    t0 = clock() if epoch is None else epoch
    computes = job.compute_times(iterations, rng)
    wait = t0 + job.job.start_offset_s - clock()  # the first iteration starts at epoch + start_offset_s
    if wait > 0:
        sleep(wait)
    records = []
    for i in range(iterations):
        start = clock()
        if computes[i] > 0:
            sleep(float(computes[i]))
        comm_start = clock()
        r0 = getattr(transport, "retransmits", 0)
        res = transport.send_iteration(job.bytes_per_iter, i)
        end = clock()
        drops = getattr(res, "retransmits", None)
        if drops is None:
            drops = getattr(transport, "retransmits", 0) - r0
        marks = getattr(res, "marks", 0) or 0
        rec = IterationRecord(
            job.label, i, start - t0, comm_start - t0, end - t0, float(job.bytes_per_iter), float(drops), float(marks)
        )
        records.append(rec)
        if on_record is not None:
            on_record(rec)
    return records
