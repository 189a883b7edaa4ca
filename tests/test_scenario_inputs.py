"""Scenario inputs: multi-flow jobs, collectives (ring, parameter server), fabrics with ECMP and
traces as job input (mltcp.scenario's new fields; the engine's side is tested in test_sim)."""

import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from mltcp.scenario import ScenarioError, from_dict, load
from mltcp.traffic import traces

LINK = {"name": "l", "rate_gbps": 1, "delay_us": 10, "buffer_pkts": 10}
FABRIC = {
    "kind": "leaf-spine",
    "leaves": 2,
    "spines": 2,
    "hosts_per_leaf": 4,
    "rate_gbps": 1,
    "delay_us": 10,
    "buffer_pkts": 50,
}


def without(d: dict, *keys) -> dict:
    return {k: v for k, v in d.items() if k not in keys}


def sc_of(jobs, fabric=None, links=None, **top):
    d = {"name": "s", "jobs": jobs, **top}
    if fabric is not None:
        d["fabric"] = fabric
    if links is not None or fabric is None:
        d["links"] = links or [LINK]
    return from_dict(d, "t.toml")


def err_of(*a, **kw) -> ScenarioError:
    with pytest.raises(ScenarioError) as e:
        sc_of(*a, **kw)
    assert str(e.value).startswith("t.toml: " + e.value.field)
    return e.value


def _chain(path, src, dst):
    hops = [p.split(">") for p in path]
    return hops[0][0] == src and hops[-1][1] == dst and all(a[1] == b[0] for a, b in zip(hops, hops[1:]))


# ---- flows and explicit per-flow paths ---------------------------------------------------------


def test_flows_split_the_jobs_bytes_over_one_path():
    sc = sc_of([{"name": "a", "compute_ms": 1, "bytes": 8000, "path": ["l"], "flows": 4}])
    j = sc.jobs[0]
    assert j.flows == 4 and j.flow_bytes() == 2000 and j.paths() == [["l"]] * 4 and j.flow_paths is None
    assert sc.bottleneck_Bps(j) == pytest.approx(1e9 / 8)  # the four share the one link
    assert err_of([{"name": "a", "compute_ms": 1, "bytes": 1, "path": ["l"], "flows": 0}]).field == "jobs[0].flows"
    assert err_of([{"name": "a", "compute_ms": 1, "bytes": 1, "path": ["l"], "flows": 10**6}]).field == "jobs[0].flows"


def test_explicit_paths_one_per_flow():
    links = [{**LINK, "name": "x", "count": 3}, {**without(LINK, "rate_gbps"), "name": "slow", "rate_mbps": 100}]
    job = {"name": "a", "compute_ms": 1, "bytes": 3000, "paths": [["x0"], ["x1", "slow"], ["x2"]]}
    sc = sc_of([job], links=links)
    j = sc.jobs[0]
    assert j.flows == 3 and j.path == ["x0"] and j.paths()[1] == ["x1", "slow"]
    assert sc.bottleneck_Bps(j) == pytest.approx(3000 / (1000 / 12.5e6))  # the slow link's share decides
    assert err_of([{**job, "paths": [["x0"], ["nope"]]}], links=links).field == "jobs[0].paths"
    assert err_of([{**job, "flows": 2}], links=links).field == "jobs[0].flows"
    assert err_of([{**job, "path": ["x0"]}], links=links).field == "jobs[0].path"
    assert err_of([{**job, "paths": [[]]}], links=links).field == "jobs[0].paths"


# ---- fabrics -----------------------------------------------------------------------------------


def test_leaf_spine_links_carry_the_fabric_parameters():
    sc = sc_of(
        [{"name": "a", "compute_ms": 1, "bytes": 1000, "hosts": ["h0", "h7"]}],
        {**without(FABRIC, "buffer_pkts"), "uplink_rate_gbps": 4, "buffer_bdp": 2, "ecn": "step", "ecn_k_pkts": 5},
    )
    assert len(sc.links) == 2 * (8 + 4) and sc.fabric.kind == "leaf-spine"
    host, up = sc.links["h0>l0"], sc.links["l0>s1"]
    assert host.rate_bps == 1e9 and up.rate_bps == 4e9 and host.delay_s == pytest.approx(10e-6)
    assert host.buffer_bytes == pytest.approx(2 * 1e9 / 8 * 20e-6)
    assert up.buffer_bytes == pytest.approx(4 * host.buffer_bytes)
    assert host.ecn == up.ecn == "step" and up.ecn_k_bytes == 5 * 1448
    j = sc.jobs[0]
    assert len(j.path) == 4 and _chain(j.path, "h0", "h7") and j.flows == 1
    assert sc.base_rtt(j) == pytest.approx(2 * 4 * 10e-6)


