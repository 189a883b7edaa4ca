"""Kernel MLTCP for real: build, register, select per socket, move data, compare the BPF program's
growth steps with the Python models, unload without a trace. Needs root, BTF, clang and bpftool;
skips with the reason otherwise."""

import dataclasses
import socket
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from mltcp.traffic.kernel import loader, maps, model
from mltcp.emulation.netns import have_mininet_prereqs, leftovers, run_prefix
from mltcp.traffic.kernel.net import KernelNet
from mltcp.traffic.kernel.transport import KernelTransport, Receiver, congestion
from _kernel_prereq import missing

pytestmark = [pytest.mark.integration, pytest.mark.root]


REASON = missing()
if REASON:
    print(f"test_kernel_cc: skipping: {REASON}")
    pytestmark.append(pytest.mark.skip(reason=REASON))

# Idle gaps between test iterations are >= 80 ms; 20 ms keeps a scheduler hiccup inside an
# iteration from being taken for a boundary.
TEST_CFG = maps.Config(min_idle=0.02)


@pytest.fixture(scope="module")
def foreign_bpf():
    """Our variants' struct_ops and map ids that other runs left held before this module loads."""
    return _bpf_ids()


@pytest.fixture(scope="module")
def loaded(foreign_bpf):
    before = list(loader.registered())
    try:
        yield loader.load(config=TEST_CFG)
    finally:
        loader.unload()
        if before:  # put back what was registered before the tests (default configuration)
            loader.load(before)


def _one_pair_dumbbell(tag: str, **kw):
    """A built one-sender 50 Mb/s KernelNet (``kw``: its other settings), removed afterwards."""
    if why := have_mininet_prereqs():
        pytest.skip(f"the kernel dumbbell is a Mininet net: {why}")
    d = KernelNet(**{"n": 1, "rate_mbit": 50, **kw}, prefix=run_prefix() + tag)
    try:
        yield d.build()
    finally:
        d.destroy()
        assert not leftovers(d.prefix)


@pytest.fixture
def dumbbell():
    yield from _one_pair_dumbbell("t", buffer_bytes=60_000)


@pytest.fixture
def long_dumbbell():
    """The dumbbell with 2 ms of round trip and a 120 kB buffer: a window of a few dozen segments."""
    yield from _one_pair_dumbbell("l", delay_us=1000, buffer_bytes=120_000)


@pytest.fixture
def traced(loaded):
    """Open maps of a variant with tracing reset; tracing and config restored afterwards."""
    opened = []

    def open_(variant):
        vm = maps.VariantMaps(variant)
        vm.reset_trace()
        opened.append(vm)
        return vm

    try:
        yield open_
    finally:
        for vm in opened:
            vm.write_config(TEST_CFG)
            vm.close()


def test_build_into_a_directory(tmp_path):
    objs = loader.build(out_dir=tmp_path)
    assert set(objs) == set(maps.VARIANTS)
    for obj in objs.values():
        data = Path(obj).read_bytes()
        assert data[:4] == b"\x7fELF" and b".struct_ops" in data
    assert (tmp_path / "vmlinux.h").stat().st_size > 1000
    assert not list(loader.source_dir().glob("*.o")), "build must not write into the source tree"


def test_registered_and_selectable(loaded):
    assert set(loaded) == set(maps.VARIANTS)
    assert set(maps.VARIANTS) <= set(loader.available())
    st = loader.status()
    for v in maps.VARIANTS:
        assert st["registered"][v]["config"]["min_idle"] == pytest.approx(0.02)
        assert st["registered"][v]["config"]["adaptive"] is True  # the shipped default: the switch on
        s = socket.socket()
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, v.encode())
            assert congestion(s) == v
        finally:
            s.close()


