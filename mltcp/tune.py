"""`mltcp tune`: search MLTCP's parameters with Optuna over a training set of scenarios.

Multi-objective (maximise the avg and p99 iteration-time speedups over the base algorithm,
minimise drops -- ECN marks for DCQCN -- relative to it; geometric means over the training cases,
:mod:`mltcp.tune_eval`), over one named configuration space of the MLTCP hook
(:mod:`mltcp.tune_space`). The study lives in Optuna storage: by default a SQLite file in the
output folder, or any Optuna RDB URL (``--storage``, e.g. PostgreSQL) that workers on many machines
share; calls are retried while the database is unreachable (:mod:`mltcp.tune_storage`). The
simulations (baselines, each trial's cases, the hold-out) run through :func:`mltcp.sweep.run_tasks`:
in the trial's process, or on a Dask cluster with ``--scheduler``. The
study remembers its space and training cases (with the scenarios' full text), so rerunning the
command, or ``mltcp tune run --storage URL --study NAME`` on another machine, adds trials to the
same study. Each trial keeps its per-case results (Optuna user attrs, ``trials/trial-N.json``,
``trials.csv``); the Pareto front is printed and plotted (``pareto.png``); ``--holdout`` runs the
chosen configuration on scenarios the tuner never saw.
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple, Optional

import optuna
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.markup import escape
from rich.table import Table

from . import sweep
from .console import err, error_exit, out
from .scenario import ScenarioError
from .tune_eval import (
    DIRECTIONS,
    OBJECTIVES,
    SIGNAL_AGGREGATES,
    Case,
    aggregate,
    check_space,
    make_cases,
    pareto_front,
    pick,
    score,
)
from .tune_storage import GRACE_S, HEARTBEAT_S  # noqa: F401  (re-exported: the heartbeat settings)
from .tune_storage import open_storage as _open_rdb
from .tune_space import BUILTIN, Space, SpaceError
from .tune_space import from_dict as space_from_dict
from .tune_space import load as load_space

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Tune MLTCP's parameters with Optuna over a training set of scenarios.",
)

SPEC_ATTR = "mltcp_tune_spec"
BASELINE_ATTR = "baseline:"
SAMPLERS = ("tpe", "nsga2", "random")
DEFAULT_SPACE = "reno-ai"
DEFAULT_SEEDS = [1, 2, 3]


class InputError(Exception):
    """Bad input: the message names the option; exit 2, nothing written."""


# ---- storage and the study's own description --------------------------------------------------------


def open_storage(url: str, retry: bool = False):
    try:
        return _open_rdb(url, retry)
    except Exception as e:  # sqlalchemy's URL, driver or connection errors
        raise InputError(
            f"--storage: cannot open {url!r}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from None


def study_exists(storage, name: str) -> bool:
    try:
        storage.get_study_id_from_name(name)
        return True
    except KeyError:
        return False


def make_sampler(name: str, seed: int | None = None):
    if name == "tpe":
        return optuna.samplers.TPESampler(multivariate=True, constant_liar=True, seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def spec_of(study) -> dict | None:
    return study.user_attrs.get(SPEC_ATTR)


def load_spec(spec: dict) -> tuple[Space, list[Case]]:
    return space_from_dict(spec["space"], spec.get("space_source", "<study>")), [
        Case.from_json(c) for c in spec["cases"]
    ]


# ---- trials -----------------------------------------------------------------------------------------


def baselines_of(study, space: Space, cases: list[Case]) -> dict[str, dict]:
    attrs = study.user_attrs
    return {
        c.key(space.base): attrs[BASELINE_ATTR + c.key(space.base)]
        for c in cases
        if BASELINE_ATTR + c.key(space.base) in attrs
    }


def case_task(case: Case, cc: str, config: dict | None = None) -> sweep.Task:
    """A case under ``cc`` (``config`` written into the scenario) as a sweep task."""
    return sweep.Task(case.source, cc, raw=case.raw, config=config or None)


def run_cases(
    tasks: list[sweep.Task], workers: int, scheduler: str | None, quiet: bool, what: str, check_in=None
) -> list[dict]:
    """The summaries of the tasks' runs, in order (:func:`mltcp.sweep.run_tasks`); RuntimeError
    naming the case if a run failed."""
    with _progress(quiet) as prog:
        bar = prog.add_task(what, total=len(tasks), note="")
        recs = sweep.run_tasks(
            tasks,
            scheduler=scheduler,
            workers=1 if scheduler is None and workers <= 1 else workers,
            progress=lambda done, total: prog.update(bar, completed=done),
            checked=True,
            check_in=check_in,
        )
    for t, r in zip(tasks, recs):
        if not r["ok"]:
            raise RuntimeError(f"{r['scenario']}@seed{r['seed']} ({t.arm}): {r['error']}")
    return [sweep.summary_of(r) for r in recs]


def compute_baselines(
    study, space: Space, cases: list[Case], workers: int, quiet: bool, scheduler: str | None = None
) -> dict[str, dict]:
    """Run the base algorithm on every case the study has no baseline for yet; stored in the study."""
    have = baselines_of(study, space, cases)
    todo = [c for c in cases if c.key(space.base) not in have]
    if todo:
        res = run_cases(
            [case_task(c, space.base) for c in todo], workers, scheduler, quiet, f"baselines ({space.base})"
        )
        for c, r in zip(todo, res):
            study.set_user_attr(BASELINE_ATTR + c.key(space.base), r)
            have[c.key(space.base)] = r
    return have


class _Log:
    """Progress as a plain line every ``every`` seconds when stderr is not a terminal (a log file)."""

    def __init__(self, quiet: bool, what: str, every: float = 15.0):
        self.on = not quiet and not err.is_terminal
        self.what, self.every, self.last = what, every, time.monotonic()

    def __call__(self, done: int, total: int, note: str = "") -> None:
        if self.on and time.monotonic() - self.last >= self.every:
            self.last = time.monotonic()
            err.print(
                f"{time.strftime('%H:%M:%S')} {self.what}: {done}/{total} {note}", highlight=False, soft_wrap=True
            )


def _progress(quiet: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=quiet,
    )


class Stop:
    """A stop request (Ctrl-C, SIGTERM, the parent's death) honoured at safe points only: between
    trials and inside a simulation's progress callback, so Optuna always records the running
    trial as failed instead of leaving it RUNNING in the storage."""

    def __init__(self):
        self.requested = False

    def request(self, *_):
        self.requested = True

    def check(self, *_):
        if self.requested:
            raise KeyboardInterrupt

    def after_trial(self, study, _trial):
        if self.requested:
            study.stop()


def make_objective(
    space: Space,
    cases: list[Case],
    baselines: dict[str, dict],
    outdir: Path | None,
    stop: Stop | None = None,
    signal_aggregate: str = "worst",
    scheduler: str | None = None,
):
    """The trial's objective: its cases run in this process, one after another (checking for a
    stop request inside each run), or all at once on the Dask cluster at ``scheduler``."""
    stop = stop or Stop()

    def objective(trial: optuna.Trial):
        stop.check()
        config = space.suggest(trial)
        trial.set_user_attr("config", config)
        tasks = [case_task(c, space.cc, config) for c in cases]
        recs = sweep.run_tasks(
            tasks,
            scheduler=scheduler,
            workers=1,
            progress=False,
            checked=True,
            check_in=None if scheduler else stop.check,
        )
        stop.check()
        rows = []
        for case, rec in zip(cases, recs):
            if not rec["ok"]:  # the simulation did not finish (a configuration that stalls)
                trial.set_user_attr("error", f"{case.label}: {rec['error']}")
                raise RuntimeError(rec["error"])
            ml = sweep.summary_of(rec)
            base = baselines[case.key(space.base)]
            rows.append({"case": case.label, "mltcp": ml, **score(base, ml, space.signal)})
        agg = aggregate(rows, signal_aggregate)
        trial.set_user_attr("cases", rows)
        trial.set_user_attr("aggregate", agg)
        values = [agg[k] for k in OBJECTIVES]
        if outdir is not None:
            _write_json(
                outdir / "trials" / f"trial-{trial.number:05d}.json",
                {
                    "number": trial.number,
                    "config": config,
                    "values": dict(zip(OBJECTIVES, values)),
                    "aggregate": agg,
                    "cases": rows,
                },
            )
        return values

    return objective


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=_json_default) + "\n")
    tmp.replace(path)


def _json_default(o):
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


def _set_parent_death_signal() -> None:
    """Linux: the kernel sends this process SIGTERM when its parent dies (even by SIGKILL)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _optimize(study, objective, n_trials: int, stop: Stop, callbacks=()) -> bool:
    """Run n_trials trials one at a time until done or a stop was requested; False if stopped.

    One at a time so that a trial another process also told (Optuna's storage can hand the same
    queued trial to two workers: "Cannot tell a COMPLETE trial") costs that trial, not the
    worker's remaining share."""
    for _ in range(n_trials):
        if stop.requested:
            return False
        try:
            study.optimize(objective, n_trials=1, catch=(RuntimeError,), callbacks=[stop.after_trial, *callbacks])
        except KeyboardInterrupt:
            return False
        except ValueError as e:
            if "Cannot tell" not in str(e):
                raise
            err.print(f"warning: {e} (another worker finished it first); going on", highlight=False)
    return not stop.requested


