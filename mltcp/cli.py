"""The `mltcp` command line."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import compare, defaults, records as rec_io
from .cc import BASES
from .console import err, fail, out, print_json
from .reference import REFERENCES, reference_side
from .scenario import ScenarioError, load

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="MLTCP: congestion control that makes DNN training jobs take turns on the network.",
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("mltcp")
        except PackageNotFoundError:  # run from a source tree that was never installed
            v = "unknown (not installed)"
        print(f"mltcp {v}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the version and exit"
    ),
):
    pass


def _algorithms(sc, cc: Optional[str], do_compare: bool) -> list[str]:
    cc = cc or sc.cc
    valid = BASES + tuple(f"mltcp-{b}" for b in BASES)
    if cc not in valid:
        fail(f"--cc: unknown congestion control {cc!r} (choose from {', '.join(valid)})")
    if not do_compare:
        return [cc]
    base = cc.removeprefix("mltcp-")
    return [base, compare.mltcp_name(base)]


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) arrived: unwind, stop the workers, exit 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, _frame):
    raise Terminated(signum)


def _die_with_parent(parent: int) -> None:
    """Worker initializer: the kernel sends SIGKILL to this process when its parent dies (even by
    SIGKILL), so no simulation keeps running orphaned (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _stop_children() -> None:
    import multiprocessing as mp

    for p in mp.active_children():
        p.kill()
    for p in mp.active_children():
        p.join(5)


def _simulate_worker(sc, algo, trace_interval, queue, engine="fast", ns3_options=None, label=None):
    report = None if queue is None else (lambda t, frac: queue.put((label or algo, t, frac)))
    if engine == "ns3":
        from .sim.ns3_engine import run

        return run(sc, algo, trace_interval=trace_interval, progress=report, options=ns3_options)
    from .sim.engine import simulate

    return simulate(sc, algo, trace_interval=trace_interval, progress=report)


def run_simulations(
    sc,
    algos: list[str],
    quiet: bool,
    trace_interval: Optional[float] = None,
    engine: str = "fast",
    ns3_options=None,
    arms: Optional[dict] = None,
):
    """Run each algorithm in its own process (they are independent; two cores, two runs), with a
    rich progress bar per run on stderr unless ``quiet``. ``engine``: "fast" or "ns3" (run with
    ``ns3_options``, an :class:`~mltcp.sim.ns3_engine.Ns3Options`, or its defaults). ``arms``
    (label -> (scenario, algorithm)) replaces ``algos`` on ``sc``; the results are keyed by label."""
    arms = arms or {a: (sc, a) for a in algos}
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing.managers import SyncManager

    ctx = mp.get_context("fork")
    me = os.getpid()
    import threading

    main = threading.current_thread() is threading.main_thread()  # signal handlers: main thread only
    old = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)} if main else {}
    manager = pool = None
    try:
        manager = SyncManager(ctx=ctx)
        manager.start(_die_with_parent, (me,))
        pool = ProcessPoolExecutor(max_workers=len(arms), mp_context=ctx, initializer=_die_with_parent, initargs=(me,))
        results = _run_pool(sc, arms, quiet, trace_interval, manager, pool, engine, ns3_options)
    except BaseException:
        # Ctrl-C, SIGTERM, a worker's error: kill the workers first (a pool's normal shutdown
        # would wait for their simulations to end), so none outlives this call
        _stop_children()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    pool.shutdown()
    manager.shutdown()
    return results


def _run_pool(sc, arms, quiet, trace_interval, manager, pool, engine="fast", ns3_options=None):
    queue = None if quiet else manager.Queue()
    futures = {
        lbl: pool.submit(_simulate_worker, s, a, trace_interval, queue, engine, ns3_options, lbl)
        for lbl, (s, a) in arms.items()
    }
    algos = list(arms)
    if not quiet:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TextColumn("sim t={task.fields[t]:.2f}s"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        ) as prog:
            tasks = {
                a: prog.add_task(f"{sc.name} · {a}" + (" · ns-3" if engine == "ns3" else ""), total=1.0, t=0.0)
                for a in algos
            }
            while not all(f.done() for f in futures.values()):
                try:
                    a, t, frac = queue.get(timeout=0.2)
                    prog.update(tasks[a], completed=frac, t=t)
                except Exception:  # queue.Empty from the manager proxy
                    pass
    return {a: f.result() for a, f in futures.items()}


