"""`mltcp traffic`: run a job's sender and a receiver by hand, and work with traces and pcaps."""

from __future__ import annotations

import json
import signal
import time
from dataclasses import asdict
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from mltcp import defaults
from mltcp.cc import ALGORITHMS
from mltcp.console import err, fail, out, print_json

from .transport.units import parse_duration, parse_rate, parse_size

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Userspace MLTCP transport: send/recv a training job's traffic; traces and pcaps.",
)

CCS = tuple(ALGORITHMS)


def _conv(fn, text, opt, lo=None, hi=None, lo_open=False):
    """Parse ``text`` with ``fn`` and check lo <= value <= hi (lo < value with ``lo_open``):
    exit 2 naming ``opt`` otherwise."""
    try:
        v = fn(text)
    except ValueError as e:
        fail(f"{opt}: {e}")
    _bounds(v, opt, lo, hi, lo_open, text)
    return v


def _bounds(v, opt, lo=None, hi=None, lo_open=False, text=None):
    shown = text if text is not None else v
    if lo is not None and (v <= lo if lo_open else v < lo):
        fail(f"{opt} must be {'>' if lo_open else '>='} {lo:g}, got {shown}")
    if hi is not None and v > hi:
        fail(f"{opt} must be <= {hi:g}, got {shown}")
    return v


def _check_output(path, opt):
    from mltcp.records import output_problem

    if path is not None:
        why = output_problem(path)
        if why:
            fail(f"{opt}: {why}")


# Limits of the command-line numbers (docs/hardening-inputs.md).
MAX_BYTES = 1e12  # per flow per iteration
MAX_SECONDS = 86_400.0  # compute, delays, timeouts, durations
MAX_ITERATIONS = 1_000_000
MAX_RATE = 1e14  # b/s


def _line_rate(text, opt) -> float:
    """A trace's line rate: parsed, and > 0 (a zero rate would divide the bytes by nothing)."""
    import math

    rate = _conv(parse_rate, text, opt)
    if not 0 < rate < math.inf:
        fail(f"{opt}: must be > 0, got {text!r}")
    return rate


