"""`mltcp emulate`: run a scenario in Mininet (see docs/design.md, "Emulation: `mltcp emulate`").

Mounted as ``main_app.add_typer(mltcp.emulation.cli.app, name="emulate")``:

    mltcp emulate SCENARIO [options]          (the default command, `run`)
    mltcp emulate baseline-peer SCENARIO      kernel-TCP baseline: fairness + kernel-CC iterations
    mltcp emulate topo dumbbell|ring|leafspine  build a topology, ping through it, tear it down
    mltcp emulate calibrate SCENARIO --out F  torch-ddp jobs alone: the simulator's compute, measured

``python -m mltcp.emulation.cli ...`` takes the same arguments.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table
from typer.core import TyperGroup

from mltcp.console import err, fail, out as stdout, print_json


class _DefaultRun(TyperGroup):
    """A group whose first argument, if it is not a sub-command, is the SCENARIO of `run`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_DefaultRun,
    add_completion=False,
    no_args_is_help=True,
    help="Mininet emulation of MLTCP scenarios: `emulate SCENARIO`, `emulate baseline-peer "
    "SCENARIO`, `emulate calibrate SCENARIO --out F`, `emulate topo KIND`.",
)


def _prereqs() -> None:
    from .netns import have_mininet_prereqs

    why = have_mininet_prereqs()
    if why:
        fail(f"emulation {why} (Mininet needs root, mnexec, ip, tc and brctl)")


def _write(doc: dict, out: Path | None, as_json: bool) -> None:
    """The document to ``--out`` and, with ``--json``, on stdout (mltcp.console.print_json)."""
    from mltcp.records import write_text_atomic

    if out is not None:
        write_text_atomic(out, json.dumps(doc, indent=2, default=float) + "\n")
    if as_json:
        print_json(doc)


# Limits of the command-line numbers (docs/hardening-inputs.md).
MAX_RATE_MBPS = 100_000.0  # 100 Gb/s: more than a veth pair carries
MAX_DELAY_MS = 10_000.0
MAX_BUFFER_KB = 1e9
MAX_SECONDS = 86_400.0
MAX_TOPO_JOBS = 64


def _check_number(v, opt: str, lo: float, hi: float, lo_open: bool = False) -> None:
    import math

    if v is None:
        return
    if not math.isfinite(v) or (v <= lo if lo_open else v < lo) or v > hi:
        fail(f"{opt} must be in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {v}")


def _check_args(
    rate_mbps=None,
    delay_ms=None,
    iterations=None,
    buffer_kb=None,
    peer_seconds=None,
    out=None,
    records=None,
    transport=None,
    topology=None,
    link_mode=None,
) -> None:
    """Every option checked before a scenario is loaded or a namespace made (exit 2 naming it)."""
    from mltcp.records import output_problem
    from mltcp.scenario import MAX_ITERATIONS

    _check_number(rate_mbps, "--rate-mbps", 0.0, MAX_RATE_MBPS, lo_open=True)
    _check_number(delay_ms, "--delay-ms", 0.0, MAX_DELAY_MS)
    _check_number(buffer_kb, "--buffer-kb", 0.0, MAX_BUFFER_KB, lo_open=True)
    _check_number(peer_seconds, "--peer-seconds", 0.0, MAX_SECONDS, lo_open=True)
    if iterations is not None and not 1 <= iterations <= MAX_ITERATIONS:
        fail(f"--iterations must be in [1, {MAX_ITERATIONS}], got {iterations}")
    if transport is not None and transport not in ("udp", "kernel"):
        fail(f"--transport must be udp or kernel, got {transport!r}")
    if topology is not None and topology not in ("auto", "dumbbell", "ring", "leafspine"):
        fail(f"--topology must be auto, dumbbell, ring or leafspine, got {topology!r}")
    from .topologies import LINK_MODES

    if link_mode is not None and link_mode not in LINK_MODES:
        fail(f"--link-mode: unknown link mode {link_mode!r}; choose from {', '.join(LINK_MODES)}")
    for opt, path, is_dir in (("--out", out, False), ("--records", records, True)):
        why = output_problem(path, is_dir=is_dir) if path is not None else None
        if why:
            fail(f"{opt}: {why}")


