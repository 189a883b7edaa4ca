// SPDX-License-Identifier: Apache-2.0
/*
 * MLTCP-CUBIC: CUBIC as in RFC 9438 (C = 0.4, beta = 0.7, fast convergence, Reno-friendly region;
 * no HyStart: plain slow start) where the per-ACK growth is scaled by F(bytes_ratio), as in mltcp.cc's MLTCP-CUBIC:
 *   W_est += F * alpha * acked / cwnd                       (Reno-friendly estimate)
 *   cwnd  += F * (target - cwnd) / cwnd per ACKed segment   (target = W_cubic(t + RTT),
 *                                                            clamped to [cwnd, 1.5 cwnd])
 *   unless W_est is above that: then cwnd = W_est            (Reno-friendly region)
 * The MLTCP lines are marked "MLTCP".
 *
 * Units: windows in segments, time in ticks of 1/1024 s, C = 410/1024, beta = 717/1024.
 */
#define MLTCP_PREFIX mcubic_
#include "mltcp_cc.bpf.h"

char _license[] SEC("license") = "GPL";

#define CUBIC_C_Q10 410U          /* 0.4 */
#define CUBIC_BETA_Q10 717U       /* 0.7 */
#define CUBIC_BETA_Q16 45875U     /* 0.7 */
#define CUBIC_ALPHA_Q10 542U      /* alpha = 3 (1 - beta) / (1 + beta) = 0.529 */
#define USEC_PER_SEC 1000000ULL

struct mcubic {
	__u64 epoch_start_us;   /* start of the current congestion-avoidance epoch, 0 = none */
	__u64 w_est_q20;        /* Reno-friendly estimate W_est, segments in Q20 */
	__u32 w_max;            /* plateau: window before the last reduction (fast convergence) */
	__u32 w_last_max;       /* window at the last reduction, unreduced */
	__u32 origin;           /* plateau of this epoch's curve */
	__u32 k_ticks;          /* K: time to reach the plateau */
};

