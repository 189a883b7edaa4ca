"""One --json convention across the CLI (mltcp.console): with --json each command prints exactly
one JSON document on stdout (json.loads of the whole of stdout), the simulator's and the
emulator's reports share their top-level keys (``baseline``, ``mltcp`` = null without --compare),
bad input exits 2 with nothing on stdout, Ctrl-C exits 130. Each command runs as a user runs it,
in its own process; the emulation needs root and Mininet and skips with the reason otherwise."""

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mltcp.emulation.netns import have_mininet_prereqs, leftovers, run_prefix

ROOT = Path(__file__).resolve().parents[1]
MLTCP = [sys.executable, "-m", "mltcp.cli"]
REPORT_KEYS = {
    "scenario",
    "source",
    "jobs",
    "warmup_iterations",
    "baseline",
    "mltcp",
    "speedup_avg",
    "speedup_p99",
    "converged_at_iteration",
    "ideal_iter_s",
}

SMALL = """name = "small"
iterations = 12
warmup_iterations = 2
[[links]]
name = "l"
rate_gbps = 1
delay_us = 20
buffer_pkts = 50
[[jobs]]
name = "a"
compute_ms = 2
bytes = 200_000
path = ["l"]
[[jobs]]
name = "b"
compute_ms = 2
bytes = 200_000
path = ["l"]
"""


def run(args, timeout=300, **kw):
    p = subprocess.run([*MLTCP, *args], capture_output=True, text=True, timeout=timeout, **kw)
    return p.returncode, p.stdout, p.stderr


def one_document(stdout: str):
    """stdout parsed as exactly one JSON document (json.loads refuses a second one)."""
    assert stdout.strip(), "nothing on stdout"
    return json.loads(stdout)


@pytest.fixture()
def small(tmp_path):
    f = tmp_path / "small.toml"
    f.write_text(SMALL)
    return str(f)


def test_simulate_json_same_keys_with_and_without_compare(small):
    rc, out, err = run(["simulate", small, "--json"])
    assert rc == 0, err
    alone = one_document(out)
    assert set(alone) == REPORT_KEYS
    assert alone["baseline"]["cc"] == "reno" and alone["mltcp"] is None and alone["speedup_avg"] is None
    rc, out, err = run(["simulate", small, "--compare", "--json"])
    assert rc == 0, err
    both = one_document(out)
    assert set(both) == REPORT_KEYS
    assert both["mltcp"]["cc"] == "mltcp-reno" and both["speedup_avg"] > 0


def test_simulate_tables_without_json_and_bad_input_exit_2(small, tmp_path):
    rc, out, err = run(["simulate", small])
    assert rc == 0, err
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)  # tables, not JSON
    rc, out, err = run(["simulate", str(tmp_path / "none.toml"), "--json"])
    assert rc == 2 and out == "" and "none.toml" in err
    rc, out, err = run(["simulate", small, "--cc", "warp", "--json"])
    assert rc == 2 and out == "" and "--cc" in err


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
        except OSError:
            continue
    return out


def test_simulate_interrupted_exits_130_with_nothing_on_stdout(tmp_path):
    f = tmp_path / "long.toml"
    f.write_text(SMALL.replace("iterations = 12", "iterations = 100000"))
    # Ctrl-C as a terminal delivers it: the child takes SIGINT's default even when this test runs from
    # a background job of a non-interactive shell, which starts with SIGINT ignored (and Python then
    # keeps it ignored, so the simulation would never see the signal)
    p = subprocess.Popen(
        [*MLTCP, "simulate", str(f), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while not _children(p.pid) and time.monotonic() < deadline:  # the simulation's workers run
            time.sleep(0.2)
        assert _children(p.pid), "the simulation did not start"
        time.sleep(1)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, err
    assert out == ""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_traffic_send_and_recv_json_are_one_document_each():
    port = _free_port()
    rx = subprocess.Popen(
        [*MLTCP, "traffic", "recv", "--bind", f"127.0.0.1:{port}", "--duration", "60s", "--idle-exit", "5s", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert rx.stderr.readline().startswith("listening on")
        rc, out, err = run(
            [
                "traffic",
                "send",
                "--to",
                f"127.0.0.1:{port}",
                "--bytes",
                "50KB",
                "--compute",
                "1ms",
                "--iterations",
                "3",
                "--json",
            ],
            timeout=120,
        )
        assert rc == 0, err
        sent = one_document(out)
        assert [r["iteration"] for r in sent["records"]] == [0, 1, 2] and len(sent["summary"]) == 1
        rx_out, rx_err = rx.communicate(timeout=60)
        assert rx.returncode == 0, rx_err
        got = one_document(rx_out)
        assert got["receiver"]["flows"] == 1 and got["flows"][0]["bytes"] == 150_000
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.communicate()
    rc, out, err = run(["traffic", "send", "--to", "127.0.0.1:9", "--bytes", "-1MB", "--json"])
    assert rc == 2 and out == ""


def test_traffic_trace_and_pcap_json(tmp_path):
    trace = ROOT / "traffic" / "traces" / "densenet121_synthetic.csv"
    rc, out, err = run(["traffic", "trace-import", str(trace), "--line-rate", "10gbit", "--json"])
    assert rc == 0, err
    assert one_document(out)["iterations"] > 0
    from mltcp.records import IterationRecord, write_csv

    write_csv(
        [IterationRecord("job5", i, 0.1 * i, 0.1 * i + 0.06, 0.1 * i + 0.1, 100_000) for i in range(3)],
        tmp_path / "r.csv",
    )
    assert run(["traffic", "pcap-write", str(tmp_path / "r.csv"), str(tmp_path / "r.pcap")])[0] == 0
    rc, out, err = run(["traffic", "pcap-records", str(tmp_path / "r.pcap"), "--json"])
    assert rc == 0, err
    assert [r["iteration"] for r in one_document(out)] == [0, 1, 2]


def test_switch_install_dry_run_json():
    topo = ROOT / "controlplane" / "topologies" / "dumbbell.toml"
    rc, out, err = run(["switch", "install", str(topo), "--dry-run", "--json"])
    assert rc == 0, err
    assert one_document(out)["dry_run"] is True


def test_kernel_status_json():
    rc, out, err = run(["kernel", "status", "--json"], timeout=120)
    if rc != 0:  # no BPF struct_ops here: an error naming why, nothing on stdout
        assert rc == 2 and out == "" and err.strip(), err
        pytest.skip(f"kernel status: {err.strip()}")
    doc = one_document(out)
    assert "available" in doc and "registered" in doc


@pytest.mark.integration
@pytest.mark.root
@pytest.mark.skipif(have_mininet_prereqs() is not None, reason=f"emulation: {have_mininet_prereqs()}")
def test_emulate_json_has_the_simulators_keys():
    p = subprocess.Popen(
        [
            *MLTCP,
            "emulate",
            "two-jobs",
            "--rate-mbps",
            "50",
            "--dilate",
            "--iterations",
            "2",
            "--no-sim",
            "--no-rtt-calibration",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert not leftovers(run_prefix(p.pid)), "left behind"
    assert p.returncode == 0, err
    doc = one_document(out)
    assert REPORT_KEYS <= set(doc) and doc["mltcp"] is None and doc["baseline"]["cc"] == "reno"
    rc, out, err = run(["emulate", "two-jobs", "--rate-mbps", "-5", "--json"], timeout=60)
    assert rc == 2 and out == ""
    rc, out, err = run(["emulate", "topo", "dumbbell", "--json"], timeout=120)
    assert rc == 0, err
    assert one_document(out)["all_reachable"] is True
