/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MLTCP hook shared by mltcp_reno.bpf.c and mltcp_cubic.bpf.c.
 *
 * A variant defines MLTCP_PREFIX (a short token such as mreno_) before including this file, so
 * that its maps get distinct kernel names (<= 15 characters) that user space can find.
 *
 * What lives here:
 *   - the per-socket iteration tracker (socket storage): bytes acked in the current training
 *     iteration (from tp->bytes_acked), the learned bytes per iteration (median of the last up to
 *     3 completed iterations), the last activity time and the last idle ("compute") gap;
 *   - iteration boundaries: CA_EVENT_TX_START after an idle gap longer than
 *     max(min_idle, idle_fraction * last gap) (or than min_idle once twice the learned bytes
 *     per iteration are acked), or a new generation number written by user space
 *     into the mark map under the socket's local port;
 *   - F(r) = slope * r + intercept in fixed point (r in Q16, F in Q10);
 *   - optionally (restart_segs), a window restart at each iteration's first send;
 *   - an optional trace ring of cong_avoid inputs/outputs for one local port (tests compare it
 *     with the Python model).
 *
 * Fixed point: MLTCP_ONE = 1024 (Q10) for slope, intercept, idle_fraction and F;
 * r is Q16 with 65536 = 1.0.
 */
#ifndef MLTCP_CC_BPF_H
#define MLTCP_CC_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#ifndef MLTCP_PREFIX
#error "define MLTCP_PREFIX (e.g. mreno_) before including mltcp_cc.bpf.h"
#endif
#define MLTCP_CAT_(a, b) a##b
#define MLTCP_CAT(a, b) MLTCP_CAT_(a, b)
#define MLTCP_MAP(x) MLTCP_CAT(MLTCP_PREFIX, x)

#define MLTCP_SHIFT 10
#define MLTCP_ONE (1U << MLTCP_SHIFT)        /* 1.0 in Q10 */
#define MLTCP_R_ONE (1U << 16)               /* 1.0 in Q16 */

/*
 * Defaults used when user space has written no configuration (Q10 / microseconds): the shipped
 * default of mltcp/defaults.py (a test holds them equal): F = 1.78 r + 0.11, the online switch on.
 */
#define MLTCP_DEF_SLOPE 1823U                /* 1.78 (round(1.78 * 1024)) */
#define MLTCP_DEF_INTERCEPT 113U             /* 0.11 */
#define MLTCP_DEF_FLAGS MLTCP_FLAG_ADAPTIVE
#define MLTCP_DEF_IDLE_FRAC 922U             /* 0.9 (round(0.9 * 1024)) */
#define MLTCP_DEF_MIN_IDLE_US 1000U          /* 1 ms, as mltcp.tracker */
#define MLTCP_DEF_TRIAL 4U                   /* the online switch's settings (mltcp.cc.mltcp.OnlineSwitch) */
#define MLTCP_DEF_CONTENDED_Q10 1280U        /* 1.25 */
#define MLTCP_DEF_HOLD_MAX 32U
#define MLTCP_DEF_MIN_WINDOW 4U              /* segments: below this window F never slows the increase */
#ifndef MLTCP_DEF_ABOVE_BDP_Q10             /* a variant's .bpf.c may set its base's own */
#define MLTCP_DEF_ABOVE_BDP_Q10 1024U        /* disengaged, growth above the path BDP x this: 1.0 = off */
#endif

#define MLTCP_FLAG_SCALE_DECREASE 1U
#define MLTCP_FLAG_TRACE_ALL 2U          /* global cfg only: trace every socket */
#define MLTCP_FLAG_NIC_CAP 4U            /* no growth past 2 x the window the pacing rate fills at min RTT */
#define MLTCP_FLAG_ADAPTIVE 8U           /* the online switch (mltcp/engage.py): F only while it interleaves */
#define MLTCP_TRACE_SLOTS 65536
#define MLTCP_EV_GROW 1      /* tcp_cong_avoid_ai(tp, w, inc) step */
#define MLTCP_EV_FRIENDLY 2  /* CUBIC Reno-friendly region: cwnd set to W_est (aux = W_est) */
#define MLTCP_EV_SSTHRESH 3  /* decrease: w = fraction kept (Q16), aux = new ssthresh */
#define MLTCP_EV_STATE 4     /* set_state: w = ssthresh, aux = new icsk_ca_state */
#define MLTCP_EV_REPAIR 5    /* mltcp_guard: w = bad ssthresh, inc = our last ssthresh(), aux = new */
#define MLTCP_EV_ACK 6       /* in_ack_event: w = ssthresh, inc = prior_cwnd, aux = ca_state | flags << 8 */
#define MLTCP_EV_RESTART 7   /* mltcp_restart: w = old ssthresh, aux = new ssthresh, cwnd_out = restart_segs */