@app.command()
def send(
    to: List[str] = typer.Option(..., "--to", help="receiver HOST:PORT (repeat for one flow per peer)"),
    cc: str = typer.Option("mltcp-reno", help="congestion control: " + ", ".join(CCS)),
    job: int = typer.Option(1, help="job id carried in the MLTCP shim (0..65535)"),
    nbytes: str = typer.Option("2MB", "--bytes", help="bytes per flow per iteration (e.g. 2MB, 512KiB)"),
    compute: str = typer.Option("20ms", help="compute time per iteration (e.g. 20ms)"),
    iterations: int = typer.Option(30, help="iterations to run"),
    jitter: float = typer.Option(0.0, help="compute-time std-dev as a fraction of --compute"),
    straggler_prob: float = typer.Option(0.0, help="probability an iteration straggles"),
    straggler_delay: str = typer.Option("0s", help="extra compute time of a straggling iteration"),
    start_offset: str = typer.Option("0s", help="wait this long before the first iteration"),
    trace: Optional[Path] = typer.Option(None, help="take --bytes/--compute/--jitter from a trace CSV"),
    trace_line_rate: str = typer.Option("10gbit", help="line rate the trace was measured at (> 0)"),
    line_rate: str = typer.Option("100mbit", help="DCQCN line rate (start rate and rate scale)"),
    slope: Optional[float] = typer.Option(None, help=f"MLTCP slope (default {defaults.SLOPE})"),
    intercept: Optional[float] = typer.Option(None, help=f"MLTCP intercept (default {defaults.INTERCEPT})"),
    min_rto: str = typer.Option("200ms", help="minimum retransmission timeout"),
    payload: int = typer.Option(
        1400, help="payload bytes per datagram (1400 = 1500-byte IP packets with the MAC and key)"
    ),
    psk: Optional[Path] = typer.Option(
        None,
        "--psk",
        help="pre-shared key file (the receiver's too): datagrams nobody without it can forge, on-path or not",
    ),
    no_ecn: bool = typer.Option(False, "--no-ecn", help="do not set ECT(0) on data"),
    no_idle_restart: bool = typer.Option(
        False, "--no-idle-restart", help="keep the window over idle periods longer than an RTO"
    ),
    detect_iterations: str = typer.Option(
        "explicit",
        help="MLTCP iteration boundaries: explicit (the sender marks them) or idle (the tracker's idle-gap rule)",
    ),
    timeout: str = typer.Option("60s", help="give up if an iteration is not delivered in this long"),
    seed: Optional[int] = typer.Option(None, help="seed for jitter/stragglers"),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="one JSON document on stdout at the end: {records: [one per iteration], summary: [one per flow]}",
    ),
    records_out: Optional[Path] = typer.Option(None, "--out", help="write iteration records CSV here"),
    trace_out: Optional[Path] = typer.Option(None, help="write the run as a trace CSV (public shape)"),
):
    """Run a training job's sender: compute (sleep), then send an iteration's bytes, repeat."""
    from mltcp.records import write_csv

    from .driver import JobSpec, run_job
    from .traces import TraceError, load_profile, rows_from_records, write_trace
    from .transport import TransportError, UdpTransport, parse_hostport

    if cc not in CCS:
        fail(f"--cc: unknown congestion control {cc!r} (choose from {', '.join(CCS)})")
    _bounds(iterations, "--iterations", 0, MAX_ITERATIONS)
    _bounds(jitter, "--jitter", 0.0, 0.99)
    _bounds(straggler_prob, "--straggler-prob", 0.0, 1.0)
    for name, v in (("--slope", slope), ("--intercept", intercept)):
        if v is not None:
            _bounds(v, name, 0.0 if name == "--slope" else 0.0, 1000.0, lo_open=name == "--intercept")
    _check_output(records_out, "--out")
    _check_output(trace_out, "--trace-out")
    peers = [_conv(parse_hostport, p, "--to") for p in to]
    size = _conv(parse_size, nbytes, "--bytes", 0, MAX_BYTES)
    comp = _conv(parse_duration, compute, "--compute", 0, MAX_SECONDS)
    if trace is not None:
        try:
            prof = load_profile(trace, _line_rate(trace_line_rate, "--trace-line-rate"))
        except TraceError as e:
            fail(str(e))
        size, comp, jitter = prof.bytes_per_flow, prof.compute_s, prof.jitter
        if prof.flows != len(peers):
            err.print(
                f"note: {trace} has {prof.flows} flows per iteration; each of the {len(peers)} --to "
                f"flow(s) sends one flow's {size:,} bytes",
                highlight=False,
            )
    params = {k: v for k, v in (("slope", slope), ("intercept", intercept)) if v is not None}
    if params and not cc.startswith("mltcp-"):
        fail("--slope/--intercept apply to the mltcp-* algorithms only")
    try:
        spec = JobSpec.of(
            job_id=job,
            compute_s=comp,
            bytes_per_iter=size,
            peers=peers,
            jitter=jitter,
            straggler_prob=straggler_prob,
            straggler_delay_s=_conv(parse_duration, straggler_delay, "--straggler-delay", 0, MAX_SECONDS),
            start_offset_s=_conv(parse_duration, start_offset, "--start-offset", 0, MAX_SECONDS),
            seed=seed,
        )
    except ValueError as e:
        fail(str(e))
    if detect_iterations not in ("explicit", "idle"):
        fail("--detect-iterations must be explicit or idle")
    if payload < 1 or payload > 65000:
        fail("--payload must be in 1..65000")
    if seed is not None:
        _bounds(seed, "--seed", 0, 2**63 - 1)
    rate = _conv(parse_rate, line_rate, "--line-rate", 0, MAX_RATE, lo_open=True)
    rto = _conv(parse_duration, min_rto, "--min-rto", 1e-6, 60.0)
    limit = _conv(parse_duration, timeout, "--timeout", 0, MAX_SECONDS, lo_open=True)

    key = _psk(psk)
    try:
        tr = UdpTransport(
            peers,
            cc=cc,
            job_id=job,
            cc_params=params,
            line_rate=rate / 8,
            payload=payload,
            psk=key,
            min_rto=rto,
            ecn=not no_ecn,
            timeout=limit,
            explicit_iterations=detect_iterations == "explicit",
            idle_restart=not no_idle_restart,
        )
    except OSError as e:
        fail(f"--to: {e}")
    with tr:
        c0, w0 = time.process_time(), time.monotonic()
        try:
            recs = run_job(spec, tr, iterations)
        except TransportError as e:  # timeout, or a fault (spoofed data/ACKs)
            fail(str(e), 1)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        stats = tr.stats()
        for st in stats:
            st.update(cpu_s=time.process_time() - c0, elapsed_s=time.monotonic() - w0)
    if records_out:
        write_csv(recs, records_out)
    if trace_out:
        write_trace(rows_from_records(recs), trace_out)
    if as_json:
        print_json({"records": [asdict(r) for r in recs], "summary": stats})
        return
    t = Table(title=f"job {job} · {cc} · {len(peers)} flow(s)")
    for c in ("iter", "compute ms", "comm ms", "MB/flow", "retx"):
        t.add_column(c, justify="right")
    for r in recs:
        t.add_row(
            str(r.iteration),
            f"{(r.comm_start - r.start) * 1e3:.1f}",
            f"{(r.end - r.comm_start) * 1e3:.1f}",
            f"{r.bytes / 1e6:.3f}",
            str(int(r.drops)),
        )
    out.print(t)
    for s in stats:
        out.print(
            f"{s['dest']}: {s['bytes']} B acked, {s['sent']} datagrams, {s['retransmits']} retransmits, "
            f"{s['timeouts']} timeouts, ECE {s['ece']}, CNP {s['cnp']}, srtt "
            f"{(s['srtt'] or 0) * 1e3:.2f} ms",
            highlight=False,
        )


