"""`mltcp kernel`: MLTCP-Reno and MLTCP-CUBIC as BPF congestion control in the Linux kernel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from mltcp import defaults
from mltcp.console import err, fail, out, print_json

from . import loader
from .maps import (
    ABOVE_BDP_DEFAULT,
    MAX_RESTART_SEGS,
    SCALE_DECREASE_DEFAULT,
    VARIANTS,
    Config,
    MapsError,
    mark_iteration_start,
)

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="MLTCP as BPF struct_ops congestion control (mltcp_reno, mltcp_cubic).",
)


def _variants(names: Optional[List[str]]) -> list[str]:
    names = names or list(VARIANTS)
    try:
        return loader.check_variants(names)
    except loader.KernelCCError as e:
        fail(str(e))


SCALE_DECREASE_HELP = (
    "F also scales the window decrease: remove (0.8 - 0.6 r) x 2 x the base fraction on loss "
    "(default: on for mltcp_cubic, off for mltcp_reno; docs/kernel.md)"
)


RESTART_WINDOW_HELP = (
    "segments: at each iteration's first send a larger window restarts at this "
    "(ssthresh kept >= 3/4 of the old window); 0 = off"
)


ADAPTIVE_HELP = "the online switch (mltcp.engage): F acts only while the flow's iterations interleave"
MIN_WINDOW_HELP = "segments: below this window (or the path BDP, if less) F never slows the increase (0 = off)"
ABOVE_BDP_HELP = (
    "once the online switch has made a flow its base, its window grows x this above the path BDP "
    "(1 = as the base; default: " + ", ".join(f"{v} {g:g}" for v, g in ABOVE_BDP_DEFAULT.items()) + ")"
)


def _config(
    slope,
    intercept,
    idle_fraction,
    min_idle_ms,
    scale_decrease,
    nic_cap=False,
    variant=None,
    restart_window=0,
    adaptive=defaults.ADAPTIVE,
    min_window=defaults.MIN_WINDOW,
    above_bdp_gain=None,
) -> Config:
    if scale_decrease is None:
        scale_decrease = SCALE_DECREASE_DEFAULT.get(variant, False)
    cfg = Config(
        slope=slope,
        intercept=intercept,
        idle_fraction=idle_fraction,
        min_idle=min_idle_ms / 1e3,
        scale_decrease=scale_decrease,
        nic_cap=nic_cap,
        restart_window=restart_window,
        adaptive=adaptive,
        min_window=min_window,
        above_bdp_gain=above_bdp_gain,
    )
    try:
        cfg.validate()
    except ValueError as e:
        fail(f"bad option: {e}")
    return cfg


VARIANT_OPT = typer.Option(None, "--variant", "-v", help="mltcp_reno or mltcp_cubic (repeat; default both)")


@app.command()
def build(
    variant: Optional[List[str]] = VARIANT_OPT,
    out_dir: Optional[Path] = typer.Option(None, "--out-dir", help="default ~/.cache/mltcp/bpf/<kernel release>"),
    clang: str = typer.Option("clang", help="clang binary"),
    force: bool = typer.Option(False, help="rebuild even if up to date"),
):
    """Compile the BPF programs (vmlinux.h from the running kernel's BTF, clang -target bpf)."""
    try:
        objs = loader.build(_variants(variant), out_dir=out_dir, clang=clang, force=force)
    except loader.KernelCCError as e:
        fail(str(e))
    for v, o in objs.items():
        out.print(f"{v}: {o}")


@app.command()
def load(
    variant: Optional[List[str]] = VARIANT_OPT,
    slope: float = typer.Option(defaults.SLOPE, help="F(r) = slope * r + intercept"),
    intercept: float = typer.Option(defaults.INTERCEPT),
    idle_fraction: float = typer.Option(0.9, help="idle gap > fraction x last compute gap starts an iteration"),
    min_idle_ms: float = typer.Option(1.0, help="shortest idle gap that can start an iteration (ms)"),
    scale_decrease: Optional[bool] = typer.Option(
        None, "--scale-decrease/--no-scale-decrease", help=SCALE_DECREASE_HELP
    ),
    nic_cap: bool = typer.Option(
        False, "--nic-cap", help="no window growth past 2 F(r) x pacing rate x min RTT, at least 1 x (paced senders)"
    ),
    restart_window: int = typer.Option(0, "--restart-window", min=0, max=MAX_RESTART_SEGS, help=RESTART_WINDOW_HELP),
    adaptive: bool = typer.Option(defaults.ADAPTIVE, "--adaptive/--no-adaptive", help=ADAPTIVE_HELP),
    min_window: int = typer.Option(
        defaults.MIN_WINDOW, "--min-window", min=0, max=MAX_RESTART_SEGS, help=MIN_WINDOW_HELP
    ),
    above_bdp_gain: Optional[float] = typer.Option(None, "--above-bdp-gain", min=0.01, max=1.0, help=ABOVE_BDP_HELP),
    clang: str = typer.Option("clang"),
):
    """Build if needed, register the algorithms and write their configuration (needs root)."""
    names = _variants(variant)  # one configuration per variant (their defaults differ)
    hook = dict(restart_window=restart_window, adaptive=adaptive, min_window=min_window, above_bdp_gain=above_bdp_gain)
    cfgs = {v: _config(slope, intercept, idle_fraction, min_idle_ms, scale_decrease, nic_cap, v, **hook) for v in names}
    try:
        regs = loader.load(names, config=cfgs, clang=clang)
    except loader.KernelCCError as e:
        fail(str(e))
    for v, sid in regs.items():
        out.print(f"registered {v} (struct_ops id {sid})")
    out.print(f"tcp_available_congestion_control: {' '.join(loader.available())}")


@app.command()
def unload(
    variant: Optional[List[str]] = VARIANT_OPT,
    wait: float = typer.Option(3.0, help="seconds to wait for the kernel to free them"),
):
    """Unregister the algorithms (needs root)."""
    try:
        removed, held = loader.unload(_variants(variant), wait=wait)
    except loader.KernelCCError as e:
        fail(str(e))
    out.print(f"unregistered: {', '.join(removed) or 'nothing was registered'}")
    if held:
        err.print(
            f"[yellow]warning:[/] {', '.join(held)} no longer selectable, but still held by open "
            "sockets or map fds; the kernel frees them when those close"
        )


@app.command()
def status(as_json: bool = typer.Option(False, "--json", help="print JSON")):
    """Registered MLTCP algorithms, their configuration, and the kernel's available list."""
    try:
        st = loader.status()
    except (loader.KernelCCError, MapsError, OSError) as e:
        fail(str(e))
    if as_json:
        print_json(st)
        return
    out.print(f"tcp_available_congestion_control: {' '.join(st['available'])}")
    if not st["registered"]:
        out.print("no MLTCP algorithm registered (`mltcp kernel load`)")
    for v, e in st["registered"].items():
        out.print(
            f"{v}: struct_ops id {e['struct_ops_id']}, config {e.get('config', e.get('error'))}, "
            f"stats {e.get('stats', {})}"
        )
    for v, ids in st.get("lingering", {}).items():
        out.print(f"{v}: unregistered, still held by sockets (struct_ops ids {ids})")


@app.command()
def mark(
    port: int = typer.Argument(..., help="local TCP port of the sending socket"),
    repeat: int = typer.Option(1, help="mark this many times and print the mean cost of one mark"),
):
    """Tell the kernel MLTCP that the flow on PORT starts a training iteration now."""
    import time

    if repeat < 1:
        fail(f"--repeat must be >= 1, got {repeat}")
    try:
        t0 = time.perf_counter()
        n = mark_iteration_start(port)
        first = time.perf_counter() - t0
        t1 = time.perf_counter()
        for _ in range(repeat - 1):
            mark_iteration_start(port)
        rest = time.perf_counter() - t1
    except (ValueError, MapsError, OSError) as e:
        fail(str(e))
    if n == 0:
        fail("no MLTCP algorithm is registered")
    out.print(
        f"marked port {port} in {n} variant(s), {repeat} time(s); first mark (finds the maps) "
        f"{first * 1e3:.2f} ms" + (f", then {rest / (repeat - 1) * 1e6:.1f} us per mark" if repeat > 1 else "")
    )


@app.command()
def experiment(
    variant: str = typer.Option("mltcp_reno", help="mltcp_reno (vs reno) or mltcp_cubic (vs cubic)"),
    rate_mbit: float = typer.Option(100.0, help="bottleneck rate (htb)"),
    payload_rate: bool = typer.Option(
        True,
        "--payload-rate/--wire-rate",
        help="the rate counts payload bytes, as in the simulator (htb at rate x 1514/1448), or frame bytes",
    ),
    buffer_kb: float = typer.Option(150.0, help="bottleneck drop-tail buffer (bfifo)"),
    mbytes: float = typer.Option(1.0, help="MB per iteration per job"),
    compute_ms: Optional[float] = typer.Option(
        None, help="compute time; default = the iteration's transfer time alone"
    ),
    iterations: int = typer.Option(60),
    warmup: int = typer.Option(10, help="iterations left out of avg/p99"),
    offset_ms: float = typer.Option(5.0, help="job B starts this much after job A"),
    delay_ms: float = typer.Option(
        0.0, help="one-way propagation delay (a C delay line between router and receiver; base RTT = 2 x this)"
    ),
    min_rto_ms: float = typer.Option(
        0.0,
        help="senders' minimum RTO (route rto_min); 0: Linux's 200 ms. Above the "
        "compute time TCP keeps its window over the idle gap",
    ),
    ecn_k_pkts: int = typer.Option(
        0,
        help="step ECN at the bottleneck: CE when >= K full frames are queued "
        "(a tc BPF marker; hosts get tcp_ecn=1); 0: drop-tail only",
    ),
    idle_restart: bool = typer.Option(
        True,
        "--idle-restart/--no-idle-restart",
        help="senders' tcp_slow_start_after_idle: after an idle gap longer than the "
        "RTO the window restarts (Linux default on)",
    ),
    mark_iterations: bool = typer.Option(False, "--mark", help="explicit iteration marks instead of idle detection"),
    pacing: bool = typer.Option(
        True,
        "--pacing/--no-pacing",
        help="senders paced at the bottleneck rate, as NICs of that rate (SO_MAX_PACING_RATE)",
    ),
    slope: float = typer.Option(defaults.SLOPE),
    intercept: float = typer.Option(defaults.INTERCEPT),
    idle_fraction: float = typer.Option(0.9),
    min_idle_ms: float = typer.Option(1.0),
    scale_decrease: Optional[bool] = typer.Option(
        None, "--scale-decrease/--no-scale-decrease", help=SCALE_DECREASE_HELP
    ),
    nic_cap: bool = typer.Option(
        False, "--nic-cap", help="no window growth past 2 F(r) x pacing rate x min RTT, at least 1 x (paced senders)"
    ),
    restart_window: int = typer.Option(0, "--restart-window", min=0, max=MAX_RESTART_SEGS, help=RESTART_WINDOW_HELP),
    adaptive: bool = typer.Option(defaults.ADAPTIVE, "--adaptive/--no-adaptive", help=ADAPTIVE_HELP),
    min_window: int = typer.Option(
        defaults.MIN_WINDOW, "--min-window", min=0, max=MAX_RESTART_SEGS, help=MIN_WINDOW_HELP
    ),
    above_bdp_gain: Optional[float] = typer.Option(None, "--above-bdp-gain", min=0.01, max=1.0, help=ABOVE_BDP_HELP),
    with_sim: bool = typer.Option(False, "--with-sim", help="also run `mltcp simulate` on the same case"),
    out_path: Optional[Path] = typer.Option(None, "--out", help="write the JSON (with per-iteration records) here"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as one JSON document (no table)"),
):
    """Two jobs through one bottleneck (the emulation's dumbbell in Mininet): kernel base CC vs its MLTCP variant."""
    from mininet.log import setLogLevel

    from mltcp.emulation.topologies import TopologyError

    from .experiment import Case, run
    from .netns import NetnsError

    setLogLevel("error")  # Mininet's warnings (as `mltcp emulate`): errors still show

    hook = dict(restart_window=restart_window, adaptive=adaptive, min_window=min_window, above_bdp_gain=above_bdp_gain)
    cfg = _config(slope, intercept, idle_fraction, min_idle_ms, scale_decrease, nic_cap, variant, **hook)
    try:
        case = Case(
            rate_mbit=rate_mbit,
            payload_rate=payload_rate,
            buffer_bytes=int(buffer_kb * 1e3),
            nbytes=int(mbytes * 1e6),
            compute_s=None if compute_ms is None else compute_ms / 1e3,
            iterations=iterations,
            warmup=warmup,
            offset_s=offset_ms / 1e3,
            delay_ms=delay_ms,
            min_rto_ms=min_rto_ms,
            idle_restart=idle_restart,
            ecn_k_pkts=ecn_k_pkts,
            variant=variant,
            mark=mark_iterations,
            pacing=pacing,
            config=cfg,
        )
    except ValueError as e:
        fail(str(e))
    if out_path is not None and out_path.is_dir():
        fail(f"--out {out_path}: is a directory")
    with err.status(f"running reno-family baseline and {variant} ({iterations} iterations each)..."):
        try:
            doc = run(case, with_sim=with_sim)
        except (loader.KernelCCError, NetnsError, TopologyError, MapsError, OSError, RuntimeError) as e:
            fail(str(e))
    summary = {k: v for k, v in doc.items() if k != "results"}
    summary["results"] = {cc: {k: v for k, v in r.items() if k != "records"} for cc, r in doc["results"].items()}
    if out_path is not None:
        tmp = out_path.with_suffix(out_path.suffix + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1, default=float))
        tmp.replace(out_path)
        err.print(f"wrote {out_path}")
    if as_json:
        print_json(summary)
        return
    table = Table(
        title=f"two jobs, {rate_mbit:g} Mbit/s, {2 * delay_ms:g} ms base RTT, {buffer_kb:g} kB buffer, "
        f"{mbytes:g} MB/iteration, "
        f"compute {case.compute * 1e3:.0f} ms (ideal iteration {doc['ideal_iter_s'] * 1e3:.0f} ms)"
    )
    for col in ("cc", "job", "avg iter (ms)", "p99 iter (ms)", "interleaved at", "overlap", "retransmits"):
        table.add_column(col)
    for cc, r in doc["results"].items():
        for j, s in r["jobs"].items():
            table.add_row(
                cc, j, f"{s['avg_iter_s'] * 1e3:.1f}", f"{s['p99_iter_s'] * 1e3:.1f}", "", "", str(s["retransmits"])
            )
        table.add_row(
            cc,
            "both",
            f"{r['avg_iter_s'] * 1e3:.1f}",
            f"{r['p99_iter_s'] * 1e3:.1f}",
            str(r["interleaved_at"]),
            f"{r['steady_overlap']:.0%}",
            str(r["retransmits"]),
        )
    out.print(table)
    out.print(
        f"speedup {variant} vs {list(doc['results'])[0]}: avg {doc['speedup_avg']:.2f}x, "
        f"p99 {doc['speedup_p99']:.2f}x; wall {doc['wall_s']:.0f} s"
    )
    if doc.get("simulation"):
        for cc, s in doc["simulation"].items():
            out.print(
                f"simulate {cc}: avg {s['avg_iter_s'] * 1e3:.1f} ms, p99 {s['p99_iter_s'] * 1e3:.1f} ms, "
                f"interleaved at {s['interleaved_at']}"
            )


def main() -> None:  # `python -m mltcp.traffic.kernel.cli`
    app()


if __name__ == "__main__":
    main()