/* Layouts below are mirrored in traffic/kernel/maps.py (struct formats): keep them in step. */
struct mltcp_cfg {
	__u32 valid;          /* 1 when written by user space */
	__u32 slope_q10;
	__u32 intercept_q10;
	__u32 idle_frac_q10;
	__u32 min_idle_us;
	__u32 flags;          /* MLTCP_FLAG_* */
	__u32 trace_port;     /* local port whose growth steps are traced, 0 = none (read live) */
	__u32 restart_segs;   /* cwnd at an iteration's first send is at most this, 0 = off */
	__u32 trial;          /* adaptive: judge every this many engaged iterations */
	__u32 contended_q10;  /* adaptive: contended = comm time > this x bytes at the best rate */
	__u32 hold_max;       /* adaptive: longest wait (iterations) before engaging again */
	__u32 min_window;     /* segments: below this window (or the path BDP if less) F never slows the increase, 0 = off */
	__u32 above_bdp_q10;  /* disengaged, a window above the path BDP grows x this (1..1024; 0 = the default) */
};

struct mltcp_sk {
	__u64 iter_start_acked;  /* tp->bytes_acked when the current iteration started */
	__u64 last_act_ns;       /* last ACK (or connection start) */
	__u64 last_gap_ns;       /* idle gap of the previous boundary ("last compute gap") */
	__u64 hist[3];           /* bytes of the last completed iterations, newest first */
	__u64 learned;           /* median of hist (0 until one iteration completed) */
	__u64 first_ack_ns;      /* the current iteration's first ACK (0: none yet) */
	__u64 best_rate_q10;     /* best delivery rate of a completed iteration, bytes/us in Q10 */
	__u32 completed;         /* iterations completed on this socket */
	__u32 mark_gen;          /* last generation seen in the mark map */
	__u32 r_q16;             /* current bytes_ratio */
	__u32 slope_q10;
	__u32 intercept_q10;
	__u32 idle_frac_q10;
	__u32 min_idle_us;
	__u32 flags;
	__u32 port;              /* local port (host order) */
	__u32 last_ssthresh;     /* what our ssthresh() last returned (for mltcp_guard) */
	__u32 restart_segs;
	__u32 last_comm_us;      /* the last completed iteration's busy time: first to last ACK less idle_us */
	__u32 engaged;           /* the online switch: 1 = F acts, 0 = the base algorithm */
	__u32 in_mode;           /* iterations since the switch last changed (or last judged a trial) */
	__u32 contended;         /* contended iterations in the current trial */
	__u32 hold;              /* disengaged: iterations to wait before engaging again */
	__u32 trial;
	__u32 contended_q10;
	__u32 hold_max;
	__u32 min_window;
	__u32 above_bdp_q10;
	__u32 idle_us;           /* the current iteration's idle gaps (TX_START after its first ACK) */
};

struct mltcp_trace_ev {
	__u64 iter_acked;   /* bytes acked in the current iteration */
	__u64 learned;
	__u32 port;
	__u32 kind;         /* MLTCP_EV_* */
	__u32 cwnd_in;
	__u32 cnt_in;
	__u32 acked;        /* segments entering congestion avoidance (after slow start) */
	__u32 w;            /* divisor handed to tcp_cong_avoid_ai */
	__u32 inc;          /* increment handed to tcp_cong_avoid_ai (acked * F) */
	__u32 clamp;
	__u32 r_q16;
	__u32 f_q10;
	__u32 cwnd_out;
	__u32 cnt_out;
	__u32 completed;
	__u32 aux;          /* variant-specific (CUBIC: target window) */
	__u64 ts_ns;        /* bpf_ktime_get_ns() */
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mltcp_sk);
} MLTCP_MAP(state) SEC(".maps");

