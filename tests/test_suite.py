"""mltcp suite run: the comparison of arms (pure), the command end to end on a local Dask cluster
(records equal to the serial run, files written whole), bad input (exit 2, nothing written), an
unreachable scheduler (exit 1 in seconds), Ctrl-C (exit 130, no worker left); mltcp tune with
--scheduler runs its simulations on a separately started cluster."""

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mltcp import sweep
from mltcp.suite import InputError, compare_arms, parse_seeds

ENV = dict(os.environ, COLUMNS="200")


def _suite(*args, timeout=400):
    return subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "suite", "run", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
    )


def test_seeds_accept_ranges_and_lists():
    assert parse_seeds("1-5") == [1, 2, 3, 4, 5]
    assert parse_seeds("1-3,9") == [1, 2, 3, 9]
    for bad in ("x", "3-1", "1,1", "1-2,2"):
        with pytest.raises(InputError, match="--seeds"):
            parse_seeds(bad)


def _rec(scenario, seed, arm, avg, p99, drops, ok=True):
    return {
        "scenario": scenario,
        "source": scenario + ".toml",
        "seed": seed,
        "arm": arm,
        "ok": ok,
        "avg_iter_s": avg,
        "p99_iter_s": p99,
        "drops": drops,
        "ecn_marks": 0.0,
    }


def test_compare_arms_geo_means_worst_case_losses_and_drops():
    recs = [
        _rec("a", 1, "reno", 2.0, 4.0, 9),
        _rec("a", 1, "ml", 1.0, 1.0, 0),  # 2x, 4x, drops 1/10
        _rec("a", 2, "reno", 2.0, 4.0, 9),
        _rec("a", 2, "ml", 1.0, 1.0, 0),
        _rec("b", 1, "reno", 1.0, 1.0, 0),
        _rec("b", 1, "ml", 2.0, 1.0, 3),  # 0.5x, 1x, drops 4/1
        _rec("c", 1, "reno", 1.0, 1.0, 0),
        {**_rec("c", 1, "ml", 0, 0, 0, ok=False), "error": "stalled"},
    ]
    rep = compare_arms(recs, ["reno", "ml"])
    a = rep["arms"]["ml"]
    assert rep["failed"] == 1 and rep["failures"][0]["error"] == "stalled"
    assert a["compared_cases"] == 3  # the failed case is not compared
    assert a["speedup_avg"] == pytest.approx((2 * 2 * 0.5) ** (1 / 3))
    assert a["speedup_p99"] == pytest.approx((4 * 4 * 1) ** (1 / 3))
    assert a["worst_speedup_avg"] == 0.5 and a["worst_case"]["scenario"] == "b"
    assert a["loses_share"] == pytest.approx(1 / 2)  # scenario b of a, b
    assert a["signal_ratio"] == pytest.approx((0.1 * 0.1 * 4) ** (1 / 3))
    assert a["worst_signal_ratio"] == 4.0
    assert [s["scenario"] for s in a["per_scenario"]] == ["b", "a"]  # sorted by speedup


