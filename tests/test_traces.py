"""Trace import/export in the public per-iteration CSV shape."""

import json

import numpy as np
import pytest

from mltcp.records import IterationRecord
from mltcp.traffic import traces
from mltcp.traffic.traces import TraceError, TraceRow


def _write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_parse_with_and_without_header(tmp_path):
    body = "0,0.7,60000000\n1,0.72,60000008\n"
    a = traces.read_trace(_write(tmp_path, body, "a.csv"))
    b = traces.read_trace(_write(tmp_path, ",".join(traces.COLUMNS) + "\n" + body, "b.csv"))
    assert a == b == [TraceRow(0, 0.7, 60_000_000), TraceRow(1, 0.72, 60_000_008)]


@pytest.mark.parametrize(
    "text,line,what",
    [
        ("0,0.7,100\n1,0.7\n", 2, "expected 3 fields"),
        ("0,0.7,100\n\n# c\nx,0.7,100\n", 4, "iteration_number"),
        ("0,0.7,100\n1,-0.1,100\n", 2, "iteration_duration_seconds must be > 0"),
        ("0,abc,100\n", 1, "iteration_duration_seconds"),
        ("0,0.7,1.5\n", 1, "whole number"),
        ("0,0.7,-3\n", 1, "whole number"),
        ("iter,dur,bytes\n0,0.7,1\n", 1, "header"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, text, line, what):
    p = _write(tmp_path, text)
    with pytest.raises(TraceError) as ei:
        traces.read_trace(p)
    assert f"{p}:{line}:" in str(ei.value) and what in str(ei.value)
    assert isinstance(ei.value, ValueError)


def test_empty_and_missing(tmp_path):
    with pytest.raises(TraceError, match="no data rows"):
        traces.read_trace(_write(tmp_path, "# only a comment\n"))
    with pytest.raises(TraceError, match="cannot read"):
        traces.read_trace(tmp_path / "nope.csv")


def test_profile_subtracts_comm_time():
    rows = [TraceRow(i, 0.5 + 0.01 * (i % 3), 10_000_000) for i in range(9)]
    p = traces.profile(rows, line_rate_bps=1e9, name="x")  # 80 ms of communication
    assert p.compute_s == pytest.approx(0.43)
    assert p.bytes_per_iter == 10_000_000 and p.clamped == 0 and 0 < p.jitter < 0.05
    assert p.flows == 1 and p.iterations == 9 and p.bytes_per_flow == 10_000_000
    spec = p.job_spec(4, peers=["10.0.0.2:9199"])
    assert (spec.job_id, spec.job.compute_s, spec.bytes_per_iter, spec.label) == (4, p.compute_s, 10_000_000, "x")
    for bad in (0, -1, float("inf"), float("nan"), "10gbit", True):
        with pytest.raises(TraceError, match="line rate"):
            traces.profile(rows, bad)


def test_export_from_records_roundtrip(tmp_path):
    recs = [IterationRecord("j1", i, 1.0 * i, 1.0 * i + 0.6, 1.0 * i + 0.75, 59_900_000) for i in range(5)]
    recs.append(IterationRecord("j2", 0, 0, 0.1, 0.2, 5))
    with pytest.raises(ValueError, match="several jobs"):
        traces.rows_from_records(recs)
    rows = traces.rows_from_records(recs, job="j1")
    out = tmp_path / "out.csv"
    traces.write_trace(rows, out)
    back = traces.read_trace(out)
    assert [r.iteration for r in back] == list(range(5))
    assert [r.duration_s for r in back] == pytest.approx([0.75] * 5)
    assert all(r.flow_bytes == 59_900_000 for r in back)
    assert not (tmp_path / "out.csv.tmp").exists()


def test_bundled_example_is_densenet_like():
    path = traces.example_trace()
    assert "SYNTHETIC" in path.read_text().splitlines()[0]
    rows = traces.read_trace(path)
    assert len(rows) >= 24
    assert all(0.69 <= r.duration_s <= 0.75 for r in rows)
    assert all(abs(r.flow_bytes - 59.9e6) < 1e5 for r in rows)
    p = traces.load_profile(path, line_rate_bps=10e9)
    assert 0.6 < p.compute_s < 0.71


# ---- one row per flow: iterations grouped, flows counted ---------------------------------------


def _public(n_iter=5, flows=8, dur=0.7, nbytes=59_861_576, first=1):
    lines = [",".join(traces.COLUMNS)]
    for i in range(first, first + n_iter):
        for f in range(flows):
            lines.append(f"{i},{dur + 0.001 * i},{nbytes + 8 * (f % 2)}")
    return "\n".join(lines) + "\n"


def test_rows_of_an_iteration_are_grouped_and_flows_counted(tmp_path):
    p = _write(tmp_path, _public())
    it = traces.read_iterations(p)
    assert len(it) == 5 and it.rows == 40
    assert list(it.iteration) == [1, 2, 3, 4, 5] and set(it.flows) == {8}
    assert it.bytes_total[0] == 8 * 59_861_576 + 4 * 8 and it.bytes_max[0] == 59_861_584
    prof = traces.load_profile(p, 10e9)
    assert (prof.iterations, prof.rows, prof.flows) == (5, 40, 8)
    assert prof.bytes_per_iter == 8 * 59_861_576 + 32 and prof.bytes_per_flow == 59_861_580
    # flows in parallel, each at 10 Gb/s: the largest flow's 47.9 ms is the transfer time
    assert prof.compute_s == pytest.approx(0.703 - 59_861_584 * 8 / 10e9)
    shared = traces.load_profile(p, 10e9, shared_link=True)  # all 8 over one 10 Gb/s link: 383 ms
    assert shared.compute_s == pytest.approx(0.703 - (8 * 59_861_576 + 32) * 8 / 10e9)


def test_uneven_flow_counts_report_the_most_common(tmp_path):
    text = "1,0.5,100\n1,0.5,100\n2,0.5,100\n2,0.5,100\n3,0.5,100\n"
    prof = traces.load_profile(_write(tmp_path, text), 1e9)
    assert (prof.flows, prof.flows_min, prof.flows_max, prof.iterations) == (2, 1, 2, 3)


def test_an_iteration_split_apart_is_an_error(tmp_path):
    p = _write(tmp_path, "1,0.5,100\n2,0.5,100\n1,0.5,100\n")
    with pytest.raises(TraceError, match=f"{p}:3: iteration_number 1 after 2"):
        traces.read_iterations(p)


# ---- issue 12 probes ------------------------------------------------------------------------------


def test_utf8_bom_is_accepted(tmp_path):
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbf" + _public(2, 2).encode())
    assert traces.read_iterations(p).rows == 4
    p.write_bytes(b"\xef\xbb\xbf" + b"0,0.7,100\n")  # no header: the BOM is not part of the number
    assert traces.read_trace(p) == [TraceRow(0, 0.7, 100)]


def test_bad_encoding_names_the_file(tmp_path):
    p = tmp_path / "latin.csv"
    p.write_bytes(b"0,0.7,100\n\xff\xfe,1,2\n")
    with pytest.raises(TraceError, match=f"{p}: not UTF-8"):
        traces.read_iterations(p)


def test_every_row_clamped_is_an_error_naming_a_rate_that_fits(tmp_path):
    p = _write(tmp_path, "0,0.1,10000000\n1,0.1,10000000\n")  # 10 MB in 0.1 s needs > 800 Mb/s
    with pytest.raises(TraceError) as e:
        traces.load_profile(p, 100e6)
    msg = str(e.value)
    assert str(p) in msg and "every iteration (2)" in msg and "8e+08" in msg
    ok = traces.load_profile(p, 1e9)
    assert ok.clamped == 0 and ok.compute_s == pytest.approx(0.02)
    some = traces.load_profile(_write(tmp_path, "0,0.1,10000000\n1,1.0,10000000\n", "some.csv"), 100e6)
    assert some.clamped == 1 and some.compute_s == pytest.approx(0.1)  # median of 0 and 0.2


def test_export_refuses_records_that_would_give_negative_durations(tmp_path):
    recs = [IterationRecord("j", 0, 1.0, 1.2, 1.5, 100), IterationRecord("j", 1, 2.0, 1.9, 1.8, 100)]
    with pytest.raises(ValueError, match="iteration 1: end 1.8 is not after start 2.0"):
        traces.rows_from_records(recs)
    with pytest.raises(ValueError, match="iteration 0"):
        traces.rows_from_records([IterationRecord("j", 0, 1.0, 1.0, 1.0, 100)])  # zero duration
    with pytest.raises(ValueError, match="not a valid trace row"):
        traces.write_trace([TraceRow(0, -0.5, 10)], tmp_path / "neg.csv")
    assert not (tmp_path / "neg.csv").exists()


def test_export_with_flows_reimports_as_the_same_iterations(tmp_path):
    recs = [IterationRecord("j", i, 0.5 * i, 0.5 * i + 0.3, 0.5 * i + 0.5, 8 * 1000 + 3) for i in range(4)]
    out = tmp_path / "t.csv"
    traces.write_trace(traces.rows_from_records(recs, flows=8), out)
    it = traces.read_iterations(out)
    assert list(it.flows) == [8] * 4 and list(it.bytes_total) == [8003] * 4 and it.bytes_max[0] == 1001
    assert it.duration_s == pytest.approx([0.5] * 4)


def test_large_trace_is_kept_as_per_iteration_arrays(tmp_path):
    """Streaming: 200,000 rows become 25,000 iterations of five numbers each, no row objects (the
    memory of a 10 M-row trace is measured in bench/bench_traces.py)."""
    p = tmp_path / "big.csv"
    with open(p, "w") as fh:
        fh.write(",".join(traces.COLUMNS) + "\n")
        for i in range(25_000):
            fh.write(f"{i},0.3,1000000\n" * 8)
    it = traces.read_iterations(p)
    assert it.rows == 200_000 and len(it) == 25_000
    assert all(isinstance(a, np.ndarray) for a in (it.iteration, it.duration_s, it.flows, it.bytes_total))
    assert it.flows.nbytes + it.bytes_total.nbytes + it.duration_s.nbytes < 1_000_000


# ---- the trace commands (issue 12 probes through the CLI) ----------------------------------------


def _cli(*args):
    from typer.testing import CliRunner

    from mltcp.traffic.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("rate", ["0", "0gbit", "0.0"])
def test_cli_zero_line_rate_exits_2_naming_the_option(tmp_path, rate):
    p = _write(tmp_path, _public(2, 2))
    r = _cli("trace-import", p, "--line-rate", rate)
    assert r.exit_code == 2 and "--line-rate" in r.output and "> 0" in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    r = _cli("send", "--to", "127.0.0.1:9", "--trace", p, "--trace-line-rate", rate, "--iterations", "1")
    assert r.exit_code == 2 and "--trace-line-rate" in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_cli_import_reports_iterations_and_flows(tmp_path):
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbf" + _public(5, 8).encode())
    r = _cli("trace-import", p, "--line-rate", "10gbit", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["iterations"], d["rows"], d["flows"]) == (5, 40, 8)
    assert d["bytes_per_flow"] == 59_861_580 and d["bytes_per_iter"] == 8 * 59_861_580
    r = _cli("trace-import", p, "--line-rate", "10gbit")
    assert r.exit_code == 0 and "5 iterations (40 rows), 8 flows per iteration" in r.output.replace("\n", " ")


def test_cli_every_row_clamped_exits_2(tmp_path):
    p = _write(tmp_path, "0,0.1,10000000\n1,0.1,10000000\n")
    r = _cli("trace-import", p, "--line-rate", "100mbit")
    assert r.exit_code == 2 and "every iteration" in r.output and str(p.name) in r.output


def test_cli_export_negative_duration_exits_2_and_writes_nothing(tmp_path):
    from mltcp.records import write_csv

    write_csv(
        [IterationRecord("j", 0, 1.0, 1.2, 1.5, 100), IterationRecord("j", 1, 2.0, 1.9, 1.8, 100)], tmp_path / "r.csv"
    )
    r = _cli("trace-export", tmp_path / "r.csv", tmp_path / "t.csv")
    assert r.exit_code == 2 and "r.csv" in r.output and "iteration 1" in r.output, r.output
    assert not (tmp_path / "t.csv").exists()
    r = _cli("trace-export", tmp_path / "r.csv", tmp_path / "missing" / "t.csv")
    assert r.exit_code == 2 and "does not exist" in r.output
    (tmp_path / "bad.csv").write_bytes(b"job,iteration\n\xff\n")
    r = _cli("trace-export", tmp_path / "bad.csv", tmp_path / "t.csv")
    assert r.exit_code == 2 and "bad.csv" in r.output and "UTF-8" in r.output


def test_cli_export_then_import_roundtrip_with_flows(tmp_path):
    from mltcp.records import write_csv

    write_csv(
        [IterationRecord("j", i, 0.4 * i, 0.4 * i + 0.3, 0.4 * i + 0.4, 4_000_000) for i in range(6)],
        tmp_path / "r.csv",
    )
    r = _cli("trace-export", tmp_path / "r.csv", tmp_path / "t.csv", "--flows", "4")
    assert r.exit_code == 0 and "6 iterations (24 rows)" in r.output, r.output
    d = json.loads(_cli("trace-import", tmp_path / "t.csv", "--line-rate", "1gbit", "--json").stdout)
    assert (d["iterations"], d["flows"], d["bytes_per_flow"]) == (6, 4, 1_000_000)
    assert d["compute_s"] == pytest.approx(0.4 - 1e6 * 8 / 1e9)
