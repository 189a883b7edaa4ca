"""`mltcp scenarios`: list the built-in scenarios; `mltcp scenarios generate`: write a random suite."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from . import suitegen
from .console import err, fail, out
from .scenario import BASES, ScenarioError, builtin_names, load

app = typer.Typer(
    add_completion=False,
    invoke_without_command=True,
    help="The built-in scenarios (no sub-command), or write a random suite (generate).",
)


@app.callback()
def list_scenarios(ctx: typer.Context):
    """List the built-in scenarios."""
    if ctx.invoked_subcommand is not None:
        return
    t = Table("name", "jobs", "links", "cc", "description")
    for n in builtin_names():
        sc = load(n)
        t.add_row(n, str(len(sc.jobs)), str(len(sc.links)), sc.cc, sc.description.split(". ")[0].split(": ")[0])
    out.print(t)


@app.command()
def generate(
    outdir: Path = typer.Argument(..., help="folder to write the suite's TOMLs into (created)"),
    n: int = typer.Option(20, "--n", min=1, max=100_000, help="how many scenarios"),
    seed: int = typer.Option(1, "--seed", min=0, help="the suite's seed (the same seed, the same suite)"),
    cc: str = typer.Option("reno", "--cc", help=f"base algorithm: {', '.join(BASES)}"),
    topology: str = typer.Option("dumbbell", "--topology", help=f"one of {', '.join(suitegen.TOPOLOGIES)}"),
    compatible: bool = typer.Option(
        False, "--compatible", help="equal periods, shares that fit one period (a perfect interleave exists)"
    ),
    ecn: bool = typer.Option(
        False, "--ecn", help="reno/cubic: the links mark ECN (a step at max(20 packets, 1 BDP)): ECN-Reno hosts"
    ),
):
    """Write N random scenarios nobody tuned for (distributions: docs/references.md)."""
    if cc not in BASES:
        fail(f"--cc: unknown base algorithm {cc!r} (choose from {', '.join(BASES)})")
    if topology not in suitegen.TOPOLOGIES:
        fail(f"--topology: unknown {topology!r} (choose from {', '.join(suitegen.TOPOLOGIES)})")
    if ecn and cc not in suitegen.ECN_OPTIONAL:
        fail(f"--ecn: {cc} suites always mark ECN; --ecn is for {' and '.join(suitegen.ECN_OPTIONAL)}")
    if outdir.exists() and not outdir.is_dir():
        fail(f"{outdir}: exists and is not a folder")
    try:
        files = suitegen.generate(outdir, n, seed, cc, topology, compatible, ecn)
    except ScenarioError as e:  # a draw the loader refuses is a bug of the generator: say which field
        fail(f"generated scenario refused: {e}", 1)
    err.print(f"wrote {len(files)} scenarios into {outdir}")
