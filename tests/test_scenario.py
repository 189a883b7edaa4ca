"""Scenario files: every built-in loads; bad input names the file and the field."""

import json
import subprocess
import sys

import pytest

from mltcp.scenario import ScenarioError, builtin_names, cc_kwargs, from_dict, load

MIN = {
    "name": "s",
    "links": [{"name": "l", "rate_gbps": 1, "delay_us": 10, "buffer_pkts": 10}],
    "jobs": [{"name": "a", "compute_ms": 1, "bytes": 1000, "path": ["l"]}],
}


def variant(**changes):
    d = json.loads(json.dumps(MIN))
    for path, value in changes.items():
        node = d
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if k.isdigit() else node[k]
        node[keys[-1]] = value
    return d


def test_every_builtin_scenario_loads():
    names = builtin_names()
    for required in (
        "two-jobs",
        "three-jobs",
        "straggler",
        "partial-compat",
        "circular",
        "dcqcn-two-jobs",
        "cubic-two-jobs",
        "paper-like",
        "thousand-jobs",
    ):
        assert required in names
    for n in names:
        sc = load(n)
        assert sc.jobs and sc.links
        for j in sc.jobs:
            assert sc.ideal_iter_s(j) > j.compute_s


def test_units_and_replication():
    sc = load("thousand-jobs")
    assert len(sc.jobs) == 1000 and len(sc.links) == 500
    assert sc.jobs[3].path == ["link1"]
    lk = load("two-jobs").links["bottleneck"]
    assert lk.rate_bps == 1e9 and lk.delay_s == pytest.approx(50e-6)
    assert lk.buffer_bytes == pytest.approx(4 * 1e9 / 8 * 100e-6)


@pytest.mark.parametrize(
    "changes,field",
    [
        ({"links__0__rate_gbps": -1}, "links[0].rate_gbps"),
        ({"links__0__rate_gbps": "fast"}, "links[0].rate_gbps"),
        ({"links__0__ecn": "maybe"}, "links[0].ecn"),
        ({"links__0__colour": "red"}, "links[0].colour"),
        ({"jobs__0__path": ["nowhere"]}, "jobs[0].path"),
        ({"jobs__0__jitter": 2.0}, "jobs[0].jitter"),
        ({"jobs__0__model": "alexnet9000"}, "jobs[0].model"),
        ({"cc": "vegas"}, "cc"),
        ({"network": {"mss": 10}}, "network.mss"),
        ({"warmup_iterations": 100}, "warmup_iterations"),
    ],
)
def test_bad_fields_are_named(changes, field):
    with pytest.raises(ScenarioError) as e:
        from_dict(variant(**changes), "bad.toml")
    assert e.value.field == field
    assert str(e.value).startswith("bad.toml: " + field)


def test_missing_required_field():
    d = variant()
    del d["jobs"][0]["bytes"]
    with pytest.raises(ScenarioError, match=r"jobs\[0\].bytes"):
        from_dict(d, "x.toml")


def test_model_profile_fills_compute_and_ring_allreduce_bytes():
    d = variant()
    del d["jobs"][0]["bytes"], d["jobs"][0]["compute_ms"]
    d["jobs"][0].update(model="resnet50", workers=4)
    j = from_dict(d).jobs[0]
    assert j.bytes_per_iter == pytest.approx(2 * 3 / 4 * 25.6e6 * 4)


def test_cc_params_are_converted_and_checked():
    d = variant(cc_params={"dcqcn": {"rai_mbps": 40, "timer_us": 55}})
    kw = cc_kwargs(from_dict(d), "dcqcn")
    assert kw == {"rai": pytest.approx(40e6 / 8), "timer": pytest.approx(55e-6)}
    with pytest.raises(ScenarioError, match="cc_params.dcqcn.bogus"):
        cc_kwargs(from_dict(variant(cc_params={"dcqcn": {"bogus": 1}})), "dcqcn")


def test_cli_bad_toml_exits_2_and_writes_nothing(tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text("name = 'x'\n[[links]\n")
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "simulate", str(bad), "--out", str(out)], capture_output=True, text=True
    )
    assert p.returncode == 2
    assert "broken.toml" in p.stderr and "toml" in p.stderr
    assert not out.exists()


def test_cli_bad_field_exits_2(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text(
        'name = "x"\n[[links]]\nname = "l"\nrate_gbps = 1\ndelay_us = 5\nbuffer_pkts = -3\n'
        '[[jobs]]\nname = "a"\ncompute_ms = 1\nbytes = 10\npath = ["l"]\n'
    )
    p = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "simulate", str(f), "--json"], capture_output=True, text=True
    )
    assert p.returncode == 2
    assert "links[0].buffer_pkts" in p.stderr
    assert p.stdout == ""
