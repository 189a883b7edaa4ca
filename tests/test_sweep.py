"""mltcp.sweep: every engine (in process, a process pool, an embedded Dask LocalCluster, a separately
started scheduler + 2 workers over TCP loopback) gives the serial run's records in task order; a
SIGKILLed worker's task re-runs and the sweep finishes; an unreachable scheduler fails in seconds;
numba's cache serves the worker processes (nothing recompiled)."""

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from mltcp import arms, sweep
from mltcp.scenario import ScenarioError

distributed = pytest.importorskip("distributed")

from mltcp.dask_local import LoopbackCluster  # noqa: E402

SMALL = sweep.tasks_for(["two-jobs", "three-jobs"], ["reno", "mltcp-reno"], [1, 2], iterations=8)


@pytest.fixture(scope="module")
def serial():
    return sweep.run_tasks(SMALL, workers=1, progress=False)


def test_tasks_nest_scenario_seed_arm_and_records_follow_task_order(serial):
    assert [(t.scenario, t.seed, t.arm) for t in SMALL][:4] == [
        ("two-jobs", 1, "reno"),
        ("two-jobs", 1, "mltcp-reno"),
        ("two-jobs", 2, "reno"),
        ("two-jobs", 2, "mltcp-reno"),
    ]
    assert [(r["scenario"], r["seed"], r["arm"]) for r in serial] == [(t.scenario, t.seed, t.arm) for t in SMALL]
    assert all(r["ok"] and r["cc"] == r["arm"] and r["iterations_cut"] == 8 for r in serial)
    # the seed reaches the simulation: two seeds of one scenario and arm are not the same run
    assert sweep.comparable(serial[0]) != sweep.comparable(serial[2])


@pytest.mark.parametrize("engine", ["processes", "dask"])
def test_every_engine_gives_the_serial_records(serial, engine):
    got = sweep.run_tasks(SMALL, workers=2, engine=engine, progress=False)
    assert sweep.records_equal(got, serial)


def test_batched_dask_tasks_give_the_serial_records_and_tick_per_run(serial):
    seen = []
    got = sweep.run_tasks(SMALL, workers=2, engine="dask", batch=3, progress=lambda d, t: seen.append(d))
    assert sweep.records_equal(got, serial)  # 8 runs in tasks of 3, 3 and 2
    assert seen == list(range(1, len(SMALL) + 1))


def test_batch_size_grows_only_where_every_worker_keeps_many_tasks():
    assert sweep.batch_size(40, 2) == 1
    assert sweep.batch_size(2 * sweep.TASKS_PER_WORKER * 2, 2) == 2
    assert sweep.batch_size(1000, 2) == sweep.MAX_BATCH
    assert sweep.batch_size(1000, 64) == 1


def test_progress_function_sees_every_task(serial):
    seen = []
    sweep.run_tasks(SMALL[:3], workers=1, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_bad_tasks_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="unknown arm 'vegas'"):
        sweep.run_tasks([sweep.Task("two-jobs", "vegas")], workers=1, progress=False)
    bad = tmp_path / "bad.toml"
    bad.write_text("iterations = 'many'\n")
    with pytest.raises(ScenarioError, match="bad.toml"):
        sweep.check([sweep.Task(str(bad), "reno")])


def test_arm_registry_is_open():
    assert {"reno", "mltcp-reno", "cubic", "mltcp-dcqcn"} <= set(arms.ARMS)
    with pytest.raises(ValueError):
        arms.register("reno", lambda sc: {})


@pytest.mark.timeout(240)
def test_a_separate_scheduler_and_two_workers_over_tcp_give_the_same_records(serial):
    with LoopbackCluster(workers=2) as c:
        assert c.address.startswith("tcp://127.0.0.1:")
        got = sweep.run_tasks(SMALL, scheduler=c.address, progress=False)
        sweep.close_clients()
        assert len(set(c.worker_pids().values())) == 2
    assert sweep.records_equal(got, serial)


def _kill_the_busy_worker(address: str, pids: dict, killed: list, stop: threading.Event) -> None:
    """Wait until a worker is inside a task, then SIGKILL that worker's process."""
    from distributed import Client

    with Client(address, timeout=10) as c:
        while not stop.is_set():
            busy = [w for w, keys in c.processing().items() if keys]
            if busy:
                time.sleep(0.3)  # well inside the run (each takes ~1 s)
                os.kill(pids[busy[0]], signal.SIGKILL)
                killed.append(pids[busy[0]])
                return
            time.sleep(0.05)


