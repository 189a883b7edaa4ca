"""In-network MLTCP (switch_policy): scenario validation, the band rule shared by the simulator,
the software switch and the control plane, and the simulator's progress-aware link."""

from __future__ import annotations

import dataclasses

import pytest

from mltcp import compare, scenario
from mltcp.progress_policy import HW_BANDS, ProgressPolicy, from_table
from mltcp.scenario import ScenarioError


def _sc(extra: dict, ecn: str = "step") -> dict:
    link = {"name": "b", "rate_gbps": 1.0, "delay_us": 50, "buffer_bdp": 4.0, "ecn": ecn}
    if ecn == "step":
        link["ecn_k_pkts"] = 20
    return {
        "name": "t",
        "iterations": 30,
        "warmup_iterations": 10,
        "links": [link],
        "jobs": [
            {"name": "A", "compute_ms": 20, "bytes": 2_500_000, "path": ["b"]},
            {"name": "B", "compute_ms": 20, "bytes": 2_500_000, "path": ["b"], "start_offset_ms": 1},
        ],
        **extra,
    }


@pytest.mark.parametrize(
    "extra, field, text",
    [
        ({"switch_policy": "fast"}, "switch_policy", "must be one of"),
        ({"switch_policy": 3}, "switch_policy", "must be str"),
        ({"switch_policy": "ecn-by-progress", "switch": {"bands": 3}}, "switch.bands", "must be one of"),
        ({"switch_policy": "priority-by-progress", "switch": {"bands": 16}}, "switch.bands", "(2, 4, 8)"),
        ({"switch_policy": "ecn-by-progress", "switch": {"ecn_scale_lo": 0}}, "switch.ecn_scale_lo", "(0, 100]"),
        (
            {"switch_policy": "ecn-by-progress", "switch": {"ecn_scale_lo": 2.0}},
            "switch.ecn_scale_lo",
            "must not exceed",
        ),
        ({"switch_policy": "ecn-by-progress", "switch": {"speed": 1}}, "switch.speed", "unknown field"),
        ({"switch_policy": "ecn-by-progress", "switch": {"links": ["x"]}}, "switch.links", "unknown link"),
    ],
)
def test_bad_policy_names_file_and_field(extra, field, text):
    with pytest.raises(ScenarioError) as e:
        scenario.from_dict(_sc(extra), "s.toml")
    assert e.value.field == field and str(e.value).startswith(f"s.toml: {field}: ") and text in str(e.value)


def test_ecn_policy_needs_an_ecn_link():
    with pytest.raises(ScenarioError, match="switch_policy: ecn-by-progress scales"):
        scenario.from_dict(_sc({"switch_policy": "ecn-by-progress"}, ecn="none"), "s.toml")
    sc = scenario.from_dict(_sc({"switch_policy": "priority-by-progress"}, ecn="none"), "s.toml")
    assert sc.switch.name == "priority-by-progress" and sc.switch.bands == 4


def test_default_is_off():
    assert scenario.from_dict(_sc({}), "s.toml").switch == ProgressPolicy()


def test_bands_thresholds_and_hardware_map():
    p = from_table("ecn-by-progress", {"bands": 4, "ecn_scale_lo": 0.25, "ecn_scale_hi": 1.0})
    assert [p.band(r) for r in (0.0, 0.2499, 0.25, 0.5, 0.99, 1.0)] == [0, 0, 1, 2, 3, 3]
    assert p.thresholds(20) == [5, 10, 15, 20]
    hw = p.hw_band_map()
    assert len(hw) == HW_BANDS and hw[:4] == [0] * 4 and hw[-1] == 3
    # the switch's band (bytes_ratio[15:12]) mapped by the table is the simulator's band
    for q in range(0, 0x10000, 97):
        assert hw[q >> 12] == p.band(q / 0xFFFF)


def test_software_switch_uses_the_band_threshold():
    from mltcp.emulation.switch import pipeline as pl
    from mltcp.traffic.header import MLTCP
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    pipe = pl.Pipeline()
    pipe.lpm.set(0x0A000200, 24, pl.Forward(b"\x02" * 6, 2))
    pipe.ecn_thresholds[2] = 10
    pipe.tables[pl.T_PROGRESS_ECN].put((2, 0), 3)

    def marked(ratio, depth):
        f = bytes(Ether() / IP(dst="10.0.2.2", tos=1) / UDP(dport=9199) / MLTCP(job_id=1, bytes_ratio=ratio))
        return pipe.egress(pipe.ingress(f, 1), depth)

    assert not marked(0x0100, 2) and marked(0x0100, 3)  # band 0: its own threshold 3
    assert not marked(0x1000, 9) and marked(0x1000, 10)  # band 1: the port's 10


