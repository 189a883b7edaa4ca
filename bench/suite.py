"""MLTCP's default on random suites against its base and the centralized reference.

    python bench/suite.py DIR [DIR ...] [--seeds 1-3] [--config '{"mltcp.slope": 1.0}'] [--reference]
                          [--workers N] [--scheduler tcp://HOST:PORT] [--json OUT.json] [--plot OUT.png]

DIR is a suite written by ``mltcp scenarios generate``. Every scenario runs under its base congestion
control (the file's ``cc``), its MLTCP variant with the scenario's own [mltcp] table (none in a
generated suite: the shipped default) plus ``--config``, and with ``--reference`` the ref-best
reference (docs/references.md), once per seed, through :mod:`mltcp.sweep` (Dask when installed).
With ``--switch-policy ecn-by-progress|priority-by-progress`` the arm measured against the base is
instead the base hosts behind the in-network policy (its defaults plus ``--config`` keys such as
``switch.bands``), and the base is the plain switch (in-network MLTCP, docs/in-network.md).

Per scenario an arm's avg (p99) iteration time is the mean over the seeds of each run's steady-state
average (p99): one run's p99 moves by up to ~15 % when a job starts 10 us later (the simulator's
noise floor, docs/references.md), so single runs cannot show a 2 % difference. Printed per suite:
the do-no-harm tallies (avg >= 0.98x and p99 >= 0.95x of the base, none below 0.90x, drops or ECN
marks <= the base), geo means and the worst case, and with --reference the reference's gain over the
base, MLTCP's share of that gain and MLTCP's geo-mean against ref-fifo.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from mltcp import reference as reference_mod, sweep
from mltcp.progress_policy import POLICIES
from mltcp.suite import parse_seeds

ARM_BASE, ARM_MLTCP, ARM_REF, ARM_FIFO, ARM_FAIR = "base", "mltcp", "ref-best", "ref-fifo", "ref-fair"


def gmean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def scenario_tables(path: Path) -> dict:
    import tomllib

    return tomllib.loads(path.read_text())


def scenario_cc(path: Path) -> str:
    return scenario_tables(path).get("cc", "reno")


def marks_ecn(path: Path) -> bool:
    """Whether any of the scenario's links marks ECN (its losses are then counted as marks)."""
    return any(link.get("ecn", "none") != "none" for link in scenario_tables(path).get("links", []))


def build_tasks(
    files: list[Path],
    seeds: list[int],
    config: dict,
    reference: bool,
    iterations: int | None = None,
    switch_policy: str | None = None,
) -> list[tuple[str, sweep.Task]]:
    """(role, task) pairs: each scenario x seed under base, MLTCP (and the references); every job
    cut to ``iterations`` if given (:func:`mltcp.sweep.cut_iterations`). With ``switch_policy`` the
    measured arm is the base behind that in-network policy and the base runs the plain switch."""
    out = []
    for f in files:
        cc = scenario_cc(f)
        for seed in seeds:
            if switch_policy:
                plain = sweep.Task(str(f), cc, seed, iterations, config={"switch_policy": "off"})
                treated = sweep.Task(str(f), cc, seed, iterations, config={"switch_policy": switch_policy, **config})
            else:
                plain = sweep.Task(str(f), cc, seed, iterations=iterations)
                treated = sweep.Task(str(f), f"mltcp-{cc}", seed, iterations, config=config or None)
            out += [(ARM_BASE, plain), (ARM_MLTCP, treated)]
            if reference:  # ref-best is chosen from these and the base (per_scenario), not run again
                out += [
                    (f"ref-{n}", sweep.Task(str(f), f"ref-{n}", seed, iterations=iterations))
                    for n in reference_mod.CANDIDATES
                ]
    return out


