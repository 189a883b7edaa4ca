"""Many independent simulations, spread over processes or a Dask cluster, results in task order.

A :class:`Task` is one run: a scenario (a built-in name or a TOML path, or its tables inline), an
arm (:mod:`mltcp.arms`: "reno", "mltcp-reno", ...) and a seed that overrides the scenario's.
:func:`run_tasks` runs a list of them and returns one JSON-able record per task, in the order of
the tasks, whatever order they finished in: the arm's summary (:func:`mltcp.arms.run_arm`) with
the task's identity, or ``ok: false`` and the error for a task that failed.

Where the runs go:

* ``scheduler="tcp://HOST:PORT"``: an existing Dask cluster (``dask scheduler`` + ``dask worker``
  on each node); an unreachable scheduler raises :class:`SweepError` after ``connect_timeout`` s;
* otherwise, with ``dask.distributed`` installed (the ``[distributed]`` extra): a ``LocalCluster``
  of ``workers`` processes (default: one per core), one thread each, closed afterwards;
* without it: a ``ProcessPoolExecutor`` of as many processes;
* ``workers=1`` without a scheduler: in this process, one run after another.

A large sweep goes to Dask in batches of a few runs per task (:func:`batch_size`: up to
``MAX_BATCH`` while every worker still gets ``TASKS_PER_WORKER`` tasks), so the scheduler handles
fewer, longer tasks; records come back per run all the same.

The simulations are deterministic for a given scenario and seed, so every engine gives the same
records (only ``wall_s``, the time one run took, differs). A worker process that dies mid-run
(SIGKILL, out of memory) has its task re-run on another worker by Dask; a task that kills
``distributed.scheduler.allowed-failures`` + 1 workers is recorded as failed, and the sweep goes on.
Ctrl-C (KeyboardInterrupt) cancels what is queued, closes the cluster (its worker processes end
with it) and re-raises; one that Python dropped (raised inside a finalizer) is raised again once
the next result is in (:class:`CtrlCKept`).
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Sequence

from . import arms
from .scenario import Scenario, ScenarioError, from_dict, read_tables, resolve

CONNECT_TIMEOUT_S = 10.0
Progress = Callable[[int, int], None]


class SweepError(RuntimeError):
    """The sweep could not run at all (no scheduler at that address, ...): exit 1."""


@dataclass(frozen=True)
class Task:
    scenario: str  # built-in name or TOML path (with ``raw``: only where it came from)
    arm: str  # an arm of mltcp.arms
    seed: int | None = None  # overrides the scenario's seed
    iterations: int | None = None  # cut every job to this many iterations (warm-up to a quarter)
    raw: dict | None = field(default=None, compare=True, hash=False)  # the scenario's tables inline
    config: dict | None = field(default=None, compare=True, hash=False)  # MLTCP hook settings written in

    def as_dict(self) -> dict:
        return asdict(self)


# ---- one task ---------------------------------------------------------------------------------------


def scenario_tables(task: Task) -> dict:
    """The scenario's TOML tables with the task's seed, iteration cut and configuration applied."""
    if task.raw is not None:
        raw = dict(task.raw)
    else:
        raw, src = read_tables(task.scenario)
        from_dict(raw, src)  # any error names the file and the field
    if task.iterations is not None:
        raw = cut_iterations(raw, task.iterations)
    if task.seed is not None:
        raw["seed"] = int(task.seed)
    if task.config:
        from .tune_space import apply

        raw = apply(raw, task.config)
    return raw


def cut_iterations(raw: dict, iterations: int, warmup: int | None = None) -> dict:
    """Every job cut to ``iterations``; the warm-up to ``warmup`` or at most a quarter of them."""
    raw = dict(raw, iterations=int(iterations))
    raw["jobs"] = [
        {k: v for k, v in j.items() if k != "iterations"} if isinstance(j, dict) else j for j in raw.get("jobs", [])
    ]
    raw["warmup_iterations"] = (
        int(warmup) if warmup is not None else min(int(raw.get("warmup_iterations", 10)), int(iterations) // 4)
    )
    return raw


def build(task: Task) -> Scenario:
    src = str(resolve(task.scenario)) if task.raw is None else task.scenario
    return from_dict(scenario_tables(task), src)


IDENTITY = ("scenario", "source", "arm", "seed", "iterations_cut", "ok", "error")


def summary_of(record: dict) -> dict:
    """The arm's own summary in a record (without the task's identity)."""
    return {k: v for k, v in record.items() if k not in IDENTITY}


def identity(task: Task, sc: Scenario | None = None) -> dict:
    return {
        "scenario": sc.name if sc is not None else task.scenario,
        "source": sc.source if sc is not None else task.scenario,
        "arm": task.arm,
        "seed": task.seed if task.seed is not None else (sc.seed if sc is not None else None),
        "iterations_cut": task.iterations,
    }


def run_task(task: Task, progress=None) -> dict:
    """Run one task here: its record (``ok`` false with the error if the run failed).
    ``progress(sim_t, fraction)`` is called now and then (it may raise to abandon the run)."""
    sc = build(task)
    try:
        return {**identity(task, sc), "ok": True, **arms.run_arm(sc, task.arm, progress)}
    except (RuntimeError, ValueError, ArithmeticError) as e:  # a run that stalled or diverged
        return failed(task, f"{type(e).__name__}: {e}", sc)


def failed(task: Task, why: str, sc: Scenario | None = None) -> dict:
    return {**identity(task, sc), "ok": False, "error": why}


def _run_payload(d: dict) -> dict:
    """What a worker runs: the task travels as a plain dict (small, picklable by any engine)."""
    return run_task(Task(**d))


def _run_batch(ds: list[dict]) -> list[dict]:
    """A Dask task of several runs, one after another on one worker (fewer, longer tasks)."""
    return [_run_payload(d) for d in ds]


MAX_BATCH = 4  # runs per Dask task at most (a 0.2 s run: 0.8 s a task)
TASKS_PER_WORKER = 50  # batch only where every worker still gets at least this many tasks


def batch_size(runs: int, workers: int) -> int:
    """Runs per Dask task: 1 for a small sweep; up to MAX_BATCH while each worker keeps
    TASKS_PER_WORKER tasks, so the scheduler handles fewer messages and the tail stays short."""
    return max(1, min(MAX_BATCH, runs // (max(1, workers) * TASKS_PER_WORKER)))


def check(tasks: Sequence[Task]) -> None:
    """Every arm known and every scenario valid (each distinct one built once): else ScenarioError
    (the file and field named) or ValueError (the arm). Nothing runs before this passes."""
    seen = set()
    for t in tasks:
        arms.check(t.arm)
        key = (t.scenario, t.seed, t.iterations, repr(t.raw), repr(t.config))
        if key not in seen:
            seen.add(key)
            build(t)


def comparable(record: dict) -> dict:
    """A record without what differs from run to run (the wall time): equal for equal runs."""
    return {k: v for k, v in record.items() if k != "wall_s"}


# ---- many tasks -------------------------------------------------------------------------------------


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def have_dask() -> bool:
    try:
        import distributed  # noqa: F401

        return True
    except ImportError:
        return False


def run_tasks(
    tasks: Iterable[Task],
    scheduler: str | None = None,
    workers: int | None = None,
    progress: bool | Progress = True,
    engine: str | None = None,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    checked: bool = False,
    check_in: Callable[..., None] | None = None,
    batch: int | None = None,
) -> list[dict]:
    """Run the tasks; one record per task, in task order.

    ``engine``: "dask", "processes" or "serial" to force one (default: as the module says).
    ``progress``: True for a progress bar on stderr, False for none, or a function (done, total).
    ``checked``: the caller already ran :func:`check` on these tasks. ``check_in(sim_t, fraction)``:
    called now and then inside each run of the serial engine (it may raise to abandon the sweep).
    ``batch``: runs per Dask task (default :func:`batch_size`; a cluster's worker count where known)."""
    tasks = list(tasks)
    if not checked:
        check(tasks)
    if not tasks:
        return []
    n = workers or default_workers()
    if engine is None:
        engine = (
            "dask" if scheduler else "serial" if n == 1 or len(tasks) == 1 else "dask" if have_dask() else "processes"
        )
    if scheduler and engine != "dask":
        raise ValueError("a scheduler address needs the dask engine")
    payloads = [t.as_dict() for t in tasks]
    with _progress_of(progress, len(tasks)) as tick:
        if engine == "serial":
            out = []
            for t in tasks:
                out.append(run_task(t, check_in))
                tick()
            return out
        if engine == "processes":
            return _run_processes(tasks, payloads, n, tick)
        with CtrlCKept() as ctrl_c:
            return _run_dask(tasks, payloads, scheduler, n, tick, connect_timeout, batch, ctrl_c.check)


def _batches(count: int, size: int) -> list[range]:
    return [range(i, min(i + size, count)) for i in range(0, count, size)]


class CtrlCKept:
    """While active in the main thread, SIGINT raises KeyboardInterrupt as Python's own handler does
    and is also kept, so :meth:`check` raises it again: a KeyboardInterrupt raised inside a
    finalizer (Dask's client runs weakref callbacks) is printed as "Exception ignored" and lost,
    and the sweep would run on. A handler someone else installed is left alone."""

    def __init__(self):
        self.seen = False
        self._installed = False

    def _on_sigint(self, *_):
        self.seen = True
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.seen:
            raise KeyboardInterrupt

    def __enter__(self):
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True
        return self

    def __exit__(self, *exc):
        if self._installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self._installed = False


def _run_dask(tasks, payloads, scheduler, n, tick, connect_timeout, batch=None, interrupted=lambda: None) -> list[dict]:
    """``interrupted()`` is called after each result (it raises KeyboardInterrupt to stop)."""
    import logging

    from distributed import Client, LocalCluster, as_completed
    from distributed.scheduler import KilledWorker

    cluster = client = None
    futures: list = []
    try:
        if scheduler:
            client = _client_of(scheduler, connect_timeout)
        else:
            cluster = LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.ERROR,
            )
            client = Client(cluster)
        if batch is None:
            batch = batch_size(len(payloads), len(client.scheduler_info(n_workers=-1).get("workers", {})) or n)
        groups = _batches(len(payloads), batch)
        run = uuid.uuid4().hex[:8]
        keys = [f"mltcp-task-{run}-{g.start}" for g in groups]
        futures = client.map(_run_batch, [[payloads[i] for i in g] for g in groups], key=keys, pure=False)
        index = {f.key: g for f, g in zip(futures, groups)}
        out: list[dict | None] = [None] * len(payloads)
        for fut in as_completed(futures):
            g = index[fut.key]
            try:
                for i, rec in zip(g, fut.result()):
                    out[i] = rec
            except KilledWorker as e:
                why = f"KilledWorker: every worker process that ran this task died ({str(e).splitlines()[0]})"
                for i in g:
                    out[i] = failed(tasks[i], why)
            except Exception as e:  # raised by the worker outside the simulation
                for i in g:
                    out[i] = failed(tasks[i], f"{type(e).__name__}: {e}")
            fut.release()
            for _ in g:
                tick()
            interrupted()
        return out
    finally:
        if client is not None and futures:
            try:
                client.cancel(futures)
            except Exception:
                pass
        if cluster is not None:
            if client is not None:
                client.close()
            cluster.close()