# The options `emulate SCENARIO` and `emulate baseline-peer` share.
RATE_OPT = typer.Option(None, "--rate-mbps", help="run every link at this rate; job bytes scale with it")
ITERATIONS_OPT = typer.Option(None, "--iterations", help="iterations per job (default: the scenario's)")
DILATE_OPT = typer.Option(False, "--dilate", help="with --rate-mbps: keep bytes, stretch all times instead")
JSON_OPT = typer.Option(False, "--json", help="print the JSON document only (no progress, no tables)")
OUT_OPT = typer.Option(None, "--out", help="write the JSON document to this file")


@app.command("run")
def emulate(
    scenario: str = typer.Argument(..., help="scenario name (built-in) or TOML file"),
    cc: str = typer.Option(
        "", help="base congestion control: reno | cubic | dcqcn (udp only) | dctcp (default: the scenario's)"
    ),
    compare: bool = typer.Option(False, "--compare", help="also run the MLTCP variant and report speedups"),
    transport: str = typer.Option("kernel", help="udp (userspace MLTCP transport) | kernel (Linux TCP)"),
    link_mode: str = typer.Option(
        "auto", help="auto | htb | linux-tc | switch | bmv2 (docs/design.md, Emulation: link modes)"
    ),
    topology: str = typer.Option("auto", help="auto | dumbbell | ring | leafspine"),
    rate_mbps: float = RATE_OPT,
    delay_ms: float = typer.Option(None, help="one-way delay per link (needs link mode linux-tc or switch)"),
    iterations: int = ITERATIONS_OPT,
    buffer_kb: float = typer.Option(None, help="drop-tail buffer per link in kB (after --rate-mbps scaling)"),
    dilate: bool = DILATE_OPT,
    no_sim: bool = typer.Option(False, "--no-sim", help="skip the in-process simulation for sim_vs_emu"),
    records: Path = typer.Option(None, help="write each arm's per-iteration records to DIR/<arm>.csv"),
    as_json: bool = JSON_OPT,
    out: Path = OUT_OPT,
    payload_rate: bool = typer.Option(
        True,
        "--payload-rate/--wire-rate",
        help="links carry the scenario's rate in payload bytes, as in the simulator (default), or in frame bytes",
    ),
    rtt_calibration: bool = typer.Option(
        True,
        "--rtt-calibration/--no-rtt-calibration",
        help="measure the RTT the hosts add (udp transport) and take it "
        "off the links' delay, so the base RTT is the scenario's",
    ),
    switch_logs: Path = typer.Option(None, help="link mode bmv2: keep each switch's log in DIR/<arm>/"),
    pcap: bool = typer.Option(
        False,
        "--pcap",
        help="link mode bmv2, with --switch-logs: per-port pcaps too; torch-ddp scenarios, with "
        "--records: the bottleneck's capture, read back against the ranks' records",
    ),
):
    """Build SCENARIO's topology in Mininet, run its jobs, print the same keys as `mltcp simulate`."""
    if switch_logs is not None and link_mode != "bmv2":
        fail("--switch-logs needs --link-mode bmv2")
    if switch_logs is not None and (switch_logs.exists() and not switch_logs.is_dir()):
        fail(f"--switch-logs: {switch_logs} exists and is not a folder")
    _emulate(
        scenario,
        cc=cc,
        compare=compare,
        transport=transport,
        link_mode=link_mode,
        topology=topology,
        rate_mbps=rate_mbps,
        delay_ms=delay_ms,
        iterations=iterations,
        buffer_kb=buffer_kb,
        dilate=dilate,
        no_sim=no_sim,
        baseline_peer=False,
        peer_seconds=10.0,
        as_json=as_json,
        out=out,
        records=records,
        payload_rate=payload_rate,
        rtt_calibration=rtt_calibration,
        switch_logs=switch_logs,
        pcap=pcap,
    )


