// SPDX-License-Identifier: GPL-2.0
/*
 * Helper of the zero-copy selftests: one end of a TCP connection whose data
 * path is attached to the NIC (ZERONIC_IOC_FLOW_ATTACH), moving a stream of
 * known bytes with zero-copy sends and receives, and checking it.
 *
 *   zc_xfer server PORT MODE BYTES   accept one connection, receive BYTES
 *   zc_xfer client ADDR PORT MODE BYTES   connect, send BYTES
 *
 * MODE is "message" (receive into posted segments) or "stream" (a receive
 * ring), or "plain" (no attach: the peer of an offloaded end). The stream's
 * byte i is (i * 7 + i / 251) & 0xff, so a byte out of place is seen. Prints
 * one line "ok bytes=N placed=N copied=N merged=N txcopied=N" (or
 * "error: ...") and exits 0 only if every byte arrived in order, and every
 * completion was successful.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/zeronic.h>

#define CHUNK (1024 * 1024)	/* bytes per send or receive segment */
#define NBUF 8			/* segments / sends in flight */
#define CQ_ENTRIES 256

static int die(const char *what)
{
	printf("error: %s: %s\n", what, strerror(errno));
	exit(1);
}

static unsigned char pattern(uint64_t i)
{
	return (unsigned char)((i * 7 + i / 251) & 0xff);
}

struct cq {
	struct zeronic_cq_ring *ring;
	struct zeronic_cqe *cqes;
	int efd;
	__u32 id;
};

static void cq_open(int zfd, struct cq *cq)
{
	struct zeronic_cq_create c = { .entries = CQ_ENTRIES };
	char *map;

	cq->efd = eventfd(0, EFD_CLOEXEC);
	if (cq->efd < 0)
		die("eventfd");
	c.eventfd = cq->efd;
	if (ioctl(zfd, ZERONIC_IOC_CQ_CREATE, &c))
		die("CQ_CREATE");
	map = mmap(NULL, c.mmap_size, PROT_READ | PROT_WRITE, MAP_SHARED, zfd, c.mmap_offset);
	if (map == MAP_FAILED)
		die("mmap CQ");
	cq->ring = (void *)map;
	cq->cqes = (void *)(map + cq->ring->entries_offset);
	cq->id = c.cq;
}

static int g_zfd = -1;
static __u32 g_flow;

/* On a failure: what the flow's counters say. */
static void dump_flow(void)
{
	struct zeronic_flow_query q = { .flow = g_flow };

	if (g_zfd < 0 || ioctl(g_zfd, ZERONIC_IOC_FLOW_QUERY, &q))
		return;
	printf("# flow %u: state %u rx_stream_off %llu placed %llu copied %llu rx_posted %u tx_posted %u\n",
	       g_flow, q.state, (unsigned long long)q.rx_stream_off,
	       (unsigned long long)q.rx_placed_bytes, (unsigned long long)q.rx_copied_bytes,
	       q.rx_posted, q.tx_posted);
}

/* Waits for the next completion and copies it to *out. */
static void cq_next(struct cq *cq, struct zeronic_cqe *out)
{
	for (;;) {
		__u32 head = cq->ring->head;
		__u32 tail = __atomic_load_n(&cq->ring->tail, __ATOMIC_ACQUIRE);
		struct pollfd p = { .fd = cq->efd, .events = POLLIN };
		uint64_t v;

		if (head != tail) {
			*out = cq->cqes[head & cq->ring->mask];
			__atomic_store_n(&cq->ring->head, head + 1, __ATOMIC_RELEASE);
			return;
		}
		__atomic_fetch_or(&cq->ring->flags, ZERONIC_CQ_ARMED, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&cq->ring->tail, __ATOMIC_SEQ_CST) != head)
			continue;
		if (poll(&p, 1, 30000) <= 0) {
			printf("error: no completion within 30 s (head %u tail %u)\n", head,
			       cq->ring->tail);
			dump_flow();
			exit(1);
		}
		if (read(cq->efd, &v, sizeof(v)) < 0)
			die("read eventfd");
	}
}

