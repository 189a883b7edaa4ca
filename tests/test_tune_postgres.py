"""mltcp tune on a real PostgreSQL 15 server (started here on a private socket folder and port,
removed afterwards): two worker processes share one study with no lost or duplicate trial, and
the same trials evaluated in SQLite give the same Pareto front; a database restart in the middle
of a study is ridden out (calls retried) and the study finishes."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from _postgres import PostgresServer, missing_reason  # noqa: E402

pytestmark = pytest.mark.integration

TINY = (Path(__file__).parent / "data" / "tiny.toml").read_text()  # two jobs, 4 iterations


@pytest.fixture(scope="module")
def pg():
    why = missing_reason()
    if why:
        pytest.skip(why)
    server = PostgresServer()
    try:
        server.create()
        yield server
    finally:
        server.close()
    assert not server.root.exists()


@pytest.fixture
def tiny(tmp_path):
    p = tmp_path / "tiny.toml"
    p.write_text(TINY)
    return p


def _tune(*args, timeout=300):
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "tune", "run", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _trials(url: str, name: str):
    return optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)


@pytest.mark.timeout(900)
def test_two_workers_share_a_postgres_study_and_sqlite_gives_the_same_front(pg, tiny, tmp_path):
    n = 12
    r = _tune(
        tiny,
        "--seeds",
        "1,2",
        "--trials",
        n,
        "--workers",
        2,
        "--storage",
        pg.url,
        "--study",
        "shared",
        "--out",
        tmp_path / "pg",
        "--json",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    trials = _trials(pg.url, "shared")
    # no trial lost, none run twice: exactly n, numbered 0..n-1, all complete, one JSON file each
    assert sorted(t.number for t in trials) == list(range(n))
    assert {t.state.name for t in trials} == {"COMPLETE"}
    assert summary["trials"] == summary["complete"] == n
    assert sorted(p.name for p in (tmp_path / "pg" / "trials").iterdir()) == [f"trial-{i:05d}.json" for i in range(n)]
    assert len({json.dumps(t.params, sort_keys=True) for t in trials}) == n
    assert pg.query("select count(*) from trials where state = 'RUNNING'") == [(0,)]

    # the same configurations evaluated in SQLite, one worker: the same values, the same front
    sq = tmp_path / "sq"
    r = _tune(tiny, "--seeds", "1,2", "--trials", 0, "--study", "shared", "--out", sq, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    url = f"sqlite:///{sq / 'study.db'}"
    study = optuna.load_study(study_name="shared", storage=url)
    waiting = [t for t in study.trials if t.state.name == "WAITING"]
    assert len(waiting) == 1 and waiting[0].system_attrs["fixed_params"] == trials[0].params  # the reference: trial 0
    for t in sorted(trials, key=lambda t: t.number)[1:]:
        study.enqueue_trial(t.params)
    r = _tune("--trials", n, "--study", "shared", "--out", sq, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    sq_summary = json.loads(r.stdout.strip().splitlines()[-1])
    by_params = {json.dumps(t.params, sort_keys=True): t.values for t in _trials(url, "shared")}
    assert by_params == {json.dumps(t.params, sort_keys=True): t.values for t in trials}
    front = {json.dumps(p["params"], sort_keys=True): p["values"] for p in summary["pareto"]}
    sq_front = {json.dumps(p["params"], sort_keys=True): p["values"] for p in sq_summary["pareto"]}
    assert front and front == sq_front


@pytest.mark.timeout(900)
def test_a_database_restart_mid_study_is_ridden_out(pg, tiny, tmp_path):
    n = 40
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
            str(n),
            "--workers",
            "2",
            "--storage",
            pg.url,
            "--study",
            "restart",
            "--out",
            str(tmp_path / "o"),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, COLUMNS="200"),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 400  # (a first run compiles the simulator)
        while time.monotonic() < deadline and p.poll() is None:
            try:
                done = pg.query(
                    "select count(*) from trials t join studies s on s.study_id = t.study_id "
                    "where s.study_name = 'restart' and t.state = 'COMPLETE'"
                )[0][0]
            except Exception:  # the tables are not there yet
                done = 0
            if done >= 3:
                break
            time.sleep(0.1)
        assert p.poll() is None, "the study ended before the restart: " + p.stderr.read()[-2000:]
        assert done >= 3, "the study did not get going"
        pg.stop("fast")  # every connection is cut; the server is gone for a while
        time.sleep(4)
        pg.start()
        so, se = p.communicate(timeout=400)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
    assert p.returncode == 0, se[-3000:]
    assert "database unreachable" in se and "reachable again" in se  # the outage was seen and ridden out
    trials = _trials(pg.url, "restart")
    assert len(trials) == n, se[-6000:]
    assert sorted(t.number for t in trials) == list(range(n))
    states = [t.state.name for t in trials]
    assert "RUNNING" not in states and "WAITING" not in states
    for t in trials:  # a trial that did not complete says why
        assert t.state.name == "COMPLETE" or t.user_attrs.get("error") or t.system_attrs.get("fail_reason"), t
    assert states.count("COMPLETE") >= n - 2
    assert json.loads(so.strip().splitlines()[-1])["trials"] == n


@pytest.mark.timeout(300)
def test_a_worker_opening_the_storage_during_an_outage_waits_for_the_server(pg, capsys):
    """A study worker that starts while the server is down (spawned just as it restarts) waits for
    it and opens the storage; a first open (the parent's, a mistyped URL) fails at once instead."""
    import threading

    from mltcp.tune_storage import open_storage

    url = pg.url
    open_storage(url).remove_session()  # the tables exist: what a worker joins
    pg.stop("fast")
    restart = threading.Timer(3.0, pg.start)
    try:
        t0 = time.monotonic()
        with pytest.raises(Exception):
            open_storage(url)
        assert time.monotonic() - t0 < 30
        restart.start()
        t0 = time.monotonic()
        storage = open_storage(url, retry=True)
        waited = time.monotonic() - t0
    finally:
        if restart.is_alive() or restart.finished.is_set():
            restart.join()
        else:
            restart.cancel()
            pg.start()
    assert waited >= 2.5  # it waited for the server rather than failing
    assert storage.get_all_studies() is not None
    err = capsys.readouterr().err
    assert "database unreachable" in err and "reachable again" in err