@app.command("baseline-peer")
def baseline_peer_cmd(
    scenario: str = typer.Argument(..., help="scenario whose first link is the bottleneck and whose jobs run"),
    link_mode: str = typer.Option("auto", help="auto | htb | linux-tc | switch"),
    rate_mbps: float = RATE_OPT,
    delay_ms: float = typer.Option(None, help="one-way delay per link (link mode linux-tc or switch)"),
    iterations: int = ITERATIONS_OPT,
    buffer_kb: float = typer.Option(None, help="drop-tail buffer per link in kB"),
    dilate: bool = DILATE_OPT,
    peer_seconds: float = typer.Option(10.0, help="seconds per long-lived-flow run"),
    as_json: bool = JSON_OPT,
    out: Path = OUT_OPT,
):
    """Kernel TCP (reno, cubic) vs the userspace Reno: 2 long-lived flows (per-flow Mb/s, Jain's
    index, retransmissions), then the scenario's jobs with kernel CC (does it interleave?)."""
    if link_mode == "bmv2":
        fail("baseline-peer runs on htb, linux-tc or switch links; --link-mode bmv2 is for `emulate SCENARIO`")
    _emulate(
        scenario,
        cc="",
        compare=False,
        transport="kernel",
        link_mode=link_mode,
        topology="dumbbell",
        rate_mbps=rate_mbps,
        delay_ms=delay_ms,
        iterations=iterations,
        buffer_kb=buffer_kb,
        dilate=dilate,
        no_sim=True,
        baseline_peer=True,
        peer_seconds=peer_seconds,
        as_json=as_json,
        out=out,
        records=None,
    )


@app.command("calibrate")
def calibrate_cmd(
    scenario: str = typer.Argument(..., help="a torch-ddp scenario (built-in name or TOML file)"),
    out: Path = typer.Option(..., "--out", help="write the scenario, with sim_compute_ms, to this TOML file"),
    cc: str = typer.Option(
        "", help="congestion control of the runs alone: reno | cubic | dctcp (default: the scenario's)"
    ),
    as_json: bool = JSON_OPT,
):
    """Run each torch-ddp job alone and write SCENARIO with the simulator's compute measured:
    sim_compute_ms = the job's mean iteration alone less its all-reduce at line rate (docs/ddp.md)."""
    from mltcp import scenario as scn
    from mltcp.ddp.calibrate import CalibrationError

    from .ddp import is_ddp

    _check_args(out=out)
    try:
        doc, src = scn.read_tables(scenario)
        sc = scn.from_dict(doc, src)
    except scn.ScenarioError as e:
        fail(str(e))
    if not is_ddp(sc):
        fail(f"{src}: calibrate measures torch-ddp jobs; this scenario has none")
    if cc and cc not in ("reno", "cubic", "dctcp"):
        fail(f"--cc must be reno, cubic or dctcp (kernel TCP under gloo), got {cc!r}")
    _prereqs()
    from mininet.log import setLogLevel

    from . import netns
    from .ddp_calibrate import calibrate, calibrated_text, calibration_report, measure_alone
    from .plan import EmulationError

    setLogLevel("error")
    cc = cc or sc.cc
    try:
        with netns.signals_raise():
            if as_json:
                measured = measure_alone(doc, sc, cc)
            else:
                from rich.progress import Progress

                with Progress(console=err, transient=True) as prog:
                    measured = measure_alone(doc, sc, cc, _progress_per_job(prog, cc))
        calibrated = calibrate(doc, sc, measured)
    except KeyboardInterrupt:
        fail(f"interrupted; network and processes removed, {out} not written", 130)
    except (EmulationError, CalibrationError) as e:
        fail(f"{e}; {out} not written", 1)
    from mltcp.records import write_text_atomic

    write_text_atomic(out, calibrated_text(f"mltcp emulate calibrate {scenario} --cc {cc}", calibrated, measured))
    result = calibration_report(sc.name, out, cc, calibrated, measured)
    if as_json:
        print_json(result)
        return
    t = Table("job", "alone (s)", "all-reduce at line rate (s)", "sim_compute_ms")
    for job, m in measured.items():
        t.add_row(job, f"{m['alone_s']:.3f}", f"{m['allreduce_s']:.3f}", f"{result['jobs'][job]['sim_compute_ms']:.1f}")
    stdout.print(t)
    stdout.print(f"wrote {out}: `mltcp simulate {out} --compare` predicts the jobs together")