static __u64 reg(int zfd, void *p, size_t len, __u32 access)
{
	struct zeronic_mr_reg r = { .addr = (uintptr_t)p, .length = len, .access = access };

	if (ioctl(zfd, ZERONIC_IOC_MR_REG, &r))
		die("MR_REG");
	return r.key;
}

static void post(int zfd, __u32 flow, __u16 op, __u64 key, __u64 off, __u32 len, __u64 id)
{
	struct zeronic_wr wr = { .wr_id = id, .key = key, .offset = off, .len = len, .opcode = op };
	struct zeronic_post p = { .flow = flow, .count = 1, .wrs = (uintptr_t)&wr };

	if (ioctl(zfd, ZERONIC_IOC_POST, &p))
		die("POST");
}

static void report(int zfd, __u32 flow, uint64_t bytes)
{
	struct zeronic_flow_query q = { .flow = flow };

	if (ioctl(zfd, ZERONIC_IOC_FLOW_QUERY, &q))
		die("FLOW_QUERY");
	printf("ok bytes=%llu placed=%llu copied=%llu merged=%llu txcopied=%llu\n",
	       (unsigned long long)bytes, (unsigned long long)q.rx_placed_bytes,
	       (unsigned long long)q.rx_copied_bytes, (unsigned long long)q.tx_merged_bytes,
	       (unsigned long long)q.tx_copied_bytes);
}

static __u32 attach(int zfd, int s, struct cq *cq, __u32 mode, __u64 ring_key, __u64 ring_size)
{
	struct zeronic_flow_attach a = {
		.sockfd = s, .cq = cq->id, .rx_mode = mode,
		.ring_key = ring_key, .ring_size = ring_size,
	};

	if (ioctl(zfd, ZERONIC_IOC_FLOW_ATTACH, &a))
		die("FLOW_ATTACH");
	g_zfd = zfd;
	g_flow = a.flow;
	return a.flow;
}

static int run_sender(int s, const char *mode, uint64_t total)
{
	size_t len = (size_t)CHUNK * NBUF;
	unsigned char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	uint64_t sent = 0, done = 0;
	int zfd, inflight = 0;
	struct cq cq;
	__u64 key;
	__u32 flow;

	if (buf == MAP_FAILED)
		die("mmap");
	if (!strcmp(mode, "plain")) {
		for (uint64_t i = 0; i < total;) {
			size_t n = total - i < len ? total - i : len;
			ssize_t w;

			for (size_t k = 0; k < n; k++)
				buf[k] = pattern(i + k);
			w = write(s, buf, n);
			if (w <= 0)
				die("write");
			i += w;
		}
		shutdown(s, SHUT_WR);
		printf("ok bytes=%llu\n", (unsigned long long)total);
		return 0;
	}
	zfd = open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC);
	if (zfd < 0)
		die("open");
	cq_open(zfd, &cq);
	key = reg(zfd, buf, len, ZERONIC_ACCESS_LOCAL_READ);
	flow = attach(zfd, s, &cq, ZERONIC_RX_MESSAGE, 0, 0);
	while (done < total) {
		while (inflight < NBUF && sent < total) {
			int slot = (int)((sent / CHUNK) % NBUF);
			size_t n = total - sent < CHUNK ? total - sent : CHUNK;

			for (size_t k = 0; k < n; k++)
				buf[(size_t)slot * CHUNK + k] = pattern(sent + k);
			post(zfd, flow, ZERONIC_WR_SEND, key, (size_t)slot * CHUNK, n, sent);
			sent += n;
			inflight++;
		}
		{
			struct zeronic_cqe c;

			cq_next(&cq, &c);
			if (c.opcode != ZERONIC_CQE_SEND || c.status) {
				printf("error: completion op %u status %u (%s) wr %llu\n", c.opcode,
				       c.status, strerror(c.status), (unsigned long long)c.wr_id);
				return 1;
			}
			done += c.len;
			inflight--;
		}
	}
	report(zfd, flow, total);
	shutdown(s, SHUT_WR);
	return 0;
}

