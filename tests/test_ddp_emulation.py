"""Real PyTorch DDP jobs in the emulation: `mltcp emulate run scenarios/ddp-tiny.toml --compare`
(two jobs, 2 ranks each, gloo over kernel TCP through one htb bottleneck), and the cleanup when a
run fails halfway. Root + Mininet + BPF; integration."""

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mltcp.emulation import netns
from mltcp.records import read_csv
from mltcp.emulation.netns import have_mininet_prereqs
from _kernel_prereq import missing as kernel_missing

pytest.importorskip("torch", reason="torch not installed (Debian: python3-torch; pip: mltcp[torch])")
why = have_mininet_prereqs() or kernel_missing()
pytestmark = [
    pytest.mark.root,
    pytest.mark.integration,
    pytest.mark.skipif(why is not None, reason=f"DDP emulation: {why}"),
]

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "scenarios" / "ddp-tiny.toml")


def _held_struct_ops() -> set[int]:
    from mltcp.traffic.kernel import loader

    return {i for ids in loader.lingering().values() for i in ids}


def test_two_ddp_jobs_compare_reno_and_mltcp_reno_with_identical_losses(tmp_path):
    from mltcp.traffic.kernel import loader

    was = set(loader.registered())
    held_before = _held_struct_ops()
    p = subprocess.Popen(
        [sys.executable, "-m", "mltcp.emulation.cli", "run", TINY, "--compare", "--json", "--records", str(tmp_path)]
        + ["--pcap"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = p.communicate(timeout=400)
    finally:
        # SIGTERM first, so a run that hangs cleans up as on Ctrl-C (a SIGKILL left a gloo worker
        # spinning in a deleted namespace); whatever it leaves is recorded, then removed
        netns.stop_process(p, grace_s=60)
        p.communicate()
        left = netns.leftovers(netns.run_prefix(p.pid))
        netns.kill_pids(left.pids)
        netns.delete_links(netns.run_prefix(p.pid))
    assert not left
    assert set(loader.registered()) == was  # a variant the run registered is gone again
    deadline = time.monotonic() + 10  # ...and nothing holds its struct_ops once the sockets are closed
    while (new := _held_struct_ops() - held_before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not new, f"struct_ops {sorted(new)} still held after the run"
    assert p.returncode == 0, err[-3000:]
    d = json.loads(out)
    for k in ("speedup_avg", "speedup_p99", "baseline", "mltcp", "losses", "losses_identical", "ddp"):
        assert k in d
    assert d["baseline"]["cc"] == "reno" and d["mltcp"]["cc"].removeprefix("bpf_") == "mltcp_reno"
    for arm in ("baseline", "mltcp"):
        a = d[arm]
        assert a["iterations"] == 2 * 8  # both jobs, every iteration recorded
        assert "interleaved_at_iteration" in a and a["retransmissions"] >= 0
        assert a["avg_iter_s"] >= 0.05  # not faster than the emulated GPU time
        for job in ("A", "B"):
            for rank in ("0", "1"):
                assert len(d["losses"][arm][job][rank]) == 8
    # MLTCP changes the timing, not the training: every job's loss at every step, on every rank
    assert d["losses"]["baseline"] == d["losses"]["mltcp"] and d["losses_identical"] is True
    # the two ranks of a job train on different data: their losses differ
    assert d["losses"]["baseline"]["A"]["0"] != d["losses"]["baseline"]["A"]["1"]
    for arm in ("baseline", "mltcp"):  # --records: rank 0's records of every job, as the report's
        rows = read_csv(tmp_path / f"{arm}.csv")
        assert len(rows) == d[arm]["iterations"] and {r.job for r in rows} == {"A", "B"}
    assert d["speedup_avg"] == pytest.approx(d["baseline"]["avg_iter_s"] / d["mltcp"]["avg_iter_s"], rel=1e-3)
    for arm in ("baseline", "mltcp"):  # the ranks' namespaces count every retransmission the sockets did
        counted = d["tcp_counters"][arm]
        assert set(counted) == {"A", "B"}
        assert sum(c["RetransSegs"] for c in counted.values()) >= d[arm]["retransmissions"]
    # the kernel tracker's view of every MLTCP connection at the end (none under plain reno)
    assert d["kernel_sockets"]["baseline"] == {"A": {"0": None, "1": None}, "B": {"0": None, "1": None}}
    for job in ("A", "B"):
        for rank in ("0", "1"):
            socks = d["kernel_sockets"]["mltcp"][job][rank]
            assert socks and all(s is not None and s["best_rate_mbit"] >= 0 and s["last_stretch"] > 0 for s in socks)
            assert d["kernel_iterations"]["mltcp"][job][rank] == [s["completed"] for s in socks]
    # the simulator ran the same scenario: every job's emulated / simulated average, per arm
    assert set(d["sim_vs_emu"]) == {"baseline", "mltcp"}
    assert all(set(v) == {"A", "B"} and all(x > 0 for x in v.values()) for v in d["sim_vs_emu"].values())
    check_the_capture_agrees_with_the_records(d["pcap"], tmp_path)


def check_the_capture_agrees_with_the_records(pcaps: dict, folder) -> None:
    """--pcap: the bottleneck's capture, read by pcap-records, against rank 0's records."""
    for arm in ("baseline", "mltcp"):
        p = pcaps[arm]
        assert p["file"] == str(folder / f"{arm}.pcap") and p["kernel_dropped"] == 0
        for job, a in p["agreement"].items():
            # every iteration is on the wire, and nothing on rank 0's connections outside them
            assert a["records"] == a["matched"] == 8 and a["unmatched_bursts"] == 0, (arm, job, a)
            assert a["first_packet_err_ms"]["median"] < 5 and a["last_received_err_ms"]["median"] < 5, (arm, job, a)
            assert a["period_ratio"] == pytest.approx(1.0, abs=0.02), (arm, job, a)
    # the command the report names reads the same capture the same way
    cmd = shlex.split(pcaps["mltcp"]["command"])
    assert cmd[:2] == ["mltcp", "traffic"]
    wire_csv = folder / "wire.csv"
    r = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", *cmd[1:], "--out", str(wire_csv)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-2000:]
    stores = (":29500", ":29501")  # the rendezvous stores' connections are no job's traffic
    bursts = [w for w in read_csv(wire_csv) if not any(s in w.job for s in stores)]
    # with 2 ranks every gloo connection has rank 0 at one end: the same bursts as the report's
    assert len(bursts) == sum(a["bursts"] for a in pcaps["mltcp"]["agreement"].values())


def test_a_failed_ddp_run_leaves_nothing_behind():
    from mltcp import scenario as scn
    from mltcp.emulation.ddp import run_ddp_arm
    from mltcp.emulation.plan import EmulationError

    prefix = netns.run_prefix() + "d"
    sc = scn.load(TINY)
    with pytest.raises(EmulationError, match="injected failure"):
        run_ddp_arm(sc, "reno", False, prefix=prefix, fail_after_records=3)
    assert not netns.leftovers(prefix)


def test_ddp_jobs_on_the_leaf_spine_cross_two_fabric_links_each_way():
    from mltcp import scenario as scn
    from mltcp.emulation.ddp import run_ddp_arm

    prefix = netns.run_prefix() + "l"
    sc = scn.load(TINY)
    try:
        run = run_ddp_arm(sc, "reno", False, prefix=prefix, topology="leafspine")
    finally:
        assert not netns.leftovers(prefix)
    assert len(run.arm.records) == 2 * 8 and set(run.rank0_ip.values()) == {"10.1.1.1", "10.1.2.1"}
    assert len(run.links) == 8  # 4 leaf-spine links, both directions
    # every rank 0 under leaf 1, every rank 1 under leaf 2: each direction of each job's gloo
    # connection crosses a leaf-spine link and a spine-leaf link in every iteration
    grads = sum(j.extra["ddp"].gradient_bytes() * j.iterations for j in sc.jobs)
    assert sum(v["bytes"] for v in run.links.values()) >= 0.95 * 2 * 2 * grads