def build_report(sc, results) -> dict:
    algos = list(results)
    sides = {
        a: compare.side(
            sc, a, r.records, r.drops, r.ecn_marks, getattr(r, "pfc_pause_s", None), getattr(r, "reordered", None)
        )
        for a, r in results.items()
    }
    return compare.report(sc, sides[algos[0]], sides[algos[1]] if len(algos) == 2 else None)


def per_job_table(sc, results) -> Table:
    from . import metrics

    t = Table(title=f"{sc.name}: iteration times after {sc.warmup_iterations} warm-up iterations", title_justify="left")
    for c in ("cc", "job", "avg (ms)", "p99 (ms)", "ideal (ms)", "drops", "ECN marks"):
        t.add_column(c, justify="right" if c not in ("cc", "job") else "left")
    for a, r in results.items():
        jobs = sc.jobs if len(sc.jobs) <= 12 else sc.jobs[:12]
        for j in jobs:
            rs = [x for x in r.records if x.job == j.name]
            s = metrics.summary(rs, sc.warmup_iterations)
            t.add_row(
                a,
                j.name,
                f"{s['avg_iter_s'] * 1e3:.2f}",
                f"{s['p99_iter_s'] * 1e3:.2f}",
                f"{sc.ideal_iter_s(j) * 1e3:.2f}",
                f"{sum(x.drops for x in rs):.0f}",
                f"{sum(x.marks for x in rs):.0f}",
            )
        if len(sc.jobs) > 12:
            t.add_row(a, f"... {len(sc.jobs) - 12} more jobs", "", "", "", "", "")
    return t


def iteration_or_never(it: Optional[int]) -> str:
    """An "interleaved at iteration" cell: the iteration, or "never" (None: it did not happen)."""
    return "never" if it is None else str(it)


def summary_table(rep: dict) -> Table:
    t = Table(title="summary", title_justify="left")
    pfc = "pfc_pause_s" in rep["baseline"]  # a lossless link: its pauses are the cost to show
    cols = (
        ("", "avg (ms)", "p99 (ms)", "drops", "ECN marks")
        + (("PFC pause (flow-ms)",) if pfc else ())
        + ("interleaved at iteration",)
    )
    for c in cols:
        t.add_column(c, justify="right")
    blank = [""] * (len(cols) - 3)
    for key in ("baseline", "mltcp"):
        if rep.get(key):
            s = rep[key]
            name = s["cc"] + (f" (switch {s['switch_policy']})" if "switch_policy" in s else "")
            t.add_row(
                name,
                f"{s['avg_iter_s'] * 1e3:.2f}",
                f"{s['p99_iter_s'] * 1e3:.2f}",
                f"{s['drops']:.0f}",
                f"{s['ecn_marks']:.0f}",
                *((f"{s['pfc_pause_s'] * 1e3:.1f}",) if pfc else ()),
                iteration_or_never(s["converged_at_iteration"]),
            )
    t.add_row("ideal", f"{rep['ideal_iter_s'] * 1e3:.2f}", *blank)
    if rep.get("speedup_avg") is not None:
        t.add_row("speedup", f"{rep['speedup_avg']:.2f}x", f"{rep['speedup_p99']:.2f}x", *blank[1:])
    return t


