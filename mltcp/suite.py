"""`mltcp suite`: run a set of scenarios under several arms and seeds, and compare the arms.

``mltcp suite run DIR_OR_NAMES --arms reno,mltcp-reno --seeds 1-5`` runs every scenario (the TOMLs
of a folder, files, built-in names) at every seed under every arm through :func:`mltcp.sweep.run_tasks`
(a local Dask cluster, or ``--scheduler tcp://HOST:PORT``), then compares each arm after the first
with the first (the base), case by case (one scenario at one seed):

* speedups: base avg (p99) iteration time / the arm's; geometric mean and worst case over cases;
* loses: the share of scenarios whose speedup (geometric mean over its seeds) is below 1;
* drops (ECN marks): (arm's + 1) / (base's + 1) per case; geometric mean and worst case.

``--out DIR`` writes ``tasks.jsonl`` (one record per run, in task order), ``report.json`` and
``speedup.png`` (each arm's per-scenario speedup over the base, sorted), each file whole or not at all.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Optional, Sequence

import typer
from rich import box
from rich.table import Table

from . import arms, records as rec_io, sweep
from .console import err, error_exit, out, print_json
from .scenario import ScenarioError, resolve

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Run scenario suites under several arms and seeds (Dask), and compare the arms.",
)


class InputError(ValueError):
    """Bad input: the message names the option or file; exit 2, nothing written."""


# ---- input ------------------------------------------------------------------------------------------


def parse_seeds(text: str) -> list[int]:
    """ "1-5", "1,2,7" or "1-3,9" -> the seeds, in order, none repeated."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(-?\d+)(?:\s*-\s*(-?\d+))?", part)
        if not m:
            raise InputError(f"--seeds: {part!r} is not a seed or a range A-B (got {text!r})")
        lo, hi = int(m.group(1)), int(m.group(2) if m.group(2) is not None else m.group(1))
        if hi < lo:
            raise InputError(f"--seeds: the range {part!r} is empty")
        seeds.extend(range(lo, hi + 1))
    if len(set(seeds)) != len(seeds):
        raise InputError(f"--seeds: a seed is repeated in {text!r}")
    if len(seeds) > 100_000:
        raise InputError(f"--seeds: {len(seeds)} seeds is too many (at most 100000)")
    return seeds


def parse_arms(text: str) -> list[str]:
    names = [a.strip() for a in text.split(",") if a.strip()]
    if len(names) < 2 or len(set(names)) != len(names):
        raise InputError(f"--arms: needs at least two distinct arms, the base first (got {text!r})")
    for a in names:
        try:
            arms.check(a)
        except ValueError as e:
            raise InputError(f"--arms: {e}") from None
    return names


def expand_scenarios(items: Sequence[str]) -> list[str]:
    """Folders become their *.toml files (sorted); files and built-in names stay as given."""
    found: list[str] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            tomls = sorted(p.glob("*.toml"))
            if not tomls:
                raise InputError(f"DIR_OR_NAMES: the folder {item} holds no .toml scenario")
            found.extend(str(t) for t in tomls)
        else:
            resolve(item)  # ScenarioError for an unknown name
            found.append(item)
    return found


# ---- the comparison (pure) --------------------------------------------------------------------------


def gmean(xs: Sequence[float]) -> float:
    xs = list(xs)
    if not xs or any(not (x > 0 and math.isfinite(x)) for x in xs):
        return float("nan")
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and math.isfinite(a) and math.isfinite(b) else float("nan")


def signal_of(records: Sequence[dict]) -> str:
    """ECN marks for DCQCN (it drops nothing by design), drops for the others."""
    return "ecn_marks" if any(str(r.get("arm", "")).endswith("dcqcn") for r in records) else "drops"


