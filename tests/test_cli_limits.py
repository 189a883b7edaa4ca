"""Every command-line number is range-checked before work starts (issue 12, item 4): exit 2 and a
message naming the option; no traceback, no namespace made, nothing sent."""

import pytest
from typer.testing import CliRunner

from mltcp.emulation.cli import app as emulate_app
from mltcp.traffic.cli import app as traffic_app
from mltcp.traffic.transport.units import parse_duration, parse_rate, parse_size

runner = CliRunner()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["two-jobs", "--rate-mbps", "inf"], "--rate-mbps"),
        (["two-jobs", "--rate-mbps", "nan"], "--rate-mbps"),
        (["two-jobs", "--rate-mbps", "0"], "--rate-mbps"),
        (["two-jobs", "--rate-mbps", "1e9"], "--rate-mbps"),
        (["two-jobs", "--delay-ms", "-1"], "--delay-ms"),
        (["two-jobs", "--buffer-kb", "0"], "--buffer-kb"),
        (["two-jobs", "--iterations", "0"], "--iterations"),
        (["two-jobs", "--iterations", "1000000000000"], "--iterations"),
        (["two-jobs", "--transport", "carrier-pigeon"], "--transport"),
        (["two-jobs", "--topology", "torus"], "--topology"),
        (["two-jobs", "--link-mode", "netem"], "--link-mode"),
        (["two-jobs", "--out", "/nonexistent-dir-mltcp/x.json"], "--out"),
        (["baseline-peer", "two-jobs", "--peer-seconds", "-3"], "--peer-seconds"),
        (["topo", "dumbbell", "--jobs", "0"], "--jobs"),
        (["topo", "dumbbell", "--rate-mbps", "-5"], "--rate-mbps"),
        (["topo", "mesh"], "KIND"),
    ],
)
def test_emulate_bad_numbers_exit_2_before_any_namespace(args, needle):
    r = runner.invoke(emulate_app, args)
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output


@pytest.mark.parametrize(
    "args,needle",
    [
        (["send", "--to", "127.0.0.1:9", "--bytes", "1e400"], "--bytes"),  # OverflowError before
        (["send", "--to", "127.0.0.1:9", "--bytes", "2TB"], "--bytes"),
        (["send", "--to", "127.0.0.1:9", "--compute", "1e9s"], "--compute"),
        (["send", "--to", "127.0.0.1:9", "--iterations", "10000000"], "--iterations"),
        (["send", "--to", "127.0.0.1:9", "--iterations", "-1"], "--iterations"),
        (["send", "--to", "127.0.0.1:9", "--jitter", "1.5"], "--jitter"),
        (["send", "--to", "127.0.0.1:9", "--straggler-prob", "2"], "--straggler-prob"),
        (["send", "--to", "127.0.0.1:9", "--line-rate", "0"], "--line-rate"),
        (["send", "--to", "127.0.0.1:9", "--min-rto", "0s"], "--min-rto"),
        (["send", "--to", "127.0.0.1:9", "--timeout", "0s"], "--timeout"),
        (["send", "--to", "127.0.0.1:9", "--seed", "-4"], "--seed"),
        (["send", "--to", "127.0.0.1:9", "--cc", "mltcp-reno", "--intercept", "0"], "--intercept"),
        (["send", "--to", "127.0.0.1:9", "--cc", "mltcp-reno", "--slope", "inf"], "--slope"),
        (["send", "--to", "127.0.0.1:70000"], "--to"),
        (["send", "--to", "127.0.0.1:9", "--trace-out", "/nonexistent-dir-mltcp/t.csv"], "--trace-out"),
        (["recv", "--ack-every", "0"], "--ack-every"),
        (["recv", "--duration", "0s"], "--duration"),
        (["recv", "--idle-exit", "1e99s"], "--idle-exit"),
        (["recv", "--bind", "127.0.0.1:99999"], "--bind"),
        (["relay", "--to", "127.0.0.1:9", "--drop", "1.5"], "drop"),
        (["pcap-records", "x.pcap", "--port", "0"], "--port"),
        (["pcap-records", "x.pcap", "--idle-gap", "0s"], "--idle-gap"),
        (["pcap-write", "r.csv", "o.pcap", "--packets-per-iter", "0"], "--packets-per-iter"),
        (["replay", "x.pcap", "--iface", "lo", "--count", "-1"], "--count"),
    ],
)
def test_traffic_bad_numbers_exit_2(args, needle):
    r = runner.invoke(traffic_app, args)
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output


@pytest.mark.parametrize(
    "fn,text",
    [
        (parse_size, "1e400"),
        (parse_duration, "9" * 400),
        (parse_rate, "1e309gbit"),
        (parse_size, "-5"),
        (parse_size, "nan"),
        (parse_duration, "inf"),
    ],
)
def test_units_refuse_non_finite_and_negative(fn, text):
    with pytest.raises(ValueError):
        fn(text)