static __always_inline struct mcubic *mcubic_ca(const struct sock *sk)
{
	return (struct mcubic *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline __u64 now_us(void)
{
	return bpf_ktime_get_ns() / 1000;
}

/* Integer cube root of x < 2^63, bit by bit. */
static __always_inline __u32 cube_root(__u64 x)
{
	__u64 r = 0, c;
	int i;

	for (i = 20; i >= 0; i--) {
		c = r | (1ULL << i);
		if (c * c * c <= x)
			r = c;
	}
	return (__u32)r;
}

/* W_cubic(t) = C (t - K)^3 + origin, t in ticks; clamped at 0. */
static __always_inline __u32 w_cubic(const struct mcubic *c, __u64 t)
{
	__u64 d = t > c->k_ticks ? t - c->k_ticks : c->k_ticks - t, delta;

	if (d > (1ULL << 17))
		d = 1ULL << 17;
	delta = (CUBIC_C_Q10 * d * d * d) >> 40;
	if (t > c->k_ticks)
		return c->origin + (__u32)delta;
	return delta >= c->origin ? 0 : c->origin - (__u32)delta;
}

SEC("struct_ops/mcubic_init")
void BPF_PROG(mcubic_init, struct sock *sk)
{
	struct mcubic *c = mcubic_ca(sk);

	c->epoch_start_us = 0;
	c->w_est_q20 = 0;
	c->w_max = 0;
	c->w_last_max = 0;
	c->origin = 0;
	c->k_ticks = 0;
	mltcp_init(sk);                                         /* MLTCP */
}

SEC("struct_ops/mcubic_cong_avoid")
void BPF_PROG(mcubic_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mcubic *c = mcubic_ca(sk);
	struct mltcp_sk *m = mltcp_get(sk);                     /* MLTCP */
	__u32 cwnd, target, w_est, f;
	__u64 cubic_inc_q20;
	struct mltcp_trace_ev *ev;
	__u64 now, t;

	if (!tcp_is_cwnd_limited(sk))
		return;
	if (tcp_in_slow_start(tp)) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	cwnd = tp->snd_cwnd;
	if (!cwnd)
		return;
	now = now_us();
	if (!c->epoch_start_us) {
		c->epoch_start_us = now ? now : 1;
		if (cwnd < c->w_max) {
			/* K = cbrt((W_max - cwnd) / C) s = cbrt((W_max - cwnd) 2^30 / C) ticks */
			__u64 diff = c->w_max - cwnd;

			if (diff > (1ULL << 22))
				diff = 1ULL << 22;
			c->k_ticks = cube_root((diff << 40) / CUBIC_C_Q10);
			c->origin = c->w_max;
		} else {
			c->k_ticks = 0;
			c->origin = cwnd;
		}
		c->w_est_q20 = (__u64)cwnd << 20;
	}
	f = m ? mltcp_f(m) : MLTCP_ONE;                         /* MLTCP */

	/* Reno-friendly estimate: W_est += F * alpha * acked / cwnd (Q20 segments). */
	c->w_est_q20 += ((__u64)CUBIC_ALPHA_Q10 * f * acked) / cwnd;   /* MLTCP: * F */

	/* Cubic target W_cubic(t + RTT), between cwnd and 1.5 cwnd; its increment in Q20. */
	t = ((now - c->epoch_start_us + (tp->srtt_us >> 3)) << 10) / USEC_PER_SEC;
	target = w_cubic(c, t);
	if (target < cwnd)
		target = cwnd;
	if (target > cwnd + cwnd / 2)
		target = cwnd + cwnd / 2;
	cubic_inc_q20 = (((__u64)f * (target - cwnd) * acked) << MLTCP_SHIFT) / cwnd;  /* MLTCP: F */

	if (c->w_est_q20 > ((__u64)cwnd << 20) + cubic_inc_q20) {
		w_est = (__u32)(c->w_est_q20 >> 20);
		ev = mltcp_trace_open(tp, m, MLTCP_EV_FRIENDLY, 0, acked, 0, w_est);
		if (w_est > cwnd && !mltcp_nic_capped(tp, m))   /* MLTCP: optional NIC cap */
			tp->snd_cwnd = w_est < tp->snd_cwnd_clamp ? w_est : tp->snd_cwnd_clamp;
		mltcp_trace_close(tp, ev);
		return;
	}
	if (target > cwnd)
		/* MLTCP: cwnd += F * (target - cwnd) / cwnd per ACKed segment */
		mltcp_grow(tp, m, (cwnd << MLTCP_SHIFT) / (target - cwnd), acked, target);
}

SEC("struct_ops/mcubic_ssthresh")
__u32 BPF_PROG(mcubic_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mcubic *c = mcubic_ca(sk);
	__u32 cwnd = tp->snd_cwnd;

	c->epoch_start_us = 0;
	/* Fast convergence: release bandwidth when the previous plateau was not reached. */
	if (cwnd < c->w_last_max)
		c->w_max = (__u32)(((__u64)cwnd * (MLTCP_ONE + CUBIC_BETA_Q10)) >> (MLTCP_SHIFT + 1));
	else
		c->w_max = cwnd;
	c->w_last_max = cwnd;
	return mltcp_ssthresh(sk, CUBIC_BETA_Q16);              /* MLTCP: optional scaling */
}

SEC("struct_ops/mcubic_set_state")
void BPF_PROG(mcubic_set_state, struct sock *sk, __u8 new_state)
{
	if (new_state == TCP_CA_Loss)
		mcubic_ca(sk)->epoch_start_us = 0;
}

SEC("struct_ops/mcubic_pkts_acked")
void BPF_PROG(mcubic_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	mltcp_on_acked(sk);                                     /* MLTCP */
	mltcp_guard(sk, CUBIC_BETA_Q16);
}

SEC("struct_ops/mcubic_in_ack_event")
void BPF_PROG(mcubic_in_ack_event, struct sock *sk, __u32 flags)
{
	mltcp_trace_ack(sk, flags);
	mltcp_guard(sk, CUBIC_BETA_Q16);
}

SEC("struct_ops/mcubic_cwnd_event")
void BPF_PROG(mcubic_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct mcubic *c = mcubic_ca(sk);
	struct mltcp_sk *m;

	if (ev != CA_EVENT_TX_START)
		return;
	/* After an idle period the curve resumes where it stopped: shift the epoch by the idle time. */
	m = mltcp_get(sk);
	if (m && c->epoch_start_us) {
		__u64 idle_us = (bpf_ktime_get_ns() - m->last_act_ns) / 1000;

		c->epoch_start_us += idle_us;
	}
	mltcp_on_tx_start(sk);                                  /* MLTCP */
}

SEC("struct_ops/mcubic_undo_cwnd")
__u32 BPF_PROG(mcubic_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops mltcp_cubic = {
	.init = (void *)mcubic_init,
	.cong_avoid = (void *)mcubic_cong_avoid,
	.ssthresh = (void *)mcubic_ssthresh,
	.set_state = (void *)mcubic_set_state,
	.pkts_acked = (void *)mcubic_pkts_acked,
	.in_ack_event = (void *)mcubic_in_ack_event,
	.cwnd_event = (void *)mcubic_cwnd_event,
	.undo_cwnd = (void *)mcubic_undo_cwnd,
	.name = "mltcp_cubic",
};
