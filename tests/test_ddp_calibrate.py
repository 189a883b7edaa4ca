"""The simulator's compute of torch-ddp jobs, measured (mltcp.ddp.calibrate, `mltcp emulate
calibrate`): pure logic on scenario documents, then one real run of ddp-tiny's job alone."""

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mltcp import scenario as scn
from mltcp import tomlfile
from mltcp.ddp.calibrate import (
    CalibrationError,
    alone_document,
    calibrated_document,
    jobs_to_measure,
    sim_compute_ms,
)
from mltcp.emulation.netns import have_mininet_prereqs
from mltcp.metrics import per_job_avg
from mltcp.sim.engine import simulate

ROOT = Path(__file__).resolve().parents[1]
TWO_JOBS = ROOT / "scenarios" / "ddp-two-jobs.toml"


def _doc(path: Path) -> dict:
    return tomlfile.loads(path.read_text())


def test_sim_compute_is_the_job_alone_less_its_allreduce_at_line_rate():
    sc = scn.load(str(TWO_JOBS))
    job = sc.jobs[0]  # ResNet-50, 2 ranks: 102 MB each way at 700 Mb/s
    allreduce = 4 * 25_557_032 * 8 / 0.7e9
    assert sim_compute_ms(job, sc, 2.485) == pytest.approx((2.485 - allreduce) * 1e3)
    with pytest.raises(CalibrationError, match="job A: alone it took 1.000 s"):
        sim_compute_ms(job, sc, 1.0)


def test_identical_jobs_share_one_measurement_and_others_get_their_own():
    doc = _doc(TWO_JOBS)
    assert jobs_to_measure(scn.from_dict(doc, "t")) == {"A": ["A", "B"]}
    doc["jobs"][1]["start_offset_ms"] = 300  # when a job starts does not change its time alone
    assert jobs_to_measure(scn.from_dict(doc, "t")) == {"A": ["A", "B"]}
    doc["jobs"][1]["gpu_ms"] = 2000
    assert jobs_to_measure(scn.from_dict(doc, "t")) == {"A": ["A"], "B": ["B"]}


def test_the_alone_document_has_the_one_job_started_at_once():
    doc = _doc(TWO_JOBS)
    doc["jobs"][1]["start_offset_ms"] = 300
    alone = alone_document(doc, "B")
    assert [j["name"] for j in alone["jobs"]] == ["B"] and "start_offset_ms" not in alone["jobs"][0]
    assert doc["jobs"][1]["start_offset_ms"] == 300  # the input is not changed
    with pytest.raises(CalibrationError, match="no job named C"):
        alone_document(doc, "C")


def test_the_simulated_job_alone_takes_the_measured_time():
    doc = _doc(TWO_JOBS)
    sc = scn.from_dict(doc, "t")
    out = calibrated_document(doc, sc, {"A": 2.485})
    want = (2.485 - 4 * 25_557_032 * 8 / 0.7e9) * 1e3
    assert [j["sim_compute_ms"] for j in out["jobs"]] == [pytest.approx(want, abs=0.1)] * 2
    assert "sim_compute_ms" not in doc["jobs"][0]
    alone = scn.from_dict(alone_document(out, "A"), "t")
    res = simulate(alone, "reno")
    assert per_job_avg(res.records, alone.warmup_iterations)["A"] == pytest.approx(2.485, rel=0.02)
    with pytest.raises(CalibrationError, match="job A: no measurement"):
        calibrated_document(doc, sc, {})


def _calibrate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "emulate", "calibrate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_calibrate_refuses_what_it_cannot_measure_exit_2(tmp_path):
    r = _calibrate("scenarios/two-jobs.toml", "--out", str(tmp_path / "x.toml"))
    assert r.returncode == 2 and "two-jobs.toml" in r.stderr and "torch-ddp" in r.stderr
    r = _calibrate("scenarios/ddp-tiny.toml", "--out", str(tmp_path / "no" / "x.toml"))
    assert r.returncode == 2 and "--out" in r.stderr
    r = _calibrate("scenarios/ddp-tiny.toml", "--out", str(tmp_path / "x.toml"), "--cc", "bbr")
    assert r.returncode == 2 and "--cc" in r.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.root
@pytest.mark.integration
def test_calibrate_runs_the_job_alone_and_writes_a_scenario_the_simulator_matches(tmp_path):
    pytest.importorskip("torch", reason="torch not installed (Debian: python3-torch; pip: mltcp[torch])")
    why = have_mininet_prereqs()
    if why:
        pytest.skip(f"DDP emulation: {why}")
    out = tmp_path / "tiny-calibrated.toml"
    r = _calibrate("scenarios/ddp-tiny.toml", "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(r.stdout)
    m = d["measured"]["A"]  # A and B are the same job: one run alone
    assert list(d["measured"]) == ["A"] and m["alone_s"] > m["allreduce_s"] > 0
    written = tomllib.loads(out.read_text())
    assert [j["sim_compute_ms"] for j in written["jobs"]] == [
        pytest.approx((m["alone_s"] - m["allreduce_s"]) * 1e3, abs=0.1)
    ] * 2
    assert out.read_text().startswith("# mltcp emulate calibrate scenarios/ddp-tiny.toml --cc reno")
    sc = scn.load(str(out))
    alone = scn.from_dict(alone_document(written, "A"), str(out))
    res = simulate(alone, "reno")
    assert per_job_avg(res.records, alone.warmup_iterations)["A"] == pytest.approx(m["alone_s"], rel=0.05)
    assert [j.start_offset_s for j in sc.jobs] == [0.0, 0.01]  # the rest of the scenario as it was


def test_the_written_scenario_loads_and_names_its_command_and_measurements():
    from mltcp.emulation.ddp_calibrate import calibrated_text, calibration_report

    doc = _doc(TWO_JOBS)
    measured = {"A": {"alone_s": 2.485, "p99_s": 2.6, "allreduce_s": 1.168}}
    out = calibrated_document(doc, scn.from_dict(doc, "t"), {"A": 2.485})
    text = calibrated_text("mltcp emulate calibrate ddp-two-jobs --cc reno", out, measured)
    assert text.splitlines()[:2] == [
        "# mltcp emulate calibrate ddp-two-jobs --cc reno",
        "# A: alone 2.485 s per iteration, all-reduce at line rate 1.168 s",
    ]
    assert tomllib.loads(text) == out  # comments aside, the document itself
    report = calibration_report("ddp-two-jobs", "x.toml", "reno", out, measured)
    assert report["jobs"]["B"] == {"gpu_ms": 1744, "sim_compute_ms": out["jobs"][1]["sim_compute_ms"]}