def _psk(path: Optional[Path]) -> Optional[bytes]:
    from .transport.auth import read_psk

    if path is None:
        return None
    try:
        return read_psk(path)
    except ValueError as e:
        fail(f"--psk: {e}")


@app.command()
def recv(
    bind: str = typer.Option("0.0.0.0:9199", help="HOST:PORT to listen on"),
    idle_exit: Optional[str] = typer.Option(None, help="exit after this long without data (once data came)"),
    duration: Optional[str] = typer.Option(None, help="exit after this long"),
    ack_every: int = typer.Option(2, help="ACK every N in-order datagrams"),
    no_verify: bool = typer.Option(False, "--no-verify", help="skip checking payload bytes"),
    psk: Optional[Path] = typer.Option(None, "--psk", help="pre-shared key file (the senders' too)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON document on exit: {flows: [...], receiver: {...}}"),
):
    """Receive MLTCP transport flows: deliver in order, verify, ACK (ECE/CNP on CE marks)."""
    import threading

    from .transport import Receiver, parse_hostport

    host, port = _conv(lambda b: parse_hostport(b, allow_zero=True), bind, "--bind")
    _bounds(ack_every, "--ack-every", 1, 10_000)
    d = _conv(parse_duration, duration, "--duration", 0, MAX_SECONDS, lo_open=True) if duration else None
    idle = _conv(parse_duration, idle_exit, "--idle-exit", 0, MAX_SECONDS, lo_open=True) if idle_exit else None
    try:
        rx = Receiver((host, port), ack_every=ack_every, verify=not no_verify, psk=_psk(psk))
    except OSError as e:
        fail(f"--bind {bind}: {e}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if d is not None:
        timer = threading.Timer(d, stop.set)
        timer.daemon = True
        timer.start()
    err.print(f"listening on {rx.addr[0]}:{rx.addr[1]}", highlight=False)
    t0, c0 = time.monotonic(), time.process_time()
    try:
        rx.serve(stop, idle_exit=idle)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        rx.sock.close()
    elapsed, cpu = time.monotonic() - t0, time.process_time() - c0
    flows = rx.summary()
    if as_json:
        print_json(
            {
                "flows": flows,
                "receiver": dict(
                    flows=len(flows),
                    elapsed_s=elapsed,
                    cpu_s=cpu,
                    bad=rx.bad,
                    refused_flows=rx.refused_flows,
                    unauthenticated=rx.unauthenticated,
                ),
            }
        )
        return
    for f in flows:
        out.print(
            f"{f['peer']} job {f['job']}: {f['bytes']} B in order ({f['iterations']} iterations), "
            f"{f['duplicates']} duplicates, {f['mismatched']} mismatched, "
            f"{f['refused']} refused, {f['forged']} forged, CE {f['ce']}, CNP {f['cnps']}",
            highlight=False,
        )
    out.print(f"{len(flows)} flow(s) in {elapsed:.1f} s", highlight=False)


@app.command()
def relay(
    listen: str = typer.Option("127.0.0.1:9198", help="HOST:PORT senders send to"),
    to: str = typer.Option(..., "--to", help="receiver HOST:PORT"),
    drop: float = typer.Option(0.0),
    reorder: float = typer.Option(0.0),
    duplicate: float = typer.Option(0.0),
    ce: float = typer.Option(0.0, help="probability of setting CE on a forwarded datagram"),
    ack_drop: float = typer.Option(0.0),
    seed: int = typer.Option(1),
):
    """A lossy UDP relay (loss/reorder/duplication/CE) for trying the transport on loopback."""
    from .transport import parse_hostport
    from .transport.relay import LossyRelay

    try:
        r = LossyRelay(
            _conv(parse_hostport, to, "--to"),
            drop=drop,
            reorder=reorder,
            duplicate=duplicate,
            ce=ce,
            ack_drop=ack_drop,
            seed=seed,
            bind=_conv(lambda b: parse_hostport(b, allow_zero=True), listen, "--listen"),
        )
    except (ValueError, OSError) as e:
        fail(str(e))
    err.print(f"relaying {r.addr[0]}:{r.addr[1]} -> {to} (Ctrl-C to stop)", highlight=False)
    try:
        r.serve()
    except KeyboardInterrupt:
        pass
    finally:
        r.close()
        out.print(json.dumps(r.stats))


@app.command("trace-import")
def trace_import(
    path: Path = typer.Argument(
        ..., help="CSV: iteration_number,iteration_duration_seconds,flow_size_bytes_in_iteration"
    ),
    line_rate: str = typer.Option("10gbit", help="line rate the trace was measured at (> 0)"),
    shared_link: bool = typer.Option(
        False,
        "--shared-link",
        help="the iteration's flows shared one link at the "
        "line rate (default: each flow had its own, as in a ring all-reduce)",
    ),
    as_json: bool = typer.Option(False, "--json"),
):
    """Turn a measured per-iteration trace into a job profile: iterations, flows per iteration,
    compute time, bytes per flow and per iteration."""
    from .traces import TraceError, load_profile

    rate = _line_rate(line_rate, "--line-rate")
    status = None if as_json else err.status(f"reading {path}")

    def progress(rows):
        if status is not None:
            status.update(f"reading {path}: {rows:,} rows")

    try:
        if status is not None:
            status.start()
        p = load_profile(path, rate, shared_link=shared_link, progress=progress)
    except TraceError as e:
        fail(str(e))
    finally:
        if status is not None:
            status.stop()
    if as_json:
        print_json(p.summary())
        return
    flows = f"{p.flows}" if p.flows_min == p.flows_max else f"{p.flows} (most common; {p.flows_min}-{p.flows_max})"
    out.print(
        f"{p.name}: {p.iterations} iterations ({p.rows} rows), {flows} flows per iteration, "
        f"compute {p.compute_s * 1e3:.1f} ms (jitter {p.jitter:.3f}), {p.bytes_per_flow / 1e6:.2f} MB per flow, "
        f"{p.bytes_per_iter / 1e6:.2f} MB per iteration"
        + (
            f"; {p.clamped} iterations shorter than their transfer time at {rate:.4g} bit/s (compute 0)"
            if p.clamped
            else ""
        ),
        highlight=False,
    )


@app.command("trace-export")
def trace_export(
    records: Path = typer.Argument(..., help="iteration records CSV (from `send --out` or the simulator)"),
    out_path: Path = typer.Argument(..., help="trace CSV to write"),
    job: Optional[str] = typer.Option(None, help="job to export when the records hold several"),
    flows: int = typer.Option(1, help="rows per iteration: the iteration's bytes split over this many flows"),
):
    """Write iteration records as a trace in the public per-iteration shape."""
    from mltcp.records import read_csv

    from .traces import rows_from_records, write_trace

    if flows < 1:
        fail(f"--flows: must be >= 1, got {flows}")
    if not out_path.parent.is_dir():
        fail(f"{out_path}: folder {out_path.parent} does not exist")
    try:
        recs = read_csv(records)
    except UnicodeDecodeError as e:
        fail(f"{records}: not UTF-8 text (byte {e.start})")
    except OSError as e:
        fail(f"{records}: cannot read ({e.strerror})")
    except ValueError as e:
        fail(str(e))
    try:
        rows = rows_from_records(recs, job, flows)
    except ValueError as e:
        fail(f"{records}: {e}")
    if not rows:
        fail(f"{records}: no records" + (f" for job {job!r}" if job else ""))
    try:
        write_trace(rows, out_path)
    except (ValueError, OSError) as e:
        fail(f"{out_path}: {e}")
    out.print(f"{len(rows) // flows} iterations ({len(rows)} rows) -> {out_path}", highlight=False)


@app.command("pcap-write")
def pcap_write(
    records: Path = typer.Argument(..., help="iteration records CSV"),
    out_path: Path = typer.Argument(..., help="pcap to write"),
    packets_per_iter: int = typer.Option(8, help="sampled packets per iteration"),
):
    """Synthetic MLTCP capture of iteration records (for replay or analysis tools)."""
    from mltcp.records import read_csv

    _bounds(packets_per_iter, "--packets-per-iter", 1, 100_000)
    _check_output(out_path, "OUT_PATH")

    from .pcap import write_records

    try:
        n = write_records(read_csv(records), out_path, packets_per_iter=packets_per_iter)
    except (ValueError, OSError) as e:
        fail(str(e))
    out.print(f"{n} packets -> {out_path}", highlight=False)


@app.command("pcap-records")
def pcap_records(
    path: Path = typer.Argument(..., help="pcap (MLTCP shim flows or any UDP/TCP flows)"),
    idle_gap: Optional[str] = typer.Option(None, help="gap that starts a new iteration in flows without the shim"),
    port: List[int] = typer.Option([], "--port", help="also parse the MLTCP shim on this UDP port (9199 always)"),
    epoch: Optional[float] = typer.Option(
        None, help="Unix time the records count from; earlier packets are left out (default: the first packet)"
    ),
    records_out: Optional[Path] = typer.Option(None, "--out", help="write records CSV here"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Per-job iteration times derived from a capture."""
    from mltcp.records import write_csv

    from .pcap import PcapError, read_records

    for p in port:
        _bounds(p, "--port", 1, 65535)
    if epoch is not None and not 0 <= epoch <= 1e11:  # NaN too
        fail(f"--epoch must be a Unix time in seconds (0 to 1e11), got {epoch}")
    _check_output(records_out, "--out")
    try:
        recs = read_records(
            path,
            idle_gap=_conv(parse_duration, idle_gap, "--idle-gap", 0, MAX_SECONDS, lo_open=True) if idle_gap else None,
            ports=port,
            epoch=epoch,
        )
    except PcapError as e:
        fail(str(e))
    if records_out:
        write_csv(recs, records_out)
    if as_json:
        print_json([asdict(r) for r in recs])
        return
    t = Table(title=str(path))
    for c in ("job", "iter", "comm start s", "comm ms", "iter ms", "MB", "retx", "CE"):
        t.add_column(c, justify="right")
    for r in recs:
        t.add_row(
            str(r.job),
            str(r.iteration),
            f"{r.comm_start:.6f}",
            f"{(r.end - r.comm_start) * 1e3:.2f}",
            f"{(r.end - r.start) * 1e3:.2f}",
            f"{r.bytes / 1e6:.3f}",
            str(int(r.drops)),
            str(int(r.marks)),
        )
    out.print(t)


@app.command()
def replay(
    path: Path = typer.Argument(..., help="pcap to replay"),
    iface: str = typer.Option(..., help="interface to send out of"),
    netns: Optional[str] = typer.Option(None, help="network namespace holding the interface"),
    fast: bool = typer.Option(False, "--fast", help="ignore the capture's timing"),
    count: Optional[int] = typer.Option(None, help="send only the first N packets"),
):
    """Send a capture's packets out of an interface (needs root), with their original timing."""
    from .pcap import replay as do_replay

    if count is not None:
        _bounds(count, "--count", 0)
    if not path.exists():
        fail(f"{path}: no such file")
    try:
        n = do_replay(path, iface, netns=netns, realtime=not fast, count=count)
    except (RuntimeError, OSError, ValueError) as e:
        fail(str(e), 1)
    out.print(f"{n} packets sent on {iface}" + (f" in {netns}" if netns else ""), highlight=False)


if __name__ == "__main__":
    app()