/* Global configuration: entry 0. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mltcp_cfg);
} MLTCP_MAP(cfg) SEC(".maps");

/* Per-job configuration keyed by local port; overrides the global entry. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct mltcp_cfg);
} MLTCP_MAP(pcfg) SEC(".maps");

/* "An iteration starts now": user space bumps the generation under the local port. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} MLTCP_MAP(mark) SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MLTCP_TRACE_SLOTS);
	__type(key, __u32);
	__type(value, struct mltcp_trace_ev);
} MLTCP_MAP(trace) SEC(".maps");

/* Entry 0: number of trace events written so far (slot = count % MLTCP_TRACE_SLOTS). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} MLTCP_MAP(tcount) SEC(".maps");

/* Counters: MLTCP_STAT_* (read by `mltcp kernel status`). */
#define MLTCP_STAT_SSTHRESH_REPAIRS 0
#define MLTCP_STAT_REPAIRS_NOT_OURS 1   /* repaired value differs from what ssthresh() returned */
#define MLTCP_STAT_CWND_REPAIRS 2       /* cwnd blown up by a corrupt ssthresh, cut back */
#define MLTCP_STAT_SSTHRESH_CALLS 3     /* our ssthresh() ran */
#define MLTCP_STAT_STATE_CALLS 4        /* our set_state() ran */
#define MLTCP_STAT_RESTARTS 5           /* windows restarted at an iteration's first send (mltcp_restart) */
#define MLTCP_STATS 8
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MLTCP_STATS);
	__type(key, __u32);
	__type(value, __u64);
} MLTCP_MAP(stats) SEC(".maps");

static __always_inline void mltcp_stat(__u32 i)
{
	__u64 *n = bpf_map_lookup_elem(&MLTCP_MAP(stats), &i);

	if (n)
		__sync_fetch_and_add(n, 1);
}

/* kfuncs exported to BPF congestion control by the kernel (net/ipv4/tcp_cong.c). */
extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline int tcp_in_slow_start(const struct tcp_sock *tp)
{
	return tp->snd_cwnd < tp->snd_ssthresh;
}

static __always_inline int tcp_is_cwnd_limited(const struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	if (tcp_in_slow_start(tp))
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return !!BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited);
}

static __always_inline struct mltcp_sk *mltcp_get(struct sock *sk)
{
	return bpf_sk_storage_get(&MLTCP_MAP(state), sk, 0, 0);
}

/* Whether the hook acts: always, or with MLTCP_FLAG_ADAPTIVE while the online switch is engaged. */
static __always_inline int mltcp_engaged(const struct mltcp_sk *m)
{
	return !(m->flags & MLTCP_FLAG_ADAPTIVE) || m->engaged;
}

/* F(r) in Q10; 1.0 (the base's own step) while the online switch has the hook off. */
static __always_inline __u32 mltcp_f(const struct mltcp_sk *m)
{
	if (!mltcp_engaged(m))
		return MLTCP_ONE;
	return m->intercept_q10 + (__u32)(((__u64)m->slope_q10 * m->r_q16) >> 16);
}

/*
 * Fraction of cwnd kept on a decrease (Q16). With scaling on, the fraction removed is the base
 * one times (0.8 - 0.6 r) / 0.5 = 1.6 - 1.2 r: Reno (base 0.5) removes 0.8 - 0.6 r of the window.
 */
static __always_inline __u32 mltcp_keep_q16(const struct mltcp_sk *m, __u32 base_keep_q16)
{
	__u64 scale_q16 = 104858ULL - ((78643ULL * m->r_q16) >> 16);   /* 1.6 - 1.2 r */
	__u64 removed = ((__u64)(MLTCP_R_ONE - base_keep_q16) * scale_q16) >> 16;

	return removed >= MLTCP_R_ONE ? 0 : MLTCP_R_ONE - (__u32)removed;
}

static __always_inline void mltcp_update_ratio(const struct tcp_sock *tp, struct mltcp_sk *m)
{
	__u64 done = tp->bytes_acked - m->iter_start_acked;

	if (!m->learned)
		m->r_q16 = 0;
	else if (done >= m->learned)
		m->r_q16 = MLTCP_R_ONE;
	else
		m->r_q16 = (__u32)((done << 16) / m->learned);
}

