// SPDX-License-Identifier: Apache-2.0
/*
 * delayline: a two-port Ethernet wire with a fixed one-way delay, for kernels without netem.
 *
 *   delayline IF_A IF_B DELAY_US [STATS_FILE]
 *
 * Every frame received on IF_A is sent out of IF_B DELAY_US microseconds later, and the other
 * way round (AF_PACKET, frames copied whole, order kept). The interfaces carry no addresses, so
 * the kernel forwards nothing itself. No rate limit and no loss: the bottleneck (htb + bfifo) is
 * elsewhere. Offloads must be off on both interfaces (frames <= 9018 bytes). SIGTERM/SIGINT end
 * it; with STATS_FILE, it writes "forwarded_ab forwarded_ba overflow late_max_us errors" there on
 * exit.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 16384
#define FRAME_MAX 9018

struct slot {
	uint64_t due_ns;
	uint32_t len;
	unsigned char data[FRAME_MAX];
};

struct queue {
	struct slot *s;
	uint32_t head, tail;       /* head: next to send; tail: next free */
	uint64_t forwarded, overflow, errors;   /* errors: sendto failed (frame dropped) */
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static int open_port(const char *ifname, int *ifindex)
{
	struct sockaddr_ll sll = {0};
	/* protocol 0: no frames until bound to ifname (with ETH_P_ALL, the frames of every
	 * interface that arrive before bind() would stay queued and be forwarded as ours) */
	int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, 0), one = 1, big = 8 << 20;

	if (fd < 0) {
		perror("delayline: socket(AF_PACKET)");
		exit(2);
	}
	*ifindex = if_nametoindex(ifname);
	if (!*ifindex) {
		fprintf(stderr, "delayline: no interface %s\n", ifname);
		exit(2);
	}
	sll.sll_family = AF_PACKET;
	sll.sll_protocol = htons(ETH_P_ALL);
	sll.sll_ifindex = *ifindex;
	if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
		perror("delayline: bind");
		exit(2);
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
	/* send straight to the driver, no qdisc on the wire's ports */
	setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one));
	return fd;
}

/* Read every waiting frame of fd into q, due at now + delay. */
static void take(int fd, struct queue *q, uint64_t delay_ns)
{
	for (;;) {
		struct sockaddr_ll from;
		socklen_t fl = sizeof(from);
		static unsigned char scratch[FRAME_MAX];
		int full = q->tail - q->head >= SLOTS;
		struct slot *s = &q->s[q->tail % SLOTS];
		ssize_t n = recvfrom(fd, full ? scratch : s->data, FRAME_MAX, MSG_TRUNC, (struct sockaddr *)&from, &fl);

		if (n < 0)
			return;                       /* EAGAIN: drained */
		if (from.sll_pkttype == PACKET_OUTGOING)
			continue;                     /* our own transmissions */
		if (full || n > FRAME_MAX) {
			q->overflow++;
			continue;
		}
		s->len = (uint32_t)n;
		s->due_ns = now_ns() + delay_ns;
		q->tail++;
	}
}

/* Send the frames of q that are due on fd; returns the next due time (0: empty). */
static uint64_t give(int fd, int ifindex, struct queue *q, uint64_t *late_max)
{
	struct sockaddr_ll to = {0};

	to.sll_family = AF_PACKET;
	to.sll_ifindex = ifindex;
	to.sll_halen = ETH_ALEN;
	while (q->head != q->tail) {
		struct slot *s = &q->s[q->head % SLOTS];
		uint64_t t = now_ns();

		if (s->due_ns > t)
			return s->due_ns;
		if (t - s->due_ns > *late_max)
			*late_max = t - s->due_ns;
		memcpy(to.sll_addr, s->data, ETH_ALEN);
		if (sendto(fd, s->data, s->len, 0, (struct sockaddr *)&to, sizeof(to)) < 0) {
			if (errno == EAGAIN || errno == ENOBUFS) {
				struct pollfd p = {fd, POLLOUT, 0};

				poll(&p, 1, 1);
				continue;             /* retry the same frame */
			}
			q->errors++;
		} else {
			q->forwarded++;
		}
		q->head++;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct queue qa = {0}, qb = {0};          /* qa: from A, to B */
	uint64_t delay_ns, late_max = 0;
	int fa, fb, ia, ib;
	char *end;

	if (argc < 4 || argc > 5) {
		fprintf(stderr, "usage: delayline IF_A IF_B DELAY_US [STATS_FILE]\n");
		return 2;
	}
	delay_ns = strtoull(argv[3], &end, 10) * 1000ULL;
	if (*end || !argv[3][0]) {
		fprintf(stderr, "delayline: DELAY_US must be a whole number of microseconds, got %s\n", argv[3]);
		return 2;
	}
	qa.s = calloc(SLOTS, sizeof(struct slot));
	qb.s = calloc(SLOTS, sizeof(struct slot));
	if (!qa.s || !qb.s) {
		fprintf(stderr, "delayline: out of memory\n");
		return 2;
	}
	prctl(PR_SET_TIMERSLACK, 1UL);            /* wake within a microsecond of the due time */
	fa = open_port(argv[1], &ia);
	fb = open_port(argv[2], &ib);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	printf("ready\n");
	fflush(stdout);
	while (!stop) {
		struct pollfd p[2] = {{fa, POLLIN, 0}, {fb, POLLIN, 0}};
		uint64_t na = give(fb, ib, &qa, &late_max), nb = give(fa, ia, &qb, &late_max), next, t;
		struct timespec ts, *tsp = NULL;

		next = na && nb ? (na < nb ? na : nb) : (na ? na : nb);
		if (next) {
			t = now_ns();
			t = next > t ? next - t : 0;
			ts.tv_sec = t / 1000000000ULL;
			ts.tv_nsec = t % 1000000000ULL;
			tsp = &ts;
		}
		if (ppoll(p, 2, tsp, NULL) < 0 && errno != EINTR)
			break;
		take(fa, &qa, delay_ns);
		take(fb, &qb, delay_ns);
	}
	if (argc == 5) {
		FILE *f = fopen(argv[4], "w");

		if (f) {
			fprintf(f, "%llu %llu %llu %llu %llu\n", (unsigned long long)qa.forwarded,
				(unsigned long long)qb.forwarded, (unsigned long long)(qa.overflow + qb.overflow),
				(unsigned long long)(late_max / 1000), (unsigned long long)(qa.errors + qb.errors));
			fclose(f);
		}
	}
	return 0;
}
