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
    """What the driver needs to know about a job. Maps one to one onto :class:`mltcp.workload.Job`
    (see :meth:`from_job`), plus the peers its flows go to."""
    job_id: int
    compute_s: float
    bytes_per_iter: int
    peers: list = field(default_factory=list)
    jitter: float = 0.0             # std-dev of compute time, fraction of compute_s
    straggler_prob: float = 0.0
    straggler_delay_s: float = 0.0
    start_offset_s: float = 0.0
    name: str | None = None
    seed: int | None = None

    def __post_init__(self):
        for f in ("compute_s", "bytes_per_iter", "jitter", "straggler_prob", "straggler_delay_s", "start_offset_s"):
            v = getattr(self, f)
            if not v >= 0:
                raise ValueError(f"job {self.job_id}: {f} must be >= 0, got {v!r}")
        if self.straggler_prob > 1:
            raise ValueError(f"job {self.job_id}: straggler_prob must be <= 1, got {self.straggler_prob}")
        if not 0 <= self.job_id <= 0xFFFF:
            raise ValueError(f"job_id must fit the shim's 16 bits, got {self.job_id}")

    @property
    def label(self) -> str:
        return self.name or f"job{self.job_id}"

    @classmethod
    def from_job(cls, job: Job, job_id: int, peers=(), seed: int | None = None) -> "JobSpec":
        return cls(job_id=job_id, compute_s=job.compute_s, bytes_per_iter=int(job.bytes_per_iter),
                   peers=list(peers), jitter=job.jitter, straggler_prob=job.straggler_prob,
                   straggler_delay_s=job.straggler_delay_s, start_offset_s=job.start_offset_s,
                   name=job.name, seed=seed)

    def compute_times(self, n: int, rng: np.random.Generator | None = None) -> np.ndarray:
        rng = rng if rng is not None else np.random.default_rng(self.seed)
        job = Job(self.label, self.compute_s, self.bytes_per_iter, [], jitter=self.jitter,
                  straggler_prob=self.straggler_prob, straggler_delay_s=self.straggler_delay_s)
        return job.compute_times(rng, n)


def run_job(job: JobSpec, transport, iterations: int, clock=time.monotonic, sleep=time.sleep,
            epoch: float | None = None, rng: np.random.Generator | None = None,
            on_record=None) -> list[IterationRecord]:
    """Run ``iterations`` compute+communicate iterations; times in the records are
    ``clock() - epoch`` (epoch defaults to the clock when run_job starts)."""
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    t0 = clock() if epoch is None else epoch
    computes = job.compute_times(iterations, rng)
    if job.start_offset_s > 0:
        sleep(job.start_offset_s)
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
        rec = IterationRecord(job.label, i, start - t0, comm_start - t0, end - t0,
                              float(job.bytes_per_iter), float(drops), float(marks))
        records.append(rec)
        if on_record is not None:
            on_record(rec)
    return records