static __always_inline __u64 mltcp_median(const struct mltcp_sk *m)
{
	__u64 a = m->hist[0], b = m->hist[1], c = m->hist[2], t;

	if (m->completed == 1)
		return a;
	if (m->completed == 2)
		return (a + b) / 2;
	if (a > b) { t = a; a = b; b = t; }
	if (b > c) { t = b; b = c; c = t; }
	if (a > b) { t = a; a = b; b = t; }
	return b;
}

/*
 * The online switch after one more completed iteration of `done` bytes (mltcp.engage.judge): the
 * iteration is contended when its busy time (first to last ACK, less the idle gaps inside) exceeds
 * contended_q10 x its bytes at the best rate seen. Engaged, every `trial` iterations: mostly
 * contended -> disengage for `hold` iterations (trial, doubled after each failed engagement, at
 * most hold_max), else hold = 0.
 * Disengaged: engage again at the first contended iteration once the hold is over.
 */
static __always_inline void mltcp_judge(struct mltcp_sk *m, __u64 done)
{
	__u32 contended = 0, hold;

	if (m->best_rate_q10 && m->last_comm_us && done)
		contended = (__u64)m->last_comm_us * m->best_rate_q10 / done > m->contended_q10;
	m->in_mode++;
	if (m->engaged) {
		m->contended += contended;
		if (m->in_mode < m->trial)
			return;
		if (2 * m->contended > m->in_mode) {
			hold = 2 * m->hold;
			if (hold < m->trial)
				hold = m->trial;
			m->hold = hold < m->hold_max ? hold : m->hold_max;
			m->engaged = 0;
		} else {
			m->hold = 0;
		}
		m->in_mode = m->contended = 0;
	} else if (contended && m->in_mode >= (m->hold > 1 ? m->hold : 1)) {
		m->engaged = 1;
		m->in_mode = m->contended = 0;
	}
}

/*
 * Close the current iteration and start a new one, if it carried bytes (as the Python tracker,
 * an idle period before any data is no boundary). An idle boundary records its gap as the
 * "last compute gap"; an explicit one (set_gap = 0) leaves it.
 */
static __always_inline void mltcp_boundary(const struct tcp_sock *tp, struct mltcp_sk *m, __u64 gap_ns,
					   int set_gap)
{
	__u64 done = tp->bytes_acked - m->iter_start_acked;

	if (!done)
		return;
	m->last_comm_us = 0;
	if (m->first_ack_ns && m->last_act_ns > m->first_ack_ns) {
		__u64 comm_us = (m->last_act_ns - m->first_ack_ns) / 1000, rate;

		comm_us = comm_us > m->idle_us ? comm_us - m->idle_us : 0;
		if (comm_us && comm_us < 0xffffffffULL) {
			m->last_comm_us = (__u32)comm_us;
			rate = (done << MLTCP_SHIFT) / comm_us;
			if (rate > m->best_rate_q10)
				m->best_rate_q10 = rate;
		}
	}
	m->first_ack_ns = 0;
	m->idle_us = 0;
	m->hist[2] = m->hist[1];
	m->hist[1] = m->hist[0];
	m->hist[0] = done;
	m->completed++;
	m->learned = mltcp_median(m);
	m->iter_start_acked = tp->bytes_acked;
	if (set_gap)
		m->last_gap_ns = gap_ns;
	m->r_q16 = 0;
	if (m->flags & MLTCP_FLAG_ADAPTIVE)
		mltcp_judge(m, done);
}

/* An explicit start from user space: returns 1 if a new generation was found. */
static __always_inline int mltcp_check_mark(const struct tcp_sock *tp, struct mltcp_sk *m, __u64 now)
{
	__u32 port = m->port;
	__u32 *gen = bpf_map_lookup_elem(&MLTCP_MAP(mark), &port);

	if (!gen || *gen == m->mark_gen)
		return 0;
	m->mark_gen = *gen;
	mltcp_boundary(tp, m, 0, 0);
	return 1;
}

