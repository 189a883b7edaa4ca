"""Degenerate but valid physics: every random scenario the loader accepts simulates to completion
(every job finishes every iteration before the horizon), and every one it cannot simulate is
refused at load with a ScenarioError that names the field. Random small scenarios (hypothesis):
link rates, delays, buffers down to a fraction of a packet, ECN, MSS, time step, RTO, compute
times, bytes per iteration down to one byte, paths over one or two links, every algorithm; a
time step longer than the round trip, an ECN threshold below one packet, a 64-byte MSS."""

import math
import os

import pytest

from hypothesis import HealthCheck, event, given, settings, strategies as st

from mltcp.cc import BASES
from mltcp.scenario import ScenarioError, from_dict
from mltcp.sim.engine import simulate


def _log(lo: float, hi: float):
    """A float spread evenly in log scale over [lo, hi]."""
    return st.floats(math.log10(lo), math.log10(hi)).map(lambda e: round(10**e, 6))


@st.composite
def links(draw, i: int) -> dict:
    lk = {"name": f"l{i}", "rate_mbps": draw(_log(0.05, 100_000)), "delay_us": draw(_log(0.1, 50_000))}
    key, lo, hi = draw(st.sampled_from([("buffer_pkts", 0.2, 300), ("buffer_bdp", 0.05, 8), ("buffer_kb", 0.3, 500)]))
    lk[key] = draw(_log(lo, hi))
    if draw(st.booleans()):
        lk |= {"ecn": "step", "ecn_k_pkts": draw(_log(0.01, 1000))}
    return lk


@st.composite
def scenarios(draw) -> dict:
    lks = [draw(links(i)) for i in range(draw(st.integers(1, 2)))]
    slowest = min(lk["rate_mbps"] for lk in lks) * 1e6 / 8  # bytes/s
    jobs = []
    for j in range(draw(st.integers(1, 3))):
        path = draw(
            st.sampled_from([[lk["name"]] for lk in lks] + ([[lk["name"] for lk in lks]] if len(lks) > 1 else []))
        )
        jobs.append(
            {
                "name": f"j{j}",
                "compute_ms": draw(st.floats(0, 20)).__round__(3),
                # at most ~20 ms of communication alone on the slowest link: runs stay short
                "bytes": draw(st.integers(1, max(1, int(slowest * 0.02)))),
                "start_offset_ms": draw(st.floats(0, 5)).__round__(3),
                "path": path,
            }
        )
    return {
        "name": "random",
        "iterations": 3,
        "warmup_iterations": 1,
        "cc": draw(st.sampled_from(BASES)),
        "network": {
            "mss": draw(st.sampled_from([64, 536, 1448, 9000])),
            "step_us": draw(_log(0.2, 5000)),
            "min_rto_ms": draw(_log(0.01, 1000)),
        },
        "links": lks,
        "jobs": jobs,
    }


# 150 fixed examples here (~20 s); MLTCP_PHYSICS_EXAMPLES=N explores N new random ones
EXPLORE = int(os.environ.get("MLTCP_PHYSICS_EXAMPLES", 0))


@settings(
    max_examples=EXPLORE or 150, derandomize=not EXPLORE, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(d=scenarios(), algo_i=st.integers(0, 1))
def test_a_valid_scenario_simulates_or_is_refused_naming_the_field(d, algo_i):
    try:
        sc = from_dict(d, "random.toml")
    except ScenarioError as e:
        top = e.field.split(".")[0].split("[")[0]
        assert top in d, f"the error names no field of the scenario: {e}"
        event(f"refused: {e.field.split('.')[-1]}")
        return
    algo = sc.cc if algo_i == 0 else f"mltcp-{sc.cc}"
    r = simulate(sc, algo)  # RuntimeError (past the horizon) fails the test
    done = {(x.job, x.iteration) for x in r.records}
    assert len(done) == sum(j.iterations for j in sc.jobs), (d, algo)
    event("simulated")


def test_a_buffer_below_one_packet_is_refused_at_load():
    d = {
        "name": "sub-packet",
        "links": [{"name": "l", "rate_mbps": 100, "delay_us": 10, "buffer_bdp": 2}],
        "jobs": [{"name": "a", "compute_ms": 2, "bytes": 200_000, "path": ["l"]}],
    }
    try:
        from_dict(d, "s.toml")
    except ScenarioError as e:
        assert e.field == "links[0].buffer_bdp" and "one packet" in str(e) and "1448" in str(e)
    else:
        raise AssertionError("a 500-byte buffer with 1448-byte packets was accepted")
    d["links"][0]["buffer_bdp"] = 6  # 1500 bytes: one packet fits
    assert from_dict(d, "s.toml").links["l"].buffer_bytes == pytest.approx(1500)
