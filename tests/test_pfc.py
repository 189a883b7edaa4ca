"""Lossless links (``pfc = true``): a queue at its XOFF limit pauses its senders instead of dropping,
per band queue under priority-by-progress (docs/in-network.md, "DCQCN on a lossless fabric")."""

import dataclasses

import pytest

from mltcp import compare, scenario as scn
from mltcp.scenario import ScenarioError, from_dict
from mltcp.sim.engine import simulate


def _sc(pfc=True, iterations=4, **link):
    lk = {"name": "bn", "rate_gbps": 1.0, "delay_us": 50, "pfc": pfc, **link}
    if not any(k.startswith("buffer_") for k in lk):
        lk["buffer_bdp"] = 1.0
    return from_dict(
        {
            "name": "t",
            "iterations": iterations,
            "warmup_iterations": 1,
            "links": [lk],
            "jobs": [
                {"name": f"J{i}", "compute_ms": 20, "bytes": 2_500_000, "path": ["bn"], "start_offset_ms": i}
                for i in range(2)
            ],
        },
        "t.toml",
    )


def test_the_field_is_a_boolean_named_in_the_error_and_off_by_default():
    assert _sc(pfc=True).links["bn"].pfc is True
    assert scn.load("two-jobs").links["bottleneck"].pfc is False
    with pytest.raises(ScenarioError) as e:
        _sc(pfc="yes")
    assert e.value.field == "links[0].pfc" and "t.toml" in str(e.value)


def test_a_buffer_without_room_for_the_headroom_is_refused_by_name():
    sc = _sc(buffer_pkts=2)
    with pytest.raises(ScenarioError, match=r"links\.bn\.pfc.*headroom"):
        simulate(sc, "reno")


@pytest.mark.parametrize("cc", ["reno", "cubic", "dcqcn", "mltcp-reno"])
def test_a_lossless_link_pauses_where_the_lossy_one_drops_and_every_byte_arrives_once(cc):
    ecn = {"ecn": "step", "ecn_k_pkts": 5} if "dcqcn" in cc else {}
    lossy, lossless = simulate(_sc(pfc=False, **ecn), cc), simulate(_sc(pfc=True, **ecn), cc)
    assert lossy.drops > 0 and lossy.pfc_pause_s == 0.0
    assert lossless.drops == 0 and lossless.pfc_pause_s > 0.0
    assert lossless.bytes_sent == pytest.approx(lossless.bytes_acked, rel=1e-9)  # nothing sent twice
    assert len(lossless.records) == 8 and all(r.drops == 0 for r in lossless.records)


@pytest.mark.parametrize("cc", ["reno", "dcqcn"])
def test_skipping_idle_slots_changes_nothing_on_a_lossless_link(cc):
    sc = _sc(**({"ecn": "step", "ecn_k_pkts": 5} if cc == "dcqcn" else {}))
    a, b = simulate(sc, cc), simulate(sc, cc, skip=False)
    assert [(x.job, x.iteration, x.end) for x in a.records] == [(x.job, x.iteration, x.end) for x in b.records]
    assert (a.bytes_sent, a.pfc_pause_s) == (b.bytes_sent, b.pfc_pause_s)


def test_pause_time_is_reported_only_for_scenarios_with_a_lossless_link():
    for pfc in (False, True):
        sc = _sc(pfc=pfc)
        r = simulate(sc, "reno")
        side = compare.side(sc, "reno", r.records, r.drops, r.ecn_marks, r.pfc_pause_s)
        assert ("pfc_pause_s" in side) is pfc


def test_dcqcn_through_lossless_priority_bands_interleaves_with_no_drops_in_either_arm():
    """innet-dcqcn-two-jobs ships lossless: the band behind is paused, never dropped, and the
    policy still reaches the issue-15 target over the plain (also lossless) ECN switch."""
    sc = scn.load("innet-dcqcn-two-jobs")
    assert sc.links["bottleneck"].pfc
    sc.jobs = [dataclasses.replace(j, iterations=25) for j in sc.jobs]
    out = {}
    for pol in ("off", "priority-by-progress"):
        s = dataclasses.replace(sc, seed=2, switch=dataclasses.replace(sc.switch, name=pol))
        r = simulate(s, "dcqcn")
        out[pol] = compare.side(s, "dcqcn", r.records, r.drops, r.ecn_marks, r.pfc_pause_s)
    off, on = out["off"], out["priority-by-progress"]
    assert off["drops"] == 0 and on["drops"] == 0
    assert off["avg_iter_s"] / on["avg_iter_s"] >= 1.3 and off["p99_iter_s"] / on["p99_iter_s"] >= 1.4
    assert on["interleaved_at_iteration"] is not None and on["interleaved_at_iteration"] <= 10
    assert on["pfc_pause_s"] > off["pfc_pause_s"]  # the cost moves into pauses of the band behind


