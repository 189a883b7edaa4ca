"""What the job peers inside emulated hosts share: JSON lines to the runner, the run's start epoch,
and the iteration loop (:func:`mltcp.traffic.driver.run_job`, with the scenario's compute jitter
and stragglers)."""
from __future__ import annotations

import json
import sys
import time

import typer

# The sender options of the compute-time model, the same in every peer (udp_peer, kernel_peer).
JITTER = typer.Option(0.0, help="std-dev of the compute time, fraction of --compute-s")
STRAGGLER_PROB = typer.Option(0.0, help="probability that an iteration's compute straggles")
STRAGGLER_DELAY_S = typer.Option(0.0, help="extra compute of a straggling iteration")
SEED = typer.Option(None, help="seed of the jitter/straggler draws")


def emit(rec: dict) -> None:
    """One JSON record per line on stdout, flushed (the runner reads it as it comes)."""
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()


def sync_t0(t0: float) -> float:
    """t0 < 0: announce readiness and take the run's start epoch from stdin (the runner sends it
    once every sender is set up, so slow start-ups cannot skew the jobs' offsets); t0 == 0: now."""
    if t0 >= 0:
        return t0 or time.time()
    emit({"type": "ready"})
    line = sys.stdin.readline()
    if not line.strip():
        raise SystemExit("peer: no start time on stdin")
    return float(line)


def check_send_mode(peer: str, iterations: int, nbytes: int, bulk_s: float) -> None:
    """Exactly one of iteration mode (with bytes) and bulk mode, else exit naming ``peer``."""
    if (iterations <= 0) == (bulk_s <= 0):
        raise SystemExit(f"{peer} send: give exactly one of --iterations N (with --bytes) or --bulk-s D")
    if iterations > 0 and nbytes <= 0:
        raise SystemExit(f"{peer} send: --bytes must be > 0")


def start_at(t0: float, start_offset_s: float) -> float:
    """The run's epoch (:func:`sync_t0`), after sleeping until this job's start ``t0 + start_offset_s``."""
    t0 = sync_t0(t0)
    wait = t0 + start_offset_s - time.time()
    if wait > 0:
        time.sleep(wait)
    return t0


def run_iterations(transport, job: str, iterations: int, nbytes: int, compute_s: float, t0: float,
                   jitter: float = 0.0, straggler_prob: float = 0.0, straggler_delay_s: float = 0.0,
                   seed: int | None = None) -> None:
    """The job's compute/communicate loop over ``transport`` (anything with ``send_iteration``),
    one ``iter`` JSON line per iteration, times in seconds since the wall-clock epoch ``t0``."""
    from mltcp.traffic.driver import JobSpec, run_job

    spec = JobSpec(job_id=0, compute_s=compute_s, bytes_per_iter=nbytes, jitter=jitter,
                   straggler_prob=straggler_prob, straggler_delay_s=straggler_delay_s, name=job, seed=seed)

    def out(r):
        emit({"type": "iter", "job": r.job, "iteration": r.iteration, "start": r.start,
              "comm_start": r.comm_start, "end": r.end, "bytes": r.bytes, "drops": r.drops, "marks": r.marks})

    run_job(spec, transport, iterations, clock=time.time, epoch=t0, on_record=out)