def test_fabric_and_explicit_links_together():
    job = {"name": "a", "compute_ms": 1, "bytes": 1000, "path": ["h0>l0", "extra"]}
    sc = sc_of([job], FABRIC, links=[{**LINK, "name": "extra"}])
    assert sc.jobs[0].path == ["h0>l0", "extra"] and len(sc.links) == 25
    assert err_of([job], FABRIC, links=[{**LINK, "name": "h0>l0"}]).field == "links[0].name"  # duplicate


def test_flows_between_two_hosts_are_spread_by_ecmp():
    sc = sc_of(
        [{"name": "a", "compute_ms": 1, "bytes": 64000, "hosts": ["h0", "h5"], "flows": 64}], {**FABRIC, "spines": 4}
    )
    j = sc.jobs[0]
    spines = Counter(p[1] for p in j.paths())
    assert j.flows == 64 and set(spines) == {"l0>s0", "l0>s1", "l0>s2", "l0>s3"} and min(spines.values()) >= 8
    again = sc_of(
        [{"name": "a", "compute_ms": 1, "bytes": 64000, "hosts": ["h0", "h5"], "flows": 64}], {**FABRIC, "spines": 4}
    )
    assert again.jobs[0].paths() == j.paths()  # deterministic
    other = sc_of(
        [{"name": "a", "compute_ms": 1, "bytes": 64000, "hosts": ["h0", "h5"], "flows": 64}],
        {**FABRIC, "spines": 4, "ecmp_seed": 9},
    )
    assert other.jobs[0].paths() != j.paths()


def test_host_templates_use_integer_arithmetic():
    sc = sc_of(
        [{"name": "j", "count": 6, "share": 2, "compute_ms": 1, "bytes": 1, "hosts": ["h{g}", "h{(g + H // 2) % H}"]}],
        FABRIC,
    )
    assert [(p[0].split(">")[0], p[-1].split(">")[1]) for p in (j.path for j in sc.jobs)] == [
        ("h0", "h4"),
        ("h0", "h4"),
        ("h1", "h5"),
        ("h1", "h5"),
        ("h2", "h6"),
        ("h2", "h6"),
    ]
    assert [j.name for j in sc.jobs] == [f"j{i}" for i in range(6)]


@pytest.mark.parametrize(
    "hosts,match",
    [
        (["h{__import__('os')}", "h1"], "only whole numbers"),
        (["h{i ** 99}", "h1"], "only whole numbers"),
        (["h{i.real}", "h1"], "only whole numbers"),
        (["h{x}", "h1"], "only whole numbers"),
        (["h{1 +}", "h1"], "bad expression"),
        (["h{i", "h1"], "unbalanced"),
        (["h{i // 0}", "h1"], "division by zero"),
        (["h0", "h99"], "not a host"),
        (["h0", "h0"], "appears twice"),
        (["h0", "h1", "h2"], "without a pattern"),
        ([3, "h1"], "host names"),
        ([], "hosts"),
    ],
)
def test_bad_hosts_are_named(hosts, match):
    e = err_of([{"name": "a", "compute_ms": 1, "bytes": 1, "hosts": hosts}], FABRIC)
    assert e.field == "jobs[0].hosts" and match in str(e)


@pytest.mark.parametrize(
    "fabric,field",
    [
        ({**FABRIC, "kind": "torus"}, "fabric.kind"),
        ({**FABRIC, "leaves": 0}, "fabric.leaves"),
        ({"kind": "fat-tree", "k": 5, "rate_gbps": 1, "delay_us": 1, "buffer_pkts": 9}, "fabric.k"),
        ({"kind": "fat-tree", "k": 4, "leaves": 2, "rate_gbps": 1, "delay_us": 1, "buffer_pkts": 9}, "fabric.leaves"),
        ({"kind": "fat-tree", "k": 1000, "rate_gbps": 1, "delay_us": 1, "buffer_pkts": 9}, "fabric.k"),
        ({**FABRIC, "rate_gbps": -1}, "fabric.rate_gbps"),
        ({**FABRIC, "colour": "red"}, "fabric.colour"),
        ({**FABRIC, "uplink_rate_gbps": 0}, "fabric.uplink_rate_gbps"),
        ({**FABRIC, "spines": 1.5}, "fabric.spines"),
        (without(FABRIC, "buffer_pkts"), "fabric.buffer_pkts"),
    ],
)
def test_bad_fabric_fields_are_named(fabric, field):
    assert err_of([{"name": "a", "compute_ms": 1, "bytes": 1, "hosts": ["h0", "h1"]}], fabric).field == field


