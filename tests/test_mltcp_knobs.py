"""The MLTCP hook's named configurations (issue 10): F's shape, the decrease's ends, DCQCN's
application points, the tracker's boundary and history, set from a scenario's [mltcp] table."""

import re
from pathlib import Path

import numpy as np

import pytest

from mltcp import scenario
from mltcp.cc import MLTCPDcqcn, MLTCPReno
from mltcp.cc import mltcp as hook
from mltcp.scenario import ScenarioError
from mltcp.sim.engine import build_cc, simulate

RTT = 100e-6
# the knobs are checked against the public MLTCP-Reno's F without the online switch (the hook as tuned)
PUBLIC = {"slope": 4.0, "intercept": 0.25, "adaptive": False}


def _hook(cls, **kw):
    return cls(**{**PUBLIC, **kw})


def _at_ratio(cc, r, n=1):
    """A fresh state whose tracker sits at bytes_ratio r (100 bytes per iteration learned)."""
    st = cc.new_state(n)
    cc.on_ack(st, np.full(n, 100.0), RTT, 0.0)
    cc.on_ack(st, np.full(n, 100.0 * r), RTT, 1.0)  # the 1 s idle gap started a new iteration
    assert st.tracker.bytes_ratio == pytest.approx(r)
    return st


@pytest.mark.parametrize(
    "shape,kw,r,want",
    [
        ("linear", {}, 0.5, 4.0 * 0.5 + 0.25),
        ("capped", {"cap": 1.5}, 0.5, 1.5),
        ("capped", {"cap": 5.0}, 0.5, 2.25),
        ("convex", {"exponent": 2.0}, 0.5, 4.0 * 0.25 + 0.25),
        ("convex", {"exponent": 3.0, "slope": 8.0, "intercept": 0.5}, 0.5, 8.0 * 0.125 + 0.5),
    ],
)
def test_F_shapes(shape, kw, r, want):
    cc = _hook(MLTCPReno, shape=shape, **kw)
    st = _at_ratio(cc, r)
    assert cc.increase_gain(st)[0] == pytest.approx(want)
    mp = cc.hook_vector()
    assert hook.gain(mp, r) == pytest.approx(want)  # the kernel the simulator runs


def test_reno_window_growth_follows_the_shape():
    for shape, want in (("linear", 2.25), ("capped", 1.0)):
        cc = _hook(MLTCPReno, shape=shape, cap=1.0)
        st = _at_ratio(cc, 0.5)
        st.cwnd[:], st.ssthresh[:] = 100 * 1448.0, 1.0
        cc.cong_avoid(st, np.array([1448.0]), 1.0)
        assert st.cwnd[0] == pytest.approx(100 * 1448 + want * 1448 / 100)


def test_decrease_ends_are_knobs():
    cc = _hook(MLTCPReno, scale_decrease=True, decrease_at_start=0.6, decrease_at_end=0.3)
    st = _at_ratio(cc, 0.5)
    st.cwnd[:] = 100 * 1448.0
    cc.on_congestion(st, np.array([True]), "loss", 1.0)
    assert st.cwnd[0] == pytest.approx(100 * 1448 * (1 - 0.45))  # removed: 0.6 + (0.3 - 0.6) * 0.5
    default = _hook(MLTCPReno, scale_decrease=True)
    assert default.decrease_scale(_at_ratio(default, 0.25))[0] == pytest.approx(hook.scaled_decrease(0.25))


def test_dcqcn_application_points():
    base = dict(line_rate=1000.0, rai=10.0, rhai=10.0, timer=1.0, fast_recovery_steps=0, alpha_interval=1e9)
    # R_AI off: the step is the plain one; recovery on: Rc moves min(1, F/2) of the way to Rt (F = 2.25 -> all)
    cc = _hook(MLTCPDcqcn, dcqcn_f_rai=False, dcqcn_f_rhai=False, dcqcn_f_recovery=True, **base)
    st = _at_ratio(cc, 0.5)
    st.rate[:], st.ca.target[:] = 100.0, 100.0
    cc.on_timer(st, 5.0)
    assert st.ca.target[0] == pytest.approx(110.0) and st.rate[0] == pytest.approx(110.0)
    # timer on: the next expiry is timer / F away
    cc = _hook(MLTCPDcqcn, dcqcn_f_timer=True, **base)
    st = _at_ratio(cc, 0.5)
    cc.on_timer(st, 5.0)
    assert st.ca.next_timer[0] == pytest.approx(5.0 + 1.0 / 2.25)
    # steps on: F = 2.25 turns 5 fast-recovery events into round(5 / 2.25) = 2
    cc = _hook(MLTCPDcqcn, dcqcn_f_steps=True, **{**base, "fast_recovery_steps": 5})
    st = _at_ratio(cc, 0.5)
    st.rate[:], st.ca.target[:] = 100.0, 100.0
    cc.on_timer(st, 5.0)
    assert st.ca.target[0] == pytest.approx(100.0)  # T = 1 < 2
    cc.on_timer(st, 7.0)
    assert st.ca.target[0] == pytest.approx(100.0 + 2.25 * 10.0)  # T = 2: additive increase