def _worker(
    url: str,
    study_name: str,
    n_trials: int,
    sampler: str,
    outdir: Optional[str],
    parent: int,
    scheduler: Optional[str] = None,
) -> None:
    """A study worker (spawned process): runs n_trials trials, then exits. SIGTERM (sent by the
    parent on Ctrl-C, or by the kernel if the parent dies) fails the running trial and stops."""
    stop = Stop()
    signal.signal(signal.SIGTERM, stop.request)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the parent, which stops us
    _set_parent_death_signal()
    if os.getppid() != parent:  # the parent died before that was armed
        return
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(url, retry=True)  # the parent opened it: an outage now is a restart
    study = optuna.load_study(study_name=study_name, storage=storage, sampler=make_sampler(sampler))
    spec = spec_of(study)
    space, cases = load_spec(spec)
    objective = make_objective(
        space,
        cases,
        baselines_of(study, space, cases),
        Path(outdir) if outdir else None,
        stop,
        spec.get("signal_aggregate", "gmean"),
        scheduler,
    )
    _optimize(study, objective, n_trials, stop)
    sweep.close_clients()


class _CtrlC:
    """While active, the first Ctrl-C requests a stop (finish cleanly); a second one interrupts."""

    def __init__(self, stop: Stop):
        self.stop = stop

    def _handler(self, *_):
        if self.stop.requested:
            raise KeyboardInterrupt
        self.stop.request()
        err.print("stopping: the running trials are recorded as failed (Ctrl-C again to abort)", highlight=False)

    def __enter__(self):
        self.old = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self.old)


