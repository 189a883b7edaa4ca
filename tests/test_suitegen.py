"""Random suites: every generated scenario loads and runs; the same seed writes the same suite."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mltcp import suitegen
from mltcp.scenario import load
from mltcp.sim.engine import simulate
from mltcp.sweep import cut_iterations


@pytest.mark.parametrize("cc", ["reno", "cubic", "dctcp", "dcqcn"])
@pytest.mark.parametrize("topology", suitegen.TOPOLOGIES)
@pytest.mark.parametrize("compatible", [False, True])
def test_every_generated_scenario_loads(tmp_path, cc, topology, compatible):
    files = suitegen.generate(tmp_path, 12, seed=3, cc=cc, topology=topology, compatible=compatible)
    assert len(files) == 12
    for f in files:
        sc = load(str(f))
        assert sc.cc == cc and 2 <= len(sc.jobs) <= 5
        assert all(lk.buffer_bytes >= suitegen.BUFFER_FLOOR_BYTES for lk in sc.links.values())
        if compatible:  # equal periods, and the communication fits in one period
            periods = [sc.ideal_iter_s(j) - sc.base_rtt(j) for j in sc.jobs]  # rounded to 0.1 us and 1 byte
            assert max(periods) - min(periods) < 1e-6
            comm = sum(j.bytes_per_iter / sc.bottleneck_Bps(j) for j in sc.jobs)
            assert comm <= 0.95 * max(periods) + 1e-6


def test_the_same_seed_writes_the_same_suite(tmp_path):
    a = suitegen.generate(tmp_path / "a", 5, seed=9)
    b = suitegen.generate(tmp_path / "b", 5, seed=9)
    c = suitegen.generate(tmp_path / "c", 5, seed=10)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert [p.read_bytes() for p in a] != [p.read_bytes() for p in c]


@pytest.mark.parametrize("topology", suitegen.TOPOLOGIES)
def test_generated_scenarios_simulate_to_the_end(tmp_path, topology):
    import tomllib
    from mltcp.scenario import from_dict

    for f in suitegen.generate(tmp_path, 3, seed=5, topology=topology):
        raw = cut_iterations(tomllib.loads(f.read_text()), 8, warmup=2)
        sc = from_dict(raw, str(f))
        for cc in ("reno", "mltcp-reno"):
            res = simulate(sc, cc)
            assert len(res.records) == sum(j.iterations for j in sc.jobs)


def _mltcp(*args):
    return subprocess.run([sys.executable, "-m", "mltcp.cli", *args], capture_output=True, text=True, timeout=120)


def test_cli_generate_writes_the_suite_and_refuses_bad_options(tmp_path):
    r = _mltcp(
        "scenarios",
        "generate",
        str(tmp_path / "s"),
        "--n",
        "3",
        "--seed",
        "2",
        "--cc",
        "cubic",
        "--topology",
        "circular",
    )
    assert r.returncode == 0, r.stderr
    assert len(list((tmp_path / "s").glob("*.toml"))) == 3
    bad = _mltcp("scenarios", "generate", str(tmp_path / "t"), "--cc", "vegas")
    assert bad.returncode == 2 and "--cc" in bad.stderr and not (tmp_path / "t").exists()
    (tmp_path / "file").write_text("x")
    r = _mltcp("scenarios", "generate", str(tmp_path / "file"))
    assert r.returncode == 2 and "not a folder" in r.stderr


def test_cli_scenarios_still_lists_the_built_ins():
    r = _mltcp("scenarios")
    assert r.returncode == 0 and "two-jobs" in r.stdout


def test_ecn_suites_mark_at_a_step_below_half_the_buffer_or_20_packets(tmp_path):
    files = suitegen.generate(tmp_path, 8, seed=3, cc="reno", ecn=True)
    for f in files:
        sc = load(str(f))
        assert "-ecn-" in sc.name
        for lk in sc.links.values():
            k = lk.ecn_k_bytes
            assert lk.ecn == "step" and k >= 20 * sc.mss - 1
            assert k <= max(20 * sc.mss, lk.buffer_bytes / 2) + 1  # one BDP at most, capped at half the buffer
    plain = suitegen.generate(tmp_path / "plain", 8, seed=3, cc="reno")
    assert all(lk.ecn == "none" for f in plain for lk in load(str(f)).links.values())
    with pytest.raises(ValueError, match="always mark ECN"):
        suitegen.generate(tmp_path / "d", 1, seed=3, cc="dctcp", ecn=True)
    bad = _mltcp("scenarios", "generate", str(tmp_path / "t"), "--cc", "dcqcn", "--ecn")
    assert bad.returncode == 2 and "--ecn" in bad.stderr and not (tmp_path / "t").exists()