def write_outputs(sc, results, rep: dict, outdir: Path) -> list[Path]:
    from . import plots

    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for a, r in results.items():
        p = outdir / f"records-{a}.csv"
        rec_io.write_csv(r.records, p)
        written.append(p)
    rec_io.write_text_atomic(outdir / "summary.json", json.dumps(rep, indent=2) + "\n")
    written.append(outdir / "summary.json")
    runs = [(a, r.trace_t, r.trace_rate, r.job_names) for a, r in results.items() if len(r.trace_t)]
    if runs:
        span = min(float(r.trace_t[-1]) for r in results.values() if len(r.trace_t))
        iters_shown = min(12, min(j.iterations for j in sc.jobs))
        window = (0.0, min(span, iters_shown * max(sc.ideal_iter_s(j) for j in sc.jobs) * 1.5))
        written.append(
            plots.throughput(
                runs,
                outdir / "throughput.png",
                window,
                f"{sc.name}: per-job throughput (first ~{iters_shown} iterations)",
            )
        )
    written.append(
        plots.iteration_cdf(
            [(a, r.records) for a, r in results.items()],
            outdir / "iteration_cdf.png",
            rep["ideal_iter_s"],
            f"{sc.name}: iteration time",
        )
    )
    return written


@app.command()
def simulate(
    scenario: str = typer.Argument(..., help="a scenario TOML file or a built-in name (see `mltcp scenarios`)"),
    cc: Optional[str] = typer.Option(None, help=f"{'|'.join(BASES)} or mltcp-*; default: the scenario's cc"),
    do_compare: bool = typer.Option(False, "--compare", help="run the base algorithm and its MLTCP variant"),
    compare_policy: bool = typer.Option(
        False,
        "--compare-policy",
        help="run the algorithm through a plain switch "
        "(switch_policy off) and through the scenario's switch_policy; the JSON of "
        "--compare, baseline = the plain switch",
    ),
    reference: Optional[str] = typer.Option(
        None,
        "--reference",
        help="also run centralized references, comma-"
        "separated: fifo, srf, cassini, best (docs/references.md); the JSON "
        "gains a 'references' object, one arm each",
    ),
    outdir: Optional[Path] = typer.Option(None, "--out", help="write records CSV, summary.json and PNG plots here"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on stdout (no progress bar)"),
    engine: str = typer.Option(
        "fast",
        "--engine",
        help="fast (the numba simulator), ns3 (ns-3, extra \\[ns3]) or both "
        "(both, with per-job, per-iteration fast/ns-3 ratios)",
    ),
    ns3_host_jitter: float = typer.Option(
        0.0,
        "--ns3-host-jitter",
        help="ns-3 only: every packet a sending host emits "
        "waits U[0, x segment times at its NIC), x in [0, 1]; 0 = ns-3 as shipped "
        "(phase-locked drop-tail queues, docs/ns3.md)",
    ),
    ns3_recovery: str = typer.Option(
        "prr-rfc",
        "--ns3-recovery",
        help="ns-3 only: fast recovery, prr-rfc (PRR as RFC "
        "6937 and Linux), prr (ns-3 3.44's own, which counts SACKed dupACKs twice) or "
        "classic (docs/ns3.md)",
    ),
):
    """Simulate a scenario in the fast simulator (or in ns-3, or both)."""
    if engine not in ("fast", "ns3", "both"):
        fail(f"--engine: unknown engine {engine!r} (choose from fast, ns3, both)")
    from .sim.ns3_engine import RECOVERY_TYPES, Ns3Options  # (ns-3 itself loads only when a run needs it)

    try:
        n3opt = Ns3Options(host_jitter=ns3_host_jitter)
    except ValueError as e:
        fail(f"--ns3-host-jitter: {e}")
    if ns3_recovery not in RECOVERY_TYPES:
        fail(f"--ns3-recovery: unknown {ns3_recovery!r} (choose from {', '.join(RECOVERY_TYPES)})")
    n3opt.recovery = ns3_recovery
    if ns3_host_jitter and engine == "fast":
        fail("--ns3-host-jitter: applies to --engine ns3 or both only")
    if ns3_recovery != "prr-rfc" and engine == "fast":
        fail("--ns3-recovery: applies to --engine ns3 or both only")
    if compare_policy and (do_compare or engine != "fast"):
        fail("--compare-policy: not with --compare, and with --engine fast only")
    refs = _references(reference, engine)
    try:
        sc = load(scenario)
        algos = _algorithms(sc, cc, do_compare)
        arms = compare.policy_arms(sc, algos[0]) if compare_policy else None
        _check_outdir(outdir)
        if engine != "fast":
            from .sim import ns3_engine

            ns3_engine.preflight(sc, algos)
        ti = _trace_interval(sc) if outdir else None
        with _interruptible():
            if engine == "both":
                return _simulate_both(sc, algos, as_json, ti, outdir, n3opt)
            results = run_simulations(
                sc, algos, quiet=as_json, trace_interval=ti, engine=engine, ns3_options=n3opt, arms=arms
            )
    except ScenarioError as e:
        fail(str(e))
    rep = compare.policy_report(arms, results) if arms else build_report(sc, results)
    if refs:
        with _interruptible():
            rep["references"] = {f"ref-{n}": reference_side(sc, n, base_side=rep["baseline"]) for n in refs}
    if outdir:
        _write_or_fail(sc, results, rep, outdir)
    if as_json:
        print_json(rep)
    else:
        out.print(per_job_table(sc, results))
        out.print(summary_table(rep))
        if refs:
            out.print(references_table(rep))
        if outdir:
            out.print(f"wrote {outdir}/ (records-*.csv, summary.json, throughput.png, iteration_cdf.png)")


def _references(text: Optional[str], engine: str) -> list[str]:
    """--reference's names, checked (exit 2 naming the option on an unknown one)."""
    if not text:
        return []
    names = [n.strip().removeprefix("ref-") for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in REFERENCES]
    if bad or not names:
        fail(f"--reference: unknown reference {(bad or [text])[0]!r} (choose from {', '.join(REFERENCES)})")
    if engine != "fast":
        fail("--reference: with --engine fast only")
    return list(dict.fromkeys(names))


def references_table(rep: dict) -> Table:
    t = Table(title="centralized references (docs/references.md)", title_justify="left")
    for c in ("", "avg (ms)", "p99 (ms)", "drops", "speedup over the base (avg)", "took"):
        t.add_column(c, justify="right")
    base = rep["baseline"]["avg_iter_s"]
    for name, s in rep["references"].items():
        t.add_row(
            name,
            f"{s['avg_iter_s'] * 1e3:.2f}",
            f"{s['p99_iter_s'] * 1e3:.2f}",
            f"{s['drops']:.0f}",
            f"{base / s['avg_iter_s']:.2f}x",
            s.get("reference_pick", ""),
        )
    return t


def _check_outdir(outdir: Optional[Path]) -> None:
    """Fail (exit 2) before a run whose outputs could not be written at its end."""
    if outdir is not None:
        why = rec_io.output_problem(outdir, is_dir=True)
        if why:
            fail(f"--out: {why}")


def _write_or_fail(sc, results, rep, outdir: Path) -> list[Path]:
    try:
        return write_outputs(sc, results, rep, outdir)
    except OSError as e:
        fail(f"--out {outdir}: {e.strerror or e}", 1)


class _interruptible:
    """Ctrl-C exits 130, SIGTERM/SIGHUP 128 + signal, with one line instead of a traceback (the
    workers are already stopped by run_simulations)."""

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if typ is KeyboardInterrupt:
            fail("interrupted", 130)
        if typ is Terminated:
            fail(f"terminated by signal {signal.Signals(exc.signum).name}; workers stopped", 128 + exc.signum)
        return False


def _simulate_both(sc, algos, as_json: bool, trace_interval, outdir: Optional[Path], ns3_options=None):
    from .sim import ns3_compare

    fast = run_simulations(sc, algos, quiet=as_json, trace_interval=trace_interval, engine="fast")
    ns3 = run_simulations(
        sc, algos, quiet=as_json, trace_interval=trace_interval, engine="ns3", ns3_options=ns3_options
    )
    rep = {"fast": build_report(sc, fast), "ns3": build_report(sc, ns3), "ratios": ns3_compare.ratios(sc, fast, ns3)}
    if outdir:
        _write_or_fail(sc, fast, rep["fast"], outdir / "fast")
        _write_or_fail(sc, ns3, rep["ns3"], outdir / "ns3")
    if as_json:
        print_json(rep)
        return
    out.print(
        per_job_table(sc, {f"{a} (fast)": r for a, r in fast.items()} | {f"{a} (ns-3)": r for a, r in ns3.items()})
    )
    out.print(ns3_compare.ratio_table(sc, rep["ratios"]))
    if outdir:
        out.print(f"wrote {outdir}/fast/ and {outdir}/ns3/")


def _trace_interval(sc) -> float:
    comm = min(j.bytes_per_iter / sc.bottleneck_Bps(j) for j in sc.jobs)
    return max(sc.step_s, comm / 40)


@app.command()
def demo(
    outdir: Path = typer.Option(Path("out/demo"), "--out", help="where the plots and records go"),
    scenario: str = typer.Option("two-jobs", help="scenario to demonstrate"),
):
    """Two training jobs on one bottleneck: Reno vs MLTCP-Reno, with a table and plots."""
    try:
        sc = load(scenario)
    except ScenarioError as e:
        fail(str(e))
    _check_outdir(outdir)
    out.print(f"[bold]{sc.name}[/]: {sc.description}")
    if sc.mltcp_params:
        out.print(
            "MLTCP runs this scenario's own \\[mltcp] table, tuned for it: an experiment, not the shipped "
            "default (the default on scenarios nobody tuned for: docs/results-suites.md)."
        )
    else:
        out.print(
            f"MLTCP runs the shipped default (no \\[mltcp] table): F = {defaults.SLOPE:g} r + "
            f"{defaults.INTERCEPT:g}" + (", behind the online switch" if defaults.ADAPTIVE else "") + "."
        )
    with _interruptible():
        results = run_simulations(sc, _algorithms(sc, None, True), quiet=False, trace_interval=_trace_interval(sc))
    rep = build_report(sc, results)
    files = _write_or_fail(sc, results, rep, outdir)
    out.print(per_job_table(sc, results))
    out.print(summary_table(rep))
    for f in files:
        out.print(f"  wrote {f}")


# Sub-commands of the other parts: module, name, the extra that brings their third-party
# dependencies, and modules they need that only the system provides (with how to get them).
_PARTS = (
    ("mltcp.scenarios_cli", "scenarios", None, {}),
    ("mltcp.controlplane.cli", "switch", "switch", {}),
    ("mltcp.traffic.cli", "traffic", None, {}),
    ("mltcp.tune", "tune", "tune", {}),
    ("mltcp.suite", "suite", None, {}),
    ("mltcp.traffic.kernel.cli", "kernel", "kernel", {}),
    (
        "mltcp.emulation.cli",
        "emulate",
        "emulate",
        {"mininet": "Mininet comes from the system packages: sudo bash scripts/install-system.sh"},
    ),
)


def _mount_not_installed(name: str, missing: str, hint: str) -> None:
    """A stand-in for a sub-command whose dependencies are not installed: it says what to
    install and exits 2, instead of `mltcp` itself failing to start."""

    @app.command(
        name,
        help=escape(f"(not available: missing Python module {missing!r}; {hint})"),
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    )
    def _stub(ctx: typer.Context):
        fail(f"`mltcp {name}` needs the Python module {missing!r}, which is not installed: {hint}")


def _absent(find_spec, module: str) -> bool:
    try:
        return find_spec(module) is None
    except ImportError:
        return True


def _mount_optional():
    from importlib import import_module
    from importlib.util import find_spec

    for mod, name, extra, system in _PARTS:
        pip_hint = f"pip install 'mltcp[{extra}]'" if extra else "reinstall mltcp"
        try:
            m = import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and mod.startswith(e.name):
                continue  # that part is not installed in this checkout
            if e.name and e.name.split(".")[0] == "mltcp":
                raise  # a module of this package is missing: a real bug, not a missing extra
            _mount_not_installed(name, e.name or "?", pip_hint)
            continue
        absent = [(m_, how) for m_, how in system.items() if _absent(find_spec, m_)]
        if absent:
            _mount_not_installed(name, absent[0][0], absent[0][1])
            continue
        app.add_typer(m.app, name=name)


def main():
    _mount_optional()
    app()


if __name__ == "__main__":
    main()