def run_trials(
    study,
    url: str,
    space: Space,
    cases: list[Case],
    baselines: dict,
    n_trials: int,
    workers: int,
    sampler: str,
    outdir: Path,
    quiet: bool,
    signal_aggregate: str = "worst",
    scheduler: str | None = None,
) -> bool:
    """Add ``n_trials`` trials to the study with ``workers`` processes. False if interrupted."""
    if n_trials <= 0:
        return True
    start = len(study.get_trials(deepcopy=False))
    stop = Stop()
    if workers == 1:
        objective = make_objective(space, cases, baselines, outdir, stop, signal_aggregate, scheduler)
        with _CtrlC(stop), _progress(quiet) as prog:
            task = prog.add_task(f"trials ({space.name})", total=n_trials, note="")

            log = _Log(quiet, "trials")

            def cb(st, tr):
                n, note = len(st.get_trials(deepcopy=False)) - start, _best_note(st)
                prog.update(task, completed=n, note=note)
                log(n, n_trials, note)

            return _optimize(study, objective, n_trials, stop, [cb])
    waiting = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))
    if waiting:  # queued trials (the reference) run here first: no two workers may pop one
        objective = make_objective(space, cases, baselines, outdir, stop, signal_aggregate, scheduler)
        with _CtrlC(stop):
            if not _optimize(study, objective, min(waiting, n_trials), stop):
                return False
        n_trials -= min(waiting, n_trials)
        if n_trials == 0:
            return True
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    shares = [n_trials // workers + (i < n_trials % workers) for i in range(workers)]
    procs = [
        ctx.Process(
            target=_worker, args=(url, study.study_name, n, sampler, str(outdir), os.getpid(), scheduler), daemon=True
        )
        for n in shares
        if n > 0
    ]
    try:
        with _CtrlC(stop), _progress(quiet) as prog:
            for p in procs:
                p.start()
            task = prog.add_task(f"trials ({space.name}, {len(procs)} workers)", total=n_trials, note="")
            log = _Log(quiet, f"trials ({len(procs)} workers)")
            while any(p.is_alive() for p in procs) and not stop.requested:
                time.sleep(0.5)
                done = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
                n, note = min(n_trials, len(done) - _finished_before(start, study)), _best_note(study)
                prog.update(task, completed=n, note=note)
                log(n, n_trials, note)
            _stop_workers(procs)
    finally:
        _stop_workers(procs, grace=0.0)
    crashed = [p.exitcode for p in procs if p.exitcode not in (0, None, -signal.SIGTERM)]
    if crashed and not stop.requested:
        err.print(
            f"warning: {len(crashed)} worker(s) failed (exit {crashed}); their traceback is above; "
            f"rerun to add the missing trials",
            highlight=False,
            soft_wrap=True,
        )
    return not stop.requested


def _finished_before(start: int, study) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False)[:start] if t.state.is_finished())