def test_hosts_need_a_fabric():
    assert err_of([{"name": "a", "compute_ms": 1, "bytes": 1, "hosts": ["h0", "h1"]}]).field == "jobs[0].hosts"


# ---- collectives ---------------------------------------------------------------------------------


def test_ring_all_reduce_over_the_hosts():
    sc = sc_of(
        [{"name": "r", "pattern": "ring", "hosts": ["h0", "h1", "h4", "h5"], "gradient_mb": 4, "compute_ms": 50}],
        FABRIC,
    )
    j = sc.jobs[0]
    assert j.flows == 4
    ends = [(p[0].split(">")[0], p[-1].split(">")[1]) for p in j.paths()]
    assert ends == [("h0", "h1"), ("h1", "h4"), ("h4", "h5"), ("h5", "h0")]
    assert all(_chain(p, a, b) for p, (a, b) in zip(j.paths(), ends))
    assert j.flow_bytes() == pytest.approx(2 * 3 / 4 * 4e6)  # 2(n-1)/n of the gradient each
    assert sc.ideal_iter_s(j) == pytest.approx(0.05 + 6e6 / 125e6 + 2 * 4 * 10e-6)  # flows in parallel
    m = sc_of([{"name": "r", "pattern": "ring", "hosts": ["h0", "h1"], "model": "resnet50"}], FABRIC).jobs[0]
    assert m.flow_bytes() == pytest.approx(25.6e6 * 4) and m.compute_s == pytest.approx(0.06)


def test_parameter_server_pushes_and_pulls():
    sc = sc_of(
        [
            {
                "name": "p",
                "pattern": "ps",
                "server": "h7",
                "hosts": ["h0", "h1", "h2"],
                "gradient_mb": 2,
                "compute_ms": 10,
            }
        ],
        FABRIC,
    )
    j = sc.jobs[0]
    ends = [(p[0].split(">")[0], p[-1].split(">")[1]) for p in j.paths()]
    assert ends == [("h0", "h7"), ("h1", "h7"), ("h2", "h7"), ("h7", "h0"), ("h7", "h1"), ("h7", "h2")]
    assert j.flows == 6 and j.flow_bytes() == pytest.approx(2e6)
    # the server's down-link carries the three pushes: 6 MB over 1 Gb/s is the iteration's transfer
    assert sc.bottleneck_Bps(j) == pytest.approx(12e6 / (6e6 / 125e6))


@pytest.mark.parametrize(
    "job,field",
    [
        ({"pattern": "ring", "hosts": ["h0"]}, "jobs[0].hosts"),
        ({"pattern": "ring", "hosts": ["h0", "h1"], "flows": 3}, "jobs[0].flows"),
        ({"pattern": "ring", "hosts": ["h0", "h1"], "workers": 2}, "jobs[0].workers"),
        ({"pattern": "ring", "path": ["h0>l0"]}, "jobs[0].pattern"),
        ({"pattern": "ps", "hosts": ["h0", "h1"]}, "jobs[0].pattern"),
        ({"pattern": "ps", "hosts": ["h0", "h1"], "server": "h1", "gradient_mb": 1}, "jobs[0].server"),
        ({"pattern": "ps", "hosts": ["h0", "h1"], "server": "h42", "gradient_mb": 1}, "jobs[0].server"),
        ({"pattern": "ring", "hosts": ["h0", "h1"], "server": "h2"}, "jobs[0].server"),
        ({"pattern": "tree", "hosts": ["h0", "h1"]}, "jobs[0].pattern"),
        ({"hosts": ["h0", "h1"], "gradient_mb": 3}, "jobs[0].gradient_mb"),
        ({"pattern": "ring", "hosts": ["h0", "h1"]}, "jobs[0].bytes"),  # nothing sizes it
    ],
)
def test_bad_collectives_are_named(job, field):
    assert err_of([{"name": "a", "compute_ms": 1, **job}], FABRIC).field == field


