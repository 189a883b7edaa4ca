// SPDX-License-Identifier: GPL-2.0
/*
 * Step ECN marking at the kernel dumbbell's bottleneck (DCTCP-style: CE when K or more bytes are
 * queued), for kernels without the red qdisc. A tc (clsact egress) program on the bottleneck port
 * in front of htb + bfifo cannot see the qdisc's backlog, so it keeps a model of it: a virtual
 * queue drained at the htb rate (frame bytes, as htb counts them), grown by every frame that
 * the bfifo would admit. Built per dumbbell with the numbers as constants (net.py):
 *   -DRATE_BPS=<htb rate, bit/s> -DK_BYTES=<K x 1514> -DLIMIT_BYTES=<bfifo limit>
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define TC_ACT_OK 0

struct ecn_vq {
	__u64 bytes;      /* modelled backlog */
	__u64 last_ns;
	__u64 marked;     /* frames marked CE */
	__u64 seen;       /* frames seen */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ecn_vq);
} ecn_vq SEC(".maps");

SEC("tc")
int ecn_mark(struct __sk_buff *skb)
{
	__u32 k = 0;
	struct ecn_vq *q = bpf_map_lookup_elem(&ecn_vq, &k);
	__u64 now = bpf_ktime_get_ns(), elapsed, drained;

	if (!q)
		return TC_ACT_OK;
	elapsed = now - q->last_ns;
	if (elapsed > 1000000000ULL)
		elapsed = 1000000000ULL;
	drained = elapsed * (RATE_BPS / 8) / 1000000000ULL;
	q->bytes = q->bytes > drained ? q->bytes - drained : 0;
	q->last_ns = now;
	q->seen++;
	if (q->bytes + skb->len > LIMIT_BYTES)
		return TC_ACT_OK;                /* the bfifo drops it: not queued */
	if (q->bytes >= K_BYTES && bpf_skb_ecn_set_ce(skb))
		q->marked++;
	q->bytes += skb->len;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