def with_best(roles: list[str], records: list[dict]) -> tuple[list[str], list[dict]]:
    """The roles and records with a ref-best record per scenario and seed that has the references:
    :func:`mltcp.reference.best_of` over the candidates' records and the base's."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for role, rec in zip(roles, records):
        if role == ARM_BASE or role.startswith("ref-"):
            groups[(rec["source"], rec["seed"])].append(rec)
    # (a group with a failed run gets none: per_scenario reports the failure)
    best = [reference_mod.best_of(g) for g in groups.values() if len(g) > 1 and all(r.get("ok") for r in g)]
    return roles + [ARM_REF] * len(best), records + best


def per_scenario(roles: list[str], records: list[dict]) -> dict[str, dict[str, dict]]:
    """scenario source -> role -> the seed-means of avg, p99 and drops/marks (and the reference's picks)."""
    acc: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for role, rec in zip(roles, records):
        if not rec.get("ok", False):
            raise RuntimeError(f"{rec.get('source')} seed {rec.get('seed')} {rec.get('arm')}: {rec.get('error')}")
        acc[rec["source"]][role].append(rec)
    out = {}
    for src, by_role in acc.items():
        out[src] = {
            role: {
                "avg": sum(r["avg_iter_s"] for r in rs) / len(rs),
                "p99": sum(r["p99_iter_s"] for r in rs) / len(rs),
                "drops": sum(r["drops"] for r in rs),
                "marks": sum(r["ecn_marks"] for r in rs),
                "picks": [r.get("reference_pick") for r in rs],
            }
            for role, rs in by_role.items()
        }
    return out


def summarize(table: dict[str, dict[str, dict]], ecn_suite: bool) -> dict:
    rows = []
    for src, arm in sorted(table.items()):
        b, m = arm[ARM_BASE], arm[ARM_MLTCP]
        loss = "marks" if ecn_suite else "drops"
        row = {
            "scenario": Path(src).stem,
            "speedup_avg": b["avg"] / m["avg"],
            "speedup_p99": b["p99"] / m["p99"],
            "loss_base": b[loss],
            "loss_mltcp": m[loss],
        }
        if ARM_REF in arm:
            row["ref_speedup_avg"] = b["avg"] / arm[ARM_REF]["avg"]
            row["mltcp_vs_fifo_avg"] = arm[ARM_FIFO]["avg"] / m["avg"]
            row["fair_speedup_avg"] = b["avg"] / arm[ARM_FAIR]["avg"]
            row["ref_picks"] = arm[ARM_REF]["picks"]
        rows.append(row)
    n = len(rows)
    sa, sp = [r["speedup_avg"] for r in rows], [r["speedup_p99"] for r in rows]
    out = {
        "scenarios": n,
        "loss": "ECN marks" if ecn_suite else "drops",
        "avg_geo": gmean(sa),
        "avg_worst": min(sa),
        "p99_geo": gmean(sp),
        "p99_worst": min(sp),
        "share_avg_ge_0.98": sum(x >= 0.98 for x in sa) / n,
        "share_p99_ge_0.95": sum(x >= 0.95 for x in sp) / n,
        "below_0.90": sum(min(a, p) < 0.90 for a, p in zip(sa, sp)),
        "share_loss_le_base": sum(r["loss_mltcp"] <= r["loss_base"] for r in rows) / n,
        "rows": rows,
    }
    if rows and "ref_speedup_avg" in rows[0]:
        ref = gmean([r["ref_speedup_avg"] for r in rows])
        out["ref_avg_geo"] = ref
        out["share_of_ref_gain"] = (out["avg_geo"] - 1) / (ref - 1) if ref > 1 else float("nan")
        out["mltcp_vs_fifo_geo"] = gmean([r["mltcp_vs_fifo_avg"] for r in rows])
        out["fair_avg_geo"] = gmean([r["fair_speedup_avg"] for r in rows])
    return out


def print_summary(name: str, s: dict) -> None:
    ok = lambda c: "yes" if c else "NO"  # noqa: E731
    print(f"\n{name}: {s['scenarios']} scenarios")
    print(
        f"  avg  geo {s['avg_geo']:.3f}x worst {s['avg_worst']:.3f}x, >= 0.98x in {s['share_avg_ge_0.98']:.0%} "
        f"(target >= 95 %: {ok(s['share_avg_ge_0.98'] >= 0.95)})"
    )
    print(
        f"  p99  geo {s['p99_geo']:.3f}x worst {s['p99_worst']:.3f}x, >= 0.95x in {s['share_p99_ge_0.95']:.0%} "
        f"(target >= 95 %: {ok(s['share_p99_ge_0.95'] >= 0.95)})"
    )
    print(f"  below 0.90x (avg or p99): {s['below_0.90']} (target 0: {ok(s['below_0.90'] == 0)})")
    print(
        f"  {s['loss']} <= the base in {s['share_loss_le_base']:.0%} (target >= 90 %: "
        f"{ok(s['share_loss_le_base'] >= 0.9)})"
    )
    if "ref_avg_geo" in s:
        print(
            f"  reference (ref-best) over the base: {s['ref_avg_geo']:.3f}x; MLTCP's share of that gain "
            f"{s['share_of_ref_gain']:.0%} (target >= 50 % on general suites); MLTCP against ref-fifo "
            f"{s['mltcp_vs_fifo_geo']:.3f} (target >= 0.95 on compatible suites)"
        )
        print(
            f"  ideal fair sharing (ref-fair, no losses or ramp-up) over the base: {s['fair_avg_geo']:.3f}x: "
            "the part of the reference's gain that is transport, not scheduling"
        )


OUTPUT_OPTIONS = ("--markdown", "--json", "--plot", "--readme")
README_START = "<!-- suites-table:start (generated by bench/suite.py --readme; edits are overwritten) -->"
README_END = "<!-- suites-table:end -->"


def with_readme_block(text: str, table: str) -> str:
    """``text`` with the part between README_START and README_END replaced by ``table``."""
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {README_START!r} ... {README_END!r} are missing or out of order")
    return text[: start + len(README_START)] + "\n" + table + text[end:]


def measuring_args(argv: list[str]) -> list[str]:
    """``argv`` without the options that only name output files (and their values)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in OUTPUT_OPTIONS:
            skip = True
        elif not a.startswith(tuple(o + "=" for o in OUTPUT_OPTIONS)):
            out.append(a)
    return out


def markdown(summaries: dict[str, dict], argv: list[str]) -> str:
    """The suites' tallies as a markdown table, headed by the command that made it (without the
    options naming output files; the date is the commit's)."""
    import shlex

    lines = [
        f"Generated by `python bench/suite.py {shlex.join(measuring_args(argv))}`.",
        "",
        "| suite | scenarios | avg geo (worst) | p99 geo (worst) | avg >= 0.98x | p99 >= 0.95x | below 0.90x "
        "| losses <= base | ref-best / ref-fair over base | MLTCP's share of ref-best's gain | MLTCP vs ref-fifo |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summaries.items():
        ref = ("-", "-", "-")
        if "ref_avg_geo" in s:
            share = (s["avg_geo"] - 1) / (s["ref_avg_geo"] - 1) if s["ref_avg_geo"] > 1 else float("nan")
            ref = (
                f"{s['ref_avg_geo']:.3f}x / {s['fair_avg_geo']:.3f}x",
                f"{share:.0%}",
                f"{s['mltcp_vs_fifo_geo']:.3f}",
            )
        lines.append(
            f"| `{Path(name).name}` | {s['scenarios']} | {s['avg_geo']:.3f}x ({s['avg_worst']:.3f}) "
            f"| {s['p99_geo']:.3f}x ({s['p99_worst']:.3f}) | {s['share_avg_ge_0.98']:.0%} "
            f"| {s['share_p99_ge_0.95']:.0%} "
            f"| {s['below_0.90']} | {s['share_loss_le_base']:.0%} | {ref[0]} | {ref[1]} | {ref[2]} |"
        )
    return "\n".join(lines) + "\n"


def plot(path: Path, summaries: dict[str, dict]) -> None:
    """One panel per suite: each scenario's avg speedup of MLTCP (and of ref-best) over the base, sorted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(summaries)
    cols = min(n, 3)
    rows_n = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.2 * rows_n), squeeze=False, sharey=True)
    for ax, (name, s) in zip(axes.flat, summaries.items()):
        rows = sorted(s["rows"], key=lambda r: r["speedup_avg"])
        x = range(len(rows))
        ax.plot(x, [r["speedup_avg"] for r in rows], marker=".", label="MLTCP")
        if "ref_speedup_avg" in rows[0]:
            ax.plot(x, [r["ref_speedup_avg"] for r in rows], ls="--", lw=1, label="ref-best")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(0.98, color="r", lw=0.6, ls=":")
        ax.set_title(Path(name).name, fontsize=9)
        ax.set_xlabel("scenario (sorted by MLTCP)", fontsize=8)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    axes[0][0].set_ylabel("avg speedup over the base")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--seeds", default="1-3")
    ap.add_argument(
        "--config",
        default="{}",
        help="MLTCP settings written into each scenario, JSON (keys as in a tune space: mltcp.slope, ...)",
    )
    ap.add_argument("--reference", action="store_true", help="also run ref-best, ref-fifo and ref-fair")
    ap.add_argument(
        "--switch-policy",
        choices=[p for p in POLICIES if p != "off"],
        default=None,
        help="measure the base hosts behind this in-network policy against the plain switch (not mltcp-<cc>)",
    )
    ap.add_argument(
        "--iterations", type=int, default=None, help="every job runs this many iterations (default: the scenario's)"
    )
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--scheduler", default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None)
    ap.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="write the tallies as a markdown table (with the command) to this file",
    )
    ap.add_argument("--readme", type=Path, default=None, help="put the same table between this file's suites markers")
    a = ap.parse_args(argv)
    try:
        seeds, config = parse_seeds(a.seeds), json.loads(a.config)
        if a.readme is not None:
            with_readme_block(a.readme.read_text(), "")  # the markers are there: fail before the runs
        if a.iterations is not None and not 8 <= a.iterations <= 100_000:
            raise ValueError(f"--iterations: {a.iterations} is not in 8..100000")
    except (ValueError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summaries = {}
    for d in a.dirs:
        files = sorted(d.glob("*.toml"))
        if not files:
            print(f"error: {d}: no scenario files", file=sys.stderr)
            return 2
        pairs = build_tasks(files, seeds, config, a.reference, a.iterations, a.switch_policy)
        recs = sweep.run_tasks([t for _, t in pairs], scheduler=a.scheduler, workers=a.workers)
        roles, recs = with_best([r for r, _ in pairs], recs)
        summaries[str(d)] = summarize(per_scenario(roles, recs), marks_ecn(files[0]))
        print_summary(str(d), summaries[str(d)])
    cut = f"; {a.iterations} iterations per job" if a.iterations else ""
    arm = f"{a.switch_policy} vs the plain switch" if a.switch_policy else "mltcp-<cc> vs <cc>"
    print(f"\n{arm}; seeds {a.seeds}; config {json.dumps(config)}{cut}")
    if a.json:
        doc = {"seeds": seeds, "config": config, "switch_policy": a.switch_policy, "suites": summaries}
        a.json.write_text(json.dumps(doc, indent=1))
    if a.plot:
        plot(a.plot, summaries)
    table = markdown(summaries, argv if argv is not None else sys.argv[1:])
    if a.markdown:
        a.markdown.write_text(table)
    if a.readme:
        text = with_readme_block(a.readme.read_text(), table)
        tmp = a.readme.with_name(f".{a.readme.name}.tmp")
        tmp.write_text(text)
        tmp.replace(a.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
