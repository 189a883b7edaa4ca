"""The online switch (mltcp.engage): engaged while iterations interleave, the base otherwise."""

import math

import numpy as np
import pytest

from mltcp import engage
from mltcp.cc import make_cc as make
from mltcp.tracker import IterationTracker

TRIAL, ABOVE, HOLD_MAX = 4, 1.25, 16


class Flow:
    """One flow's tracker fed iterations of 1000 bytes (10 ACKs) behind 20 ms compute gaps; a
    contended iteration delivers them at half the rate."""

    def __init__(self):
        self.tr, self.t = IterationTracker(1, idle_fraction=0.9, min_idle=1e-3), 0.0

    def iteration(self, contended: bool) -> bool:
        """Run one iteration; returns whether the switch has MLTCP engaged after its first ACK
        (when the previous iteration has been judged)."""
        self.t += 0.020
        for k in range(10):
            self.t += (0.0002 if contended else 0.0001) if k else 0.0
            self.tr.on_ack(np.array([100.0]), self.t)
            if k == 0:
                on = engage.engaged(self.tr.a, 0, TRIAL, ABOVE, HOLD_MAX)
        return on

    def run(self, pattern: str) -> str:
        """'c' contended, '.' not, per iteration -> 'E' engaged / 'b' base, per iteration."""
        return "".join("E" if self.iteration(c == "c") else "b" for c in pattern)


def test_a_flow_whose_iterations_interleave_stays_engaged():
    f = Flow()
    assert f.run("." * 30) == "E" * 30
    assert engage.stretch(f.tr.a, 0) == pytest.approx(1.0)


def test_stretch_is_the_communication_time_over_the_bytes_at_the_best_rate():
    f = Flow()
    f.run("....c")
    f.iteration(False)  # closes the contended one
    assert engage.stretch(f.tr.a, 0) == pytest.approx(2.0)


def test_contention_that_does_not_resolve_disengages_and_the_hold_doubles_to_its_cap():
    f = Flow()
    states = f.run("." * 2 + "c" * 80)
    # an iteration is judged at the next one's first ACK, every 4 engaged ones as a trial: the
    # first (2 clean, 2 contended) is no majority; the second (4 of 4) disengages from iteration 8:
    # base for 4, engaged 4 (fails), base 8, 4, base 16, 4, base 16 (the cap) ...
    first_base = states.index("b")
    runs = [len(r) for r in "".join(states[first_base:]).replace("Eb", "E b").replace("bE", "b E").split()]
    assert states[:first_base] == "E" * first_base and first_base == 8
    assert runs[:7] == [4, 4, 8, 4, 16, 4, 16]


def test_an_engagement_that_works_resets_the_hold():
    f = Flow()
    assert f.run("." * 4 + "c" * 5) == "E" * 8 + "b"  # one failed trial: base, hold 4
    assert f.tr.a[0, engage.HOLD] == TRIAL
    # engaged again after the hold, at a contended iteration; a trial that interleaves resets it
    assert f.run("ccc" + "c" + "." * 8) == "bbb" + "E" * 9 and f.tr.a[0, engage.HOLD] == 0


def test_disengaged_the_hook_is_its_base_algorithm():
    cc = make("mltcp-reno", adaptive=True, trial=TRIAL, hold_max=HOLD_MAX)
    st = cc.new_state(2, 1448, 0.0)
    st.tracker.a[:, 1] = 1000.0  # bytes per iteration learned
    st.tracker.a[:, 0] = 900.0  # 90 % through the iteration
    st.tracker.a[1, engage.ENGAGED] = 0.0
    gain = cc.increase_gain(st)
    assert gain[1] == 1.0 and gain[0] == pytest.approx(cc.F(np.array([0.9]))[0])
    from mltcp.cc.mltcp import ADAPTIVE

    assert make("mltcp-reno").hook_vector()[ADAPTIVE] == 1.0  # the shipped default: on
    assert make("mltcp-reno", adaptive=False).hook_vector()[ADAPTIVE] == 0.0


def bucketed_iterations(tr, n, contended_from, boundary):
    """``n`` iterations of a data-parallel job: 4 collectives of 250 bytes (5 ACKs 0.1 ms apart, 0.2
    ms from ``contended_from`` on) with 3 ms of backward compute between them, each sent with
    nothing in flight (TX_START), then 20 ms of compute. Returns the stretch after each iteration
    (judged at the next one's first ACK)."""
    t, out = 0.0, []
    for it in range(n):
        step = 0.0002 if it >= contended_from else 0.0001
        for bucket in range(4):
            t += 0.003 if bucket else 0.020
            if boundary == "mark" and bucket == 0:
                tr.iteration_start(np.ones(1, bool))
            tr.tx_start(t)
            for k in range(5):
                t += step
                tr.on_ack(np.array([50.0]), t)
                if bucket == 0 and k == 0:
                    out.append(engage.stretch(tr.a, 0))
    return out[1:]


@pytest.mark.parametrize("boundary", ["idle", "tx_start", "mark"])
def test_contention_shows_on_bucketed_iterations_as_on_one_block(boundary):
    """The stretch is measured on busy time: the gaps inside an iteration when the flow had nothing
    in flight (compute between a framework's collectives) are left out. On the first-to-last-ACK
    span (9 ms of backward plus 2 ms of sending) twice as slow a network would read as 1.18x,
    under the 1.25 that counts as contended, and a flow could never see that its turn did not come."""
    tr = IterationTracker(1, idle_fraction=0.9, min_idle=math.inf if boundary == "mark" else 1e-3, boundary=boundary)
    tr.last_gap = 0.020  # the idle rules: as after one compute gap (the first iteration's gaps would split it)
    stretch = bucketed_iterations(tr, 8, 4, boundary)
    assert stretch[:3] == pytest.approx([1.0] * 3, rel=0.02)
    assert stretch[4:] == pytest.approx([2.0] * 3, rel=0.06)
    assert tr.bytes_per_iter[0] == 1000  # the backward gaps split no iteration
