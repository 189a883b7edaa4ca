// SPDX-License-Identifier: Apache-2.0
/*
 * MLTCP-Reno: the kernel's Reno (slow start, additive increase, halving on loss) where the
 * congestion-avoidance increase is scaled by F(bytes_ratio) = slope * r + intercept.
 * The MLTCP lines are marked "MLTCP".
 */
#define MLTCP_PREFIX mreno_
#define MLTCP_DEF_ABOVE_BDP_Q10 512U         /* MLTCP: disengaged, growth above the path BDP x 0.5 */
#include "mltcp_cc.bpf.h"

char _license[] SEC("license") = "GPL";

SEC("struct_ops/mreno_init")
void BPF_PROG(mreno_init, struct sock *sk)
{
	mltcp_init(sk);                                         /* MLTCP */
}

SEC("struct_ops/mreno_cong_avoid")
void BPF_PROG(mreno_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (!tcp_is_cwnd_limited(sk))
		return;
	if (tcp_in_slow_start(tp)) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	/* MLTCP: cwnd += F(r) * acked / cwnd (Reno: acked / cwnd) */
	mltcp_grow(tp, mltcp_get(sk), tp->snd_cwnd << MLTCP_SHIFT, acked, tp->snd_ssthresh);
}

SEC("struct_ops/mreno_ssthresh")
__u32 BPF_PROG(mreno_ssthresh, struct sock *sk)
{
	return mltcp_ssthresh(sk, MLTCP_R_ONE / 2);             /* MLTCP: optional scaling */
}

SEC("struct_ops/mreno_pkts_acked")
void BPF_PROG(mreno_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	mltcp_on_acked(sk);                                     /* MLTCP */
	mltcp_guard(sk, MLTCP_R_ONE / 2);
}

SEC("struct_ops/mreno_in_ack_event")
void BPF_PROG(mreno_in_ack_event, struct sock *sk, __u32 flags)
{
	mltcp_trace_ack(sk, flags);
	mltcp_guard(sk, MLTCP_R_ONE / 2);
}

SEC("struct_ops/mreno_cwnd_event")
void BPF_PROG(mreno_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	if (ev == CA_EVENT_TX_START)
		mltcp_on_tx_start(sk);                          /* MLTCP */
}

SEC("struct_ops/mreno_set_state")
void BPF_PROG(mreno_set_state, struct sock *sk, __u8 new_state)
{
	mltcp_on_state(sk, new_state);                          /* trace only */
}

SEC("struct_ops/mreno_undo_cwnd")
__u32 BPF_PROG(mreno_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops mltcp_reno = {
	.init = (void *)mreno_init,
	.cong_avoid = (void *)mreno_cong_avoid,
	.ssthresh = (void *)mreno_ssthresh,
	.pkts_acked = (void *)mreno_pkts_acked,
	.in_ack_event = (void *)mreno_in_ack_event,
	.cwnd_event = (void *)mreno_cwnd_event,
	.set_state = (void *)mreno_set_state,
	.undo_cwnd = (void *)mreno_undo_cwnd,
	.name = "mltcp_reno",
};