static __always_inline void mltcp_init(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp_cfg *cfg;
	struct mltcp_sk *m;
	__u32 port, zero = 0, *gen;

	m = bpf_sk_storage_get(&MLTCP_MAP(state), sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!m)
		return;
	port = sk->__sk_common.skc_num;
	cfg = bpf_map_lookup_elem(&MLTCP_MAP(pcfg), &port);
	if (!cfg || !cfg->valid)
		cfg = bpf_map_lookup_elem(&MLTCP_MAP(cfg), &zero);
	if (cfg && cfg->valid) {
		m->slope_q10 = cfg->slope_q10;
		m->intercept_q10 = cfg->intercept_q10;
		m->idle_frac_q10 = cfg->idle_frac_q10;
		m->min_idle_us = cfg->min_idle_us;
		m->flags = cfg->flags;
		m->restart_segs = cfg->restart_segs;
		m->trial = cfg->trial ? cfg->trial : MLTCP_DEF_TRIAL;
		m->contended_q10 = cfg->contended_q10 ? cfg->contended_q10 : MLTCP_DEF_CONTENDED_Q10;
		m->hold_max = cfg->hold_max ? cfg->hold_max : MLTCP_DEF_HOLD_MAX;
		m->min_window = cfg->min_window;
		m->above_bdp_q10 = cfg->above_bdp_q10 ? cfg->above_bdp_q10 : MLTCP_DEF_ABOVE_BDP_Q10;
	} else {
		m->slope_q10 = MLTCP_DEF_SLOPE;
		m->intercept_q10 = MLTCP_DEF_INTERCEPT;
		m->idle_frac_q10 = MLTCP_DEF_IDLE_FRAC;
		m->min_idle_us = MLTCP_DEF_MIN_IDLE_US;
		m->flags = MLTCP_DEF_FLAGS;
		m->restart_segs = 0;
		m->trial = MLTCP_DEF_TRIAL;
		m->contended_q10 = MLTCP_DEF_CONTENDED_Q10;
		m->hold_max = MLTCP_DEF_HOLD_MAX;
		m->min_window = MLTCP_DEF_MIN_WINDOW;
		m->above_bdp_q10 = MLTCP_DEF_ABOVE_BDP_Q10;
	}
	m->port = port;
	m->iter_start_acked = tp->bytes_acked;
	m->last_act_ns = bpf_ktime_get_ns();
	m->last_gap_ns = 0;
	m->hist[0] = m->hist[1] = m->hist[2] = 0;
	m->learned = 0;
	m->completed = 0;
	m->r_q16 = 0;
	m->first_ack_ns = m->best_rate_q10 = 0;
	m->last_comm_us = m->in_mode = m->contended = m->hold = m->idle_us = 0;
	m->engaged = 1;
	gen = bpf_map_lookup_elem(&MLTCP_MAP(mark), &port);
	m->mark_gen = gen ? *gen : 0;
}

/* pkts_acked: count the iteration's progress and note the activity. */
static __always_inline void mltcp_on_acked(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp_sk *m = mltcp_get(sk);
	__u64 now = bpf_ktime_get_ns();

	if (!m)
		return;
	mltcp_check_mark(tp, m, now);
	if (!m->first_ack_ns)
		m->first_ack_ns = now;
	m->last_act_ns = now;
	mltcp_update_ratio(tp, m);
}

/* Trace one growth step of a traced socket: returns the slot to fill, or 0. */
static __always_inline struct mltcp_trace_ev *mltcp_trace_open(const struct tcp_sock *tp,
								const struct mltcp_sk *m, __u32 kind,
								__u32 w, __u32 acked, __u32 inc,
								__u32 aux)
{
	struct mltcp_trace_ev *ev;
	struct mltcp_cfg *cfg;
	__u32 zero = 0, slot;
	__u64 *cnt;

	if (!m)
		return 0;
	cfg = bpf_map_lookup_elem(&MLTCP_MAP(cfg), &zero);
	if (!cfg || !((cfg->flags & MLTCP_FLAG_TRACE_ALL) || (cfg->trace_port && cfg->trace_port == m->port)))
		return 0;
	cnt = bpf_map_lookup_elem(&MLTCP_MAP(tcount), &zero);
	if (!cnt)
		return 0;
	slot = (__u32)(__sync_fetch_and_add(cnt, 1) % MLTCP_TRACE_SLOTS);
	ev = bpf_map_lookup_elem(&MLTCP_MAP(trace), &slot);
	if (!ev)
		return 0;
	ev->iter_acked = tp->bytes_acked - m->iter_start_acked;
	ev->learned = m->learned;
	ev->port = m->port;
	ev->kind = kind;
	ev->cwnd_in = tp->snd_cwnd;
	ev->cnt_in = tp->snd_cwnd_cnt;
	ev->acked = acked;
	ev->w = w;
	ev->inc = inc;
	ev->clamp = tp->snd_cwnd_clamp;
	ev->r_q16 = m->r_q16;
	ev->f_q10 = mltcp_f(m);
	ev->completed = m->completed;
	ev->aux = aux;
	ev->ts_ns = bpf_ktime_get_ns();
	return ev;
}