def _progress_per_job(prog, cc: str):
    """measure_alone's on_job: a progress bar per job run alone, advanced at each record."""

    def on_job(job: str, iterations: int):
        task = prog.add_task(f"{job} alone, {cc}", total=iterations)
        return lambda record: prog.advance(task)

    return on_job


def _emulate(
    scenario,
    *,
    cc,
    compare,
    transport,
    link_mode,
    topology,
    rate_mbps,
    delay_ms,
    iterations,
    buffer_kb,
    dilate,
    no_sim,
    baseline_peer,
    peer_seconds,
    as_json,
    out,
    records=None,
    payload_rate=True,
    rtt_calibration=True,
    switch_logs=None,
    pcap=False,
):
    from mltcp import scenario as scn

    from .plan import EmulationError, check_emulatable, choose_topology, needs_ecn, plan_from_scenario, rescale
    from .network import resolve_link_mode
    from .topologies import TopologyError, features

    _check_args(
        rate_mbps,
        delay_ms,
        iterations,
        buffer_kb,
        peer_seconds if baseline_peer else None,
        out,
        records,
        transport,
        topology,
        link_mode,
    )
    try:
        sc = scn.load(scenario)
    except scn.ScenarioError as e:
        fail(str(e))
    try:
        check_emulatable(sc)
        _check_ddp(sc)
    except (TopologyError, EmulationError) as e:
        fail(str(e))
    _refuse_options_ddp_ignores(sc, transport, link_mode, topology, switch_logs, baseline_peer)
    _check_pcap(sc, pcap, link_mode, topology, switch_logs, records)
    _prereqs()
    try:
        sc = rescale(sc, rate_mbps, delay_ms, iterations, buffer_kb, dilate)
        kind = topology if topology != "auto" else ("dumbbell" if baseline_peer else choose_topology(sc))
        ecn = needs_ecn(sc, cc)
        mode = resolve_link_mode(link_mode, kind, ecn=ecn)
    except (ValueError, TopologyError) as e:
        fail(str(e))
    if any(l.delay_s > 0 for l in sc.links.values()) and not features(mode)["delay"]:
        err.print(
            f"[yellow]note:[/yellow] link mode {mode} has no delay on this kernel: links run without "
            "their propagation delay"
        )
    if ecn and not features(mode)["ecn"]:
        err.print(
            f"[yellow]note:[/yellow] link mode {mode} cannot mark ECN on this kernel: the links only drop "
            "(--link-mode switch or bmv2 marks)"
        )
    from mininet.log import setLogLevel

    setLogLevel("error")
    from . import netns

    try:
        with netns.signals_raise():
            if baseline_peer:
                from .baseline import baseline_peer as run_bp

                plan = plan_from_scenario(sc, "dumbbell" if topology == "auto" else topology)
                say = (lambda m: None) if as_json else (lambda m: err.print(f"[cyan]{m}[/cyan]"))
                doc = run_bp(plan.bottleneck, plan, seconds=peer_seconds, link_mode=mode, progress=say)
                doc["scenario"] = sc.name
                if not as_json:
                    _print_baseline(doc)
                _write(doc, out, as_json)
                return
            doc = _run_with_progress(
                sc,
                cc or sc.cc,
                compare,
                transport,
                mode,
                topology,
                not no_sim,
                as_json,
                records,
                payload_rate,
                rtt_calibration,
                switch_logs,
                pcap,
            )
    except KeyboardInterrupt:
        fail("interrupted; network and processes removed", 130)
    except (EmulationError, TopologyError) as e:
        fail(str(e), 1)
    if not as_json:
        _print_summary(doc)
    _write(doc, out, as_json)


def _check_ddp(sc) -> None:
    """A torch-ddp scenario's jobs and [mltcp] table (emulation/ddp.py), checked before anything runs."""
    from .ddp import check_ddp_scenario, is_ddp

    if is_ddp(sc):
        check_ddp_scenario(sc)