@pytest.mark.timeout(600)
def test_suite_runs_end_to_end_and_matches_the_serial_run(tmp_path):
    d = tmp_path / "suite"
    d.mkdir()
    for name in ("two-jobs", "three-jobs"):
        (d / f"{name}.toml").write_text((Path(sweep.resolve(name))).read_text())
    out = tmp_path / "out"
    r = _suite(
        d, "--arms", "reno,mltcp-reno", "--seeds", "1-2", "--iterations", 8, "--workers", 2, "--out", out, "--json"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    assert rep["runs"] == 8 and rep["cases"] == 4 and rep["failed"] == 0
    a = rep["arms"]["mltcp-reno"]
    assert a["compared_cases"] == 4 and math.isfinite(a["speedup_avg"])
    got = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    want = sweep.run_tasks(
        sweep.tasks_for(sorted(str(p) for p in d.glob("*.toml")), ["reno", "mltcp-reno"], [1, 2], 8),
        workers=1,
        progress=False,
    )
    assert sweep.records_equal(got, want)
    assert json.loads((out / "report.json").read_text())["arms"]["mltcp-reno"]["speedup_avg"] == pytest.approx(
        a["speedup_avg"]
    )
    assert (out / "speedup.png").stat().st_size > 1000
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary file left


@pytest.mark.parametrize(
    "args, names",
    [
        (["two-jobs", "--arms", "reno"], "--arms"),
        (["two-jobs", "--arms", "reno,vegas"], "vegas"),
        (["two-jobs", "--seeds", "2-1"], "--seeds"),
        (["no-such-scenario"], "no-such-scenario"),
        (["two-jobs", "--workers", "0"], "--workers"),
        (["two-jobs", "--scheduler", "localhost:8786"], "--scheduler"),
    ],
)
def test_bad_input_exits_2_naming_it_and_writes_nothing(tmp_path, args, names):
    out = tmp_path / "o"
    r = _suite(*args, "--out", out, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert names in r.stderr and r.stderr.startswith("error:")
    assert not out.exists()


def test_an_unreachable_scheduler_exits_1_within_seconds(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    r = _suite(
        "two-jobs", "--iterations", 4, "--scheduler", f"tcp://127.0.0.1:{port}", "--out", tmp_path / "o", timeout=120
    )
    assert r.returncode == 1, r.stderr
    assert f"tcp://127.0.0.1:{port}" in r.stderr and "no Dask scheduler answered" in r.stderr
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "o").exists()


def _descendants(pid: int) -> set[int]:
    kids, frontier = set(), {pid}
    while frontier:
        nxt = set()
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                if ppid in frontier and int(d.name) not in kids:
                    nxt.add(int(d.name))
        kids |= nxt
        frontier = nxt
    return kids


def _alive(pids) -> list[int]:
    out = []
    for k in pids:
        try:
            if Path(f"/proc/{k}/stat").read_text().split(")")[1].split()[0] != "Z":
                out.append(k)
        except OSError:
            pass
    return out


@pytest.mark.timeout(300)
def test_ctrl_c_cancels_the_sweep_and_leaves_no_worker(tmp_path):
    pytest.importorskip("distributed")
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mltcp.cli",
            "suite",
            "run",
            "two-jobs",
            "three-jobs",
            "--seeds",
            "1-300",
            "--iterations",
            "60",
            "--workers",
            "2",
            "--out",
            str(tmp_path / "o"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and p.poll() is None:
            seen |= _descendants(p.pid)
            if len(_alive(seen)) >= 2:  # the worker processes are up (their nannies run in the parent)
                time.sleep(3)
                seen |= _descendants(p.pid)
                break
            time.sleep(0.2)
        assert p.poll() is None, p.stderr.read()[-2000:]
        os.killpg(p.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
        so, se = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, se[-3000:]
    assert b"interrupted" in se
    deadline = time.monotonic() + 15
    while _alive(seen) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _alive(seen)
    for k in left:
        os.kill(k, signal.SIGKILL)
    assert not left, "worker processes outlived the interrupted sweep"
    assert not (tmp_path / "o").exists()  # nothing half-written


TINY = (Path(__file__).parent / "data" / "tiny.toml").read_text()  # two jobs, 4 iterations


@pytest.mark.timeout(600)
def test_tune_runs_its_simulations_on_a_dask_scheduler(tmp_path):
    pytest.importorskip("optuna")
    pytest.importorskip("distributed")
    from mltcp.dask_local import LoopbackCluster

    tiny = tmp_path / "tiny.toml"
    tiny.write_text(TINY)

    def tune(out, *extra):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "mltcp.cli",
                "tune",
                "run",
                str(tiny),
                "--seeds",
                "1,2",
                "--trials",
                "2",
                "--out",
                str(out),
                "--json",
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=400,
            env=ENV,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    local = tune(tmp_path / "local")
    with LoopbackCluster(workers=2) as c:
        remote = tune(tmp_path / "remote", "--scheduler", c.address)
        logs = "".join(p.read_text(errors="replace") for p in c.dir.glob("worker*.log"))
    t0 = json.loads((tmp_path / "local" / "trials" / "trial-00000.json").read_text())
    r0 = json.loads((tmp_path / "remote" / "trials" / "trial-00000.json").read_text())
    assert r0["values"] == t0["values"]  # the reference trial: same runs, same numbers
    assert [c["baseline"]["avg_iter_s"] for c in r0["cases"]] == [c["baseline"]["avg_iter_s"] for c in t0["cases"]]
    assert remote["complete"] == local["complete"] == 2
    assert "Traceback" not in logs