def test_ns3_refuses_and_the_emulation_notes_a_lossless_link():
    from emulation.plan import plan_from_scenario
    from mltcp.sim import ns3_engine

    sc = _sc()
    with pytest.raises(ScenarioError, match=r"links\.bn\.pfc"):
        ns3_engine.check(sc, "reno")
    assert any("no PFC" in n for n in plan_from_scenario(sc).notes)
    assert not any("PFC" in n for n in plan_from_scenario(_sc(pfc=False)).notes)


@pytest.mark.parametrize("cc", ["dcqcn", "reno"])
def test_a_band_below_waits_while_the_band_above_holds_the_link(cc):
    """Strict priority times a packet's departure at dequeue: B, joining when A is half through its
    transfer, gets nothing until A is done, so the link never carries more than its rate (a
    departure fixed at enqueue let B finish as if it had the link to itself)."""
    lk = {"name": "bn", "rate_gbps": 1.0, "delay_us": 50, "buffer_kb": 4000, "pfc": True}
    sc = from_dict(
        {
            "name": "t",
            "iterations": 1,
            "warmup_iterations": 0,
            "links": [lk],
            "switch_policy": "priority-by-progress",
            "switch": {"bands": 8, "priority_ecn": "off"},
            "jobs": [
                {"name": "A", "compute_ms": 1, "bytes": 2_500_000, "path": ["bn"]},
                {"name": "B", "compute_ms": 1, "bytes": 2_500_000, "path": ["bn"], "start_offset_ms": 10},
            ],
        },
        "t.toml",
    )
    r = simulate(sc, cc)
    a, b = sorted(r.records, key=lambda x: x.job)
    alone = 2_500_000 * 8 / 1e9  # 20 ms of link time per job
    assert a.end - a.comm_start < 1.1 * alone  # A, ahead, keeps the link
    assert b.end - a.comm_start >= 2 * alone  # both jobs' bytes crossed one 1 Gb/s link
    assert r.drops == 0


def test_the_cli_summary_shows_the_pause_column_only_for_a_lossless_scenario():
    from mltcp.cli import build_report, summary_table

    for pfc in (False, True):
        sc = _sc(pfc=pfc)
        t = summary_table(build_report(sc, {"reno": simulate(sc, "reno")}))
        headers = [c.header for c in t.columns]
        assert ("PFC pause (flow-ms)" in headers) is pfc
        assert all(len(c._cells) == len(t.columns[0]._cells) for c in t.columns)  # every row full width


def test_strict_priority_reorders_a_flow_unless_it_is_pinned_to_its_queue():
    """A flow that moves up a band while bytes of it wait below overtakes them: the model counts
    those packets (a real receiver sees them out of order; docs/in-network.md). With priority_pin
    (the default) a flow stays in the band queue that holds packets of it: nothing is reordered,
    and on ECN-Reno two-jobs it costs nothing. One FIFO does not reorder."""
    sc = scn.load("innet-ecn-reno-two-jobs")
    sc.jobs = [dataclasses.replace(j, iterations=12) for j in sc.jobs]
    out = {}
    for pol, pin in (("off", True), ("priority-by-progress", False), ("priority-by-progress", True)):
        s = dataclasses.replace(sc, switch=dataclasses.replace(sc.switch, name=pol, priority_pin=pin))
        r = simulate(s, "reno")
        out[pol, pin] = (r, compare.side(s, "reno", r.records, r.drops, r.ecn_marks, None, r.reordered))
    assert out["off", True][0].reordered == 0.0 and "reordered" not in out["off", True][1]
    loose, pinned = out["priority-by-progress", False], out["priority-by-progress", True]
    assert loose[0].reordered > 0 and loose[1]["reordered"] > 0
    assert pinned[0].reordered == 0.0
    assert pinned[1]["avg_iter_s"] <= 1.01 * loose[1]["avg_iter_s"]
