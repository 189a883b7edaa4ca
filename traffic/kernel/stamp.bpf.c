// SPDX-License-Identifier: GPL-2.0
/*
 * The MLTCP IPv4 option on kernel TCP, from a tc (clsact egress) program on a sender host's
 * interface: hosts keep their congestion control (reno, cubic, ECN), and a progress-aware switch
 * (switch_policy, docs/in-network.md) still sees how far each flow is through its iteration.
 *
 * Per flow (addresses and ports) it tracks the iteration as mltcp.tracker does, from what it
 * sends instead of what is acked:
 *  - bytes: new sequence space only (a retransmission is stamped with the current ratio and not
 *    counted again);
 *  - a boundary: a new segment after an idle gap longer than max(MIN_IDLE_NS, IDLE_FRAC_Q10/1024
 *    x the previous boundary gap);
 *  - bytes per iteration: the median of the last three completed iterations;
 *  - bytes_ratio = bytes sent this iteration (this segment included) / bytes per iteration, in
 *    Q0.16, capped at 0xFFFF; 0 until one iteration has completed.
 * Every TCP segment with payload and no IPv4 options gets the 8-byte option (a GSO super-packet
 * is tracked and stamped as one: its segments share one bytes_ratio) (docs/CONTRACTS.md:
 * kind 94, length 8, version 1 | flags, 0, job_id, bytes_ratio; ITER_START on an iteration's
 * first segment): IHL 5 -> 7, total length + 8, header checksum recomputed. The TCP checksum
 * does not cover IPv4 options. A frame that would exceed MAX_FRAME bytes is sent unstamped
 * (counted): the host's MTU must leave 8 bytes (stamp.py lowers it).
 * Built per host with the numbers as constants (stamp.py):
 *   -DJOB_ID=<job id> -DMIN_IDLE_NS=<ns> -DIDLE_FRAC_Q10=<x1024> -DMAX_FRAME=<bytes>
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define TC_ACT_OK 0
#define ETH_P_IP_BE 0x0008        /* htons(0x0800) */
#define PROTO_TCP 6
#define OPT_KIND 0x5E
#define OPT_LEN 8
#define OPT_VERSION 1
#define FLAG_ITER_START 0x4
#define HIST 3

struct flow_key {
	__u32 saddr, daddr;
	__u16 sport, dport;
};

struct flow_st {
	__u64 last_ns;       /* last segment with new bytes */
	__u64 last_gap_ns;   /* the gap that opened this iteration */
	__u32 snd_max;       /* end of the new sequence space sent */
	__u32 bytes_cur;     /* new bytes this iteration */
	__u32 learned;       /* bytes per iteration (median of hist) */
	__u32 iteration;
	__u32 hist[HIST];    /* completed iterations' bytes, newest first; 0 = none */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct flow_key);
	__type(value, struct flow_st);
} stamp_flows SEC(".maps");

struct stamp_stats {
	__u64 stamped;
	__u64 no_room;      /* frame would exceed MAX_FRAME: sent unstamped */
	__u64 failed;       /* bpf_skb_adjust_room refused */
	__u64 iterations;   /* boundaries detected (all flows) */
	__u64 retrans;      /* segments with no new bytes */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stamp_stats);
} stamp_stats SEC(".maps");

#define STAT(field) do {                                            \
	__u32 k0 = 0;                                               \
	struct stamp_stats *s = bpf_map_lookup_elem(&stamp_stats, &k0); \
	if (s)                                                      \
		__sync_fetch_and_add(&s->field, 1);                 \
} while (0)

static __always_inline __u32 median(const struct flow_st *f)
{
	__u32 a = f->hist[0], b = f->hist[1], c = f->hist[2], t;

	if (!b)
		return a;
	if (!c)
		return (a + b) / 2;
	if (a > b) { t = a; a = b; b = t; }
	if (b > c) { t = b; b = c; c = t; }
	return a > b ? a : b;
}