def test_software_switch_gives_an_mltcp_packet_its_band_priority():
    from mltcp.emulation.switch import pipeline as pl
    from mltcp.traffic.header import MLTCP
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    pipe = pl.Pipeline()
    pipe.lpm.set(0x0A000200, 24, pl.Forward(b"\x02" * 6, 2))
    t = pipe.tables[pl.T_PROGRESS_PRIORITY]
    t.put((2, 15), t.value("MyIngress.set_progress_priority", {"priority": 7}))
    t.put((2, 1), t.value("MyIngress.set_progress_priority", {"priority": 3}))

    def prio(ratio, shim=True, port=2):
        pkt = Ether() / IP(dst="10.0.2.2") / UDP(dport=9199 if shim else 5001)
        return pipe.ingress(bytes(pkt / MLTCP(job_id=1, bytes_ratio=ratio) if shim else pkt), 1).priority

    assert prio(0xF000) == 7 and prio(0x1FFF) == 3 and prio(0x0100) == 0  # band 15, 1; 0 has no entry
    assert prio(0xF000, shim=False) == 0  # not MLTCP: priority 0
    t.delete((2, 15))
    assert prio(0xF000) == 0
    with pytest.raises(pl.UnsupportedAction):
        t.set_default(t.value("MyIngress.set_progress_priority", {"priority": 1}))


def test_controlplane_entries_per_band():
    from mltcp.controlplane import entries as E
    from mltcp.p4src import load_p4info

    idx = E.index(load_p4info())
    pol = from_table("ecn-by-progress", {"bands": 4, "ecn_scale_lo": 0.25})
    tes = E.progress_entries(idx, 3, pol, 20)
    assert len(tes) == HW_BANDS
    ks = [int.from_bytes(te.action.action.params[0].value, "big") for te in tes]
    assert ks == [5] * 4 + [10] * 4 + [15] * 4 + [20] * 4
    default = E.progress_entries(idx, 3, from_table("ecn-by-progress", {}), 20)  # the mild default tilt
    assert [int.from_bytes(te.action.action.params[0].value, "big") for te in default] == [18] * 4 + [19] * 8 + [20] * 4
    assert E.describe(idx, tes[5]) == "progress ECN threshold on port 3 band 5"
    prio = E.progress_entries(idx, 3, from_table("priority-by-progress", {"bands": 8, "priority_ecn": "link"}), None)
    assert [int.from_bytes(te.action.action.params[0].value, "big") for te in prio] == [b // 2 for b in range(16)]
    assert E.progress_entries(idx, 3, ProgressPolicy(), 20) == []
    with pytest.raises(ValueError, match="needs the port's ECN threshold"):
        E.progress_entries(idx, 3, pol, None)


def test_sim_plain_reno_interleaves_through_the_progress_aware_link():
    """The same plain ECN-Reno hosts: the policy link interleaves them, the plain one does not."""
    from mltcp.sim.engine import simulate

    sc = scenario.from_dict(_sc({"switch_policy": "ecn-by-progress"}), "s.toml")
    out = {}
    for pol in ("off", "ecn-by-progress"):
        s = dataclasses.replace(sc, switch=dataclasses.replace(sc.switch, name=pol))
        r = simulate(s, "reno")
        out[pol] = compare.side(s, "reno", r.records, r.drops, r.ecn_marks)
    on, off = out["ecn-by-progress"], out["off"]
    assert on["converged_at_iteration"] is not None and on["converged_at_iteration"] <= 10
    assert off["converged_at_iteration"] is None
    assert on["avg_iter_s"] < 0.8 * off["avg_iter_s"]
    assert on["drops"] <= off["drops"]


def test_sim_priority_policy_runs_and_keeps_every_byte():
    from mltcp.sim.engine import simulate

    sc = scenario.from_dict(_sc({"switch_policy": "priority-by-progress"}), "s.toml")
    r = simulate(sc, "reno")
    assert len(r.records) == 60 and r.bytes_in_flight == 0
    assert r.bytes_acked == pytest.approx(60 * 2_500_000)
