"""priority-by-progress's priority_ecn (link | by-band | off) and priority_buffer (per-band |
shared): validation, the simulator's band queues (mltcp.sim.engine._priority_queues), and the
seeded DCQCN regression (docs/in-network.md): plain DCQCN hosts interleave through strict priority
queues that do not mark, and not through the plain ECN switch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mltcp import compare, scenario
from mltcp.progress_policy import ProgressPolicy, from_table
from mltcp.scenario import ScenarioError
from mltcp.sim import engine as E


def _sc(switch: dict, policy: str = "priority-by-progress") -> dict:
    link = {"name": "b", "rate_gbps": 1.0, "delay_us": 50, "buffer_bdp": 4.0, "ecn": "step", "ecn_k_pkts": 20}
    return {
        "name": "t",
        "iterations": 30,
        "warmup_iterations": 10,
        "links": [link],
        "jobs": [{"name": "A", "compute_ms": 20, "bytes": 2_500_000, "path": ["b"]}],
        "switch_policy": policy,
        "switch": switch,
    }


def test_defaults_keep_the_old_band_queues():
    p = from_table("priority-by-progress", {"bands": 4})
    assert p.priority_ecn == "by-band" and p.priority_buffer == "per-band"
    assert ProgressPolicy().priority_ecn_code == 1


@pytest.mark.parametrize(
    "switch, policy, field, text",
    [
        ({"priority_ecn": "total"}, "priority-by-progress", "switch.priority_ecn", "link, by-band, off"),
        ({"priority_ecn": 1}, "priority-by-progress", "switch.priority_ecn", "must be one of"),
        ({"priority_buffer": "pooled"}, "priority-by-progress", "switch.priority_buffer", "per-band, shared"),
        ({"priority_ecn": "off"}, "ecn-by-progress", "switch.priority_ecn", "not ecn-by-progress"),
        ({"priority_buffer": "shared"}, "ecn-by-progress", "switch.priority_buffer", "not ecn-by-progress"),
        ({"priority_pin": "yes"}, "priority-by-progress", "switch.priority_pin", "true or false"),
        ({"priority_pin": False}, "ecn-by-progress", "switch.priority_pin", "not ecn-by-progress"),
    ],
)
def test_bad_priority_fields_name_file_and_field(switch, policy, field, text):
    with pytest.raises(ScenarioError) as e:
        scenario.from_dict(_sc(switch, policy), "s.toml")
    assert e.value.field == field and str(e.value).startswith(f"s.toml: {field}: ") and text in str(e.value)


def test_off_keeps_the_fields_for_switching_arms():
    sc = scenario.from_dict(_sc({"priority_ecn": "off", "priority_buffer": "shared"}, "off"), "s.toml")
    assert sc.switch.name == "off" and sc.switch.priority_ecn == "off" and sc.switch.priority_buffer == "shared"


def _queues(mode: str, buffer: str, q_low: float, arr_low: float, arr_high: float, buf: float = 100e3):
    """One slot of a 2-band link (1 Gb/s, step ECN at K = 20 kB): band 0 holds ``q_low`` bytes;
    returns the band array after the slot."""
    pol = from_table(
        "priority-by-progress",
        {"bands": 2, "ecn_scale_lo": 1.0, "ecn_scale_hi": 1.0, "priority_ecn": mode, "priority_buffer": buffer},
    )
    lp = np.zeros((1, 8))
    lp[0, E.L_RATE], lp[0, E.L_BUF], lp[0, E.L_MODE], lp[0, E.L_K] = 125e6, buf, 1.0, 20e3
    pp = np.array([2.0, 15.0, 1.0, 1.0, float(pol.priority_ecn_code), 1.0 if buffer == "shared" else 0.0])
    pq = np.zeros((1, 2, 4))
    pq[0, 0, E.PQ_Q], pq[0, 0, E.PQ_ARR], pq[0, 1, E.PQ_ARR] = q_low, arr_low, arr_high
    q_end, total = E._priority_queues(lp, pp, pq, 0, 20e-6)  # 2500 B served per 20 us slot
    pq[0, :, E.PQ_Q] = q_end
    return pq[0], total


def test_high_band_is_served_first_and_marked_by_the_total_queue_only_with_link():
    # band 1 arrives 2500 B, exactly a slot's service: its queue stays empty, band 0's grows
    for mode, mark_hi, mark_lo in (("link", True, True), ("by-band", False, True), ("off", False, False)):
        pq, total = _queues(mode, "per-band", 50e3, 2500.0, 2500.0)
        assert pq[1, E.PQ_Q] == 0.0 and pq[0, E.PQ_Q] == pytest.approx(52.5e3) and total == pytest.approx(52.5e3)
        assert (pq[1, E.PQ_MARK] > 0.0) == mark_hi, mode
        assert (pq[0, E.PQ_MARK] > 0.0) == mark_lo, mode
        assert pq[0, E.PQ_DROP] == 0.0 and pq[1, E.PQ_DROP] == 0.0


def test_shared_buffer_drops_the_low_band_first():
    # band 0 reaches the 100 kB buffer; band 1 queues 5 kB of its 7.5 kB: per-band keeps both,
    # shared drops 5 kB of band 0's arrivals and none of band 1's
    pq, total = _queues("off", "per-band", 95e3, 5000.0, 7500.0)
    assert total == pytest.approx(105e3) and pq[0, E.PQ_DROP] == 0.0 and pq[1, E.PQ_DROP] == 0.0
    pq, total = _queues("off", "shared", 95e3, 5000.0, 7500.0)
    assert total == pytest.approx(100e3)
    assert pq[1, E.PQ_Q] == pytest.approx(5000.0) and pq[1, E.PQ_DROP] == 0.0
    assert pq[0, E.PQ_DROP] == pytest.approx(1.0) and pq[0, E.PQ_Q] == pytest.approx(95e3)
    pq, total = _queues("off", "shared", 99e3, 5000.0, 7500.0)  # 9 kB over: band 0's 5 kB, then 4 kB of band 1's
    assert total == pytest.approx(100e3)
    assert pq[0, E.PQ_DROP] == pytest.approx(1.0) and pq[1, E.PQ_DROP] == pytest.approx(4000.0 / 7500.0)


def _dcqcn(policy: str, **switch):
    from mltcp.sim.engine import simulate

    sc = scenario.load("innet-dcqcn-two-jobs")
    sc = dataclasses.replace(sc, seed=2, switch=dataclasses.replace(sc.switch, name=policy, **switch))
    sc.jobs = [dataclasses.replace(j, iterations=25) for j in sc.jobs]
    r = simulate(sc, "dcqcn")
    return compare.side(sc, "dcqcn", r.records, r.drops, r.ecn_marks)


def test_dcqcn_interleaves_through_unmarked_priority_queues_and_not_through_the_plain_switch():
    """The seeded regression of docs/in-network.md (DCQCN): the plain ECN switch never interleaves
    the two jobs; strict priority by progress without marks does, within 10 iterations; the same
    priority queues that mark by the band's own queue do not."""
    sc = scenario.load("innet-dcqcn-two-jobs")
    assert (sc.switch.name, sc.switch.priority_ecn, sc.switch.priority_buffer) == (
        "priority-by-progress",
        "off",
        "per-band",
    )
    ideal = compare.ideal_iter_s(sc)
    off = _dcqcn("off")
    on = _dcqcn("priority-by-progress")
    marked = _dcqcn("priority-by-progress", priority_ecn="by-band", ecn_scale_lo=1.0)
    assert off["converged_at_iteration"] is None and off["avg_iter_s"] > 1.4 * ideal
    assert on["converged_at_iteration"] is not None and on["converged_at_iteration"] <= 10
    assert on["avg_iter_s"] < 1.01 * ideal and off["avg_iter_s"] / on["avg_iter_s"] >= 1.3
    assert off["p99_iter_s"] / on["p99_iter_s"] >= 1.4
    assert on["ecn_marks"] == 0.0 and off["ecn_marks"] > 0.0
    assert marked["converged_at_iteration"] is None and marked["avg_iter_s"] > 1.4 * ideal