def _stop_workers(procs, grace: float = 60.0) -> None:
    """SIGTERM each worker (it fails its running trial at the next safe point and exits), then
    SIGKILL whatever is still there after ``grace`` seconds."""
    for p in procs:
        if p.pid is not None and p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        if p.pid is None:
            continue
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _best_note(study) -> str:
    done = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))]
    if not done:
        return ""
    b = max(done, key=lambda t: t.values[0])
    return f"best avg {b.values[0]:.2f}x (p99 {b.values[1]:.2f}x, drops x{b.values[2]:.2f})"


# ---- reports ----------------------------------------------------------------------------------------


def complete_trials(study) -> list:
    return [
        t
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if t.values and all(math.isfinite(v) for v in t.values)
    ]


def front_of(trials) -> list:
    idx = pareto_front([t.values for t in trials], DIRECTIONS)
    return [trials[i] for i in idx]


def chosen_trial(trials, number: int | None):
    if number is not None:
        for t in trials:
            if t.number == number:
                return t
        raise InputError(f"--pick: trial {number} is not a completed trial of this study")
    front = front_of(trials)
    i = pick([t.values for t in front], list(range(len(front))))
    return None if i is None else front[i]


def signal_name(space: Space) -> str:
    return "ECN marks" if space.signal == "ecn_marks" else "drops"


def pareto_table(space: Space, trials, chosen, reference_number: int | None, sig_agg: str = "worst") -> Table:
    front = sorted(front_of(trials), key=lambda t: -t.values[0])
    t = Table(
        title=f"{space.name}: Pareto front, {len(front)} of {len(trials)} completed trials "
        f"(speedups: geometric means over the training cases; {signal_name(space)}: "
        f"{'worst case' if sig_agg == 'worst' else 'geometric mean'} x baseline; "
        f"* chosen, ref = the defaults)",
        title_justify="left",
    )
    for c in ("trial", "avg", "p99", signal_name(space), "worst avg", "worst p99"):
        t.add_column(c, justify="right", no_wrap=True)
    t.add_column("configuration", overflow="fold")
    for tr in front:
        agg = tr.user_attrs.get("aggregate", {})
        mark = "*" if chosen is not None and tr.number == chosen.number else ""
        mark += " ref" if tr.number == reference_number else ""
        t.add_row(
            f"{tr.number}{mark}",
            f"{tr.values[0]:.2f}x",
            f"{tr.values[1]:.2f}x",
            f"x{tr.values[2]:.2f}",
            f"{agg.get('worst_speedup_avg', float('nan')):.2f}x",
            f"{agg.get('worst_speedup_p99', float('nan')):.2f}x",
            " ".join(f"{k.key.split('.')[-1]}={_fmt(tr.params.get(k.key))}" for k in space.knobs),
        )
    return t


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def write_csv(path: Path, space: Space, study) -> None:
    """One row per trial and training case: the trial's params, its objectives, the case's numbers."""
    keys = [k.key for k in space.knobs]
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "trial",
                "state",
                *keys,
                *OBJECTIVES,
                "case",
                "case_speedup_avg",
                "case_speedup_p99",
                "case_signal_ratio",
                "mltcp_avg_iter_s",
                "mltcp_p99_iter_s",
                "mltcp_drops",
                "mltcp_ecn_marks",
                "mltcp_converged_at_iteration",
                "error",
            ]
        )
        for tr in study.get_trials(deepcopy=False):
            vals = list(tr.values) if tr.values else ["", "", ""]
            head = [tr.number, tr.state.name, *[tr.params.get(k, "") for k in keys], *vals]
            rows = tr.user_attrs.get("cases") or [None]
            for r in rows:
                if r is None:
                    w.writerow(head + ["", "", "", "", "", "", "", "", "", tr.user_attrs.get("error", "")])
                    continue
                m = r["mltcp"]
                w.writerow(
                    head
                    + [
                        r["case"],
                        r["speedup_avg"],
                        r["speedup_p99"],
                        r["signal_ratio"],
                        m["avg_iter_s"],
                        m["p99_iter_s"],
                        m["drops"],
                        m["ecn_marks"],
                        m["converged_at_iteration"],
                        "",
                    ]
                )
    tmp.replace(path)