@pytest.mark.parametrize("variant", list(maps.VARIANTS))
def test_20mib_over_loopback_intact_and_iterations_learned(loaded, variant):
    rx = Receiver("127.0.0.1", 0, verify=True)
    tr = None
    above = {"mltcp_reno": None, "mltcp_cubic": 0.75}[variant]
    expected_above = maps.ABOVE_BDP_DEFAULT[variant] if above is None else above
    per_iter = 5 << 20
    vm = maps.VariantMaps(variant)
    try:
        # The receiver hashes what it reads (in this process, sharing the GIL with the sender),
        # so it can close its window for tens of ms: a stall with nothing in flight that the
        # kernel cannot tell from an idle gap. min_idle 150 ms with 300 ms gaps keeps such stalls
        # inside an iteration; the gaps vary by tens of ms, which idle_fraction 0.5 tolerates.
        vm.write_config(dataclasses.replace(TEST_CFG, idle_fraction=0.5, min_idle=0.15, above_bdp_gain=above))
        tr = KernelTransport("127.0.0.1", rx.port, cc=variant, verify=True)
        assert congestion(tr.sock) == variant
        for i in range(4):
            tr.send_iteration(per_iter, i)  # raises on a digest mismatch
            time.sleep(0.3)
        state = vm.socket_state(tr.sock)
    finally:
        if tr:
            tr.close()
        rx.close()
        vm.write_config(TEST_CFG)
        vm.close()
    assert rx.errors == []
    assert sum(rx.received.values()) == 20 << 20
    # The BPF tracker saw the idle gaps: 3 iterations completed (the 4th is current), each of
    # the payload plus the transport's 16-byte header.
    assert state.completed == 3
    # the socket took the config: above_bdp_gain as written, or unset, the variant's own built-in default
    assert (state.min_window, state.above_bdp_q10) == (TEST_CFG.min_window, round(1024 * expected_above))
    assert state.learned == per_iter + 16
    assert state.hist == (per_iter + 16,) * 3
    assert state.bytes_ratio == 1.0
    assert state.last_gap_ns > 0.29e9
    # The online switch's bookkeeping (mltcp.engage, on by default): each iteration's first-to-last
    # ACK time and the best rate; one flow alone over loopback is never contended, so it stays
    # engaged, one trial (4 iterations) not yet complete
    assert state.flags & maps.FLAG_ADAPTIVE and state.engaged == 1 and state.in_mode == 3 and state.hold == 0
    assert 0 < state.last_comm_us < 300_000 and state.best_rate_q10 >= ((per_iter << 10) // state.last_comm_us)


def test_explicit_mark_starts_an_iteration(loaded):
    rx = Receiver("127.0.0.1", 0)
    tr = None
    try:
        # A huge min_idle: only the explicit marks can start iterations.
        with maps.VariantMaps("mltcp_reno") as vm:
            vm.write_config(maps.Config(min_idle=100.0))
            tr = KernelTransport("127.0.0.1", rx.port, cc="mltcp_reno")
            vm.write_config(TEST_CFG)
            tr.send_iteration(300_000, 0)
            time.sleep(0.02)
            assert vm.socket_state(tr.sock).completed == 0  # idle gap alone is no boundary
            for i, n in enumerate((300_000, 600_000), start=1):
                assert maps.mark_iteration_start(tr.local_port) == len(maps.VARIANTS)
                tr.send_iteration(n, i)
                time.sleep(0.02)
            state = vm.socket_state(tr.sock)
            assert state.completed == 2 and state.learned == 300_016
            assert state.last_gap_ns == 0  # no idle boundary was taken
            assert state.bytes_ratio == 1.0  # 600 kB into an iteration of 300 kB
            gen = state.mark_gen
            vm.mark(tr.local_port)
            tr.send_iteration(1000, 3)
            state = vm.socket_state(tr.sock)
            assert state.mark_gen == gen + 1 and state.completed == 3
            assert state.learned == 300_016  # median of (300_016, 300_016, 600_016)
    finally:
        if tr:
            tr.close()
        rx.close()


def _bucketed_iterations(sends, nbytes, gap_s, after_s, d=None):
    """Three marked iterations of ``sends`` sends of ``nbytes`` each, ``gap_s`` apart, ``after_s``
    of quiet after each (a framework's collectives with compute between them), on one mltcp_reno
    connection over loopback or, with ``d``, through the dumbbell ``d``: its socket state after."""
    rx = Receiver(*(("0.0.0.0", 0, d.ns(d.receivers[0])) if d else ("127.0.0.1", 0)))
    tr = None
    try:
        with maps.VariantMaps("mltcp_reno") as vm:
            vm.write_config(maps.Config(min_idle=100.0))  # only the marks start iterations
            if d:
                tr = KernelTransport(d.ip(d.receivers[0]), rx.port, cc="mltcp_reno", ns=d.ns(d.senders[0]))
            else:
                tr = KernelTransport("127.0.0.1", rx.port, cc="mltcp_reno")
            vm.write_config(TEST_CFG)
            for i in range(3):
                maps.mark_iteration_start(tr.local_port)
                for k in range(sends):
                    if k:
                        time.sleep(gap_s)
                    tr.send_iteration(nbytes, sends * i + k)
                time.sleep(after_s)
            return vm.socket_state(tr.sock)
    finally:
        if tr:
            tr.close()
        rx.close()


def test_idle_gaps_inside_an_iteration_are_not_busy_time(loaded):
    """Marked iterations of four sends 40 ms apart: each later send starts with nothing in flight
    (TX_START), and the socket leaves the gaps out of the iteration's busy time, which the online
    switch judges contention on."""
    state = _bucketed_iterations(4, 200_000, 0.04, 0.01)
    assert state.completed == 2 and state.learned == 4 * 200_016
    # the current iteration: three gaps of >= 40 ms, less the few microseconds each send's ACK takes
    assert 110_000 < state.idle_us < 200_000
    # the last closed one spans >= 120 ms from its first to its last ACK; its busy time is the sends'
    assert 0 < state.last_comm_us < 40_000
    assert state.best_rate_q10 >= (4 * 200_016 << 10) // 40_000


def test_busy_time_through_a_shaped_link_is_the_link_rate(loaded):
    """Marked iterations of eight 500 kB sends 30 ms apart through a 200 Mb/s htb link with the
    emulation's burst: the best iteration rate on busy time is the link's (payload) rate. Over the
    first-to-last-ACK span it would be under half of it; with the gaps' sending time left out too,
    or a shaper that passes a large burst after every pause (htb's bucket), above it."""
    from mltcp.emulation.topologies import default_burst_bytes

    for d in _one_pair_dumbbell("b", rate_mbit=200, buffer_bytes=250_000, burst_bytes=default_burst_bytes(200)):
        state = _bucketed_iterations(8, 500_000, 0.03, 0.05, d)
    assert state.completed == 2 and state.learned == 8 * 500_016
    payload_rate = 200 * 1448 / 1514
    assert 0.8 * payload_rate < state.best_rate_mbit < 1.15 * payload_rate, state


def _run_traced(d, variant, traced, cfg, iterations=5, nbytes=1_500_000):
    b = d.receivers[0]
    rx = Receiver("0.0.0.0", 0, ns=d.ns(b))
    tr = None
    try:
        vm = traced(variant)
        vm.write_config(cfg)  # read by the socket when it connects
        tr = KernelTransport(d.ip(b), rx.port, cc=variant, ns=d.ns(d.senders[0]))
        vm.write_config(dataclasses.replace(cfg, trace_port=tr.local_port))
        for i in range(iterations):
            tr.send_iteration(nbytes, i)
            time.sleep(0.08)
        events = [e for e in vm.read_trace() if e.port == tr.local_port]
        assert vm.trace_count() < maps.TRACE_SLOTS, "trace ring overflowed: shorten the run"
    finally:
        if tr:
            tr.close()
        rx.close()
    return events


def _check_tracker_fields(events, cfg):
    s, i = model.q10(cfg.slope), model.q10(cfg.intercept)
    for e in events:
        assert e.r_q16 == model.ratio_q16(e.iter_acked, e.learned)
        assert e.f_q10 == model.f_q10(s, i, e.r_q16)


def test_reno_growth_matches_models(loaded, dumbbell, traced):
    """Every congestion-avoidance step of the BPF MLTCP-Reno, on a real lossy transfer, equals
    the integer model bit for bit and mltcp.cc's MLTCP-Reno for the same (cwnd, acked, r)."""
    from mltcp.cc import make_cc

    # idle_fraction 0.5: the 80 ms gaps between iterations must each count as a boundary; with 0.9 a
    # gap stretched by the scheduler raised the next threshold above the next gap (2 in ~85 runs)
    cfg = maps.Config(slope=4.0, intercept=0.25, idle_fraction=0.5, min_idle=0.02, scale_decrease=True)
    events = _run_traced(dumbbell, "mltcp_reno", traced, cfg)
    grow = [e for e in events if e.kind == maps.EV_GROW]
    cuts = [e for e in events if e.kind == maps.EV_SSTHRESH]
    assert len(grow) > 200 and cuts, "the bottleneck should force losses and congestion avoidance"
    assert len({e.completed for e in grow}) >= 3
    assert any(0 < e.r_q16 < model.R_ONE for e in grow), "no step with a partial bytes_ratio"
    _check_tracker_fields(events, cfg)

    mss = 1448
    cc = make_cc("mltcp-reno", slope=cfg.slope, intercept=cfg.intercept)
    for e in grow:
        assert e.w == model.reno_w(e.cwnd_in) and e.inc == e.acked * e.f_q10
        assert (e.cwnd_out, e.cnt_out) == model.grow(e.cwnd_in, e.cnt_in, e.w, e.acked, e.f_q10, e.clamp)
        # mltcp.cc (float, bytes) on the same inputs: the increment in segments agrees.
        st = cc.new_state(1, mss=mss, now=0.0)
        st.cwnd[:] = e.cwnd_in * mss
        st.ssthresh[:] = e.cwnd_in * mss  # in congestion avoidance
        if e.learned:
            st.tracker.bytes_per_iter[:] = e.learned
            st.tracker.bytes_cur[:] = e.iter_acked - e.acked * mss
            st.tracker.history[0, 0] = e.learned
        st.tracker.last_active[:] = 1.0
        cc.on_ack(st, np.array([e.acked * mss], float), np.array([1e-3]), 1.0)
        py_inc = (st.cwnd[0] / mss) - e.cwnd_in
        bpf_inc = e.inc / e.w
        assert bpf_inc == pytest.approx(py_inc, rel=0.01, abs=2e-4)
    for e in cuts:
        keep = model.keep_q16(model.RENO_KEEP_Q16, e.r_q16, True)
        assert e.w == keep and e.aux == model.ssthresh(e.cwnd_in, keep)


def _paced_grow_cwnds(d, traced, cfg, pace_mbit, iterations=3, nbytes=1_500_000):
    """(cwnd, F in Q10) at every congestion-avoidance step of a mltcp_reno sender paced at ``pace_mbit``."""
    b = d.receivers[0]
    rx = Receiver("0.0.0.0", 0, ns=d.ns(b))
    tr = None
    try:
        vm = traced("mltcp_reno")
        vm.write_config(cfg)
        tr = KernelTransport(d.ip(b), rx.port, cc="mltcp_reno", ns=d.ns(d.senders[0]), pacing_mbit=pace_mbit)
        vm.write_config(dataclasses.replace(cfg, trace_port=tr.local_port))
        for i in range(iterations):
            tr.send_iteration(nbytes, i)
            time.sleep(0.08)
        grow = [(e.cwnd_in, e.f_q10) for e in vm.read_trace() if e.port == tr.local_port and e.kind == maps.EV_GROW]
        # struct tcp_info: tcpi_min_rtt follows 8 u8, 24 u32, 4 u64, segs_out, segs_in, notsent_bytes
        raw = tr.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        min_rtt_us = struct.unpack_from("=I", raw, 8 + 24 * 4 + 4 * 8 + 3 * 4)[0]
    finally:
        if tr:
            tr.close()
        rx.close()
    return grow, min_rtt_us


def test_nic_cap_stops_growth_past_twice_f_times_the_paced_window(loaded, long_dumbbell, traced):
    """With nic_cap a paced sender's window grows (congestion avoidance) only below 2 F(r) x its
    pacing rate x min RTT (at least 1 x; +2), so the flow further into its iteration may hold more
    of a shared link: growth at a high F goes past what a fixed 2 x cap would ever allow. Paced at
    1.5x the bottleneck, so that the queue fills and the flow leaves slow start."""
    d = long_dumbbell
    pace = 1.5 * d.rate_mbit
    cfg = maps.Config(slope=4.0, intercept=0.25, min_idle=0.02, nic_cap=True)
    capped, min_rtt_us = _paced_grow_cwnds(d, traced, cfg, pace, iterations=4)
    assert 2000 <= min_rtt_us < 3000, f"min RTT {min_rtt_us} us on a 2 ms path"
    # the running min RTT at any step is at most 3 ms: the BDP in segments at most
    bdp_hi = pace * 1e6 / 8 * 3e-3 / 1448
    assert len(capped) > 50, f"too few congestion-avoidance steps to judge: {capped}"
    over = [(c, f) for c, f in capped if c >= max(bdp_hi, 2 * bdp_hi * f / 1024) + 2]
    assert not over, f"grew past the cap at (cwnd, F Q10) {over[:5]}"
    beyond_fixed = [(c, f) for c, f in capped if c >= 2 * bdp_hi + 2]
    assert beyond_fixed and all(f > 1024 for _, f in beyond_fixed), f"no growth past 2 BDP at F > 1: {capped}"


def test_cubic_growth_matches_model(loaded, dumbbell, traced):
    cfg = maps.Config(slope=4.0, intercept=0.25, min_idle=0.02)
    events = _run_traced(dumbbell, "mltcp_cubic", traced, cfg)
    grow = [e for e in events if e.kind == maps.EV_GROW]
    friendly = [e for e in events if e.kind == maps.EV_FRIENDLY]
    cuts = [e for e in events if e.kind == maps.EV_SSTHRESH]
    assert len(grow) + len(friendly) > 200 and cuts
    _check_tracker_fields(events, cfg)
    for e in grow:  # cwnd += F (target - cwnd) / cwnd per acked segment
        assert e.cwnd_in < e.aux <= e.cwnd_in + e.cwnd_in // 2
        assert e.w == model.cubic_w(e.cwnd_in, e.aux)
        assert (e.cwnd_out, e.cnt_out) == model.grow(e.cwnd_in, e.cnt_in, e.w, e.acked, e.f_q10, e.clamp)
    for e in friendly:  # Reno-friendly region: cwnd = W_est
        assert e.cwnd_out == min(max(e.cwnd_in, e.aux), e.clamp)
    for e in cuts:
        assert e.w == model.CUBIC_KEEP_Q16 and e.aux == model.ssthresh(e.cwnd_in, model.CUBIC_KEEP_Q16)


def _iteration_starts(events):
    """cwnd at the first ACK of each iteration after the first (in_ack_event runs before any growth)."""
    acks = [e for e in events if e.kind == maps.EV_ACK]
    return [b.cwnd_in for a, b in zip(acks, acks[1:]) if b.completed > a.completed]


@pytest.mark.parametrize("variant", list(maps.VARIANTS))
def test_restart_window_restarts_the_window_at_each_iteration_start(loaded, dumbbell, traced, variant):
    """restart_window = 8: at the first send of every iteration a larger window restarts at 8
    segments and ssthresh becomes max(ssthresh, 3/4 of the old window) (model.restart); the next
    ACK finds cwnd 8. With 0 (the default) the window is carried over the idle gap untouched."""
    restart = 8
    runs = {}
    for rw in (restart, 0):
        vm = traced(variant)
        before = vm.stats()["iteration_restarts"]
        events = _run_traced(dumbbell, variant, traced, maps.Config(min_idle=0.02, restart_window=rw))
        runs[rw] = events, vm.stats()["iteration_restarts"] - before

    events, counted = runs[restart]
    rs = [e for e in events if e.kind == maps.EV_RESTART]
    assert counted == len(rs)
    # the connection's first send (nothing acked yet, initial window 10) and >= 3 idle boundaries
    assert len({e.completed for e in rs if e.completed >= 1}) >= 3, [(e.completed, e.cwnd_in) for e in rs]
    for e in rs:
        assert e.iter_acked == 0 and e.cwnd_in > restart
        assert (e.cwnd_out, e.aux) == model.restart(e.cwnd_in, e.w, restart)
    for e in rs:  # the kernel's window at the next ACK: the restart stuck
        nxt = next(x for x in events[events.index(e) + 1 :] if x.kind == maps.EV_ACK)
        assert nxt.cwnd_in == restart
    assert set(_iteration_starts(events)) == {restart}

    events, counted = runs[0]
    assert counted == 0 and not [e for e in events if e.kind == maps.EV_RESTART]
    starts = _iteration_starts(events)
    assert len(starts) >= 3 and max(starts) > restart, starts
    print(
        f"{variant}: restarts (iteration, cwnd before -> after, ssthresh before -> after): "
        f"{[(e.completed, e.cwnd_in, e.cwnd_out, e.w, e.aux) for e in rs]}; "
        f"without restart_window, cwnd at each iteration's first ACK: {starts}"
    )


def test_failed_load_leaves_nothing(loaded, monkeypatch):
    """A load that fails after registering the first variant unregisters it again."""
    loader.unload()
    real_run = loader._run

    def failing(cmd, what):
        if "register" in cmd and "mltcp_cubic" in str(cmd[-1]):
            raise loader.KernelCCError("injected failure")
        return real_run(cmd, what)

    monkeypatch.setattr(loader, "_run", failing)
    with pytest.raises(loader.KernelCCError, match="injected"):
        loader.load(config=TEST_CFG)
    monkeypatch.undo()
    try:
        assert not set(maps.VARIANTS) & set(loader.available())
        assert loader.registered() == {}
    finally:
        loader.load(config=TEST_CFG)  # the module fixture expects them loaded


def _bpf_ids() -> tuple[set[int], set[int]]:
    """The ids of our variants' unregistered struct_ops still held, and of their maps."""
    held = {i for ids in loader.lingering().values() for i in ids}
    return held, _our_map_ids()


def _our_map_ids() -> set[int]:
    """Every map of our variants' names, not only the newest of each name (find_maps): older copies
    held elsewhere would be hidden while a newer one is loaded and show up once it is unloaded."""
    return {m["id"] for m in maps.maps_named(tuple(maps.VARIANTS[v][1] for v in maps.VARIANTS))}


def test_unload_leaves_no_trace(loaded, foreign_bpf):
    # Runs last in this module: every socket from the tests above is closed. What other runs left
    # held before this module started is not this module's trace: only ids beyond those count. (A
    # namespace default set to a restricted variant fails with EPERM and, on this kernel, keeps a
    # reference for ever: older DDP runs did that; emulation/ddp.py no longer does.)
    removed, _ = loader.unload(wait=0.0)
    assert set(removed) == set(maps.VARIANTS)
    assert not set(maps.VARIANTS) & set(loader.available())
    assert loader.registered() == {}
    deadline = time.monotonic() + 10.0
    while True:
        held, map_ids = _bpf_ids()
        new = (held - foreign_bpf[0], map_ids - foreign_bpf[1])
        if new == (set(), set()) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert new == (set(), set())
