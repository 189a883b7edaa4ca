"""Trace import/export in the public per-iteration CSV shape."""
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


@pytest.mark.parametrize("text,line,what", [
    ("0,0.7,100\n1,0.7\n", 2, "expected 3 fields"),
    ("0,0.7,100\n\n# c\nx,0.7,100\n", 4, "iteration_number"),
    ("0,0.7,100\n1,-0.1,100\n", 2, "iteration_duration_seconds must be > 0"),
    ("0,abc,100\n", 1, "iteration_duration_seconds"),
    ("0,0.7,1.5\n", 1, "whole number"),
    ("0,0.7,-3\n", 1, "whole number"),
    ("iter,dur,bytes\n0,0.7,1\n", 1, "header"),
])
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
    p = traces.profile(rows, line_rate_bps=1e9, name="x")   # 80 ms of communication
    assert p.compute_s == pytest.approx(0.43)
    assert p.bytes_per_iter == 10_000_000 and p.clamped == 0 and 0 < p.jitter < 0.05
    slow = traces.profile(rows, line_rate_bps=1e8)          # 0.8 s > duration: clamped
    assert slow.compute_s == 0 and slow.clamped == 9
    spec = p.job_spec(4, peers=["10.0.0.2:9199"])
    assert (spec.job_id, spec.compute_s, spec.bytes_per_iter, spec.label) == (4, p.compute_s, 10_000_000, "x")
    with pytest.raises(ValueError):
        traces.profile(rows, 0)


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