def compare_arms(records: Sequence[dict], arm_names: Sequence[str]) -> dict:
    """Each arm after the first against the first (the base), over the cases (scenario x seed)
    where both ran to the end; failed runs are counted, not compared."""
    base = arm_names[0]
    cases: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in records:
        cases[(r["source"], r["scenario"], r["seed"])][r["arm"]] = r
    failed = [r for r in records if not r.get("ok")]
    report = {
        "base": base,
        "cases": len(cases),
        "runs": len(records),
        "failed": len(failed),
        "failures": [{k: r.get(k) for k in ("scenario", "source", "seed", "arm", "error")} for r in failed],
        "arms": {},
    }
    for arm in arm_names[1:]:
        rows, by_scenario = [], defaultdict(list)
        for (src, name, seed), by_arm in cases.items():
            b, a = by_arm.get(base), by_arm.get(arm)
            if not (b and a and b.get("ok") and a.get("ok")):
                continue
            sig = signal_of([a, b])
            row = {
                "scenario": name,
                "source": src,
                "seed": seed,
                "speedup_avg": _ratio(b["avg_iter_s"], a["avg_iter_s"]),
                "speedup_p99": _ratio(b["p99_iter_s"], a["p99_iter_s"]),
                "signal": sig,
                "signal_ratio": (a[sig] + 1.0) / (b[sig] + 1.0),
            }
            rows.append(row)
            by_scenario[(src, name)].append(row)
        per_scenario = sorted(
            (
                {
                    "scenario": name,
                    "source": src,
                    "seeds": len(rs),
                    "speedup_avg": gmean([r["speedup_avg"] for r in rs]),
                    "speedup_p99": gmean([r["speedup_p99"] for r in rs]),
                    "signal_ratio": gmean([r["signal_ratio"] for r in rs]),
                }
                for (src, name), rs in by_scenario.items()
            ),
            key=lambda s: s["speedup_avg"],
        )
        report["arms"][arm] = {
            "compared_cases": len(rows),
            "speedup_avg": gmean([r["speedup_avg"] for r in rows]),
            "speedup_p99": gmean([r["speedup_p99"] for r in rows]),
            "worst_speedup_avg": min((r["speedup_avg"] for r in rows), default=float("nan")),
            "worst_speedup_p99": min((r["speedup_p99"] for r in rows), default=float("nan")),
            "worst_case": min(rows, key=lambda r: r["speedup_avg"], default=None),
            "loses_share": (
                sum(s["speedup_avg"] < 1.0 for s in per_scenario) / len(per_scenario) if per_scenario else float("nan")
            ),
            "signal_ratio": gmean([r["signal_ratio"] for r in rows]),
            "worst_signal_ratio": max((r["signal_ratio"] for r in rows), default=float("nan")),
            "per_scenario": per_scenario,
            "per_case": rows,
        }
    return report


