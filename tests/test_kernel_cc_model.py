"""Pure checks of the kernel MLTCP's integer model and configuration (no root needed)."""

import dataclasses

import numpy as np
import pytest

from mltcp.traffic.kernel import model
from mltcp.traffic.kernel.maps import CFG, EV, SK, Config, SocketState


def test_cong_avoid_ai_matches_linux_rules():
    # One segment per w acked; leftover credits carried; clamp respected.
    assert model.cong_avoid_ai(10, 0, 10, 5, 1000) == (10, 5)
    assert model.cong_avoid_ai(10, 5, 10, 5, 1000) == (11, 0)
    assert model.cong_avoid_ai(10, 0, 10, 25, 1000) == (12, 5)
    # Credits accumulated at a larger w are applied gently first.
    assert model.cong_avoid_ai(10, 12, 10, 0, 1000) == (11, 0)
    assert model.cong_avoid_ai(10, 0, 10, 25, 11) == (11, 5)


@pytest.mark.parametrize("slope,intercept", [(4.0, 0.25), (2.0, 1.0), (0.0, 1.0)])
def test_f_q10_is_linear_in_r(slope, intercept):
    s, i = model.q10(slope), model.q10(intercept)
    for r in np.linspace(0, 1, 11):
        r16 = round(r * model.R_ONE)
        assert model.f_q10(s, i, r16) / model.ONE == pytest.approx(slope * r + intercept, abs=2e-3)


def test_mltcp_reno_step_is_f_times_reno():
    # Over one window of acks at fixed r, MLTCP-Reno grows F(r) segments where Reno grows one.
    for r, f in ((0.0, 0.25), (0.5, 2.25), (1.0, 4.25)):
        fq = model.f_q10(model.q10(4.0), model.q10(0.25), round(r * model.R_ONE))
        cwnd, cnt = 40, 0
        for _ in range(400):  # 10 windows of single-segment acks at the start cwnd
            cwnd, cnt = model.grow(cwnd, cnt, model.reno_w(40), 1, fq, 1 << 30)
        assert cwnd - 40 == pytest.approx(10 * f, abs=1)


def test_ratio_and_median():
    assert model.ratio_q16(500, 0) == 0
    assert model.ratio_q16(500, 1000) == model.R_ONE // 2
    assert model.ratio_q16(5000, 1000) == model.R_ONE
    assert model.median((7, 0, 0), 1) == 7
    assert model.median((10, 20, 0), 2) == 15
    assert model.median((10, 30, 20), 3) == 20


def test_scaled_decrease_matches_mltcp_cc_rule():
    # Fraction removed = base * (0.8 - 0.6 r) / 0.5 (mltcp.cc.mltcp.MLTCPHook.decrease_factor).
    for base_keep, base_removed in ((model.RENO_KEEP_Q16, 0.5), (model.CUBIC_KEEP_Q16, 0.3)):
        for r in (0.0, 0.25, 1.0):
            keep = model.keep_q16(base_keep, round(r * model.R_ONE), True) / model.R_ONE
            assert 1 - keep == pytest.approx(base_removed * (0.8 - 0.6 * r) / 0.5, abs=1e-3)
        assert model.keep_q16(base_keep, 12345, False) == base_keep
    assert model.ssthresh(3, model.RENO_KEEP_Q16) == 2
    assert model.ssthresh(100, model.RENO_KEEP_Q16) == 50


def test_socket_state_unpacks_the_storage_and_converts_the_best_rate():
    raw = SK.pack(*range(1, 10), *range(10, 32))
    st = SocketState.unpack(raw)
    assert st.hist == (4, 5, 6) and st.learned == 7 and st.best_rate_q10 == 9
    assert st.best_rate_mbit == 9 * 8 / 1024  # bytes/us in Q10 -> Mbit/s
    assert (st.above_bdp_q10, st.idle_us) == (30, 31)
    assert st.last_stretch == 21 * 9 / 1024 / 4  # last_comm_us x best rate / the last iteration's bytes
    assert dataclasses.replace(st, last_comm_us=0).last_stretch == 1.0


def test_config_pack_and_errors():
    raw = Config(
        slope=4.0, intercept=0.25, idle_fraction=0.9, min_idle=0.001, scale_decrease=True, adaptive=False
    ).pack()
    valid, slope, icpt, idle, min_idle, flags, trace, restart, trial, cont, hold_max, floor, above = CFG.unpack(raw)
    assert (valid, slope, icpt, idle, min_idle, flags, trace, restart) == (1, 4096, 256, 922, 1000, 1, 0, 0)
    assert (trial, cont, hold_max, floor, above) == (4, 1280, 32, 4, 0)  # above_bdp_gain unset: the variant's own
    assert CFG.unpack(Config(above_bdp_gain=0.5).pack())[12] == 512
    assert CFG.unpack(Config(restart_window=12).pack())[7] == 12
    switch = CFG.unpack(Config(trial=6, contended_above=1.5, hold_max=20).pack())
    assert switch[5] == 8 and switch[8:11] == (6, 1536, 20)  # the online switch on by default: its flag alone
    assert CFG.unpack(Config(adaptive=False).pack())[5] == 0
    bads = ({"trial": 0}, {"hold_max": 2.5}, {"contended_above": 1.0}, {"above_bdp_gain": 0}, {"above_bdp_gain": 1.5})
    for bad in bads:
        with pytest.raises(ValueError, match=next(iter(bad))):
            Config(**bad).pack()
    with pytest.raises(ValueError, match="idle_fraction"):
        Config(idle_fraction=0).pack()
    with pytest.raises(ValueError, match="slope"):
        Config(slope=-1).pack()
    with pytest.raises(ValueError, match="both 0"):
        Config(slope=0, intercept=0).pack()
    for bad in (-1, 2.5, True, 1_000_001):
        with pytest.raises(ValueError, match="restart_window"):
            Config(restart_window=bad).pack()