static int run_receiver(int s, const char *mode, uint64_t total)
{
	size_t len = (size_t)CHUNK * NBUF;
	unsigned char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	uint64_t got = 0, posted = 0;
	int zfd, stream;
	struct cq cq;
	__u64 key;
	__u32 flow;

	if (buf == MAP_FAILED)
		die("mmap");
	if (!strcmp(mode, "plain")) {
		while (got < total) {
			ssize_t r = read(s, buf, len);

			if (r <= 0) {
				printf("error: read after %llu bytes: %s\n",
				       (unsigned long long)got, r ? strerror(errno) : "EOF");
				return 1;
			}
			for (ssize_t k = 0; k < r; k++)
				if (buf[k] != pattern(got + k)) {
					printf("error: byte %llu is %u, want %u\n",
					       (unsigned long long)(got + k), buf[k], pattern(got + k));
					return 1;
				}
			got += r;
		}
		printf("ok bytes=%llu\n", (unsigned long long)total);
		return 0;
	}
	stream = !strcmp(mode, "stream");
	zfd = open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC);
	if (zfd < 0)
		die("open");
	cq_open(zfd, &cq);
	key = reg(zfd, buf, len, ZERONIC_ACCESS_LOCAL_WRITE);
	flow = attach(zfd, s, &cq, stream ? ZERONIC_RX_STREAM : ZERONIC_RX_MESSAGE,
		      stream ? key : 0, stream ? len : 0);
	if (!stream)
		for (int i = 0; i < NBUF && posted < total; i++) {
			size_t n = total - posted < CHUNK ? total - posted : CHUNK;

			post(zfd, flow, ZERONIC_WR_RECV, key, (size_t)i * CHUNK, n, posted);
			posted += n;
		}
	while (got < total) {
		struct zeronic_cqe c;
		uint64_t off, n;

		cq_next(&cq, &c);
		if (c.status || (c.opcode != ZERONIC_CQE_RECV && c.opcode != ZERONIC_CQE_STREAM_DATA)) {
			printf("error: completion op %u status %u flags %#x after %llu bytes\n",
			       c.opcode, c.status, c.flags, (unsigned long long)got);
			return 1;
		}
		if (c.stream_off != got) {
			printf("error: completion at %llu, want %llu\n",
			       (unsigned long long)c.stream_off, (unsigned long long)got);
			return 1;
		}
		for (n = 0; n < c.len; n++) {
			off = (c.stream_off + n) % len;
			if (buf[off] != pattern(got + n)) {
				printf("error: byte %llu is %u, want %u\n",
				       (unsigned long long)(got + n), buf[off], pattern(got + n));
				return 1;
			}
		}
		got += c.len;
		if (stream) {
			struct zeronic_stream_consume sc = { .flow = flow, .stream_off = got };

			if (ioctl(zfd, ZERONIC_IOC_STREAM_CONSUME, &sc))
				die("STREAM_CONSUME");
		} else if (posted < total) {
			size_t n2 = total - posted < CHUNK ? total - posted : CHUNK;

			post(zfd, flow, ZERONIC_WR_RECV, key, (c.stream_off % len), n2, posted);
			posted += n2;
		}
	}
	report(zfd, flow, total);
	return 0;
}

int main(int argc, char **argv)
{
	int one = 1, s;

	if (argc == 5 && !strcmp(argv[1], "server")) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
		int l = socket(AF_INET, SOCK_STREAM, 0);

		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (void *)&a, sizeof(a)) || listen(l, 1))
			die("listen");
		printf("listening\n");
		fflush(stdout);
		s = accept(l, NULL, NULL);
		if (s < 0)
			die("accept");
		return run_receiver(s, argv[3], strtoull(argv[4], NULL, 0));
	}
	if (argc == 6 && !strcmp(argv[1], "client")) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[3])) };

		inet_pton(AF_INET, argv[2], &a.sin_addr);
		s = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(s, (void *)&a, sizeof(a)))
			die("connect");
		return run_sender(s, argv[4], strtoull(argv[5], NULL, 0));
	}
	fprintf(stderr, "usage: zc_xfer server PORT MODE BYTES | client ADDR PORT MODE BYTES\n");
	return 2;
}
