"""mltcp tune: a tiny study runs end to end and resumes; the Pareto front is non-dominated; bad input
exits 2 naming the option with nothing written; Ctrl-C and a killed parent leave a resumable study
and no worker behind."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from typer.testing import CliRunner  # noqa: E402

from mltcp.tune import app  # noqa: E402
from mltcp.tune_eval import DIRECTIONS, dominates, pareto_front, pick  # noqa: E402
from mltcp.tune_space import SpaceError, apply, from_dict, load  # noqa: E402

TINY = (Path(__file__).parent / "data" / "tiny.toml").read_text()  # two jobs, 4 iterations


@pytest.fixture
def tiny(tmp_path):
    p = tmp_path / "tiny.toml"
    p.write_text(TINY)
    return p


def tune(*args):
    r = CliRunner().invoke(app, ["run", *map(str, args)])
    return r.exit_code, r.stdout, r.stderr if hasattr(r, "stderr") else ""


def _summary(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_tiny_study_runs_end_to_end_and_resumes(tiny, tmp_path):
    out = tmp_path / "o"
    code, so, se = tune(tiny, "--seeds", "1,2", "--trials", 2, "--out", out, "--json")
    assert code == 0, se
    s = _summary(so)
    assert s["trials"] == 2 and s["complete"] == 2
    assert s["reference_trial"] == 0  # the public defaults are trial 0
    assert s["training"] == ["tiny@seed1", "tiny@seed2"]
    for f in (
        "study.db",
        "trials.csv",
        "pareto.png",
        "summary.json",
        "trials/trial-00000.json",
        "trials/trial-00001.json",
    ):
        assert (out / f).exists(), f
    t0 = json.loads((out / "trials/trial-00000.json").read_text())
    assert [c["case"] for c in t0["cases"]] == ["tiny@seed1", "tiny@seed2"]
    c = t0["cases"][0]
    assert c["speedup_avg"] == pytest.approx(c["baseline"]["avg_iter_s"] / c["mltcp"]["avg_iter_s"])
    assert t0["params"] == {
        "mltcp.slope": 4.0,
        "mltcp.intercept": 0.25,
        "mltcp.idle_fraction": 0.9,
        "mltcp.min_idle_ms": 1.0,
    }
    rows = (out / "trials.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2  # header + trials x cases
    # resume: the same folder, no scenarios named; the study keeps its training set and baselines
    code, so, se = tune("--trials", 1, "--out", out, "--json", "--holdout", tiny)
    assert code == 0, se
    s = _summary(so)
    assert s["trials"] == 3
    assert [r["case"] for r in s["holdout"]["cases"]] == ["tiny@seed1", "tiny@seed2"]  # the study's seeds
    # the reported front is exactly the non-dominated completed trials
    st = optuna.load_study(study_name="reno-ai", storage=f"sqlite:///{out / 'study.db'}")
    done = [t for t in st.trials if t.state == optuna.trial.TrialState.COMPLETE]
    front = {p["number"] for p in s["pareto"]}
    for t in done:
        dominated = any(dominates(u.values, t.values) for u in done)
        assert (t.number in front) == (not dominated)


def test_storage_url_is_shared_and_the_training_set_is_checked(tiny, tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    code, so, se = tune(
        tiny, "--seeds", "3", "--trials", 1, "--storage", url, "--study", "s1", "--out", tmp_path / "a", "--json"
    )
    assert code == 0, se
    code, so, se = tune("--trials", 1, "--storage", url, "--study", "s1", "--out", tmp_path / "b", "--json")
    assert code == 0, se
    assert _summary(so)["trials"] == 2
    # another training set for the same study is refused, not silently mixed in
    code, so, se = tune(tiny, "--seeds", "4", "--trials", 1, "--storage", url, "--study", "s1", "--out", tmp_path / "c")
    assert code == 2 and "SCENARIOS" in se and "differs" in se
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "args, names",
    [
        (["no-such-scenario"], "no-such-scenario"),
        (["{tiny}", "--storage", "nosuchdb://x/y"], "--storage"),
        (["{tiny}", "--storage", "sqlite:////nonexistent-dir-mltcp/x.db"], "--storage"),
        (["{tiny}", "--workers", "0"], "--workers"),
        (["{tiny}", "--trials", "-1"], "--trials"),
        (["{tiny}", "--seeds", "1,x"], "--seeds"),
        (["{tiny}", "--space", "no-such-space"], "--space"),
        (["{tiny}", "--sampler", "grid"], "--sampler"),
        (["{tiny}", "--drops-objective", "mean"], "--drops-objective"),
        (["{tiny}", "--pick", "3"], "--pick"),
        (["{tiny}", "--holdout", "nope.toml"], "nope.toml"),
    ],
)
def test_bad_input_exits_2_naming_the_option_and_writes_nothing(tiny, tmp_path, args, names):
    out = tmp_path / "o"
    code, so, se = tune(*[a.format(tiny=tiny) for a in args], "--out", out)
    assert code == 2, (so, se)
    assert names in se and se.startswith("error:")
    assert not out.exists()


def test_a_space_file_with_a_bad_field_names_file_and_field(tiny, tmp_path):
    sp = tmp_path / "sp.toml"
    sp.write_text('name = "x"\nbase = "reno"\n[search]\n"mltcp.slope" = { low = 2.0, high = 1.0 }\n')
    code, so, se = tune(tiny, "--space", sp, "--out", tmp_path / "o")
    assert code == 2 and f"{sp}: search.mltcp.slope.high" in se
    sp.write_text('name = "x"\nbase = "reno"\n[fixed]\n"mltcp.no_such_knob" = 1.0\n')
    code, so, se = tune(tiny, "--space", sp, "--out", tmp_path / "o")
    assert code == 2 and "mltcp.no_such_knob" in se  # the scenario loader refuses it
    assert not (tmp_path / "o").exists()


def test_space_validation_and_apply():
    with pytest.raises(SpaceError, match="cc_params.cubic"):
        from_dict({"name": "x", "base": "reno", "fixed": {"cc_params.cubic.c": 1.0}})
    with pytest.raises(SpaceError, match="base"):
        from_dict({"name": "x", "base": "bbr"})
    s = load("dcqcn-full")
    assert s.cc == "mltcp-dcqcn" and s.signal == "ecn_marks"
    raw = {"name": "n", "mltcp": {"slope": 1.0}}
    got = apply(raw, {"mltcp.slope": 8.0, "cc_params.dcqcn.rai_mbps": 20.0})
    assert got == {"name": "n", "mltcp": {"slope": 8.0}, "cc_params": {"dcqcn": {"rai_mbps": 20.0}}}
    assert raw == {"name": "n", "mltcp": {"slope": 1.0}}  # the original is untouched


def test_every_builtin_space_loads_and_its_reference_is_a_valid_scenario():
    from mltcp import defaults
    from mltcp.tune_eval import make_cases
    from mltcp.tune_space import BUILTIN

    case = make_cases(["two-jobs"], [1])[0]
    for n in BUILTIN:
        s = load(n)
        sc = case.scenario({**s.fixed, **s.reference()})
        shipped = n.endswith("-default")  # the <base>-default spaces start from mltcp.defaults
        assert sc.mltcp_params.get("slope") == (defaults.SLOPE if shipped else 4.0)


def test_pareto_front_is_exactly_the_non_dominated_points():
    rng = random.Random(5)
    pts = [(rng.uniform(0.8, 1.5), rng.uniform(0.8, 2.0), rng.uniform(0.2, 3.0)) for _ in range(60)]
    pts += [pts[3]]  # a duplicate stays on the front with its twin
    front = set(pareto_front(pts, DIRECTIONS))
    assert front
    for i, p in enumerate(pts):
        dominated = any(dominates(q, p) for q in pts)
        assert (i in front) == (not dominated)
    assert (3 in front) == (len(pts) - 1 in front)
    # the pick prefers no more drops than the baseline
    ok = [i for i in front if pts[i][2] <= 1.0]
    chosen = pick(pts, sorted(front))
    assert chosen in front and (not ok or pts[chosen][2] <= 1.0)


# ---- processes: Ctrl-C and a dying parent ----------------------------------------------------------


def _children(pid: int) -> list[int]:
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"spawn_main" in (d / "cmdline").read_bytes():
                    kids.append(int(d.name))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def _start_study(tiny, out: Path):
    env = dict(os.environ, COLUMNS="200")
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mltcp.cli",
            "tune",
            "run",
            str(tiny),
            "--seeds",
            "1",
            "--trials",
            "200",
            "--workers",
            "2",
            "--out",
            str(out),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        kids = _children(p.pid)
        if len(kids) == 2 and (out / "study.db").exists() and _states(out).count("RUNNING") == 2:
            return p, kids  # both workers are inside a trial
        if p.poll() is not None:
            break
        time.sleep(0.2)
    p.kill()
    pytest.fail("the study did not start two workers: " + p.communicate()[1].decode()[-3000:])


def _gone(pids, timeout=15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(
            Path(f"/proc/{k}").exists() and "Z" not in Path(f"/proc/{k}/stat").read_text().split()[2:3]
            for k in pids
            if Path(f"/proc/{k}").exists()
        ):
            return True
        time.sleep(0.1)
    return False


def _states(out: Path):
    try:
        st = optuna.load_study(study_name="reno-ai", storage=f"sqlite:///{out / 'study.db'}")
    except KeyError:  # not created yet
        return []
    return [t.state.name for t in st.trials]


def test_ctrl_c_stops_workers_and_leaves_a_resumable_study(tiny, tmp_path):
    out = tmp_path / "o"
    p, kids = _start_study(tiny, out)
    try:
        os.killpg(p.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
        so, se = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, se[-2000:]
    assert b"interrupted" in se and b"resume" in se
    assert _gone(kids)
    states = _states(out)
    assert states and "RUNNING" not in states  # interrupted trials are recorded as failed
    assert json.loads(so.strip().splitlines()[-1])["trials"] == len(states)
    assert (out / "trials.csv").exists()


def test_workers_die_with_their_parent(tiny, tmp_path):
    out = tmp_path / "o"
    p, kids = _start_study(tiny, out)
    p.kill()  # SIGKILL: no chance to clean up
    p.wait()
    try:
        assert _gone(kids), "workers outlived their parent"
    finally:
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert "RUNNING" not in _states(out)  # each failed its running trial on the way out


def test_aggregate_drops_worst_case_or_geometric_mean():
    from mltcp.tune_eval import aggregate

    rows = [
        {"speedup_avg": 2.0, "speedup_p99": 1.0, "signal_ratio": 0.25},
        {"speedup_avg": 0.5, "speedup_p99": 4.0, "signal_ratio": 4.0},
    ]
    w, g = aggregate(rows, "worst"), aggregate(rows, "gmean")
    assert w["speedup_avg"] == pytest.approx(1.0) and w["speedup_p99"] == pytest.approx(2.0)
    assert w["signal_ratio"] == 4.0 and g["signal_ratio"] == pytest.approx(1.0)
    assert w["worst_speedup_avg"] == 0.5 and w["worst_speedup_p99"] == 1.0


def test_the_default_is_tuned_over_a_suite_folder_and_held_out_on_another(tmp_path):
    from mltcp import defaults, suitegen

    train = tmp_path / "train"
    held = tmp_path / "held"
    suitegen.generate(train, 2, seed=21, compatible=True)
    suitegen.generate(held, 1, seed=22, compatible=True)
    out = tmp_path / "o"
    code, so, se = tune(train, "--space", "reno-default", "--seeds", "1", "--iterations", "8", "--trials", 2,
                        "--out", out, "--holdout", held, "--json")  # fmt: skip
    assert code == 0, se
    s = _summary(so)
    assert s["training"] == [f"rand-reno-dumbbell-compatible-21-000{i}@seed1" for i in range(2)]  # the folder's files
    assert [r["case"] for r in s["holdout"]["cases"]] == ["rand-reno-dumbbell-compatible-22-0000@seed1"]
    t0 = json.loads((out / "trials/trial-00000.json").read_text())
    assert t0["params"]["mltcp.slope"] == defaults.SLOPE and t0["params"]["mltcp.intercept"] == defaults.INTERCEPT
    assert t0["params"]["mltcp.contended_above"] == defaults.CONTENDED_ABOVE  # trial 0: the default as shipped
    (tmp_path / "empty").mkdir()
    code, so, se = tune(tmp_path / "empty", "--out", tmp_path / "o2")
    assert code == 2 and "no scenario files" in se and not (tmp_path / "o2").exists()
