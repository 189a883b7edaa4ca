"""priority-by-progress's band FIFOs: a slow link holds more sends than segments, and the run that
outgrows the first FIFO size is run again with more room, the same run."""

from __future__ import annotations

import pytest

from mltcp import suitegen, sweep
from mltcp.sim import engine
from mltcp.sim.state import BandFifoOverflow


def _slow_priority_case(tmp_path):
    # suite seed 11's fourth DCTCP scenario: 110 Mb/s, 42 us RTT, 30 KB buffers, four jobs, three
    # of them over access links: a slot's send is a fraction of a segment
    f = suitegen.generate(tmp_path, 4, seed=11, cc="dctcp")[3]
    return sweep.build(sweep.Task(str(f), "x", 1, iterations=8, config={"switch_policy": "priority-by-progress"}))


def test_a_fifo_that_overflows_is_run_again_with_more_room_and_gives_the_same_run(tmp_path, monkeypatch):
    sc = _slow_priority_case(tmp_path)
    monkeypatch.setattr(engine, "FIFO_ROOMS", (1,))
    with pytest.raises(BandFifoOverflow, match="band FIFO overflow"):
        engine.simulate(sc, sc.cc)
    monkeypatch.setattr(engine, "FIFO_ROOMS", (1, 8, 64))
    retried = engine.simulate(sc, sc.cc)
    monkeypatch.setattr(engine, "FIFO_ROOMS", (64,))
    roomy = engine.simulate(sc, sc.cc)
    assert len(retried.records) == sum(j.iterations for j in sc.jobs)
    assert retried.records == roomy.records and retried.drops == roomy.drops and retried.ecn_marks == roomy.ecn_marks
