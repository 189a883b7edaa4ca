"""The *-no-rack scenarios: the same jobs on a sender without RACK-TLP (loss_recovery = "ns3"),
with the MLTCP tables tuned for it (scenarios/tuned/*-no-rack.toml, experiments; docs/tuning.md,
"MLTCP without RACK-TLP"). Issue 10 asks that
MLTCP hold up with fewer drops than its base; with Linux's tables and no RACK-TLP it does not
(docs/tuning.md: two-jobs 0.90x on seed 1, three-jobs 0.99x on seed 2). Simulator, seeded; the
thresholds sit below the measured values (two-jobs 1.21-1.27x, three-jobs 1.01-1.11x, CUBIC
1.06-1.24x)."""

import pytest

from mltcp import compare, metrics, tune_eval
from mltcp.sim.engine import simulate

FLOOR = {"tuned/two-jobs-no-rack": 1.15, "tuned/three-jobs-no-rack": 1.0, "tuned/cubic-two-jobs-no-rack": 1.03}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(FLOOR))
def test_no_rack_table_is_faster_with_fewer_drops_than_its_base(name, seed):
    case = tune_eval.make_cases([name], [seed])[0]
    sc = case.scenario()
    assert sc.loss_recovery == "ns3"
    base = simulate(sc, sc.cc)
    ml = simulate(sc, compare.mltcp_name(sc.cc))
    sb = metrics.summary(base.records, sc.warmup_iterations)
    sm = metrics.summary(ml.records, sc.warmup_iterations)
    assert sb["avg_iter_s"] / sm["avg_iter_s"] >= FLOOR[name], f"{name} seed {seed}"
    assert ml.drops < base.drops, f"{name} seed {seed}: {ml.drops:.0f} drops against {base.drops:.0f}"