static __always_inline void mltcp_trace_close(const struct tcp_sock *tp, struct mltcp_trace_ev *ev)
{
	if (ev) {
		ev->cwnd_out = tp->snd_cwnd;
		ev->cnt_out = tp->snd_cwnd_cnt;
	}
}

/*
 * restart_window (mltcp.cc.mltcp.iteration_restart): the first send of an iteration (nothing acked
 * in it yet) restarts a window above restart_segs as Linux's tcp_cwnd_restart does after an idle
 * RTO, but at every iteration boundary: ssthresh = max(ssthresh, 3/4 cwnd), cwnd = restart_segs.
 */
static __always_inline void mltcp_restart(struct tcp_sock *tp, struct mltcp_sk *m)
{
	__u32 cwnd = tp->snd_cwnd, ssthresh = tp->snd_ssthresh, w = (__u32)(((__u64)cwnd * 3) / 4);
	struct mltcp_trace_ev *ev;

	if (!m->restart_segs || !mltcp_engaged(m) || cwnd <= m->restart_segs || tp->bytes_acked != m->iter_start_acked)
		return;
	if (w < ssthresh)
		w = ssthresh;
	ev = mltcp_trace_open(tp, m, MLTCP_EV_RESTART, ssthresh, 0, 0, w);
	tp->snd_ssthresh = w;
	tp->snd_cwnd = m->restart_segs;
	mltcp_trace_close(tp, ev);
	mltcp_stat(MLTCP_STAT_RESTARTS);
}

/*
 * CA_EVENT_TX_START: data is sent with nothing in flight, i.e. after an idle period. A new mark
 * or a long enough gap closes the iteration; then the restart, if this send starts one. The kernel
 * also raises it for a retransmission when every segment out is marked lost or SACKed (after a
 * retransmission timeout): packets_out is not 0 then, and the gap was a stall with data out, so it
 * is neither a boundary nor idle time.
 */
static __always_inline void mltcp_on_tx_start(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp_sk *m = mltcp_get(sk);
	__u64 now = bpf_ktime_get_ns(), gap, thr, min_idle;

	if (!m)
		return;
	if (!mltcp_check_mark(tp, m, now) && !tp->packets_out) {
		gap = now - m->last_act_ns;
		min_idle = (__u64)m->min_idle_us * 1000;
		thr = (m->last_gap_ns * m->idle_frac_q10) >> MLTCP_SHIFT;
		if (thr < min_idle)
			thr = min_idle;
		/* twice the learned bytes are in, so a boundary was missed: any gap > min_idle ends
		 * the iteration (the threshold of an earlier long stall must not hide every boundary
		 * after it) */
		if (gap > thr || (gap > min_idle && m->learned &&
				  tp->bytes_acked - m->iter_start_acked >= 2 * m->learned))
			mltcp_boundary(tp, m, gap, 1);
		else if (m->first_ack_ns)  /* idle inside the iteration: not busy time */
			m->idle_us += (__u32)(gap / 1000);
	}
	mltcp_restart(tp, m);
}

/*
 * The MLTCP growth step: cwnd grows by F(r) * acked * 1024 / w segments, the fraction kept in
 * tp->snd_cwnd_cnt in units of 1/1024 segment. It is the kernel's own tcp_cong_avoid_ai with the
 * divisor w given in 1/1024 segment (Reno: w = cwnd << 10) and the increment acked * F (Q10).
 */
/*
 * MLTCP_FLAG_NIC_CAP: a sender paced at its NIC's rate (SO_MAX_PACING_RATE) fills the path with
 * rate x min RTT (one BDP); a window far beyond that only queues at the bottleneck. Such growth
 * happens in the kernel when scheduling jitter lets the pacer catch up in bursts (a standing queue
 * makes the flow cwnd-limited), and at F up to 4.25 it overruns a shallow buffer with no
 * competitor. The cap is 2 x F(r) BDPs, at least one: with a fixed cap every flow sharing a link
 * sits at it and they share equally, so the flow ahead in its iteration could not take the link.
 */
