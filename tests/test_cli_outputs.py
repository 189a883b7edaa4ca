"""CLI robustness (issue 12, item 4): workers die with their parent, outputs are written
atomically and their folders checked before a run, bad records files name the file."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mltcp import records as rec_io
from mltcp.records import IterationRecord, atomic_path, output_problem, read_csv, write_csv

CLI = [sys.executable, "-m", "mltcp.cli"]


def children(pid: int) -> set[int]:
    """Live (non-zombie) processes whose parent is ``pid``."""
    out = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.add(int(d.name))
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _long_scenario(tmp_path) -> Path:
    """two-jobs with 20,000 iterations: minutes of simulation, so the signal always lands while
    the workers run (the built-in scenarios now finish in about a second)."""
    src = (Path(__file__).resolve().parents[1] / "scenarios" / "two-jobs.toml").read_text()
    assert "iterations = 60\n" in src
    out = tmp_path / "long.toml"
    out.write_text(src.replace("iterations = 60\n", "iterations = 20000\n", 1))
    return out


def _start_compare(tmp_path):
    p = subprocess.Popen(
        [*CLI, "simulate", str(_long_scenario(tmp_path)), "--compare", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    end = time.monotonic() + 60
    kids = set()
    while time.monotonic() < end and p.poll() is None:
        kids = children(p.pid)
        if len(kids) >= 3:  # the progress manager and two simulation workers
            break
        time.sleep(0.1)
    assert len(kids) >= 3, f"workers did not start: {kids}"
    time.sleep(0.5)  # let the workers get into their simulations
    return p, children(p.pid)


def _wait_gone(pids, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(alive(k) for k in pids):
        time.sleep(0.05)
    return {k for k in pids if alive(k)}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_simulate_compare_workers_die_with_their_parent(sig, tmp_path):
    p, kids = _start_compare(tmp_path)
    try:
        p.send_signal(sig)
        p.wait(timeout=20)
        left = _wait_gone(kids)
        assert not left, f"orphaned workers after {sig.name}: {left}"
        if sig == signal.SIGTERM:
            assert p.returncode == 128 + signal.SIGTERM
            assert "terminated by signal SIGTERM" in p.stderr.read()
            assert "Traceback" not in p.stderr.read()
    finally:
        for k in kids | {p.pid}:  # our own processes only
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait(timeout=10)
        p.stdout.close()
        p.stderr.close()


# -- output folders checked before the run ---------------------------------------------------------


def test_simulate_out_under_a_file_fails_before_the_run(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    t0 = time.monotonic()
    p = subprocess.run(
        [*CLI, "simulate", "two-jobs", "--out", str(blocker / "sub"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "--out" in p.stderr and str(tmp_path / "file") in p.stderr
    assert p.stdout == "" and time.monotonic() - t0 < 20  # the simulation never ran


def test_traffic_send_out_in_a_missing_folder_fails_before_the_run(tmp_path):
    missing = tmp_path / "nope" / "records.csv"
    t0 = time.monotonic()
    # 127.0.0.1:9 has no receiver: the old code ran (and timed out) before looking at --out
    p = subprocess.run(
        [
            *CLI,
            "traffic",
            "send",
            "--to",
            "127.0.0.1:9",
            "--iterations",
            "1",
            "--timeout",
            "30s",
            "--out",
            str(missing),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "--out" in p.stderr and "does not exist" in p.stderr
    assert time.monotonic() - t0 < 20 and not missing.parent.exists()


def test_output_problem_cases(tmp_path):
    assert output_problem(tmp_path / "a.csv") is None
    assert "does not exist" in output_problem(tmp_path / "x" / "a.csv")
    assert "is a folder" in output_problem(tmp_path)
    assert output_problem(tmp_path / "new" / "deeper", is_dir=True) is None
    (tmp_path / "f").write_text("")
    assert "not a folder" in output_problem(tmp_path / "f", is_dir=True)
    assert "not a folder" in output_problem(tmp_path / "f" / "sub", is_dir=True)
    if os.geteuid() != 0:  # root may write anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        assert "not writable" in output_problem(ro / "a.csv")


# -- atomic writes -------------------------------------------------------------------------------------


def test_atomic_path_keeps_the_old_file_on_error(tmp_path):
    target = tmp_path / "r.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash mid-write")
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["r.csv"]


def test_write_csv_is_atomic_and_leaves_no_temp(tmp_path, monkeypatch):
    recs = [IterationRecord("a", i, i, i + 0.5, i + 1, 100.0) for i in range(3)]
    target = tmp_path / "r.csv"
    write_csv(recs, target)
    before = target.read_bytes()

    class Boom(Exception):
        pass

    def bad_writer(*a, **k):
        raise Boom()

    monkeypatch.setattr(rec_io.csv, "writer", bad_writer)
    with pytest.raises(Boom):
        write_csv(recs[:1], target)
    assert target.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["r.csv"]
    monkeypatch.undo()
    assert read_csv(target) == recs
    assert oct(target.stat().st_mode & 0o777) != oct(0o600)  # not mkstemp's private mode


def test_plots_are_written_atomically(tmp_path):
    from mltcp import plots

    recs = [IterationRecord("a", i, i, i + 0.5, i + 1, 100.0) for i in range(5)]
    out = plots.iteration_cdf([("x", recs)], tmp_path / "cdf.png", 1.0, "t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and os.listdir(tmp_path) == ["cdf.png"]


# -- records files that are not records ----------------------------------------------------------------


@pytest.mark.parametrize(
    "content,why",
    [
        (b"job,iteration,start\n\xff\xfe\x00bad", "not UTF-8"),
        ("job,iteration,start,comm_start,end,bytes,drops,marks\na,1,0,0,1,inf,0,0\n".encode(), "not finite"),
        (b"job,iteration\na,1\n", "missing column"),
        (b"job,iteration,start,comm_start,end,bytes,drops,marks\na,x,0,0,1,5,0,0\n", "bad iteration record"),
        (b"job,iteration,start,comm_start,end,bytes,drops,marks\na,1,0\x00,0,1,5,0,0\n", ""),
    ],
)
def test_bad_records_name_the_file(tmp_path, content, why):
    f = tmp_path / "recs.csv"
    f.write_bytes(content)
    with pytest.raises(ValueError) as e:
        read_csv(f)
    assert str(e.value).startswith(str(f)) and why in str(e.value)


def test_trace_export_of_a_bad_encoding_names_the_file(tmp_path):
    f = tmp_path / "recs.csv"
    f.write_bytes(b"job,iteration,start,comm_start,end,bytes\n\xe9\xff,1,0,0,1,5\n")
    p = subprocess.run(
        [*CLI, "traffic", "trace-export", str(f), str(tmp_path / "t.csv")], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2 and str(f) in p.stderr and "UTF-8" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "t.csv").exists()


def test_records_with_a_bom_load(tmp_path):
    f = tmp_path / "recs.csv"
    f.write_bytes(b"\xef\xbb\xbfjob,iteration,start,comm_start,end,bytes,drops,marks\na,1,0,0.5,1,5,0,0\n")
    assert read_csv(f)[0].job == "a"


SMALL = """name = "small"
iterations = 12
warmup_iterations = 2
[[links]]
name = "l"
rate_gbps = 1
delay_us = 20
buffer_pkts = 50
[[jobs]]
name = "a"
compute_ms = 2
bytes = 200_000
path = ["l"]
"""


def test_simulate_out_writes_everything_atomically(tmp_path):
    sc = tmp_path / "small.toml"
    sc.write_text(SMALL)
    out = tmp_path / "new" / "run"
    p = subprocess.run(
        [*CLI, "simulate", str(sc), "--out", str(out), "--json"], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr
    names = sorted(os.listdir(out))  # no temporary file left behind
    assert names == ["iteration_cdf.png", "records-reno.csv", "summary.json", "throughput.png"]
    assert json.loads((out / "summary.json").read_text())["scenario"] == "small"


def test_demo_says_which_mltcp_it_runs(tmp_path):
    """The demo runs scenarios/two-jobs.toml, which has no [mltcp] table: it says MLTCP runs the
    shipped default (with its F from mltcp/defaults.py). Given the tuned experiment
    (scenarios/tuned/two-jobs.toml) it says its MLTCP figures are that table's."""
    from mltcp import defaults

    shipped = subprocess.run([*CLI, "demo", "--out", str(tmp_path / "a")], capture_output=True, text=True, timeout=600)
    assert shipped.returncode == 0, shipped.stderr
    said = " ".join(shipped.stdout.split())
    assert "runs the shipped default" in said and f"F = {defaults.SLOPE:g} r + {defaults.INTERCEPT:g}" in said
    assert "tuned for it" not in said and "speedup" in said
    tuned = subprocess.run(
        [*CLI, "demo", "--scenario", "tuned/two-jobs", "--out", str(tmp_path / "b")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert tuned.returncode == 0, tuned.stderr
    said = " ".join(tuned.stdout.split())
    assert "[mltcp] table, tuned for it" in said and "runs the shipped default" not in said and "speedup" in said