def test_mark_boundary_turns_the_idle_rule_off():
    cc = _hook(MLTCPReno, boundary="mark", history=1)
    st = cc.new_state(1)
    cc.on_ack(st, np.array([100.0]), RTT, 0.0)
    cc.on_ack(st, np.array([50.0]), RTT, 10.0)  # a long gap: no boundary
    assert st.tracker.iteration[0] == 0 and st.tracker.bytes_cur[0] == 150.0
    cc.iteration_start(st, np.array([True]))
    cc.on_ack(st, np.array([30.0]), RTT, 11.0)
    assert st.tracker.bytes_per_iter[0] == 150.0 and st.tracker.bytes_ratio[0] == pytest.approx(0.2)
    assert st.tracker.history.shape == (1, 1)


def _write(tmp_path, extra, seed=None):
    src = (Path(scenario.builtin_dir()) / "two-jobs.toml").read_text()
    src = re.sub(r"(?ms)^\[mltcp\].*?(?=^\[|\Z)", "", src)  # a table the file may carry: the tests set theirs
    if seed is not None:
        src = re.sub(r"(?m)^seed = \d+", f"seed = {seed}", src)
    assert not re.search(r"(?m)^\[mltcp\]", src)
    p = tmp_path / "s.toml"
    pinned = "".join(
        f"{k} = {str(v).lower() if isinstance(v, bool) else v}\n"
        for k, v in PUBLIC.items()
        if not re.search(rf"(?m)^{k}\s*=", extra)
    )
    p.write_text(src + "\n[mltcp]\n" + pinned + extra)
    return p


def test_scenario_table_sets_every_knob_and_names_bad_fields(tmp_path):
    sc = scenario.load(
        str(
            _write(
                tmp_path,
                'shape = "capped"\ncap = 2.0\nboundary = "mark"\nhistory = 5\n'
                "decrease_at_start = 0.7\ndcqcn_f_timer = true\n",
            )
        )
    )
    cc = build_cc(sc, "mltcp-reno")  # the DCQCN-only key does not apply to Reno
    assert (cc.shape, cc.cap, cc.boundary, cc.history, cc.decrease_at_start) == ("capped", 2.0, "mark", 5, 0.7)
    assert build_cc(sc, "mltcp-dcqcn").dcqcn_f_timer is True
    for bad, field in (
        ('shape = "round"', "mltcp.shape"),
        ("history = 0", "mltcp.history"),
        ("decrease_at_end = 1.5", "mltcp.decrease_at_end"),
        ('cap = "x"', "mltcp.cap"),
        ("colour = 1", "mltcp.colour"),
    ):
        with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
            scenario.load(str(_write(tmp_path, bad + "\n")))