static __always_inline int mltcp_nic_capped(const struct tcp_sock *tp, const struct mltcp_sk *m)
{
	__u64 rate = ((const struct sock *)tp)->sk_max_pacing_rate;     /* bytes/s; ~0: not paced */
	__u64 min_rtt_us = tp->rtt_min.s[0].v, mss = tp->mss_cache, bdp, cap;

	if (!m || !(m->flags & MLTCP_FLAG_NIC_CAP) || rate >= 0xffffffffULL || !min_rtt_us || !mss ||
	    min_rtt_us == ~0U)
		return 0;
	bdp = rate * min_rtt_us / 1000000 / mss;
	cap = (2 * bdp * mltcp_f(m)) >> MLTCP_SHIFT;    /* 2 x F(r) BDPs: the flow ahead may take more */
	if (cap < bdp)
		cap = bdp;                               /* never below what fills the path alone */
	return tp->snd_cwnd >= cap + 2;
}

/* The path's BDP in bytes (mltcp.tracker.path_bdp): the best delivery rate of a completed iteration
 * x the min RTT; 0 until both are known. */
static __always_inline __u64 mltcp_bdp_bytes(const struct tcp_sock *tp, const struct mltcp_sk *m)
{
	__u64 min_rtt_us = tp->rtt_min.s[0].v;

	if (!m->best_rate_q10 || !min_rtt_us || min_rtt_us == ~0U)
		return 0;
	return (m->best_rate_q10 * min_rtt_us) >> MLTCP_SHIFT;
}

/*
 * The window floor in bytes (mltcp.cc.mltcp.floor_bytes): min_window segments, but never more than
 * the path's BDP once it is known: a flow at one BDP fills the link alone, so a higher floor would
 * keep the flow behind from yielding.
 */
static __always_inline __u64 mltcp_floor_bytes(const struct tcp_sock *tp, const struct mltcp_sk *m)
{
	__u64 floor = (__u64)m->min_window * tp->mss_cache, bdp = mltcp_bdp_bytes(tp, m);

	return bdp && bdp < floor ? bdp : floor;
}

/*
 * The increase gain (mltcp.cc.mltcp.window_gain): F, at least 1 below the floor while the hook
 * acts; once the online switch has made the flow its base, above_bdp while the window exceeds
 * the path's BDP (beyond it a larger window only queues), else 1.
 */
static __always_inline __u32 mltcp_window_gain(const struct tcp_sock *tp, const struct mltcp_sk *m)
{
	__u64 cwnd_bytes = (__u64)tp->snd_cwnd * tp->mss_cache, bdp;
	__u32 f = mltcp_f(m);

	if (!mltcp_engaged(m)) {
		bdp = mltcp_bdp_bytes(tp, m);
		return bdp && cwnd_bytes > bdp ? m->above_bdp_q10 : MLTCP_ONE;
	}
	return f < MLTCP_ONE && cwnd_bytes < mltcp_floor_bytes(tp, m) ? MLTCP_ONE : f;
}

static __always_inline void mltcp_grow(struct tcp_sock *tp, const struct mltcp_sk *m, __u32 w,
				       __u32 acked, __u32 aux)
{
	__u32 f = m ? mltcp_window_gain(tp, m) : MLTCP_ONE, inc;
	struct mltcp_trace_ev *ev;

	inc = acked * f;

	if (mltcp_nic_capped(tp, m))
		return;
	ev = mltcp_trace_open(tp, m, MLTCP_EV_GROW, w, acked, inc, aux);

	tcp_cong_avoid_ai(tp, w, inc);
	mltcp_trace_close(tp, ev);
}

/* ssthresh on a loss: max(cwnd * keep, 2); keep = the base algorithm's unless scaling is on. */
static __always_inline __u32 mltcp_ssthresh(struct sock *sk, __u32 keep_q16)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp_sk *m = mltcp_get(sk);
	struct mltcp_trace_ev *ev;
	__u32 w;

	mltcp_stat(MLTCP_STAT_SSTHRESH_CALLS);
	if (m && (m->flags & MLTCP_FLAG_SCALE_DECREASE) && mltcp_engaged(m))
		keep_q16 = mltcp_keep_q16(m, keep_q16);
	w = (__u32)(((__u64)tp->snd_cwnd * keep_q16) >> 16);
	if (w < 2)
		w = 2;
	if (m)
		m->last_ssthresh = w;
	ev = mltcp_trace_open(tp, m, MLTCP_EV_SSTHRESH, keep_q16, 0, 0, w);
	mltcp_trace_close(tp, ev);
	return w;
}