def plot_front(path: Path, space: Space, trials, chosen, reference_number: int | None) -> Path:
    from . import plots  # the Agg backend
    import matplotlib.pyplot as plt

    front = {t.number for t in front_of(trials)}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
    pairs = (
        (0, 1, "avg speedup (x)", "p99 speedup (x)"),
        (0, 2, "avg speedup (x)", f"{signal_name(space)} / baseline's"),
    )
    for ax, (i, j, xl, yl) in zip(axes, pairs):
        rest = [t for t in trials if t.number not in front]
        fr = sorted((t for t in trials if t.number in front), key=lambda t: t.values[i])
        ax.scatter([t.values[i] for t in rest], [t.values[j] for t in rest], s=14, c="0.7", label="trial")
        ax.scatter([t.values[i] for t in fr], [t.values[j] for t in fr], s=26, c="tab:red", label="Pareto front")
        for t in trials:
            if t.number == reference_number:
                ax.scatter([t.values[i]], [t.values[j]], marker="x", s=60, c="k", label="reference (defaults)")
        if chosen is not None:
            ax.scatter(
                [chosen.values[i]],
                [chosen.values[j]],
                marker="*",
                s=180,
                c="tab:blue",
                label=f"chosen (#{chosen.number})",
            )
        ax.axvline(1.0, color="0.5", lw=0.8, ls="--")
        ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"mltcp tune: {space.name} ({space.cc} vs {space.base}), {len(trials)} trials")
    return plots._save(fig, path)


# ---- hold-out ---------------------------------------------------------------------------------------


def holdout(
    space: Space,
    cases: list[Case],
    configs: dict[str, dict],
    workers: int,
    quiet: bool,
    signal_aggregate: str = "worst",
    scheduler: str | None = None,
) -> dict:
    """Run the baseline and each named configuration on every hold-out case."""
    tasks = []
    for c in cases:
        tasks.append(case_task(c, space.base))
        for cfg in configs.values():
            tasks.append(case_task(c, space.cc, cfg))
    res = iter(run_cases(tasks, workers, scheduler, quiet, "hold-out"))
    rows = []
    for c in cases:
        base = next(res)
        row = {"case": c.label, "baseline": base}
        for name in configs:
            ml = next(res)
            row[name] = {"mltcp": ml, **score(base, ml, space.signal)}
        rows.append(row)
    return {
        "configs": configs,
        "cases": rows,
        "aggregate": {n: aggregate([r[n] for r in rows], signal_aggregate) for n in configs},
    }


def holdout_table(space: Space, rep: dict) -> Table:
    sig = space.signal
    t = Table(
        title=f"hold-out: {space.cc} vs {space.base} ({signal_name(space)}: baseline -> MLTCP)", title_justify="left"
    )
    for c in ("case", "config", "avg", "p99", signal_name(space), "interleaved at"):
        t.add_column(c, justify="right" if c not in ("case", "config") else "left")
    for r in rep["cases"]:
        for n in rep["configs"]:
            s = r[n]
            t.add_row(
                r["case"],
                n,
                f"{s['speedup_avg']:.3f}x",
                f"{s['speedup_p99']:.3f}x",
                f"{r['baseline'][sig]:.0f} -> {s['mltcp'][sig]:.0f}",
                str(s["mltcp"]["converged_at_iteration"]),
            )
    for n, a in rep["aggregate"].items():
        t.add_row(
            "geometric mean",
            n,
            f"{a['speedup_avg']:.3f}x",
            f"{a['speedup_p99']:.3f}x",
            f"x{a['gmean_signal_ratio']:.3f}",
            "",
        )
        t.add_row(
            "worst case",
            n,
            f"{a['worst_speedup_avg']:.3f}x",
            f"{a['worst_speedup_p99']:.3f}x",
            f"x{a['worst_signal_ratio']:.3f}",
            "",
        )
    return t


# ---- the command ------------------------------------------------------------------------------------


def _parse_seeds(s: str) -> list[int]:
    try:
        seeds = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--seeds: must be comma-separated integers (got {s!r})") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise InputError(f"--seeds: needs at least one seed, none repeated (got {s!r})")
    return seeds