def test_simulator_runs_the_named_configurations(tmp_path):
    """Defaults are the old hook; each knob changes the run (the compiled loop reads them)."""

    def sim(extra, seed, cc="mltcp-reno"):
        return simulate(scenario.load(str(_write(tmp_path, extra, seed))), cc)

    def run(extra, seed=8):
        r = sim(extra, seed)
        return [x.duration for x in r.records], r.drops

    r8 = sim("", 8)  # seed 8: no timer (RTO or probe), so every idle gap is a compute gap
    assert r8.timeouts == 0 and r8.probes == 0
    ref = run("")
    assert run('shape = "linear"\nboundary = "idle"\n') == ref
    for extra in ('shape = "capped"\ncap = 1.0\n', 'shape = "convex"\n'):
        assert run(extra) != ref, extra
    # with clean compute gaps the idle rule finds exactly the marked boundaries; with a hair-trigger
    # idle rule (short stalls count as boundaries) the mark boundary differs
    trigger = "idle_fraction = 0.01\nmin_idle_ms = 0.02\n"
    assert run('boundary = "mark"\n') == ref
    assert run(trigger + 'boundary = "mark"\n') == ref != run(trigger)
    # seed 2: a 200 ms wait for a timer (an RTO, or Linux's tail-loss probe, which with one packet out
    # fires at the RTO's time) stalls a flow for longer than a compute gap, so the idle rule starts a
    # new iteration inside the stalled one (bytes_ratio back to 0); marks do not
    idle, mark = sim("", 2), sim('boundary = "mark"\n', 2)
    assert max(x.comm_duration for x in idle.records) >= 0.2
    assert idle.timeouts + idle.probes >= 1 and [x.duration for x in idle.records] != [x.duration for x in mark.records]


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"slope": -1.0}, "slope must be in [0, 1000]"),
        ({"intercept": 0.0}, "intercept must be in (0, 1000]"),
        ({"min_idle": 0.0}, "min_idle must be in (0, inf]"),
        ({"history": 0}, "history must be in [1, 64]"),
        ({"decrease_at_end": 1.0}, "decrease_at_end must be in (0, 1)"),
    ],
)
def test_constructor_refuses_values_outside_the_declared_bounds(kw, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        _hook(MLTCPReno, **kw)
    _hook(MLTCPReno, **{k: (0.5 if isinstance(v, float) else 3) for k, v in kw.items()})  # in bounds: accepted


def test_restart_window_restarts_the_window_at_an_iteration_s_first_send_only():
    """restart_window (window-based variants): at TX_START after an idle gap the tracker counts as a
    boundary, cwnd = min(cwnd, restart_window) and ssthresh >= 3/4 of the old cwnd (Linux's
    restart after idle); a shorter gap, a window already that small, or the knob at 0 change nothing."""
    mss = 1448.0
    cc = _hook(MLTCPReno, restart_window=10, history=1)
    st = cc.new_state(1)
    cc.on_ack(st, np.array([100.0]), RTT, 0.0)
    cc.on_ack(st, np.array([100.0]), RTT, 0.0001)  # an iteration of 200 bytes
    cc.on_ack(st, np.array([100.0]), RTT, 0.0201)  # a 20 ms gap: the tracker's last gap; 100 of 200 bytes in
    assert st.tracker.last_gap[0] == pytest.approx(0.020)

    def restart(c, s, cwnd, ssthresh, idle):
        s.cwnd[:], s.ssthresh[:] = cwnd * mss, ssthresh * mss
        done = c.cwnd_event(s, "tx_start", 1.0, idle=idle, rto=0.2)  # idle < rto: Linux's restart does not apply
        return bool(done[0]), s.cwnd[0] / mss, s.ssthresh[0] / mss

    assert restart(cc, st, 30, 8, 0.019) == (True, 10.0, 22.5)  # 19 ms > 0.9 x 20 ms
    assert restart(cc, st, 30, 25, 0.019) == (True, 10.0, 25.0)  # ssthresh only rises
    assert restart(cc, st, 30, 8, 0.017) == (False, 30.0, 8.0)  # 17 ms < 18 ms: not a boundary
    assert restart(cc, st, 8, 4, 0.019) == (False, 8.0, 4.0)  # already below the window
    off = _hook(MLTCPReno, history=1)
    st_off = off.new_state(1)
    assert restart(off, st_off, 30, 8, 0.1) == (False, 30.0, 8.0)  # the default: off
    # explicit marks: the first send of an iteration a mark started (nothing acked in it yet)
    mk = _hook(MLTCPReno, restart_window=10, boundary="mark")
    sm = mk.new_state(1)
    mk.on_ack(sm, np.array([100.0]), RTT, 0.0)
    assert restart(mk, sm, 30, 8, 0.1) == (False, 30.0, 8.0)  # a long gap, but no mark
    mk.iteration_start(sm, np.array([True]))
    assert restart(mk, sm, 30, 8, 1e-6) == (True, 10.0, 22.5)
    with pytest.raises(TypeError, match="restart_window"):  # DCQCN has no window to restart
        _hook(MLTCPDcqcn, restart_window=10, line_rate=1.25e8)


def test_restart_window_removes_the_tail_timers_of_a_colliding_start(tmp_path):
    """two-jobs seed 7 (docs/tuning.md "Tail RTOs"): the starting job's carried-over window lands on
    the finishing job's last segment, which waits ~200 ms for a timer. Restarting the starting
    job's window keeps that tail: fewer timers, and the iterations they stretch are gone."""

    def sim(extra):  # without the window floor, which removes these timers too (next test)
        table = "scale_decrease = true\nmin_window = 0\n" + extra
        return simulate(scenario.load(str(_write(tmp_path, table, 7))), "mltcp-reno")

    plain, rs = sim(""), sim("restart_window = 10\n")
    assert plain.timeouts + plain.probes >= 2
    assert rs.timeouts + rs.probes < plain.timeouts + plain.probes
    assert max(x.duration for x in rs.records[20:]) < 0.1 < max(x.duration for x in plain.records[20:])


def test_the_window_floor_keeps_a_yielding_flow_out_of_the_timers(tmp_path):
    """The same collision with the shipped min_window (4 segments): the flow behind is not slowed
    below the window that three duplicate ACKs need, so its losses are repaired without a timer."""

    def sim(extra):
        return simulate(scenario.load(str(_write(tmp_path, "scale_decrease = true\n" + extra, 7))), "mltcp-reno")

    bare, floored = sim("min_window = 0\n"), sim("")
    assert bare.timeouts + bare.probes >= 2
    assert floored.timeouts + floored.probes < bare.timeouts + bare.probes
    assert max(x.duration for x in floored.records[20:]) < 0.1 < max(x.duration for x in bare.records[20:])