/* set_state: traced (w = ssthresh, aux = new state) for diagnosing recovery paths. */
static __always_inline void mltcp_on_state(struct sock *sk, __u8 new_state)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp_trace_ev *ev = mltcp_trace_open(tp, mltcp_get(sk), MLTCP_EV_STATE, tp->snd_ssthresh,
						     0, 0, new_state);

	mltcp_trace_close(tp, ev);
	mltcp_stat(MLTCP_STAT_STATE_CALLS);
}

/* in_ack_event: one trace event per ACK of a traced socket (ssthresh, prior_cwnd, state, flags). */
static __always_inline void mltcp_trace_ack(struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	__u32 state = BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
	struct mltcp_trace_ev *ev = mltcp_trace_open(tp, mltcp_get(sk), MLTCP_EV_ACK, tp->snd_ssthresh,
						     0, tp->prior_cwnd, state | (flags << 8));

	mltcp_trace_close(tp, ev);
}

/*
 * Guard against a corrupt ssthresh (measured on this project's kernel, 6.18, x86-64 with the SRSO
 * return thunk; see docs/kernel.md). Now and then a window reduction (entry into Recovery or
 * Loss, tcp_init_cwnd_reduction/tcp_enter_loss) stores into snd_ssthresh a value our ssthresh()
 * never returned: 0x822704e5 in every traced case, the low half of srso_return_thunk+5, i.e. a
 * stale stack word that the struct_ops call handed back without our program running (neither our
 * ssthresh() nor our set_state() left its trace event or counter for that reduction, while
 * prior_cwnd shows the kernel did start it). Being above TCP_INFINITE_SSTHRESH it makes the PRR
 * arithmetic of tcp_cwnd_reduction() (int delta = ssthresh - in_flight < 0) set cwnd to
 * ssthresh * delivered / prior_cwnd: hundreds of millions of segments, and at the end of recovery
 * cwnd = ssthresh keeps it there: every later iteration leaves as one burst of the whole socket
 * buffer into the bottleneck (the retransmission storm).
 *
 * During a reduction (CWR, Recovery, Loss) ssthresh can never legitimately exceed the window the
 * reduction started from (prior_cwnd), except TCP_INFINITE_SSTHRESH itself, which an undo
 * restores; anything else is recomputed from prior_cwnd on the next ACK, and a cwnd the corrupt
 * value blew up is cut back to what PRR would allow (at most the larger of the repaired ssthresh
 * and the packets in flight).
 */
static __always_inline void mltcp_guard(struct sock *sk, __u32 base_keep_q16)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	__u32 state = BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state), keep = base_keep_q16, w, cap, in_flight;
	struct mltcp_trace_ev *ev;
	struct mltcp_sk *m;

	if (state < TCP_CA_CWR || tp->snd_ssthresh <= tp->prior_cwnd || tp->snd_ssthresh == 0x7fffffff)
		return;
	m = mltcp_get(sk);
	if (m && (m->flags & MLTCP_FLAG_SCALE_DECREASE) && mltcp_engaged(m))
		keep = mltcp_keep_q16(m, base_keep_q16);
	w = (__u32)(((__u64)tp->prior_cwnd * keep) >> 16);
	if (w < 2)
		w = 2;
	ev = mltcp_trace_open(tp, m, MLTCP_EV_REPAIR, tp->snd_ssthresh, 0, m ? m->last_ssthresh : 0, w);
	if (m && m->last_ssthresh != tp->snd_ssthresh)
		mltcp_stat(MLTCP_STAT_REPAIRS_NOT_OURS);
	tp->snd_ssthresh = w;
	/* packets in flight = packets_out - (sacked_out + lost_out) + retrans_out (tcp_packets_in_flight) */
	in_flight = tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
	cap = in_flight > w ? in_flight : w;
	if (cap > tp->prior_cwnd)
		cap = tp->prior_cwnd;
	if (tp->snd_cwnd > cap) {
		tp->snd_cwnd = cap;
		mltcp_stat(MLTCP_STAT_CWND_REPAIRS);
	}
	mltcp_trace_close(tp, ev);
	mltcp_stat(MLTCP_STAT_SSTHRESH_REPAIRS);
}

#endif /* MLTCP_CC_BPF_H */