def test_restart_keeps_three_quarters_of_the_window_in_ssthresh():
    # mltcp_restart (mltcp.cc.mltcp.iteration_restart): cwnd = restart, ssthresh = max(ssthresh, 3/4 cwnd)
    assert model.restart(40, 20, 8) == (8, 30)
    assert model.restart(40, 35, 8) == (8, 35)
    assert model.restart(41, 0x7FFFFFFF, 8) == (8, 0x7FFFFFFF)
    assert model.restart(8, 4, 8) == (8, 4)  # not above the restart window: untouched
    assert model.restart(40, 20, 0) == (40, 20)  # off


def test_layout_sizes_match_the_c_structs():
    # Sizes the C header's structs have (naturally aligned; struct mltcp_sk ends in 4 bytes of padding).
    assert (CFG.size, SK.size, EV.size) == (52, 160, 80)


def test_loader_refuses_clearly(monkeypatch, tmp_path):
    from mltcp.traffic.kernel import loader

    with pytest.raises(loader.KernelCCError, match="not found on PATH"):
        loader.build(out_dir=tmp_path, clang="clang-does-not-exist")
    with pytest.raises(loader.KernelCCError, match="unknown variant"):
        loader.build(["mltcp_bbr"], out_dir=tmp_path)
    monkeypatch.setattr(loader.os, "geteuid", lambda: 1000)
    with pytest.raises(loader.KernelCCError, match="needs root"):
        loader.load()
    with pytest.raises(loader.KernelCCError, match="needs root"):
        loader.unload()
    monkeypatch.setattr(loader, "BTF_PATH", tmp_path / "no-btf")
    with pytest.raises(loader.KernelCCError, match="no BTF"):
        loader.require_btf()
    assert not list(tmp_path.glob("*.o"))


def test_the_decrease_is_scaled_by_default_for_mltcp_cubic_only_and_an_explicit_flag_wins():
    from mltcp.traffic.kernel.cli import _config

    args = (4.0, 0.25, 0.9, 1.0)
    assert _config(*args, None, False, "mltcp_cubic").scale_decrease is True
    assert _config(*args, None, False, "mltcp_reno").scale_decrease is False
    assert _config(*args, False, False, "mltcp_cubic").scale_decrease is False
    assert _config(*args, True, False, "mltcp_reno").scale_decrease is True


def test_load_wants_a_configuration_for_every_variant_before_touching_the_kernel():
    from mltcp.traffic.kernel import loader

    with pytest.raises(loader.KernelCCError, match="no configuration given for mltcp_cubic"):
        loader.load(["mltcp_reno", "mltcp_cubic"], config={"mltcp_reno": Config()})
    with pytest.raises(loader.KernelCCError, match="bad configuration"):
        loader.load(["mltcp_cubic"], config={"mltcp_cubic": Config(slope=0.0, intercept=0.0)})


def test_the_kernel_switch_takes_the_decisions_of_mltcp_engage():
    """The BPF online switch (integer, microseconds) against mltcp.engage (float seconds), on the
    same iterations: clean ones at 1 GB/s, contended ones 1.1x-3x slower, half of them with idle
    gaps inside (left out of the busy time by both), in random runs."""
    import random

    import numpy as np

    from mltcp import engage, tracker as trk

    rng = random.Random(7)
    for _ in range(20):
        a = trk.IterationTracker(1).a
        k = {"engaged": 1, "in_mode": 0, "contended": 0, "hold": 0, "last_comm_us": 0, "best_rate_q10": 0}
        for _ in range(120):
            done = rng.randrange(100_000, 2_000_000)
            slow = 1.0 if rng.random() < 0.4 else rng.uniform(1.1, 3.0)
            comm_us = max(1, round(done / 1000 * slow))  # 1000 bytes per microsecond, or slower
            idle_us = rng.choice([0, rng.randrange(1, 50_000)])  # gaps inside with nothing in flight
            span_ns = (comm_us + idle_us) * 1000
            model.close_iteration(k, done, 1_000_000, 1_000_000 + span_ns, idle_us)
            model.judge(k, done, 4, model.q10(1.25), 32)
            a[0, trk.BYTES_CUR], a[0, trk.FIRST_ACK], a[0, trk.LAST_ACTIVE] = done, 1.0, 1.0 + span_ns * 1e-9
            a[0, trk.IDLE_IN] = idle_us * 1e-6
            trk.close(a, 0)
            assert engage.engaged(a, 0, 4, 1.25, 32) == bool(k["engaged"])
            assert (a[0, trk.HOLD], a[0, trk.IN_MODE]) == (k["hold"], k["in_mode"])
        assert np.isfinite(a[0, trk.BEST_RATE])


def test_a_scenarios_mltcp_table_becomes_the_kernel_config_or_is_refused_by_key():
    from mltcp.traffic.kernel.maps import config_from_hook

    assert config_from_hook({}) == Config()  # silent: the shipped default
    cfg = config_from_hook({"slope": 4.0, "min_idle": 0.002, "min_window": 6.0, "above_bdp_gain": 0.5})
    assert (cfg.slope, cfg.min_idle, cfg.min_window, cfg.above_bdp_gain) == (4.0, 0.002, 6, 0.5)
    assert cfg.intercept == Config().intercept
    with pytest.raises(ValueError, match="do not model exponent, shape"):
        config_from_hook({"shape": "convex", "exponent": 1.5, "slope": 2.0})
    with pytest.raises(ValueError, match="min_window must be a whole number"):
        config_from_hook({"min_window": 4.5})