def _check_pcap(sc, pcap, link_mode, topology, switch_logs, records) -> None:
    """--pcap: per-port pcaps of BMv2 (in --switch-logs), or a torch-ddp run's bottleneck (in --records)."""
    from .ddp import is_ddp

    if not pcap:
        return
    if is_ddp(sc):
        if records is None:
            fail("--pcap needs --records DIR (the folder the captures are kept in, beside the records)")
        if topology not in ("auto", "dumbbell"):
            fail(f"--pcap: a torch-ddp run captures the dumbbell's bottleneck, not a {topology}'s links")
        return
    if link_mode != "bmv2":
        fail("--pcap needs --link-mode bmv2 (or a torch-ddp scenario)")
    if switch_logs is None:
        fail("--pcap needs --switch-logs DIR (the folder the pcaps are kept in)")


def _refuse_options_ddp_ignores(sc, transport, link_mode, topology, switch_logs, baseline_peer) -> None:
    """torch-ddp jobs run on kernel TCP over htb links, on the dumbbell or the leaf-spine: other
    choices exit 2."""
    from .ddp import is_ddp

    if not is_ddp(sc):
        return
    for opt, got, ok in (
        ("--transport", transport, ("kernel",)),
        ("--link-mode", link_mode, ("auto", "htb")),
        ("--topology", topology, ("auto", "dumbbell", "leafspine")),
    ):
        if got not in ok:
            fail(
                f"{sc.source}: torch-ddp jobs run on kernel TCP over htb links (dumbbell or leafspine), not {opt} {got}"
            )
    if switch_logs is not None or baseline_peer:
        fail(f"{sc.source}: torch-ddp jobs run over htb links: --switch-logs and --baseline-peer do not apply")


def _run_with_progress(
    sc,
    cc,
    compare,
    transport,
    mode,
    topology,
    with_sim,
    quiet,
    records=None,
    payload_rate=True,
    rtt_calibration=True,
    switch_logs=None,
    pcap=False,
) -> dict:
    from rich.progress import Progress

    from .runner import run_experiment

    kw = dict(
        with_sim=with_sim, records_dir=records, payload_rate=payload_rate, rtt_calibration=rtt_calibration, pcap=pcap
    )
    if switch_logs is not None:
        kw.update(switch_logs=switch_logs)
    if quiet:
        return run_experiment(sc, cc, compare, transport, mode, topology, **kw)
    total = sum(j.iterations for j in sc.jobs)
    with Progress(console=err, transient=True) as prog:
        tasks = {"baseline": prog.add_task(f"baseline {cc}", total=total)}
        if compare:
            tasks["mltcp"] = prog.add_task(f"mltcp-{cc}", total=total)
        return run_experiment(
            sc, cc, compare, transport, mode, topology, **kw, on_record=lambda arm, r: prog.advance(tasks[arm])
        )


def _print_summary(doc: dict) -> None:
    t = Table(
        title=f"emulation: {doc['scenario']} ({doc['emulation']['topology']}, "
        f"{doc['emulation']['transport']}, {doc['emulation']['link_mode']})"
    )
    for c in ("arm", "cc", "avg iter s", "p99 iter s", "drops", "retrans", "converged at", "interleaved at (20 %)"):
        t.add_column(c)
    for arm in ("baseline", "mltcp"):
        a = doc.get(arm)
        if a:
            t.add_row(
                arm,
                a["cc"],
                f"{a['avg_iter_s']:.4f}",
                f"{a['p99_iter_s']:.4f}",
                str(a["drops"]),
                str(a["retransmissions"]),
                str(a["converged_at_iteration"]),
                str(a["interleaved_at_iteration"]),
            )
    stdout.print(t)
    cal = doc["emulation"].get("rtt_calibration")
    if cal:
        stdout.print(
            f"RTT calibration: hosts add {cal['host_rtt_ms']:.2f} ms per round trip; links run "
            f"{cal['link_delay_ms']:.3f} ms one way for a {cal['scenario_rtt_ms']:g} ms base RTT"
        )
    if doc.get("speedup_avg"):
        stdout.print(f"speedup avg {doc['speedup_avg']:.3f}  p99 {doc['speedup_p99']:.3f}")


