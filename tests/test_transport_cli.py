"""`mltcp traffic` commands (typer app in mltcp.traffic.cli) and the unit parsers."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from mltcp.traffic.cli import app
from mltcp.traffic.transport import Receiver
from mltcp.traffic.transport.units import parse_duration, parse_rate, parse_size

runner = CliRunner()


def test_units():
    assert parse_size("2MB") == 2_000_000 and parse_size("64KiB") == 65536 and parse_size("10") == 10
    assert parse_duration("20ms") == pytest.approx(0.02) and parse_duration("1.5") == 1.5
    assert parse_rate("100mbit") == 1e8 and parse_rate("10Gbit") == 1e10
    for bad in ("", "2XB", "-1MB", "MB"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_send_json_against_receiver():
    with Receiver(("127.0.0.1", 0)) as rx:
        rx.start()
        res = runner.invoke(
            app,
            [
                "send",
                "--to",
                f"127.0.0.1:{rx.addr[1]}",
                "--cc",
                "mltcp-cubic",
                "--job",
                "4",
                "--bytes",
                "100KB",
                "--compute",
                "1ms",
                "--iterations",
                "3",
                "--json",
            ],
        )
        rx.stop()
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)  # one JSON document
        recs, summary = doc["records"], doc["summary"]
        assert [r["iteration"] for r in recs] == [0, 1, 2]
        assert all(r["bytes"] == 100_000 and r["end"] >= r["comm_start"] >= r["start"] for r in recs)
        (f,) = rx.flows.values()
        assert f.delivered == 300_000 and f.job_id == 4 and summary[0]["crc32"] == f.crc


@pytest.mark.parametrize(
    "args,needle",
    [
        (["send", "--to", "127.0.0.1:x"], "--to"),
        (["send", "--to", "127.0.0.1:9", "--cc", "vegas"], "unknown congestion control"),
        (["send", "--to", "127.0.0.1:9", "--bytes", "lots"], "--bytes"),
        (["send", "--to", "127.0.0.1:9", "--cc", "reno", "--slope", "2"], "mltcp"),
        (["send", "--to", "127.0.0.1:9", "--job", "70000"], "job_id"),
        (["send", "--to", "127.0.0.1:9", "--detect-iterations", "magic"], "explicit or idle"),
    ],
)
def test_send_bad_input_exits_2(args, needle):
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and needle in res.output


def test_trace_import_errors_and_profile(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("0,0.7,100\n1,zz,100\n")
    res = runner.invoke(app, ["trace-import", str(bad)])
    assert res.exit_code == 2 and f"{bad}:2:" in res.output.replace("\n", "")
    from mltcp.traffic.traces import example_trace

    res = runner.invoke(app, ["trace-import", str(example_trace()), "--line-rate", "10gbit", "--json"])
    assert res.exit_code == 0
    d = json.loads(res.stdout)
    assert d["iterations"] == 40 and abs(d["bytes_per_iter"] - 59.9e6) < 1e5


def test_records_trace_and_pcap_commands(tmp_path):
    from mltcp.records import IterationRecord, write_csv

    recs = [IterationRecord("job5", i, 0.1 * i, 0.1 * i + 0.06, 0.1 * i + 0.1, 1_000_000) for i in range(4)]
    write_csv(recs, tmp_path / "r.csv")
    assert runner.invoke(app, ["trace-export", str(tmp_path / "r.csv"), str(tmp_path / "t.csv")]).exit_code == 0
    assert (tmp_path / "t.csv").read_text().startswith("iteration_number,")
    assert runner.invoke(app, ["pcap-write", str(tmp_path / "r.csv"), str(tmp_path / "r.pcap")]).exit_code == 0
    res = runner.invoke(app, ["pcap-records", str(tmp_path / "r.pcap"), "--json"])
    assert res.exit_code == 0
    back = json.loads(res.stdout)
    assert [b["iteration"] for b in back] == [0, 1, 2, 3] and all(b["bytes"] == 1_000_000 for b in back)
    assert back[1]["end"] - back[1]["comm_start"] == pytest.approx(0.04, abs=2e-6)
    res = runner.invoke(app, ["pcap-records", str(tmp_path / "r.csv")])
    assert res.exit_code == 2


def test_recv_command_process():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mltcp.traffic.cli",
            "recv",
            "--bind",
            "127.0.0.1:0",
            "--duration",
            "20s",
            "--idle-exit",
            "0.5s",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()  # "listening on 127.0.0.1:PORT"
        assert line.startswith("listening on"), line
        port = int(line.strip().rsplit(":", 1)[1])
        res = runner.invoke(
            app,
            [
                "send",
                "--to",
                f"127.0.0.1:{port}",
                "--cc",
                "dcqcn",
                "--bytes",
                "50KB",
                "--compute",
                "0",
                "--iterations",
                "2",
                "--json",
            ],
        )
        assert res.exit_code == 0, res.output
        out, _ = proc.communicate(timeout=30)
        doc = json.loads(out)
        flows, tail = doc["flows"], doc["receiver"]
        assert tail["flows"] == 1 and tail["cpu_s"] > 0
        assert len(flows) == 1 and flows[0]["bytes"] == 100_000 and flows[0]["mismatched"] == 0
        assert flows[0]["iterations"] == 2
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_send_without_receiver_times_out_with_exit_1():
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    res = runner.invoke(
        app,
        [
            "send",
            "--to",
            f"127.0.0.1:{port}",
            "--bytes",
            "10KB",
            "--compute",
            "0",
            "--iterations",
            "1",
            "--timeout",
            "0.5s",
        ],
    )
    assert res.exit_code == 1 and "not delivered" in res.output
    assert "flow 0: acked 0 of 10000" in " ".join(res.output.split())  # what was stuck, and how far


def test_send_with_a_psk_file_against_a_receiver_with_the_same_key(tmp_path):
    key = tmp_path / "psk"
    key.write_text("k" * 32 + "\n")
    with Receiver(("127.0.0.1", 0), psk=b"k" * 32) as rx:
        rx.start()
        res = runner.invoke(
            app,
            [
                "send",
                "--to",
                f"127.0.0.1:{rx.addr[1]}",
                "--psk",
                str(key),
                "--bytes",
                "50KB",
                "--compute",
                "1ms",
                "--iterations",
                "2",
                "--json",
            ],
        )
        rx.stop()
        assert res.exit_code == 0, res.output
        (f,) = rx.flows.values()
        assert f.delivered == 100_000 and f.forged == 0
        assert json.loads(res.stdout)["summary"][0]["crc32"] == f.crc


@pytest.mark.parametrize("content", [None, "short"])
def test_a_bad_psk_file_exits_2_naming_it(tmp_path, content):
    key = tmp_path / "psk"
    if content is not None:
        key.write_text(content)
    for cmd in (["send", "--to", "127.0.0.1:9"], ["recv", "--bind", "127.0.0.1:0", "--duration", "1s"]):
        res = runner.invoke(app, [*cmd, "--psk", str(key)])
        assert res.exit_code == 2, res.output
        assert "--psk" in res.output and str(key) in res.output.replace("\n", "")
