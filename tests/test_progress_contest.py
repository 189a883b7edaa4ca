"""ecn-by-progress's contest window (``[switch] contest_window_us``): the band thresholds apply
only while another job passed the port within the window, so a job alone keeps the port's own
threshold. Validation, the software switch's registers, the control-plane entries, time dilation
and the simulator's link."""

from __future__ import annotations

import dataclasses

import pytest

from mltcp import scenario
from mltcp.progress_policy import HW_BANDS, from_table
from mltcp.scenario import ScenarioError


def _sc(extra: dict, jobs: int = 2, nic_gbps: float | None = None) -> dict:
    """Jobs on a 1 Gb/s ECN link ``b``; with ``nic_gbps`` each first crosses a faster link (its
    NIC), so a job alone queues at ``b``."""
    links = [{"name": "b", "rate_gbps": 1.0, "delay_us": 50, "buffer_bdp": 4.0, "ecn": "step", "ecn_k_pkts": 20}]
    path = ["b"]
    if nic_gbps:
        links.insert(0, {"name": "nic", "rate_gbps": nic_gbps, "delay_us": 1, "buffer_bdp": 40.0})
        path = ["nic", "b"]
    js = [
        {"name": n, "compute_ms": 20, "bytes": 2_500_000, "path": path, "start_offset_ms": i}
        for i, n in enumerate("AB"[:jobs])
    ]
    return {"name": "t", "iterations": 24, "warmup_iterations": 4, "links": links, "jobs": js, **extra}


@pytest.mark.parametrize(
    "value, text",
    [
        (-1, "[0, 60000000]"),
        (True, "[0, 60000000]"),
        ("500", "[0, 60000000]"),
        (float("inf"), "[0, 60000000]"),
        (7e7, "[0, 60000000]"),
    ],
)
def test_bad_window_names_file_and_field(value, text):
    d = _sc({"switch_policy": "ecn-by-progress", "switch": {"contest_window_us": value}})
    with pytest.raises(ScenarioError) as e:
        scenario.from_dict(d, "s.toml")
    assert e.value.field == "switch.contest_window_us" and text in str(e.value)


def test_window_is_ecn_by_progress_only():
    d = _sc({"switch_policy": "priority-by-progress", "switch": {"contest_window_us": 500}})
    with pytest.raises(ScenarioError, match="applies to ecn-by-progress"):
        scenario.from_dict(d, "s.toml")
    assert from_table("ecn-by-progress", {}).contest_window_us == 0.0
    assert from_table("ecn-by-progress", {"contest_window_us": 250}).contest_window_us == 250.0


def _mltcp_frame(job: int, ratio: int) -> bytes:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from mltcp.traffic.header import MLTCP

    return bytes(Ether() / IP(dst="10.0.2.2", tos=1) / UDP(dport=9199) / MLTCP(job_id=job, bytes_ratio=ratio))


def test_software_switch_scales_only_while_contested():
    from mltcp.emulation.switch import pipeline as pl

    pipe = pl.Pipeline()
    pipe.lpm.set(0x0A000200, 24, pl.Forward(b"\x02" * 6, 2))
    pipe.ecn_thresholds[2] = 10
    pipe.tables[pl.T_PROGRESS_ECN].put((2, 0), 3)  # band 0 marked from 3 packets
    t = pipe.tables[pl.T_PROGRESS_CONTEST]
    t.put((2,), t.value("MyEgress.set_contest_window", {"window": 1000}))  # 1 ms

    def marked(job, depth, now):
        return pipe.egress(pipe.ingress(_mltcp_frame(job, 0x0100), 1), depth, now)

    assert not marked(7, 5, 1.0)  # job 7 alone: the port's 10
    assert not marked(7, 9, 1.0005) and marked(7, 10, 1.0006)
    assert marked(9, 5, 1.0010)  # job 9 after job 7: contested, band 0's 3
    assert marked(7, 5, 1.0015)  # and job 7 too, within 1 ms of the change
    assert marked(7, 5, 1.00249)  # the last change (9 -> 7) was at 1.0015
    assert not marked(7, 5, 1.0025)  # 1 ms after it: alone again
    assert pipe.registers[pl.R_CONTEST_JOB][2] == 8
    assert pipe.registers[pl.R_CONTEST_SEEN][2] == 1_001_500
    t.delete((2,))  # no entry: always the band's threshold
    assert marked(7, 5, 5.0)
    with pytest.raises(pl.UnsupportedAction):
        t.set_default(1000)


