"""What the job peers inside emulated hosts share: the sender's job document (one JSON object,
:func:`read_send_doc`), JSON lines to the runner, the run's start epoch, and the iteration loop
(:func:`mltcp.traffic.driver.run_job`, with the scenario's compute jitter and stragglers)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import typer

from mltcp.traffic.driver import JobSpec, run_job

# The command-line options both peers (kernel_peer, udp_peer) take.
SPEC_OPT = typer.Option(
    "-", "--spec", help="the job document (JSON, read_send_doc): a file, or - for one line of stdin"
)
T0_OPT = typer.Option(0.0, "--t0", help="epoch the run's times are relative to")
RUN_OPT = typer.Option("", "--run", help="run tag (only marks the process as part of a run)")

# The fields every sender document has (type, default; no default: required). A peer adds its own.
SEND_FIELDS: dict[str, tuple[type | tuple, object]] = {
    "spec": (dict, ...),  # mltcp.traffic.driver.JobSpec.to_dict()
    "host": (str, ...),  # the receiver's address
    "port": (int, ...),
    "cc": (str, "reno"),
    "t0": ((int, float), 0.0),  # epoch of the run (< 0: read it from stdin after a ready line)
    "nic_rate_mbps": ((int, float), 0.0),  # pace like a NIC of this rate (0: unpaced)
    "bulk_s": ((int, float), 0.0),  # bulk mode: send for this many seconds instead of iterating
}


def read_send_doc(source: str, peer: str, extra: dict | None = None) -> tuple[JobSpec, dict]:
    """The sender's job document from file ``source`` or, for ``-``, one line of stdin (the run's
    start epoch may follow on the next line): (its JobSpec, the other fields with defaults filled).
    A bad document exits naming ``peer``, the source and the field."""
    fields = dict(SEND_FIELDS, **(extra or {}))
    where = "stdin" if source == "-" else source
    try:
        text = sys.stdin.readline() if source == "-" else Path(source).read_text()
        doc = json.loads(text)
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"{peer} send: {where}: not a JSON job document: {e}") from None
    if not isinstance(doc, dict):
        raise SystemExit(f"{peer} send: {where}: expected a JSON object")
    unknown = sorted(set(doc) - set(fields))
    if unknown:
        raise SystemExit(f"{peer} send: {where}: unknown field(s) {', '.join(unknown)}")
    opts = {}
    for name, (typ, default) in fields.items():
        if name not in doc:
            if default is ...:
                raise SystemExit(f"{peer} send: {where}: field {name!r} is required")
            opts[name] = default
            continue
        v = doc[name]
        if (isinstance(v, bool) and typ is not bool) or not isinstance(v, typ):
            raise SystemExit(f"{peer} send: {where}: field {name!r}: wrong type {type(v).__name__}")
        opts[name] = v
    try:
        spec = JobSpec.from_dict(opts.pop("spec"))
    except ValueError as e:
        raise SystemExit(f"{peer} send: {where}: {e}") from None
    if opts["nic_rate_mbps"] < 0:
        raise SystemExit(f"{peer} send: {where}: nic_rate_mbps must be >= 0, got {opts['nic_rate_mbps']}")
    check_send_mode(peer, spec, opts["bulk_s"])
    return spec, opts


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


def check_send_mode(peer: str, spec: JobSpec, bulk_s: float) -> None:
    """Exactly one of iteration mode (with bytes) and bulk mode, else exit naming ``peer``."""
    if (spec.job.iterations <= 0) == (bulk_s <= 0):
        raise SystemExit(f"{peer} send: give exactly one of spec.job.iterations N (with bytes_per_iter) or bulk_s D")
    if spec.job.iterations > 0 and spec.bytes_per_iter <= 0:
        raise SystemExit(f"{peer} send: spec.job.bytes_per_iter must be > 0")


def start_at(t0: float, start_offset_s: float) -> float:
    """The run's epoch (:func:`sync_t0`), after sleeping until this job's start ``t0 + start_offset_s``."""
    t0 = sync_t0(t0)
    wait = t0 + start_offset_s - time.time()
    if wait > 0:
        time.sleep(wait)
    return t0


def run_iterations(transport, spec: JobSpec, t0: float) -> None:
    """The job's compute/communicate loop over ``transport`` (anything with ``send_iteration``),
    from the run's epoch (:func:`sync_t0` of ``t0``) plus the job's start offset; one ``iter`` JSON
    line per iteration, times in seconds since that epoch."""

    def out(r):
        emit({"type": "iter", **asdict(r)})  # the runner reads it back with IterationRecord.from_dict

    run_job(spec, transport, spec.job.iterations, clock=time.time, epoch=sync_t0(t0), on_record=out)