# ---- traces as input -----------------------------------------------------------------------------


def _trace(tmp_path, flows=4, n=6, nbytes=1_000_000, dur=0.1):
    p = tmp_path / "t.csv"
    rows = [",".join(traces.COLUMNS)] + [f"{i},{dur + 0.001 * i},{nbytes}" for i in range(n) for _ in range(flows)]
    p.write_text("\n".join(rows) + "\n")
    return p


def test_trace_gives_flows_bytes_and_per_iteration_compute(tmp_path):
    p = _trace(tmp_path)
    sc = sc_of(
        [{"name": "a", "trace": str(p), "trace_line_rate_gbps": 1, "path": ["l"], "iterations": 9}], warmup_iterations=2
    )
    j = sc.jobs[0]
    assert j.flows == 4 and j.bytes_per_iter == 4e6 and j.flow_bytes() == 1e6
    expect = [0.1 + 0.001 * i - 8e6 / 1e9 for i in range(6)]  # each flow at 1 Gb/s: 8 ms
    assert j.compute_series == pytest.approx(expect) and j.compute_s == pytest.approx(np.median(expect))
    times = j.compute_times(np.random.default_rng(0), 9)
    assert times == pytest.approx(expect + expect[:3])  # replayed in order, then repeated
    shared = sc_of(
        [{"name": "a", "trace": str(p), "trace_line_rate_gbps": 1, "trace_shared_link": True, "path": ["l"]}]
    ).jobs[0]
    assert shared.compute_s == pytest.approx(np.median(expect) - 24e6 / 1e9)


def test_trace_path_is_taken_from_the_scenarios_folder(tmp_path):
    _trace(tmp_path)
    f = tmp_path / "s.toml"
    f.write_text(
        'name = "x"\n[[links]]\nname = "l"\nrate_gbps = 1\ndelay_us = 5\nbuffer_pkts = 9\n'
        '[[jobs]]\nname = "a"\ntrace = "t.csv"\ntrace_line_rate_mbps = 1000\npath = ["l"]\n'
    )
    assert load(str(f)).jobs[0].flows == 4


@pytest.mark.parametrize(
    "extra,field,match",
    [
        ({}, "jobs[0].trace_line_rate_gbps", "required"),
        ({"trace_line_rate": 10}, "jobs[0].trace_line_rate", "trace_line_rate_gbps"),
        ({"trace_line_rate_gbps": 0}, "jobs[0].trace_line_rate_gbps", "> 0"),
        ({"trace_line_rate_mbps": 1}, "jobs[0].trace", "every iteration"),  # all clamped at 1 Mb/s
        ({"trace_line_rate_gbps": 1, "flows": 3}, "jobs[0].flows", "4 flows per iteration"),
        ({"trace_line_rate_gbps": 1, "trace": "missing.csv"}, "jobs[0].trace", "no such file"),
        ({"trace_line_rate_gbps": 1, "trace_skip": 6}, "jobs[0].trace_skip", "6 iterations"),
        ({"trace_line_rate_gbps": 1, "trace_skip": -1}, "jobs[0].trace_skip", "[0, 1e9]"),
    ],
)
def test_bad_trace_fields_are_named(tmp_path, extra, field, match):
    job = {"name": "a", "trace": str(_trace(tmp_path)), "path": ["l"], **extra}
    e = err_of([job])
    assert e.field == field and match in str(e)


def test_trace_flows_must_match_the_pattern(tmp_path):
    job = {
        "name": "a",
        "trace": str(_trace(tmp_path, flows=4)),
        "trace_line_rate_gbps": 1,
        "pattern": "ring",
        "hosts": ["h0", "h1", "h2"],
    }
    e = err_of([job], FABRIC)
    assert e.field == "jobs[0].hosts" and "3 flows" in str(e)
    job["hosts"].append("h5")
    assert sc_of([job], FABRIC).jobs[0].flows == 4


# ---- the shipped scenarios -----------------------------------------------------------------------