_CLIENTS: dict = {}


def _client_of(scheduler: str, connect_timeout: float):
    """One client per scheduler address for this process (a tuning worker submits every trial's
    runs through it), closed at exit."""
    from distributed import Client

    c = _CLIENTS.get(scheduler)
    if c is not None and c.status == "running":
        return c
    try:
        c = Client(scheduler, timeout=connect_timeout)
    except (OSError, TimeoutError) as e:
        raise SweepError(
            f"--scheduler {scheduler}: no Dask scheduler answered within {connect_timeout:g} s "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        ) from None
    if not _CLIENTS:
        import atexit

        atexit.register(close_clients)
    _CLIENTS[scheduler] = c
    return c


def close_clients() -> None:
    while _CLIENTS:
        _, c = _CLIENTS.popitem()
        try:
            c.close()
        except Exception:
            pass


def _die_with_parent(parent: int) -> None:
    """Pool worker: SIGKILL when the parent dies (Linux), Ctrl-C left to the parent."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getppid() != parent:
        os._exit(1)


def _run_processes(tasks, payloads, n, tick) -> list[dict]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(
        max_workers=min(n, len(payloads)),
        mp_context=mp.get_context("fork"),
        initializer=_die_with_parent,
        initargs=(os.getpid(),),
    )
    try:
        futs = {pool.submit(_run_payload, p): i for i, p in enumerate(payloads)}
        out: list[dict | None] = [None] * len(payloads)
        for f in as_completed(futs):
            i = futs[f]
            try:
                out[i] = f.result()
            except BrokenProcessPool as e:  # a worker died: the pool cannot go on; the rest fail
                out[i] = failed(tasks[i], f"BrokenProcessPool: {e}")
            tick()
        pool.shutdown()
        return out
    except BaseException:
        for p in list(getattr(pool, "_processes", {}).values()):
            p.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        raise


class _progress_of:
    """A context giving ``tick()``: a rich bar on stderr, a caller's function, or nothing."""

    def __init__(self, progress: bool | Progress, total: int):
        self.progress, self.total, self.done, self.bar = progress, total, 0, None

    def __enter__(self):
        if self.progress is True:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn
            from .console import err

            self.bar = Bar(
                TextColumn("runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err, transient=True
            )
            self.bar.__enter__()
            self.task = self.bar.add_task("runs", total=self.total)
        return self.tick

    def tick(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)
        elif callable(self.progress):
            self.progress(self.done, self.total)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)
        return False


def tasks_for(
    scenarios: Sequence[str], arms_: Sequence[str], seeds: Sequence[int | None] = (None,), iterations: int | None = None
) -> list[Task]:
    """The sweep of every scenario x seed x arm, in that nesting (arms of one case side by side)."""
    return [Task(s, a, seed, iterations) for s in scenarios for seed in seeds for a in arms_]


def records_equal(a: Sequence[dict], b: Sequence[dict]) -> bool:
    return [comparable(r) for r in a] == [comparable(r) for r in b]


__all__ = [
    "Task",
    "SweepError",
    "run_tasks",
    "run_task",
    "tasks_for",
    "check",
    "comparable",
    "records_equal",
    "cut_iterations",
    "scenario_tables",
    "have_dask",
    "default_workers",
    "ScenarioError",
]