def test_controlplane_expresses_priority_ecn_as_entries():
    from mltcp.controlplane import entries as CE
    from mltcp.p4src import load_p4info, names as N

    idx = CE.index(load_p4info())
    link = CE.progress_entries(idx, 3, from_table("priority-by-progress", {"bands": 8, "priority_ecn": "link"}), 20)
    assert {idx.tables[te.table_id].preamble.name for te in link} == {N.T_PROGRESS_PRIORITY}
    off = CE.progress_entries(idx, 3, from_table("priority-by-progress", {"bands": 8, "priority_ecn": "off"}), 20)
    no_ecn = [te for te in off if idx.tables[te.table_id].preamble.name == N.T_PROGRESS_ECN]
    assert len(off) == 32 and len(no_ecn) == 16
    assert {te.action.action.action_id for te in no_ecn} == {idx.id("action", N.A_NO_PROGRESS_ECN)}
    assert all(not te.action.action.params for te in no_ecn)
    with pytest.raises(ValueError, match="by-band.*v1model's enq_qdepth"):
        CE.progress_entries(idx, 3, from_table("priority-by-progress", {"bands": 8}), 20)


def test_software_switch_never_marks_a_no_progress_ecn_band():
    from mltcp.emulation.switch import pipeline as pl
    from mltcp.p4src import names as N
    from mltcp.traffic.header import MLTCP
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    pipe = pl.Pipeline()
    pipe.lpm.set(0x0A000200, 24, pl.Forward(b"\x02" * 6, 2))
    pipe.ecn_thresholds[2] = 10
    t = pipe.tables[pl.T_PROGRESS_ECN]
    t.put((2, 0), t.value(N.A_NO_PROGRESS_ECN, {}))

    def marked(ratio, depth):
        f = bytes(Ether() / IP(dst="10.0.2.2", tos=1) / UDP(dport=9199) / MLTCP(job_id=1, bytes_ratio=ratio))
        return pipe.egress(pipe.ingress(f, 1), depth)

    assert not marked(0x0100, 10) and not marked(0x0100, 100000)  # band 0: never
    assert marked(0x1000, 10)  # band 1: the port's threshold
    t.delete((2, 0))
    assert marked(0x0100, 10)
