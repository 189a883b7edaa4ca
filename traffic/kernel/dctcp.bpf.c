// SPDX-License-Identifier: GPL-2.0
/*
 * DCTCP (RFC 8257) as a BPF struct_ops congestion control, "bpf_dctcp", for kernels built without
 * tcp_dctcp (this project's machines list only reno, bbr and cubic). A plain base algorithm, no
 * MLTCP: the DCTCP-style ECN host of in-network MLTCP (docs/in-network.md).
 *
 * Sender: once per window of data, alpha <- (1 - g) alpha + g F, with F the fraction of the
 * packets delivered in that window that were CE-marked (tp->delivered, tp->delivered_ce) and
 * g = 1/16. An ECE makes the kernel enter CWR, which takes ssthresh() = cwnd (1 - alpha/2): at
 * most one cut per window, as deep as the marking. A loss or a timeout halves the window, as Reno.
 * Receiver: ECE echoes exactly the CE state of the data being acknowledged (RFC 8257 3.2): when
 * the state changes, a delayed ACK still pending goes out first with the old state, then the
 * next ACK is sent at once.
 * Both ends run it: the emulation makes it the hosts' default, which a network namespace other
 * than the first may only do for a TCP_CONG_NON_RESTRICTED algorithm. TCP_CONG_NEEDS_ECN
 * negotiates ECN whatever net.ipv4.tcp_ecn says.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define TCP_CONG_NON_RESTRICTED 0x1
#define TCP_CONG_NEEDS_ECN 0x2
#define TCP_ECN_DEMAND_CWR 4
#define MAX_ALPHA 1024U        /* alpha in Q10: 1024 = 1.0 */
#define SHIFT_G 4              /* g = 1/16 */

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

char _license[] SEC("license") = "GPL";

struct dctcp {
	__u32 next_seq;          /* end of the current observation window */
	__u32 old_delivered;     /* tp->delivered at its start */
	__u32 old_delivered_ce;  /* tp->delivered_ce at its start */
	__u32 alpha;
	__u32 loss_cwnd;         /* cwnd before the last cut, for undo */
	__u32 prior_rcv_nxt;     /* receiver: rcv_nxt when the CE state last changed */
	__u32 ce_state;          /* receiver: CE on the last data packet */
};

static __always_inline struct dctcp *dctcp_of(struct sock *sk)
{
	return (struct dctcp *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline void new_window(const struct tcp_sock *tp, struct dctcp *d)
{
	d->next_seq = tp->snd_nxt;
	d->old_delivered = tp->delivered;
	d->old_delivered_ce = tp->delivered_ce;
}

SEC("struct_ops/dctcp_init")
void BPF_PROG(dctcp_init, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	struct dctcp *d = dctcp_of(sk);

	d->alpha = MAX_ALPHA;
	d->loss_cwnd = 0;
	d->prior_rcv_nxt = tp->rcv_nxt;
	d->ce_state = 0;
	new_window(tp, d);
}

SEC("struct_ops/dctcp_ssthresh")
__u32 BPF_PROG(dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	struct dctcp *d = dctcp_of(sk);
	__u32 cwnd = tp->snd_cwnd, keep = cwnd - ((cwnd * d->alpha) >> 11);

	d->loss_cwnd = cwnd;
	return keep > 2 ? keep : 2;
}

static __always_inline void halve(struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	dctcp_of(sk)->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = tp->snd_cwnd / 2 > 2 ? tp->snd_cwnd / 2 : 2;
}

SEC("struct_ops/dctcp_in_ack_event")
void BPF_PROG(dctcp_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	struct dctcp *d = dctcp_of(sk);
	__u32 delivered, marked, alpha;

	if ((__s32)(tp->snd_una - d->next_seq) < 0)
		return;                         /* the window is not over yet */
	delivered = tp->delivered - d->old_delivered;
	marked = tp->delivered_ce - d->old_delivered_ce;
	alpha = d->alpha - (d->alpha >> SHIFT_G);
	if (marked) {
		alpha += (marked << (10 - SHIFT_G)) / (delivered ? delivered : 1);
		if (alpha > MAX_ALPHA)
			alpha = MAX_ALPHA;
	}
	d->alpha = alpha;
	new_window(tp, d);
}

SEC("struct_ops/dctcp_set_state")
void BPF_PROG(dctcp_set_state, struct sock *sk, __u8 new_state)
{
	/* entering fast recovery: a loss halves the window (ssthresh() above gave alpha's cut) */
	if (new_state == TCP_CA_Recovery && ((struct inet_connection_sock *)sk)->icsk_ca_state != TCP_CA_Recovery)
		halve(sk);
}

static __always_inline void demand_cwr(struct tcp_sock *tp, __u32 ce)
{
	if (ce)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

SEC("struct_ops/dctcp_cwnd_event")
void BPF_PROG(dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	struct dctcp *d = dctcp_of(sk);
	__u32 ce;

	if (ev == CA_EVENT_LOSS) {
		halve(sk);
		return;
	}
	if (ev != CA_EVENT_ECN_IS_CE && ev != CA_EVENT_ECN_NO_CE)
		return;
	ce = ev == CA_EVENT_ECN_IS_CE;
	if (d->ce_state != ce) {
		if (icsk->icsk_ack.pending & ICSK_ACK_TIMER) {
			demand_cwr(tp, d->ce_state);    /* the delayed ACK, with the old state */
			bpf_tcp_send_ack(tp, d->prior_rcv_nxt);
		}
		icsk->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	d->prior_rcv_nxt = tp->rcv_nxt;
	d->ce_state = ce;
	demand_cwr(tp, ce);
}

SEC("struct_ops/dctcp_cong_avoid")
void BPF_PROG(dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops/dctcp_undo_cwnd")
__u32 BPF_PROG(dctcp_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u32 loss = dctcp_of(sk)->loss_cwnd;

	return tp->snd_cwnd > loss ? tp->snd_cwnd : loss;
}

SEC(".struct_ops")
struct tcp_congestion_ops bpf_dctcp = {
	.init = (void *)dctcp_init,
	.ssthresh = (void *)dctcp_ssthresh,
	.in_ack_event = (void *)dctcp_in_ack_event,
	.set_state = (void *)dctcp_set_state,
	.cwnd_event = (void *)dctcp_cwnd_event,
	.cong_avoid = (void *)dctcp_cong_avoid,
	.undo_cwnd = (void *)dctcp_undo_cwnd,
	.flags = TCP_CONG_NON_RESTRICTED | TCP_CONG_NEEDS_ECN,
	.name = "bpf_dctcp",
};