@app.command("run")
def run_cmd(
    scenarios: Optional[list[str]] = typer.Argument(
        None,
        help="training scenarios (files, folders of a random suite, or built-in names); omit to resume a study "
        "with its own training set",
    ),
    space_name: Optional[str] = typer.Option(
        None, "--space", help=f"a built-in space ({', '.join(BUILTIN)}) or a TOML file; default reno-ai for a new study"
    ),
    seeds: Optional[str] = typer.Option(
        None,
        help="seeds per scenario, comma-separated; default 1,2,3 for a new "
        "study, the study's own when resuming (also used for --holdout)",
    ),
    iterations: Optional[int] = typer.Option(None, help="cut every scenario to this many iterations (faster, noisier)"),
    trials: int = typer.Option(20, help="trials to add in this call (0: report only)"),
    workers: int = typer.Option(1, help="local processes sharing the study"),
    scheduler: Optional[str] = typer.Option(
        None,
        help="a Dask scheduler, tcp://HOST:PORT: every simulation "
        "(baselines, each trial's cases, hold-out) runs on its cluster",
    ),
    outdir: Path = typer.Option(Path("out/tune"), "--out", help="reports, per-trial JSON and (by default) the study"),
    storage: Optional[str] = typer.Option(
        None,
        help="Optuna RDB URL shared by many workers, e.g. postgresql://user@host/db; default sqlite:///OUT/study.db",
    ),
    study_name: Optional[str] = typer.Option(None, "--study", help="study name; default: the space's name"),
    sampler: str = typer.Option("tpe", help=f"Optuna sampler: {', '.join(SAMPLERS)}"),
    signal_aggregate: Optional[str] = typer.Option(
        None,
        "--drops-objective",
        help="the drops (ECN marks) objective "
        "of a new study: worst (the worst case's ratio to its baseline; "
        "default) or gmean (the geometric mean over cases)",
    ),
    holdout_names: Optional[list[str]] = typer.Option(
        None, "--holdout", help="hold-out scenario or suite folder (repeatable): report the chosen configuration there"
    ),
    pick_trial: Optional[int] = typer.Option(
        None, "--pick", help="trial number to report on the hold-out set; default: chosen from the Pareto front"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on stdout (no progress bars)"),
):
    """Run (or resume) a tuning study; print and plot its Pareto front; report on hold-out scenarios."""
    created: list[Path] = []
    try:
        code = _run(
            scenarios or [],
            space_name,
            seeds,
            iterations,
            trials,
            workers,
            outdir,
            storage,
            study_name,
            sampler,
            holdout_names or [],
            pick_trial,
            as_json,
            created,
            signal_aggregate,
            scheduler,
        )
    except sweep.SweepError as e:
        raise error_exit(str(e), 1)
    except (InputError, ScenarioError, SpaceError) as e:
        for p in reversed(created):  # nothing half-written: remove what this call created
            if p.is_dir():
                import shutil

                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        raise error_exit(str(e))
    if code:
        raise typer.Exit(code)


def _check_options(workers, trials, sampler, signal_aggregate, iterations, scheduler) -> None:
    """The options' ranges and names (InputError naming the option)."""
    if workers < 1:
        raise InputError(f"--workers: must be >= 1 (got {workers})")
    if trials < 0:
        raise InputError(f"--trials: must be >= 0 (got {trials})")
    if sampler not in SAMPLERS:
        raise InputError(f"--sampler: must be one of {', '.join(SAMPLERS)} (got {sampler!r})")
    if signal_aggregate is not None and signal_aggregate not in SIGNAL_AGGREGATES:
        raise InputError(f"--drops-objective: must be one of {', '.join(SIGNAL_AGGREGATES)} (got {signal_aggregate!r})")
    if iterations is not None and iterations < 2:
        raise InputError(f"--iterations: must be >= 2 (got {iterations})")
    if scheduler is not None and not (scheduler.startswith("tcp://") and sweep.have_dask()):
        raise InputError(
            f"--scheduler: expected tcp://HOST:PORT with dask.distributed installed "
            f"(pip install 'mltcp[distributed]'); got {scheduler!r}"
        )


def _run(
    scenarios,
    space_name,
    seeds_s,
    iterations,
    trials,
    workers,
    outdir,
    storage_url,
    study_name,
    sampler,
    holdout_names,
    pick_trial,
    as_json,
    created,
    signal_aggregate=None,
    scheduler=None,
) -> int:
    # 1. everything that can be checked without touching storage
    _check_options(workers, trials, sampler, signal_aggregate, iterations, scheduler)
    seeds = _parse_seeds(seeds_s) if seeds_s is not None else None
    space = load_space(space_name) if space_name else None
    new_cases = make_cases(scenarios, seeds or DEFAULT_SEEDS, iterations) if scenarios else None
    hold_names_ok = make_cases(holdout_names, seeds or DEFAULT_SEEDS, iterations) if holdout_names else []
    if new_cases is not None:
        check_space(space or load_space(DEFAULT_SPACE), new_cases + hold_names_ok)
    if outdir.exists() and not outdir.is_dir():
        raise InputError(f"--out: {outdir} exists and is not a folder")
    # 2. storage
    if storage_url is None:
        if not outdir.exists():
            created.append(outdir)
        outdir.mkdir(parents=True, exist_ok=True)
        db = outdir / "study.db"
        if not db.exists():
            created.append(db)
        storage_url = f"sqlite:///{db.resolve()}"
    storage = open_storage(storage_url)
    name = study_name or (space.name if space else None)
    if name is None and new_cases is not None:
        name = DEFAULT_SPACE
    if name is None:  # resuming: the storage's only study
        names = [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]
        if len(names) != 1:
            raise InputError(
                f"--study: the storage holds {len(names)} studies ({', '.join(names) or 'none'}): name one"
            )
        name = names[0]
    exists = study_exists(storage, name)
    if not exists and new_cases is None:
        raise InputError(f"SCENARIOS: study {name!r} does not exist in the storage yet: name its training scenarios")
    if not exists and pick_trial is not None:
        raise InputError(f"--pick: study {name!r} is new: it has no trial {pick_trial}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        directions=list(DIRECTIONS),
        sampler=make_sampler(sampler),
        load_if_exists=True,
    )
    spec = spec_of(study)
    if spec is None:  # a new study: it records what it tunes on
        if space is None:
            space = load_space(DEFAULT_SPACE)
        spec = {
            "version": 1,
            "space": space.as_dict(),
            "space_source": space.source,
            "scenarios": list(scenarios),
            "seeds": seeds or DEFAULT_SEEDS,
            "iterations": iterations,
            "signal_aggregate": signal_aggregate or "worst",
            "cases": [c.as_dict() for c in new_cases],
        }
        if exists or len(study.trials):
            raise InputError(f"--study: {name!r} exists but was not made by mltcp tune")
        study.set_user_attr(SPEC_ATTR, spec)
        study.enqueue_trial(space.reference())  # the public defaults: the point to beat
    stored_space, cases = load_spec(spec)
    if space is not None and space.as_dict() != stored_space.as_dict():
        raise InputError(
            f"--space: {space.name!r} differs from the study's {stored_space.name!r} (use another --study or --out)"
        )
    if new_cases is not None and [c.as_dict() for c in new_cases] != spec["cases"]:
        raise InputError(
            f"SCENARIOS: the training set ({', '.join(c.label for c in new_cases)}) differs from the "
            f"study's ({', '.join(c.label for c in cases)}); omit it to resume, or use another --study"
        )
    sig_agg = spec.get("signal_aggregate", "gmean")  # studies made before the option: gmean
    if signal_aggregate is not None and signal_aggregate != sig_agg:
        raise InputError(f"--drops-objective: {signal_aggregate} differs from the study's {sig_agg}")
    if new_cases is None and seeds is not None and seeds != spec["seeds"]:
        raise InputError(f"--seeds: {seeds_s} differs from the study's {','.join(map(str, spec['seeds']))}")
    space = stored_space
    hold_cases = (
        make_cases(holdout_names, seeds or spec["seeds"], iterations or spec["iterations"]) if hold_names_ok else []
    )
    check_space(space, hold_cases)
    trials_now = complete_trials(study)
    if pick_trial is not None:
        chosen_trial(trials_now, pick_trial)  # check now, before any work
    created.clear()  # from here on the study is real: keep it
    quiet = as_json
    if not quiet:
        err.print(
            f"study {name!r} ({space.name}: {space.cc} vs {space.base}) in {storage_url}: "
            f"{len(study.trials)} trials so far; training cases: {', '.join(c.label for c in cases)}",
            highlight=False,
            soft_wrap=True,
        )
    # 3. baselines, then trials
    try:
        baselines = compute_baselines(study, space, cases, workers, quiet, scheduler)
    except RuntimeError as e:
        raise error_exit(f"baseline: {e}", 1)
    finished = run_trials(
        study, storage_url, space, cases, baselines, trials, workers, sampler, outdir, quiet, sig_agg, scheduler
    )
    # 4. reports (also after Ctrl-C: what finished is kept)
    opened = _Opened(study, space, cases, name, storage_url, sig_agg)
    return _report(opened, baselines, finished, hold_cases, pick_trial, outdir, workers, quiet, scheduler, as_json)


class _Opened(NamedTuple):
    """The study this run opened, and what it was opened with."""

    study: Any
    space: Any
    cases: list
    name: str
    storage_url: str
    sig_agg: str


def _report(opened, baselines, finished, hold_cases, pick_trial, outdir, workers, quiet, scheduler, as_json) -> int:
    """Write the trials, the summary and the hold-out (when the trials finished), print them; the exit code."""
    study, space, cases, name, storage_url, sig_agg = opened
    done = complete_trials(study)
    ref = next(
        (
            t.number
            for t in study.get_trials(deepcopy=False)
            if t.params == space.reference() and t.state == optuna.trial.TrialState.COMPLETE
        ),
        None,
    )
    chosen = chosen_trial(done, pick_trial) if done else None
    outdir.mkdir(parents=True, exist_ok=True)
    base_by_label = {c.label: baselines[c.key(space.base)] for c in cases}
    for tr in study.get_trials(deepcopy=False):
        if tr.state.is_finished():
            attrs = dict(tr.user_attrs)
            attrs["cases"] = [{**r, "baseline": base_by_label.get(r["case"])} for r in attrs.get("cases", [])]
            _write_json(
                outdir / "trials" / f"trial-{tr.number:05d}.json",
                {
                    "number": tr.number,
                    "state": tr.state.name,
                    "params": tr.params,
                    "values": dict(zip(OBJECTIVES, tr.values)) if tr.values else None,
                    **attrs,
                },
            )
    write_csv(outdir / "trials.csv", space, study)
    summary = {
        "study": name,
        "storage": storage_url,
        "space": space.as_dict(),
        "training": [c.label for c in cases],
        "drops_objective": sig_agg,
        "trials": len(study.trials),
        "complete": len(done),
        "directions": dict(zip(OBJECTIVES, DIRECTIONS)),
        "pareto": [
            {
                "number": t.number,
                "values": dict(zip(OBJECTIVES, t.values)),
                "params": t.params,
                "aggregate": t.user_attrs.get("aggregate"),
            }
            for t in front_of(done)
        ],
        "reference_trial": ref,
        "chosen": None
        if chosen is None
        else {
            "number": chosen.number,
            "config": chosen.user_attrs.get("config"),
            "values": dict(zip(OBJECTIVES, chosen.values)),
        },
    }
    files = [outdir / "trials.csv", outdir / "trials/"]
    if done:
        files.append(plot_front(outdir / "pareto.png", space, done, chosen, ref))
    if finished and hold_cases and chosen is not None:
        configs = {f"chosen #{chosen.number}": chosen.user_attrs["config"]}
        ref_cfg = {**space.fixed, **space.reference()}
        if chosen.user_attrs["config"] != ref_cfg:
            configs["reference"] = ref_cfg
        summary["holdout"] = holdout(space, hold_cases, configs, workers, quiet, sig_agg, scheduler)
        _write_json(outdir / "holdout.json", summary["holdout"])
        files.append(outdir / "holdout.json")
    _write_json(outdir / "summary.json", summary)
    files.append(outdir / "summary.json")
    if as_json:
        print(json.dumps(summary, default=_json_default))
    else:
        if done:
            out.print(pareto_table(space, done, chosen, ref, sig_agg))
            if chosen is not None:
                out.print(
                    f"chosen (*): trial {chosen.number}: {json.dumps(chosen.user_attrs.get('config'))}",
                    highlight=False,
                    soft_wrap=True,
                )
        else:
            out.print("no completed trials yet")
        if "holdout" in summary:
            out.print(holdout_table(space, summary["holdout"]))
        out.print("wrote " + ", ".join(str(f) for f in files), highlight=False, soft_wrap=True)
    if not finished:
        err.print(
            f"interrupted: {len(done)} trials completed are kept; rerun the same command to resume",
            highlight=False,
            soft_wrap=True,
        )
        return 130
    return 0


@app.command("spaces")
def spaces_cmd():
    """List the built-in configuration spaces (named configurations of the MLTCP hook)."""
    for n in BUILTIN:
        s = load_space(n)
        out.print(f"[bold]{n}[/] ({s.cc} vs {s.base}): {escape(s.description)}", soft_wrap=True)
        for k, v in s.fixed.items():
            out.print(f"    {k} = {v}", highlight=False)
        for k in s.knobs:
            rng = (
                f"one of {list(k.choices)}"
                if k.choices is not None
                else f"{k.low:g} .. {k.high:g}{' (log)' if k.log else ''}{' (integer)' if k.integer else ''}"
            )
            out.print(f"    {k.key}: {rng}, reference {k.default}", highlight=False)


def main():  # pragma: no cover - `python -m mltcp.tune`
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
