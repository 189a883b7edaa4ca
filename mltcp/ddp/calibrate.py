"""The simulator's compute of a torch-ddp job, measured: ``sim_compute_ms`` is the job's mean
iteration when it runs alone in the emulation, less its all-reduce at its path's rate.

The simulator models a DDP job as compute, then the ring all-reduce at line rate. With the job's
``gpu_ms`` as that compute it misses two things the emulation has, pulling opposite ways: DDP
all-reduces most buckets while backward still runs (the real iteration is shorter), and the ranks
spend CPU on every step (the optimizer, gloo's reductions, the kernel's TCP; it is longer). Both
are in the iteration of a job that has the link to itself, so one run of each job alone measures
them; what the simulator then predicts for the jobs together is what sharing the link adds.

Pure logic on scenario documents (the TOML as a dict); ``mltcp emulate calibrate`` runs the jobs.
"""

from __future__ import annotations

import copy

from mltcp.scenario import Job, Scenario


class CalibrationError(ValueError):
    """A measurement the simulator's model cannot take (named job and reason)."""


def allreduce_s(job: Job, sc: Scenario) -> float:
    """Seconds the job's all-reduce takes at the slowest rate on its path, with the link to itself."""
    return job.bytes_per_iter * 8 / min(sc.links[name].rate_bps for name in job.path)


def sim_compute_ms(job: Job, sc: Scenario, alone_s: float) -> float:
    """The compute that makes the simulator's job alone take ``alone_s`` per iteration."""
    net = allreduce_s(job, sc)
    if not alone_s > net:
        raise CalibrationError(
            f"job {job.name}: alone it took {alone_s:.3f} s per iteration, not more than its all-reduce "
            f"at line rate ({net:.3f} s): the measurement is not of this scenario's link"
        )
    return (alone_s - net) * 1e3


def spec_of(job: Job, sc: Scenario) -> tuple:
    """What decides a torch-ddp job's time alone: jobs with the same spec share one measurement."""
    d = job.extra["ddp"]
    return (d.model, d.ranks, d.gpu_ms, d.bucket_mb, d.pacing, tuple(sc.links[n].rate_bps for n in job.path))


def jobs_to_measure(sc: Scenario) -> dict[str, list[str]]:
    """The first job of each spec -> the names of every job with that spec (itself included)."""
    by_spec: dict[tuple, list[str]] = {}
    for job in sc.jobs:
        by_spec.setdefault(spec_of(job, sc), []).append(job.name)
    return {names[0]: names for names in by_spec.values()}


def alone_document(doc: dict, job_name: str) -> dict:
    """The scenario document with only ``job_name``, started at once."""
    out = copy.deepcopy(doc)
    out["jobs"] = [copy.deepcopy(t) for t in doc["jobs"] if t.get("name") == job_name]
    if not out["jobs"]:
        raise CalibrationError(f"no job named {job_name}")
    for key in ("start_offset_ms", "start_offset_s"):
        out["jobs"][0].pop(key, None)
    out["name"] = f"{doc.get('name', 'scenario')}-{job_name}-alone"
    return out


def calibrated_document(doc: dict, sc: Scenario, alone_s: dict[str, float]) -> dict:
    """``doc`` with ``sim_compute_ms`` on every torch-ddp job, from the measured ``alone_s`` of the
    job that represents its spec (:func:`jobs_to_measure`)."""
    by_name = {j.name: j for j in sc.jobs}
    compute: dict[str, float] = {}
    for measured, names in jobs_to_measure(sc).items():
        if measured not in alone_s:
            raise CalibrationError(f"job {measured}: no measurement of it alone")
        for name in names:
            compute[name] = sim_compute_ms(by_name[name], sc, alone_s[measured])
    out = copy.deepcopy(doc)
    for table in out["jobs"]:
        if table.get("name") in compute:
            table["sim_compute_ms"] = round(compute[table["name"]], 1)
    return out
