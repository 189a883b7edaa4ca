"""bench/studies/ns3_suite.py: the subset rule (deterministic, the fewest segments per directory),
the per-scenario arithmetic on hand-made runs, and one tiny run in both engines where ns-3 imports."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mltcp import suitegen
from mltcp.sim import ns3_engine
from mltcp.suite import InputError

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "studies" / "ns3_suite.py"
spec = importlib.util.spec_from_file_location("ns3_suite", SCRIPT)
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)


@pytest.fixture(scope="module")
def suites(tmp_path_factory):
    root = tmp_path_factory.mktemp("suites")
    a, b = root / "general", root / "compat"
    suitegen.generate(a, 6, 41, cc="reno")
    suitegen.generate(b, 6, 42, cc="reno", compatible=True)
    return a, b


def test_subset_is_the_fewest_segments_split_over_the_directories(suites):
    a, b = suites
    sub = study.select([a, b], 5)
    assert list(sub) == ["reno"] and sub == study.select([a, b], 5)  # deterministic
    picked = sub["reno"]
    assert [Path(e["path"]).parent for e in picked] == [a, a, a, b, b]  # the first directory takes the remainder
    for d, k in ((a, 3), (b, 2)):
        segs = sorted(study.segments_per_run(study.load_cut(f)) for f in d.glob("*.toml"))
        assert [e["segments"] for e in picked if Path(e["path"]).parent == d] == [round(x) for x in segs[:k]]
    # a cut to fewer iterations scales every job alike: the same scenarios, fewer segments
    cut = study.select([a, b], 5, iterations=8)
    assert [e["path"] for e in cut["reno"]] == [e["path"] for e in picked]
    assert all(c["segments"] < e["segments"] for c, e in zip(cut["reno"], picked))


def test_subset_refuses_bases_ns3_does_not_run(tmp_path):
    suitegen.generate(tmp_path / "d", 2, 1, cc="dctcp")
    with pytest.raises(InputError, match="ns-3"):
        study.select([tmp_path / "d"], 1)


def test_speedups_and_their_ratio_are_seed_means():
    def run(avg, p99, engaged=None):
        return {
            "avg": avg,
            "p99": p99,
            "p99_no_rto": p99,
            "rto_iters": 0,
            "overlap": 0.5,
            "drops": 1.0,
            "rtos": 0,
            "engaged": engaged,
            "wall_s": 0.1,
        }

    per_seed = [
        {
            "seed": s,
            "fast_base": run(1.0, 2.0),
            "fast_mltcp": run(0.8, 1.0),
            "ns3_base": run(1.1, 2.0),
            "ns3_mltcp": run(x, 2.0, [1, 0]),
        }
        for s, x in ((1, 1.0), (2, 1.2))
    ]
    row = study.aggregate({"path": "x.toml", "segments": 1, "rate_gbps": 0.1, "jobs": 2}, per_seed, 0.10)
    assert row["fast_speedup_avg"] == pytest.approx(1.25) and row["fast_speedup_p99"] == pytest.approx(2.0)
    assert row["ns3_speedup_avg"] == pytest.approx(1.0) and row["ns3_speedup_p99"] == pytest.approx(1.0)
    assert row["speedup_ratio_avg"] == pytest.approx(0.8) and not row["within_avg"]
    assert row["iter_ratio_base"] == pytest.approx(1 / 1.1) and row["ns3_engaged_at_end"] == [2, 4]
    assert row["speedup_ratio_p99_no_rto"] == pytest.approx(0.5) and row["fast_mltcp"]["overlap"] == 0.5
    s = study.summarize([row], 0.10)
    assert s["within_avg"] == 0 and s["ns3"]["avg_ge_0.98"] == 1 and s["ns3"]["p99_ge_0.95"] == 1


def test_list_prints_the_rule_and_runs_nothing(suites):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, suites), "--pick", "2", "--list"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "fewest data segments per run" in out.stdout and out.stdout.count("segments  ") == 2


@pytest.mark.skipif(not ns3_engine.available()[0], reason=ns3_engine.available()[1])
def test_one_scenario_few_iterations_in_both_engines(suites, tmp_path):
    rep = tmp_path / "r.json"
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(suites[1]), "--pick", "1", "--seeds", "1", "--iterations", "8"]
        + ["--json", str(rep)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert "[4/4]" in out.stderr and "within 10%" in out.stdout
    g = json.loads(rep.read_text())["groups"]["reno"]
    (row,) = g["rows"]
    assert row["seeds"] == [1] and g["summary"]["scenarios"] == 1
    assert row["ns3_engaged_at_end"][1] == row["jobs"]  # one flow per job, each reports its switch


def test_config_goes_into_the_mltcp_arm_only(suites, monkeypatch):
    f = sorted(suites[0].glob("*.toml"))[0]
    assert study.load_cut(f, config={"mltcp.above_bdp_gain": 0.5}).mltcp_params == {"above_bdp_gain": 0.5}
    assert study.load_cut(f).mltcp_params == {}
    seen = {}
    monkeypatch.setattr(study, "load_cut", lambda path, seed, iterations, config: seen.setdefault("c", config))
    with pytest.raises(AttributeError):  # the stub scenario stops the run right after loading
        study.one_run(f, 1, 8, "fast", "reno", None, None, {"mltcp.above_bdp_gain": 0.5})
    assert seen["c"] is None


def test_bad_config_json_exits_2(suites):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(suites[0]), "--config", "{not json", "--list"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "--config" in out.stderr