def test_resnet50_pair_comes_from_the_8_flow_trace():
    sc = load("resnet50-pair")
    prof = traces.load_profile(traces.resnet50_trace(), 10e9)
    assert "SYNTHETIC" in traces.resnet50_trace().read_text().splitlines()[0]
    assert (prof.iterations, prof.flows) == (40, 8)
    assert len(sc.jobs) == 2
    c = list(prof.compute_times)
    assert sc.jobs[0].compute_series == pytest.approx(c[:30])
    assert sc.jobs[1].compute_series == pytest.approx((c[20:] + c)[:30])  # trace_skip = 20
    for j in sc.jobs:
        assert j.flows == 8 and len(j.paths()) == 8
        assert j.bytes_per_iter == prof.bytes_per_iter and j.flow_bytes() == pytest.approx(179.2e6, rel=1e-4)
        # alone on the fabric an iteration is what the trace measured (within the 100 us round trip)
        assert sc.ideal_iter_s(j) == pytest.approx(0.1697 + 179.2e6 * 8 / 10e9, abs=2e-3)
    # each host's NIC carries one flow of each job
    up = Counter(p[0] for j in sc.jobs for p in j.paths())
    assert set(up.values()) == {2} and len(up) == 8


def test_ring_allreduce_scenario():
    sc = load("ring-allreduce")
    assert [j.flows for j in sc.jobs] == [4, 4]
    crossing = [p for p in sc.jobs[0].paths() if len(p) == 4]
    assert len(crossing) == 2  # h1 -> h4 and h5 -> h0 go over a spine


def test_fat_tree_10k_is_one_fabric_with_ecmp_over_the_core():
    sc = load("fat-tree-10k")
    assert len(sc.jobs) == 10_000 and sc.fabric.k == 28 and len(sc.links) == 32_928
    assert all(len(j.path) == 6 for j in sc.jobs)
    a0, b0 = sc.jobs[0], sc.jobs[5000]
    assert (a0.name, b0.name) == ("a0", "b0") and a0.path[0] == b0.path[0] == "h0>e0.0"
    assert a0.path[-1] == b0.path[-1] == "e14.0>h2744" and b0.start_offset_s == pytest.approx(1e-3)
    # the sources h0..h4999 fill 26 pods, whose 196 aggregation->core links each share ~390 flows at
    # random: about 1 - e^-2 = 86 % of those links carry a flow, none carries many
    cores = Counter(h for j in sc.jobs for h in j.path if h.startswith("a") and ">c" in h)
    assert 0.8 * 26 * 196 < len(cores) <= 26 * 196 and max(cores.values()) <= 12
    names = set(sc.links)
    assert all(h in names for j in sc.jobs[::97] for h in j.path)


def test_cli_bad_fabric_exits_2(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text(
        'name = "x"\n[fabric]\nkind = "fat-tree"\nk = 7\nrate_gbps = 1\ndelay_us = 5\nbuffer_pkts = 9\n'
        '[[jobs]]\nname = "a"\ncompute_ms = 1\nbytes = 10\nhosts = ["h0", "h1"]\n'
    )
    p = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "simulate", str(f), "--json"], capture_output=True, text=True
    )
    assert p.returncode == 2 and "fabric.k" in p.stderr and p.stdout == ""


@pytest.mark.parametrize(
    "extra,field",
    [
        ({"pattern": "ring", "hosts": ["h0", "h1"], "gradient_mb": float("inf")}, "jobs[0].gradient_mb"),
        ({"pattern": "ring", "hosts": ["h0", "h1"], "gradient_mb": 1e9}, "jobs[0].gradient_mb"),
        ({"hosts": ["h0", "h1"], "bytes": 1, "trace_line_rate_gbps": 1}, "jobs[0].trace_line_rate_gbps"),
    ],
)
def test_new_numbers_are_range_checked(extra, field):
    assert err_of([{"name": "a", "compute_ms": 1, **extra}], FABRIC).field == field
    assert (
        err_of([{"name": "a", "compute_ms": 1, "bytes": 1, "hosts": ["h0", "h1"]}], {**FABRIC, "ecmp_seed": -1}).field
        == "fabric.ecmp_seed"
    )


def test_trace_line_rate_bounds(tmp_path):
    job = {"name": "a", "trace": str(_trace(tmp_path)), "path": ["l"], "trace_line_rate_gbps": 1e9}
    assert err_of([job]).field == "jobs[0].trace_line_rate_gbps"