def _sweep_killing_one_worker(cluster, tasks):
    pids, killed, stop = cluster.worker_pids(), [], threading.Event()
    killer = threading.Thread(target=_kill_the_busy_worker, args=(cluster.address, pids, killed, stop), daemon=True)
    killer.start()
    try:
        got = sweep.run_tasks(tasks, scheduler=cluster.address, progress=False)
    finally:
        stop.set()
        killer.join(10)
        sweep.close_clients()
    assert killed, "no worker was seen running a task"
    return got


@pytest.mark.timeout(300)
def test_a_task_whose_worker_dies_past_the_allowed_failures_is_recorded_failed_and_the_sweep_goes_on():
    tasks = sweep.tasks_for(["two-jobs"], ["reno", "mltcp-reno"], [1], iterations=60)
    want = sweep.run_tasks(tasks, workers=1, progress=False)
    with LoopbackCluster(workers=2, env={"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}) as c:
        got = _sweep_killing_one_worker(c, tasks)
    bad = [r for r in got if not r["ok"]]
    assert len(bad) == 1 and bad[0]["error"].startswith("KilledWorker")
    assert (bad[0]["scenario"], bad[0]["arm"], bad[0]["seed"]) in [(t.scenario, t.arm, t.seed) for t in tasks]
    assert [sweep.comparable(r) for r in got if r["ok"]] == [sweep.comparable(w) for w, r in zip(want, got) if r["ok"]]


@pytest.mark.timeout(300)
def test_a_sigkilled_worker_s_task_reruns_and_the_sweep_finishes():
    tasks = sweep.tasks_for(["two-jobs"], ["reno", "mltcp-reno"], [1], iterations=60)
    want = sweep.run_tasks(tasks, workers=1, progress=False)
    with LoopbackCluster(workers=2) as c:
        got = _sweep_killing_one_worker(c, tasks)
    assert all(r["ok"] for r in got)
    assert sweep.records_equal(got, want)


def test_an_unreachable_scheduler_fails_within_seconds():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(sweep.SweepError, match=f"tcp://127.0.0.1:{port}.*no Dask scheduler answered within 2 s"):
        sweep.run_tasks(SMALL[:1], scheduler=f"tcp://127.0.0.1:{port}", connect_timeout=2, progress=False)
    assert time.monotonic() - t0 < 30


def _cache_files() -> dict[Path, int]:
    import numba

    root = Path(numba.config.CACHE_DIR)
    return {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


@pytest.mark.timeout(240)
def test_worker_processes_load_numba_s_cache_instead_of_compiling():
    sweep.run_tasks(SMALL[:2], workers=1, progress=False)  # this process: compiled (or loaded) once
    before = _cache_files()
    assert any(p.suffix == ".nbc" for p in before), "numba wrote no cache"
    sweep.run_tasks(SMALL[:4], workers=2, engine="dask", progress=False)  # fresh spawned worker processes
    assert _cache_files() == before, "a worker process compiled afresh instead of loading the cache"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped Ctrl-C
def test_a_ctrl_c_that_python_drops_in_a_finalizer_is_raised_at_the_next_check():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # a background start inherits SIG_IGN
    try:
        _drop_a_ctrl_c_in_a_finalizer()
    finally:
        signal.signal(signal.SIGINT, old)


def _drop_a_ctrl_c_in_a_finalizer():
    import weakref

    class Thing:
        pass

    with sweep.CtrlCKept() as ctrl_c:
        t = Thing()
        weakref.finalize(t, os.kill, os.getpid(), signal.SIGINT)  # Ctrl-C lands inside a finalizer
        del t  # ...Python prints "Exception ignored" and goes on
        for _ in range(100):
            sum(range(10))  # signal handlers run between bytecodes
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.check()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Python's own handler is back


def test_ctrl_c_kept_leaves_a_handler_someone_else_installed():
    def mine(*_):
        pass

    old = signal.signal(signal.SIGINT, mine)
    try:
        with sweep.CtrlCKept() as ctrl_c:
            assert signal.getsignal(signal.SIGINT) is mine
            ctrl_c.check()  # nothing seen: no exception
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, old)