/* The tracker: returns the segment's bytes_ratio (Q16) and sets *flags. */
static __always_inline __u32 track(struct flow_st *f, __u32 seq, __u32 payload, __u64 now, __u8 *flags)
{
	__u32 end_seq = seq + payload, fresh;
	__u64 thr, r;

	if ((__s32)(end_seq - f->snd_max) <= 0) {
		STAT(retrans);
	} else {
		fresh = end_seq - f->snd_max;
		if (fresh > payload)
			fresh = payload;
		thr = f->last_gap_ns * IDLE_FRAC_Q10 / 1024;
		if (thr < MIN_IDLE_NS)
			thr = MIN_IDLE_NS;
		if (now - f->last_ns > thr) {
			f->hist[2] = f->hist[1];
			f->hist[1] = f->hist[0];
			f->hist[0] = f->bytes_cur;
			f->learned = median(f);
			f->bytes_cur = 0;
			f->iteration++;
			f->last_gap_ns = now - f->last_ns;
			*flags |= FLAG_ITER_START;
			STAT(iterations);
		}
		f->bytes_cur += fresh;
		f->snd_max = end_seq;
		f->last_ns = now;
	}
	if (!f->learned)
		return 0;
	r = (__u64)f->bytes_cur * 0xFFFF / f->learned;
	return r > 0xFFFF ? 0xFFFF : (__u32)r;
}

SEC("tc")
int mltcp_stamp(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct tcphdr *th = data + sizeof(*eth) + sizeof(*ip);
	struct flow_key key = {};
	struct flow_st init = {}, *f;
	__u32 tot, hl, seg, ratio, sum = 0;
	__u8 flags = 0, *o;
	__u16 *w;
	__u64 now = bpf_ktime_get_ns();
	int i;

	if ((void *)(th + 1) > end || eth->h_proto != ETH_P_IP_BE)
		return TC_ACT_OK;
	if (ip->ihl != 5 || ip->protocol != PROTO_TCP || (ip->frag_off & bpf_htons(0x1FFF)))
		return TC_ACT_OK;
	tot = bpf_ntohs(ip->tot_len);
	hl = sizeof(*ip) + th->doff * 4;
	if (tot <= hl)
		return TC_ACT_OK;       /* no payload: SYN, pure ACK, FIN */
	key.saddr = ip->saddr;
	key.daddr = ip->daddr;
	key.sport = th->source;
	key.dport = th->dest;
	f = bpf_map_lookup_elem(&stamp_flows, &key);
	if (!f) {
		init.snd_max = bpf_ntohl(th->seq);
		init.last_ns = now;
		bpf_map_update_elem(&stamp_flows, &key, &init, BPF_NOEXIST);
		f = bpf_map_lookup_elem(&stamp_flows, &key);
		if (!f)
			return TC_ACT_OK;
		flags |= FLAG_ITER_START;
	}
	ratio = track(f, bpf_ntohl(th->seq), tot - hl, now, &flags);

	/* TCP hands tc egress GSO super-packets (segmented after tc): the frames that matter are
	 * its segments, which keep their size (FIXED_GSO) and each get the option. */
	seg = skb->gso_size ? sizeof(*eth) + hl + skb->gso_size : skb->len;
	if (seg + OPT_LEN > MAX_FRAME) {
		STAT(no_room);
		return TC_ACT_OK;
	}
	if (bpf_skb_adjust_room(skb, OPT_LEN, BPF_ADJ_ROOM_NET, skb->gso_size ? BPF_F_ADJ_ROOM_FIXED_GSO : 0)) {
		STAT(failed);
		return TC_ACT_OK;
	}
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	ip = data + sizeof(struct ethhdr);
	if ((void *)ip + sizeof(*ip) + OPT_LEN > end)
		return TC_ACT_OK;
	ip->ihl = 7;
	ip->tot_len = bpf_htons(tot + OPT_LEN);
	o = (__u8 *)(ip + 1);
	o[0] = OPT_KIND;
	o[1] = OPT_LEN;
	o[2] = OPT_VERSION << 4 | flags;
	o[3] = 0;
	o[4] = JOB_ID >> 8;
	o[5] = JOB_ID & 0xFF;
	o[6] = ratio >> 8;
	o[7] = ratio & 0xFF;
	ip->check = 0;
	w = (__u16 *)ip;
	for (i = 0; i < (sizeof(*ip) + OPT_LEN) / 2; i++)
		sum += w[i];
	sum = (sum & 0xFFFF) + (sum >> 16);
	sum = (sum & 0xFFFF) + (sum >> 16);
	ip->check = ~sum & 0xFFFF;
	STAT(stamped);
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