def _print_baseline(doc: dict) -> None:
    t = Table(title=f"long-lived flows, {doc['bottleneck']['rate_mbps']:g} Mb/s bottleneck, {doc['seconds']:g} s")
    for c in ("stack", "per-flow Mb/s", "total Mb/s", "Jain", "retrans", "drops"):
        t.add_column(c)
    for r in doc["fairness"]:
        t.add_row(
            r["label"],
            " / ".join(f"{x:.1f}" for x in r["flows_mbps"]),
            f"{r['total_mbps']:.1f}",
            f"{r['jain']:.3f}",
            str(r["retransmissions"]),
            str(r["drops"]),
        )
    stdout.print(t)
    if "userspace_reno_error" in doc:
        stdout.print(f"userspace reno: {doc['userspace_reno_error']}")
    for cc, a in doc["iterations"].items():
        stdout.print(
            f"kernel {cc} iterations: avg {a['avg_iter_s']:.4f} s, p99 {a['p99_iter_s']:.4f} s, "
            f"converged at {a['converged_at_iteration']}, interleaved (20 %) at {a['interleaved_at_iteration']}"
        )


@app.command("topo")
def emulate_topo(
    kind: str = typer.Argument(..., help="dumbbell | ring | leafspine"),
    jobs: int = typer.Option(2, help="job endpoints (hosts per side / per leaf)"),
    rate_mbps: float = typer.Option(100.0, help="bottleneck rate"),
    link_mode: str = typer.Option("auto", help="auto | htb | linux-tc | switch | bmv2"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Build a topology, ping each job's receiver from its sender (hop count from the TTL), tear down."""
    from mininet.log import setLogLevel

    from . import netns
    from .network import build_network, resolve_link_mode
    from .topologies import LinkParams, TopologyError, make_topology

    _check_args(rate_mbps=rate_mbps, link_mode=link_mode)
    if not 1 <= jobs <= MAX_TOPO_JOBS:
        fail(f"--jobs must be in [1, {MAX_TOPO_JOBS}], got {jobs}")
    if kind not in ("dumbbell", "ring", "leafspine"):
        fail(f"KIND must be dumbbell, ring or leafspine, got {kind!r}")
    _prereqs()
    setLogLevel("error")
    try:
        mode = resolve_link_mode(link_mode, kind)
        with netns.signals_raise(), netns.Cleanup(netns.run_prefix()) as cl:
            from .network import switch_class_for

            topo = make_topology(
                kind, cl.prefix, LinkParams(rate_mbps=rate_mbps), n_jobs=jobs, switch_cls=switch_class_for(mode)
            )
            net = build_network(topo, mode, cl)
            rows = [ping_pair(net, topo, s, r) for s, r in topo.job_pairs]
    except TopologyError as e:
        fail(str(e))
    doc = {"topology": kind, "link_mode": mode, "pairs": rows, "all_reachable": all(r["ok"] for r in rows)}
    if as_json:
        print_json(doc)
    else:
        for r in rows:
            stdout.print(
                f"{r['sender']} -> {r['receiver']} ({r['dst']}): "
                f"{'ok' if r['ok'] else 'UNREACHABLE'}, {r['router_hops']} router hops"
            )
    if not doc["all_reachable"]:
        raise typer.Exit(1)


def ping_pair(net, topo, s: str, r: str) -> dict:
    """One ping sender -> receiver; router hops = 64 - received TTL (Linux default TTL 64)."""
    import re

    dst = topo.ip_of(r)
    out = net[s].cmd(f"ping -c 1 -W 2 {dst}")
    m = re.search(r"ttl=(\d+)", out)
    return {
        "sender": s,
        "receiver": r,
        "dst": dst,
        "ok": m is not None,
        "router_hops": (64 - int(m.group(1))) if m else None,
    }


def main() -> None:  # `python -m mltcp.emulation.cli`
    app()


if __name__ == "__main__":
    main()
