"""Scenario fields are range-checked before any work starts (issue 12, item 4): each probe that
hung or gave a traceback now exits 2 naming the file and the field, fast."""

import json
import subprocess
import sys
import time

import pytest

from mltcp import scenario as scn
from mltcp.scenario import ScenarioError, from_dict

MIN = {
    "name": "s",
    "links": [{"name": "l", "rate_gbps": 1, "delay_us": 10, "buffer_pkts": 10}],
    "jobs": [{"name": "a", "compute_ms": 1, "bytes": 1000, "path": ["l"]}],
}


def variant(top=None, link=None, job=None, **extra):
    d = json.loads(json.dumps(MIN))
    d.update(top or {})
    d["links"][0].update(link or {})
    d["jobs"][0].update(job or {})
    d.update(extra)
    return d


def toml_value(v):
    if isinstance(v, float) and v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return json.dumps(v)


def write_scenario(path, top=(), link=(), job=(), mltcp=()):
    lines = ['name = "probe"'] + [f"{k} = {toml_value(v)}" for k, v in dict(top).items()]
    if mltcp:
        lines += ["[mltcp]"] + [f"{k} = {toml_value(v)}" for k, v in dict(mltcp).items()]
    lk = {"name": "l", "rate_gbps": 1, "delay_us": 10, "buffer_pkts": 10, **dict(link)}
    jb = {"name": "a", "compute_ms": 1, "bytes": 1000, "path": ["l"], **dict(job)}
    lines += ["[[links]]"] + [f"{k} = {toml_value(v)}" for k, v in lk.items()]
    lines += ["[[jobs]]"] + [f"{k} = {toml_value(v)}" for k, v in jb.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def simulate(*args, timeout=60):
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "mltcp.cli", "simulate", *map(str, args), "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p, time.monotonic() - t0


# -- the probes of the issue, through the CLI ------------------------------------------------------


@pytest.mark.parametrize(
    "kind,key,value,field",
    [
        ("job", "bytes", 1e30, "jobs[0].bytes"),  # hung > 60 s
        ("job", "count", 1_000_000_000, "jobs[0].count"),  # hung > 60 s
        ("top", "iterations", 10**12, "iterations"),  # MemoryError traceback
        ("link", "rate_gbps", float("inf"), "links[0].rate_gbps"),  # accepted, nonsense
        ("mltcp", "idle_fraction", -1.0, "mltcp.idle_fraction"),  # accepted
    ],
)
def test_issue_probes_exit_2_naming_the_field(tmp_path, kind, key, value, field):
    f = write_scenario(tmp_path / "probe.toml", **{kind: {key: value}})
    p, took = simulate(f)
    assert p.returncode == 2, p.stderr
    assert f"{f}: {field}:" in p.stderr and "Traceback" not in p.stderr
    assert p.stdout == ""
    assert took < 30  # checked before any work (the simulator never starts)


def test_non_utf8_scenario_names_the_file(tmp_path):
    f = tmp_path / "latin1.toml"
    f.write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    p, _ = simulate(f)
    assert p.returncode == 2 and f"{f}: file: not UTF-8" in p.stderr and "Traceback" not in p.stderr


def test_a_directory_is_not_a_scenario(tmp_path):
    d = tmp_path / "dir.toml"
    d.mkdir()
    p, _ = simulate(d)
    assert p.returncode == 2 and f"{d}: file:" in p.stderr and "Traceback" not in p.stderr


# -- the limits, one by one (pure) ----------------------------------------------------------------


@pytest.mark.parametrize(
    "d,field",
    [
        (variant(job={"bytes": scn.MAX_BYTES_PER_ITER * 1.01}), "jobs[0].bytes"),
        (variant(job={"comm_mb": 2e6}), "jobs[0].comm_mb"),
        (variant(job={"count": scn.MAX_JOBS + 1}), "jobs[0].count"),
        (variant(job={"iterations": scn.MAX_ITERATIONS + 1}), "jobs[0].iterations"),
        (variant(job={"compute_ms": float("nan")}), "jobs[0].compute_ms"),
        (variant(job={"compute_s": 1e6}), "jobs[0].compute_s"),
        (variant(job={"start_offset_s": -1}), "jobs[0].start_offset_s"),
        (variant(job={"count": 1000, "stagger_ms": 1e6}), "jobs[0].stagger_ms"),
        (variant(job={"straggler_delay_ms": 1e12}), "jobs[0].straggler_delay_ms"),
        (variant(job={"workers": 10**9, "model": "vgg16"}), "jobs[0].workers"),
        (variant(job={"path": []}), "jobs[0].path"),
        (variant(job={"path": [3]}), "jobs[0].path"),
        (variant(job={"path": ["l{x}"]}), "jobs[0].path"),
        (variant(job={"path": ["l{"]}), "jobs[0].path"),
        (variant(job={"name": ""}), "jobs[0].name"),
        (variant(link={"rate_gbps": float("inf")}), "links[0].rate_gbps"),
        (variant(link={"rate_mbps": 1e-9}), "links[0].rate_mbps"),
        (variant(link={"rate_gbps": 1e6}), "links[0].rate_gbps"),
        (variant(link={"delay_ms": 1e5}), "links[0].delay_ms"),
        (variant(link={"delay_us": -5}), "links[0].delay_us"),
        (variant(link={"buffer_pkts": 1e15}), "links[0].buffer_pkts"),
        (variant(link={"buffer_pkts": None, "buffer_kb": 1e-4}), "links[0].buffer_kb"),
        (variant(link={"buffer_pkts": None, "buffer_bdp": 4, "delay_us": 0}), "links[0].buffer_bdp"),
        (variant(link={"count": scn.MAX_LINKS + 1}), "links[0].count"),
        (variant(top={"seed": -1}), "seed"),
        (variant(top={"iterations": 0}), "iterations"),
        (variant(top={"network": {"step_us": 1e9}}), "network.step_us"),
        (variant(top={"network": {"min_rto_ms": float("inf")}}), "network.min_rto_ms"),
        (variant(top={"network": {"host_delay_us": 1e9}}), "network.host_delay_us"),
        (variant(top={"mltcp": {"idle_fraction": -1.0}}), "mltcp.idle_fraction"),
        (variant(top={"mltcp": {"idle_fraction": 0.0}}), "mltcp.idle_fraction"),
        (variant(top={"mltcp": {"slope": float("inf")}}), "mltcp.slope"),
        (variant(top={"mltcp": {"intercept": -0.5}}), "mltcp.intercept"),
        (variant(top={"mltcp": {"min_idle_ms": 0}}), "mltcp.min_idle_ms"),
        (variant(jobs=[MIN["jobs"][0], MIN["jobs"][0]]), "jobs[1].name"),
    ],
)
def test_out_of_range_fields_are_named(d, field):
    for lk in d["links"]:
        for k in [k for k, v in lk.items() if v is None]:
            del lk[k]
    with pytest.raises(ScenarioError) as e:
        from_dict(d, "bad.toml")
    assert e.value.field == field, str(e.value)
    assert str(e.value).startswith(f"bad.toml: {field}: ")


def test_work_estimate_refuses_runs_that_cannot_finish():
    # 1 TB per iteration on a 1 Gb/s link: 8000 s per iteration, 400 M slots of 20 us
    d = variant(job={"bytes": 1e12})
    with pytest.raises(ScenarioError, match=r"jobs\[0\]: job 'a' needs at least .* slots"):
        from_dict(d, "big.toml")
    d = variant(job={"count": 10_000}, top={"iterations": 1000})
    d["jobs"][0]["iterations"] = scn.MAX_ITERATIONS  # 10 G job-iterations: too many records
    with pytest.raises(ScenarioError, match="job-iterations"):
        from_dict(d, "many.toml")


def test_ten_thousand_jobs_stay_allowed():
    d = variant(
        job={"count": 10_000, "share": 2, "path": ["l{g}"], "stagger_ms": 0.01},
        link={"count": 5_000},
        top={"iterations": 50},
    )
    sc = from_dict(d, "big.toml")
    assert len(sc.jobs) == 10_000 and len(sc.links) == 5_000


def test_limits_are_inclusive_at_the_edge():
    sc = from_dict(variant(job={"bytes": 1e9, "iterations": 20}, link={"rate_gbps": 100_000}), "edge.toml")
    assert sc.jobs[0].bytes_per_iter == 1e9 and sc.links["l"].rate_bps == scn.MAX_RATE_BPS


def test_every_builtin_still_loads():
    for n in scn.builtin_names():
        scn.load(n)
