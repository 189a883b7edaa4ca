"""Real PyTorch DDP jobs in the emulation, several runs of the base against its MLTCP variant: one
`mltcp emulate run SCENARIO --cc CC --compare --json` per run (root, Mininet, BPF), a row per run
and the tallies the DDP targets are judged by (do no harm: avg >= 0.98x and p99 >= 0.95x with no
more retransmissions; the interleave; identical losses). First each distinct job runs alone
(`mltcp emulate calibrate`): the first job's time alone is the perfect-interleave bound, and the
runs use the calibrated scenario, so each row also says how close the simulator's prediction of
every job came (`sim_vs_emu`).

    sudo .venv/bin/python bench/bench_ddp.py scenarios/ddp-mlp-compatible.toml --runs 5
    sudo .venv/bin/python bench/bench_ddp.py scenarios/ddp-mlp-compatible.toml --cc cubic --runs 3 --markdown t.md

Each run takes about two minutes here. The machine's load is printed with every run: these are
timings of real processes on 2 cores, so run it idle.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from mltcp import scenario
from mltcp.metrics import overlap_fractions
from mltcp.records import read_csv


def one_run(scenario: str, cc: str, records: Path | None, compare: bool = True) -> dict:
    """One run's JSON document (with ``compare`` both arms; the records under ``records``)."""
    r = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "emulate", "run", scenario, "--cc", cc, "--json"]
        + (["--compare"] if compare else [])
        + (["--records", str(records)] if records else []),
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise SystemExit(f"bench_ddp: the run failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout)


def median_overlap(records: Path, arm: str, warmup: int) -> float:
    """The median over steady iterations of the largest communication overlap among the jobs."""
    worst: dict[int, float] = {}
    for (_, it), f in overlap_fractions(read_csv(records / f"{arm}.csv")).items():
        if it >= warmup:
            worst[it] = max(worst.get(it, 0.0), f)
    v = sorted(worst.values())
    return v[len(v) // 2] if v else float("nan")


def calibrated(path: str, cc: str, out: Path) -> dict:
    """`mltcp emulate calibrate`: every job alone once (one run per distinct job), the scenario
    written to ``out`` with the simulator's compute measured; its JSON document."""
    r = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "emulate", "calibrate", path, "--cc", cc, "--out", str(out), "--json"],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise SystemExit(f"bench_ddp: the runs alone failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout)


FLOOR_RATE_FACTOR = 10


def network_free(path: str, out: Path) -> str:
    """The scenario with every link ten times as fast: the jobs together where the network never
    limits them, so what is left is the hosts' own floor (the ranks sharing 2 cores)."""
    import tomli_w

    from mltcp import tomlfile

    doc = tomlfile.loads(scenario.resolve(path).read_text())
    for link in doc["links"]:
        for key in ("rate_gbps", "rate_mbps", "rate_bps"):
            if key in link:
                link[key] = link[key] * FLOOR_RATE_FACTOR
    doc["name"] = f"{doc.get('name', 'scenario')}-network-free"
    out.write_text(tomli_w.dumps(doc, multiline_strings=True))
    return str(out)


def sim_over_emu(doc: dict) -> list[float]:
    """The simulator's average iteration over the emulation's, per job and arm (1 = exact)."""
    return [1 / v for arm in (doc.get("sim_vs_emu") or {}).values() if isinstance(arm, dict) for v in arm.values() if v]


def row_of(doc: dict, records: Path, load: float, warmup: int) -> dict:
    b, m = doc["baseline"], doc["mltcp"]
    return {
        "load": load,
        "base_avg": b["avg_iter_s"],
        "base_p99": b["p99_iter_s"],
        "mltcp_avg": m["avg_iter_s"],
        "mltcp_p99": m["p99_iter_s"],
        "speedup_avg": doc["speedup_avg"],
        "speedup_p99": doc["speedup_p99"],
        "interleaved_at": m["interleaved_at_iteration"],
        "overlap_base": median_overlap(records, "baseline", warmup),
        "overlap_mltcp": median_overlap(records, "mltcp", warmup),
        "retrans_base": b["retransmissions"],
        "retrans_mltcp": m["retransmissions"],
        "drops_base": b["drops"],
        "drops_mltcp": m["drops"],
        "losses_identical": doc["losses_identical"],
        "sim_over_emu": sim_over_emu(doc),
        "tcp_base": tcp_counted(doc, "baseline"),
        "tcp_mltcp": tcp_counted(doc, "mltcp"),
        "switch_mltcp": switch_state(doc),
    }


def switch_state(doc: dict) -> dict:
    """The MLTCP arm's online switch at the end (the report's kernel_sockets): how many of the ranks'
    connections had the hook engaged, and each one's last stretch (> 1.25: judged contended)."""
    socks = [
        s
        for job in (doc.get("kernel_sockets") or {}).get("mltcp", {}).values()
        for rank in job.values()
        for s in rank or []
        if s
    ]
    return {
        "engaged": sum(s["engaged"] for s in socks),
        "connections": len(socks),
        "last_stretch": [s.get("last_stretch") for s in socks],
    }


def tcp_counted(doc: dict, arm: str) -> dict:
    """The ranks' namespaces' TCP counters over every job of an arm (mltcp.ddp.netstat)."""
    from mltcp.ddp import netstat

    return netstat.summed(list(doc.get("tcp_counters", {}).get(arm, {}).values()))


def tallies(rows: list[dict], avg_target: float, p99_target: float) -> dict:
    def no_harm(r):
        return r["speedup_avg"] >= 0.98 and r["speedup_p99"] >= 0.95 and r["retrans_mltcp"] <= r["retrans_base"]

    def target(r):
        return (
            r["speedup_avg"] >= avg_target
            and r["speedup_p99"] >= p99_target
            and r["interleaved_at"] is not None
            and r["interleaved_at"] <= 10
            and r["retrans_mltcp"] <= r["retrans_base"]
        )

    return {
        "runs": len(rows),
        "no_harm": sum(map(no_harm, rows)),
        "target": sum(map(target, rows)),
        "losses_identical": sum(bool(r["losses_identical"]) for r in rows),
        "sim_within_15pc": sum(
            bool(r["sim_over_emu"]) and all(abs(x - 1) <= 0.15 for x in r["sim_over_emu"]) for r in rows
        ),
    }


HEAD = (
    "| run | load | base avg / p99 (s) | MLTCP avg / p99 (s) | speedup avg / p99 | interleaved at "
    "| median overlap base -> MLTCP | retransmissions | drops | simulator / emulation "
    "| timeouts / tail probes / DSACKed, base -> MLTCP |"
)


def run_table(rows: list[dict], summary: str) -> str:
    """The runs as a markdown table, a row each, then the summary line."""
    delimiter = "|" + "---|" * (HEAD.count("|") - 1)
    return "\n".join([HEAD, delimiter] + [markdown_row(i, r) for i, r in enumerate(rows, 1)] + ["", summary, ""])


def markdown_row(i: int, r: dict) -> str:
    at = "-" if r["interleaved_at"] is None else str(r["interleaved_at"])
    return (
        f"| {i} | {r['load']:.1f} | {r['base_avg']:.3f} / {r['base_p99']:.3f} | {r['mltcp_avg']:.3f} / "
        f"{r['mltcp_p99']:.3f} | {r['speedup_avg']:.3f} / {r['speedup_p99']:.3f} | {at} "
        f"| {r['overlap_base']:.2f} -> {r['overlap_mltcp']:.2f} | {r['retrans_base']:,} -> {r['retrans_mltcp']:,} "
        f"| {r['drops_base']:,.0f} -> {r['drops_mltcp']:,.0f} | {_span(r['sim_over_emu'])} "
        f"| {_kinds(r.get('tcp_base'))} -> {_kinds(r.get('tcp_mltcp'))} |"
    )


def _kinds(tcp: dict | None) -> str:
    """Why a run's sockets retransmitted: timeouts / tail-loss probes / segments the peer had already."""
    if not tcp:
        return "-"
    return f"{tcp.get('TCPTimeouts', 0):,} / {tcp.get('TCPLossProbes', 0):,} / {tcp.get('TCPDSACKRecvSegs', 0):,}"


def _span(xs: list[float]) -> str:
    return "-" if not xs else f"{min(xs):.2f}-{max(xs):.2f}"


README_START = "<!-- ddp-table:start (generated by bench/bench_ddp.py --readme; edits are overwritten) -->"
README_END = "<!-- ddp-table:end -->"
README_HEAD = (
    "| scenario | base | runs | alone / floor (s) | base / alone | speedup avg | speedup p99 | do no harm "
    "| 1.2x / 1.3x | retransmissions MLTCP / base | losses identical | simulator within 15 % |"
)


def _range(xs: list[float], fmt: str = "{:.2f}") -> str:
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if f"{lo:.2f}" == f"{hi:.2f}" else f"{fmt.format(lo)}-{fmt.format(hi)}"


def readme_row(name: str, cc: str, rows: list[dict], t: dict) -> str:
    """One README row: the runs' ranges and tallies (``t``: :func:`tallies`, with the bounds)."""
    n = t["runs"]
    bounds = f"{t['alone_avg']:.3f} / {t['floor_avg']:.3f}" if "floor_avg" in t else "-"
    over_alone = _range([r["base_avg"] / t["alone_avg"] for r in rows], "{:.2f}x") if "alone_avg" in t else "-"
    retr = sorted(r["retrans_mltcp"] / max(r["retrans_base"], 1) for r in rows)
    avg, p99 = [r["speedup_avg"] for r in rows], [r["speedup_p99"] for r in rows]
    return (
        f"| `{name}` | {cc} | {n} | {bounds} | {over_alone} "
        f"| {_range(avg, '{:.2f}x')} | {_range(p99, '{:.2f}x')} "
        f"| {t['no_harm']} of {n} | {t['target']} of {n} | {_range(retr)} | {t['losses_identical']} of {n} "
        f"| {t['sim_within_15pc']} of {n} |"
    )


def with_readme_row(text: str, row: str) -> str:
    """``text`` with ``row`` in the DDP block: in place of the row of the same scenario and base,
    else appended."""
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {README_START!r} ... {README_END!r} are missing or out of order")
    key = row.split("|")[1:3]
    rows = [ln for ln in text[start + len(README_START) : end].splitlines() if ln.startswith("| `")]
    rows = [row if ln.split("|")[1:3] == key else ln for ln in rows]
    if row not in rows:
        rows.append(row)
    block = [
        "Two DDP jobs (2 ranks, gloo) on one link, the kernel defaults; each row by `sudo .venv/bin/python "
        "bench/bench_ddp.py scenarios/SCENARIO.toml --cc BASE --runs N --readme README.md`. Alone: one job with "
        "the link to itself (a perfect interleave's time); floor: both jobs on links 10x as fast (what the hosts' "
        "2 cores allow with the network out of the way; one run). Do no harm: avg >= 0.98x, p99 >= 0.95x, no more "
        "retransmissions ([docs/ddp.md](docs/ddp.md) has every run).",
        "",
        README_HEAD,
        "|" + "---|" * (README_HEAD.count("|") - 1),
        *rows,
    ]
    return text[: start + len(README_START)] + "\n" + "\n".join(block) + "\n" + text[end:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", help="a torch-ddp scenario (TOML file or built-in name)")
    ap.add_argument("--cc", default="reno", help="base congestion control: reno or cubic")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--avg-target", type=float, default=1.2, help="the avg speedup a run must reach")
    ap.add_argument("--p99-target", type=float, default=1.3, help="the p99 speedup a run must reach")
    ap.add_argument(
        "--no-alone",
        action="store_true",
        help="skip the runs alone (`mltcp emulate calibrate`): no perfect-interleave bound, the simulator uncalibrated",
    )
    ap.add_argument("--markdown", type=Path, help="write the rows and tallies as markdown to this file")
    ap.add_argument("--json", type=Path, help="write every run's row to this file")
    ap.add_argument("--readme", type=Path, help="put this scenario and base's row in the DDP table of this README")
    ap.add_argument(
        "--from-json",
        type=Path,
        help="measure nothing: the rows and tallies of an earlier --json of this scenario and base (to --readme)",
    )
    a = ap.parse_args()
    if a.cc not in ("reno", "cubic"):
        ap.error(f"--cc must be reno or cubic (the kernel has MLTCP variants of those), not {a.cc}")
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    try:
        warmup = scenario.load(a.scenario).warmup_iterations
    except scenario.ScenarioError as e:
        ap.error(str(e))
    if a.from_json:
        saved = json.loads(a.from_json.read_text())
        if a.readme:
            row = readme_row(scenario.load(a.scenario).name, a.cc, saved["rows"], saved["tallies"])
            a.readme.write_text(with_readme_row(a.readme.read_text(), row))
        return
    alone = None
    tmp = tempfile.TemporaryDirectory()
    path = a.scenario
    if not a.no_alone:
        path = str(Path(tmp.name) / "calibrated.toml")
        cal = calibrated(a.scenario, a.cc, Path(path))
        alone = next(iter(cal["measured"].values()))  # the first job's
        for job, m in cal["measured"].items():
            print(
                f"job {job} alone on {a.cc}: {m['alone_s']:.3f} / {m['p99_s']:.3f} s (avg / p99; the first job's is "
                f"the perfect-interleave bound); the simulator's compute {cal['jobs'][job]['sim_compute_ms']:.0f} ms",
                flush=True,
            )
    floor = None
    if not a.no_alone:
        floor = one_run(network_free(a.scenario, Path(tmp.name) / "free.toml"), a.cc, None, compare=False)["baseline"]
        print(
            f"the jobs together on links {FLOOR_RATE_FACTOR}x as fast: {floor['avg_iter_s']:.3f} / "
            f"{floor['p99_iter_s']:.3f} s (avg / p99; the hosts' floor, with the network out of the way)",
            flush=True,
        )
    rows = []
    print(HEAD, flush=True)
    for i in range(1, a.runs + 1):
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory() as d:
            doc = one_run(path, a.cc, Path(d))
            rows.append(row_of(doc, Path(d), load, warmup))
        print(markdown_row(i, rows[-1]), flush=True)
    t = tallies(rows, a.avg_target, a.p99_target)
    summary = (
        f"{a.scenario}, {a.cc} vs mltcp_{a.cc}: do no harm (avg >= 0.98x, p99 >= 0.95x, retransmissions <= base) "
        f"in {t['no_harm']} of {t['runs']} runs; avg >= {a.avg_target}x, p99 >= {a.p99_target}x, interleaved "
        f"within 10 iterations and retransmissions <= base in {t['target']} of {t['runs']}; losses identical "
        f"between the arms in {t['losses_identical']} of {t['runs']}; the simulator within 15 % of every job's "
        f"average in both arms in {t['sim_within_15pc']} of {t['runs']}"
    )
    if alone:
        near = sum(r["mltcp_avg"] <= 1.05 * alone["alone_s"] for r in rows)
        base_x = [r["base_avg"] / alone["alone_s"] for r in rows]
        summary += (
            f"; MLTCP's avg within 5 % of the first job alone in {near} of {t['runs']} runs; the base's avg "
            f"{min(base_x):.2f}-{max(base_x):.2f}x the job alone"
        )
        t.update(alone_avg=alone["alone_s"], alone_p99=alone["p99_s"], mltcp_near_alone=near)
    if floor:
        most = [r["base_avg"] / floor["avg_iter_s"] for r in rows]
        summary += f"; the base's avg {min(most):.2f}-{max(most):.2f}x the hosts' floor (one run of it)"
        t.update(floor_avg=floor["avg_iter_s"], floor_p99=floor["p99_iter_s"])
    print(summary)
    if a.markdown:
        a.markdown.write_text(run_table(rows, summary))
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "tallies": t}, indent=1))
    if a.readme:
        row = readme_row(scenario.load(a.scenario).name, a.cc, rows, t)
        a.readme.write_text(with_readme_row(a.readme.read_text(), row))


if __name__ == "__main__":
    main()
