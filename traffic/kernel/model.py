"""Integer model of the BPF programs' arithmetic (mltcp_cc.bpf.h), bit for bit.

Tests replay traced kernel steps through these functions, and compare them with the float model
in :mod:`mltcp.cc` to show both implement the same MLTCP rules.
"""

from __future__ import annotations

import math

from mltcp import defaults

SHIFT = 10
ONE = 1 << SHIFT
R_ONE = 1 << 16
U32 = 0xFFFFFFFF


def q10(x: float) -> int:
    return round(x * ONE)


def f_q10(slope_q10: int, intercept_q10: int, r_q16: int) -> int:
    """F(r) = slope * r + intercept in Q10 (mltcp_f)."""
    return intercept_q10 + ((slope_q10 * r_q16) >> 16)


def ratio_q16(done: int, learned: int) -> int:
    """bytes_ratio = min(1, done / learned) in Q16; 0 before any iteration completed."""
    if learned == 0:
        return 0
    if done >= learned:
        return R_ONE
    return (done << 16) // learned


def median(hist: tuple[int, int, int], completed: int) -> int:
    """Median of the last up-to-3 completed iterations (mean of two when there are two)."""
    if completed == 1:
        return hist[0]
    if completed == 2:
        return (hist[0] + hist[1]) // 2
    return sorted(hist)[1]


def cong_avoid_ai(cwnd: int, cnt: int, w: int, inc: int, clamp: int) -> tuple[int, int]:
    """Linux tcp_cong_avoid_ai(tp, w, inc) on (snd_cwnd, snd_cwnd_cnt): returns the new pair."""
    if cnt >= w:
        cnt = 0
        cwnd += 1
    cnt = (cnt + inc) & U32
    if cnt >= w:
        delta = cnt // w
        cnt -= delta * w
        cwnd += delta
    return min(cwnd, clamp), cnt


def reno_w(cwnd: int) -> int:
    """Divisor for MLTCP-Reno's step: cwnd segments in 1/1024 segment."""
    return cwnd << SHIFT


def cubic_w(cwnd: int, target: int) -> int:
    """Divisor for MLTCP-CUBIC's step toward ``target`` (target > cwnd)."""
    return (cwnd << SHIFT) // (target - cwnd)


def bdp_segments(best_rate_q10: int, min_rtt_us: int, mss: int) -> float:
    """mltcp_floor_bytes's path BDP in segments: best iteration rate (bytes/us, Q10) x min RTT;
    infinite while either is unknown."""
    if not best_rate_q10 or not min_rtt_us or min_rtt_us == 0xFFFFFFFF:
        return math.inf
    return ((best_rate_q10 * min_rtt_us) >> SHIFT) / mss


def grow(
    cwnd: int,
    cnt: int,
    w: int,
    acked: int,
    f: int,
    clamp: int,
    min_window: int = defaults.MIN_WINDOW,
    bdp_segs: float = math.inf,
    engaged: bool = True,
    above_bdp_q10: int = ONE,
) -> tuple[int, int]:
    """mltcp_grow: cwnd += gain * acked * 1024 / w, fraction kept in cnt (mltcp_window_gain).
    Engaged, the gain is F, counted as 1 below the floor: ``min_window`` segments, at most the
    path's BDP (:func:`bdp_segments`); disengaged (``f`` is then 1), ``above_bdp_q10`` while the
    window exceeds a known BDP."""
    if not engaged:
        f = above_bdp_q10 if cwnd > bdp_segs else ONE
    elif f < ONE and cwnd < min(min_window, bdp_segs):
        f = ONE
    return cong_avoid_ai(cwnd, cnt, w, acked * f, clamp)


def keep_q16(base_keep_q16: int, r_q16: int, scale_decrease: bool) -> int:
    """Fraction of the window kept on a decrease (Q16): removed = base * (0.8 - 0.6 r) / 0.5."""
    if not scale_decrease:
        return base_keep_q16
    scale = 104858 - ((78643 * r_q16) >> 16)
    removed = ((R_ONE - base_keep_q16) * scale) >> 16
    return 0 if removed >= R_ONE else R_ONE - removed


def ssthresh(cwnd: int, keep: int) -> int:
    return max((cwnd * keep) >> 16, 2)


RENO_KEEP_Q16 = R_ONE // 2
CUBIC_KEEP_Q16 = 45875  # 0.7


def restart(cwnd: int, ssthresh: int, restart_segs: int) -> tuple[int, int]:
    """mltcp_restart at an iteration's first send: (cwnd, ssthresh) afterwards."""
    if not restart_segs or cwnd <= restart_segs:
        return cwnd, ssthresh
    return restart_segs, max(ssthresh, cwnd * 3 // 4)


def judge(state: dict, done: int, trial: int, contended_q10: int, hold_max: int) -> None:
    """The online switch after an iteration of ``done`` bytes (mltcp_judge); ``state`` holds
    engaged, in_mode, contended, hold, last_comm_us and best_rate_q10 as the socket storage does."""
    s = state
    c = bool(s["best_rate_q10"] and s["last_comm_us"] and done) and (
        s["last_comm_us"] * s["best_rate_q10"] // done > contended_q10
    )
    s["in_mode"] += 1
    if s["engaged"]:
        s["contended"] += c
        if s["in_mode"] < trial:
            return
        if 2 * s["contended"] > s["in_mode"]:
            s["hold"], s["engaged"] = min(max(2 * s["hold"], trial), hold_max), 0
        else:
            s["hold"] = 0
        s["in_mode"] = s["contended"] = 0
    elif c and s["in_mode"] >= max(s["hold"], 1):
        s["engaged"], s["in_mode"], s["contended"] = 1, 0, 0


def close_iteration(state: dict, done: int, first_ack_ns: int, last_act_ns: int, idle_us: int = 0) -> None:
    """mltcp_boundary's bookkeeping for the switch: the iteration's busy time (first to last ACK
    less ``idle_us``, its idle gaps inside) and the best rate."""
    state["last_comm_us"] = 0
    comm_us = (last_act_ns - first_ack_ns) // 1000 if first_ack_ns and last_act_ns > first_ack_ns else 0
    comm_us = max(comm_us - idle_us, 0)
    if 0 < comm_us < U32:
        state["last_comm_us"] = comm_us
        state["best_rate_q10"] = max(state["best_rate_q10"], (done << SHIFT) // comm_us)