def report_table(rep: dict) -> Table:
    t = Table(
        title=f"{rep['cases']} cases (scenario x seed) against {rep['base']}: geometric means, worst case, "
        f"share of scenarios lost, drops (ECN marks for DCQCN) as (arm+1)/(base+1)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for c in ("arm", "avg", "p99", "worst avg", "worst p99", "loses", "drops", "worst drops"):
        t.add_column(c, justify="left" if c == "arm" else "right", no_wrap=True)
    for arm, a in rep["arms"].items():
        t.add_row(
            arm,
            f"{a['speedup_avg']:.3f}x",
            f"{a['speedup_p99']:.3f}x",
            f"{a['worst_speedup_avg']:.3f}x",
            f"{a['worst_speedup_p99']:.3f}x",
            f"{a['loses_share'] * 100:.0f} %",
            f"x{a['signal_ratio']:.3f}",
            f"x{a['worst_signal_ratio']:.3f}",
        )
    return t


def worst_lines(rep: dict) -> list[str]:
    return [
        f"{arm}: worst case {wc['scenario']}@seed{wc['seed']} ({wc['speedup_avg']:.3f}x avg, "
        f"{wc['speedup_p99']:.3f}x p99)"
        for arm, a in rep["arms"].items()
        if (wc := a["worst_case"])
    ]


def plot_speedups(path: Path, rep: dict) -> Path:
    from . import plots  # the Agg backend
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
    for ax, key, label in ((axes[0], "speedup_avg", "avg"), (axes[1], "speedup_p99", "p99")):
        for arm, a in rep["arms"].items():
            ys = sorted(s[key] for s in a["per_scenario"])
            ax.plot(range(1, len(ys) + 1), ys, marker="o", ms=3, lw=1, label=arm)
        ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
        ax.set_xlabel("scenario (sorted by speedup)")
        ax.set_ylabel(f"{label} iteration-time speedup over {rep['base']} (x)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"mltcp suite: {rep['cases']} cases, speedup over {rep['base']} per scenario (geometric mean over seeds)"
    )
    return plots._save(fig, path)


def write_outputs(outdir: Path, records: Sequence[dict], rep: dict) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    rec_io.write_text_atomic(
        outdir / "tasks.jsonl", "".join(json.dumps(r, default=_json_default) + "\n" for r in records)
    )
    rec_io.write_text_atomic(outdir / "report.json", json.dumps(rep, indent=1, default=_json_default) + "\n")
    files = [outdir / "tasks.jsonl", outdir / "report.json"]
    if any(a["per_scenario"] for a in rep["arms"].values()):
        files.append(plot_speedups(outdir / "speedup.png", rep))
    return files


def _json_default(o):
    return float(o)


# ---- the command ------------------------------------------------------------------------------------


@app.command("run")
def run_cmd(
    scenarios: list[str] = typer.Argument(
        ..., help="scenario folders (every *.toml in them), TOML files or built-in names"
    ),
    arm_list: str = typer.Option(
        "reno,mltcp-reno",
        "--arms",
        help="arms, the base first: congestion controls (reno, mltcp-reno, cubic, ...) or other registered arms",
    ),
    seeds: str = typer.Option("1", help="seeds per scenario: 1-5, 1,2,7 or 1-3,9"),
    iterations: Optional[int] = typer.Option(None, help="cut every scenario to this many iterations (faster, noisier)"),
    workers: Optional[int] = typer.Option(
        None, help="local worker processes; default one per core (1: in this process)"
    ),
    scheduler: Optional[str] = typer.Option(None, help="an existing Dask scheduler, tcp://HOST:PORT"),
    outdir: Optional[Path] = typer.Option(None, "--out", help="write tasks.jsonl, report.json and speedup.png here"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on stdout (no progress bar)"),
):
    """Run every scenario x seed x arm and compare each arm with the first."""
    try:
        if workers is not None and workers < 1:
            raise InputError(f"--workers: must be >= 1 (got {workers})")
        if iterations is not None and iterations < 2:
            raise InputError(f"--iterations: must be >= 2 (got {iterations})")
        if scheduler is not None and not re.fullmatch(r"(tcp|tls|ucx|inproc)://\S+", scheduler):
            raise InputError(f"--scheduler: expected tcp://HOST:PORT (got {scheduler!r})")
        if scheduler is not None and not sweep.have_dask():
            raise InputError("--scheduler: needs dask.distributed: pip install 'mltcp[distributed]'")
        if outdir is not None and (why := rec_io.output_problem(outdir, is_dir=True)):
            raise InputError(f"--out: {why}")
        arm_names = parse_arms(arm_list)
        tasks = sweep.tasks_for(expand_scenarios(scenarios), arm_names, parse_seeds(seeds), iterations)
        sweep.check(tasks)
    except (InputError, ScenarioError) as e:
        raise error_exit(str(e))
    if not as_json:
        where = scheduler or (
            f"{workers} local process(es)" if workers else f"{sweep.default_workers()} local processes"
        )
        err.print(
            f"{len(tasks)} runs ({len(tasks) // len(arm_names)} cases x {len(arm_names)} arms) on {where}",
            highlight=False,
        )
    try:
        records = sweep.run_tasks(tasks, scheduler=scheduler, workers=workers, progress=not as_json, checked=True)
    except sweep.SweepError as e:
        raise error_exit(str(e), 1)
    except KeyboardInterrupt:
        raise error_exit("interrupted: the queued runs were cancelled and the workers stopped", 130)
    rep = compare_arms(records, arm_names)
    files = []
    if outdir is not None:
        try:
            files = write_outputs(outdir, records, rep)
        except OSError as e:
            raise error_exit(f"--out {outdir}: {e.strerror or e}", 1)
    if as_json:
        print_json({k: v for k, v in rep.items()})
    else:
        out.print(report_table(rep))
        for line in worst_lines(rep):
            out.print(line, highlight=False, soft_wrap=True)
        for f in rep["failures"]:
            out.print(
                f"failed: {f['scenario']}@seed{f['seed']} {f['arm']}: {f['error']}", highlight=False, soft_wrap=True
            )
        if files:
            out.print("wrote " + ", ".join(str(f) for f in files), highlight=False, soft_wrap=True)
    if rep["failed"]:
        raise error_exit(f"{rep['failed']} of {rep['runs']} runs failed (listed in the report)", 1)
