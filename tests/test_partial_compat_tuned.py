"""The [mltcp] table tuned on partial-compat (scenarios/tuned/partial-compat.toml, an experiment;
docs/tuning.md, "partial-compat retuned"): issue 10 asked that MLTCP be no worse than 0.98x there and
drop no more than the baseline. Seeded runs of the tuned file, simulator."""

import pytest

from mltcp import compare, metrics, tune_eval
from mltcp.sim.engine import simulate


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_partial_compat_no_slower_and_fewer_drops_than_reno(seed):
    case = tune_eval.make_cases(["tuned/partial-compat"], [seed])[0]
    sc = case.scenario()
    base = simulate(sc, sc.cc)
    ml = simulate(sc, compare.mltcp_name(sc.cc))
    sb = metrics.summary(base.records, sc.warmup_iterations)
    sm = metrics.summary(ml.records, sc.warmup_iterations)
    assert sb["avg_iter_s"] / sm["avg_iter_s"] >= 0.98, f"seed {seed}"
    assert ml.drops <= base.drops, f"seed {seed}: {ml.drops:.0f} drops against Reno's {base.drops:.0f}"