def test_controlplane_adds_the_window_entry():
    from mltcp.controlplane import entries as E
    from mltcp.p4src import load_p4info

    idx = E.index(load_p4info())
    assert len(E.progress_entries(idx, 3, from_table("ecn-by-progress", {}), 20)) == HW_BANDS
    tes = E.progress_entries(idx, 3, from_table("ecn-by-progress", {"contest_window_us": 499.6}), 20)
    assert len(tes) == HW_BANDS + 1
    assert int.from_bytes(tes[-1].action.action.params[0].value, "big") == 500
    assert E.describe(idx, tes[-1]) == "progress contest window on port 3"
    tiny = E.progress_entries(idx, 3, from_table("ecn-by-progress", {"contest_window_us": 0.2}), 20)
    assert int.from_bytes(tiny[-1].action.action.params[0].value, "big") == 1


def test_dilation_stretches_the_window_and_the_switch_gets_it():
    from mltcp.emulation.plan import rescale
    from mltcp.emulation.softswitch import policy_spec

    sc = scenario.from_dict(_sc({"switch_policy": "ecn-by-progress", "switch": {"contest_window_us": 500}}), "s.toml")
    slow = rescale(sc, rate_mbps=25, dilate=True)
    assert slow.switch.contest_window_us == pytest.approx(500 * 40)
    spec = policy_spec(slow.switch)
    assert spec["contest_window_us"] == pytest.approx(20000)
    name = spec.pop("name")
    assert from_table(name, spec) == slow.switch.__class__(**{**dataclasses.asdict(slow.switch), "links": None})
    assert "contest_window_us" not in policy_spec(from_table("ecn-by-progress", {}))


def test_sim_a_job_alone_keeps_the_links_threshold():
    """One job whose NIC is faster than the link queues at it. Band 0's threshold (lo 0.05: one
    packet) marks it far more than the link's 20 packets do; with a contest window it is never
    contested, so it runs exactly as through the plain switch."""
    from mltcp.sim.engine import simulate

    sc = scenario.from_dict(
        _sc(
            {"switch_policy": "ecn-by-progress", "switch": {"ecn_scale_lo": 0.05, "links": ["b"]}},
            jobs=1,
            nic_gbps=10.0,
        ),
        "s.toml",
    )
    runs = {}
    for key, name, win in (
        ("off", "off", 0.0),
        ("scaled", "ecn-by-progress", 0.0),
        ("window", "ecn-by-progress", 500.0),
    ):
        s = dataclasses.replace(sc, switch=dataclasses.replace(sc.switch, name=name, contest_window_us=win))
        runs[key] = simulate(s, "reno")
    off, scaled, window = (runs[k] for k in ("off", "scaled", "window"))
    assert off.ecn_marks > 0
    assert scaled.ecn_marks > 2 * off.ecn_marks
    assert window.ecn_marks == off.ecn_marks
    assert [r.end for r in window.records] == [r.end for r in off.records]


def test_sim_two_jobs_still_interleave_with_a_window():
    """Both jobs send at once only while contested, which is where the policy acts: the window
    keeps the interleave the policy gives without it."""
    from mltcp import compare
    from mltcp.sim.engine import simulate

    sc = scenario.from_dict(_sc({"switch_policy": "ecn-by-progress", "switch": {"contest_window_us": 500}}), "s.toml")
    out = {}
    for name in ("off", "ecn-by-progress"):
        s = dataclasses.replace(sc, switch=dataclasses.replace(sc.switch, name=name))
        r = simulate(s, "reno")
        out[name] = compare.side(s, "reno", r.records, r.drops, r.ecn_marks)
    on, off = out["ecn-by-progress"], out["off"]
    assert off["avg_iter_s"] / on["avg_iter_s"] > 1.2
    assert on["interleaved_at_iteration"] is not None and on["interleaved_at_iteration"] <= 10
    assert on["drops"] <= off["drops"]
