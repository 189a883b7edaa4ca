"""`mltcp emulate calibrate`: each torch-ddp job of a scenario alone in the emulation, and the
scenario written back with the simulator's compute measured (mltcp.ddp.calibrate)."""

from __future__ import annotations

from typing import Callable

from mltcp import scenario
from mltcp.ddp.calibrate import alone_document, allreduce_s, calibrated_document, jobs_to_measure
from mltcp.records import IterationRecord

from .ddp import run_ddp_experiment


def measure_alone(
    doc: dict,
    sc: scenario.Scenario,
    cc: str,
    on_job: Callable[[str, int], Callable[[IterationRecord], None]] | None = None,
) -> dict[str, dict]:
    """For the first job of each spec: its mean iteration alone (after the warm-up) and its
    all-reduce at line rate, seconds (``sc``: ``doc`` checked). ``on_job(name, iterations)`` gives
    a per-record callback."""
    by_name = {j.name: j for j in sc.jobs}
    out = {}
    for name in jobs_to_measure(sc):
        alone = scenario.from_dict(alone_document(doc, name), sc.source)
        cb = on_job(name, alone.jobs[0].iterations) if on_job else None
        report = run_ddp_experiment(alone, cc, False, on_record=(lambda arm, r: cb(r)) if cb else None, with_sim=False)
        out[name] = {
            "alone_s": report["baseline"]["per_job_avg_iter_s"][name],
            "p99_s": report["baseline"]["p99_iter_s"],
            "allreduce_s": allreduce_s(by_name[name], sc),
        }
    return out


def calibrate(doc: dict, sc: scenario.Scenario, measured: dict[str, dict]) -> dict:
    """``doc`` (checked as ``sc``) with every torch-ddp job's ``sim_compute_ms`` from :func:`measure_alone`."""
    return calibrated_document(doc, sc, {k: v["alone_s"] for k, v in measured.items()})


def calibrated_text(command: str, calibrated: dict, measured: dict[str, dict]) -> str:
    """The calibrated scenario as TOML, headed by comments: the command and each measurement."""
    import tomli_w

    head = "".join(
        f"# {job}: alone {m['alone_s']:.3f} s per iteration, all-reduce at line rate {m['allreduce_s']:.3f} s\n"
        for job, m in measured.items()
    )
    return f"# {command}\n{head}" + tomli_w.dumps(calibrated, multiline_strings=True)


def calibration_report(name: str, out, cc: str, calibrated: dict, measured: dict[str, dict]) -> dict:
    """``mltcp emulate calibrate --json``: each job's GPU time and simulator compute, the runs alone."""
    jobs = {t["name"]: {"gpu_ms": t.get("gpu_ms"), "sim_compute_ms": t["sim_compute_ms"]} for t in calibrated["jobs"]}
    return {"scenario": name, "out": str(out), "cc": cc, "jobs": jobs, "measured": measured}
