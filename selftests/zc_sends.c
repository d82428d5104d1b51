// SPDX-License-Identifier: GPL-2.0
/*
 * Zero-copy sends where TCP does not simply reference the send's pages
 * (issue 32, finding 12): what a send's completion says, and what the peer
 * gets.
 *
 * - unsent_plain_data_before_attach: bytes the application wrote before
 *   FLOW_ATTACH that TCP had not sent yet (the peer's window closed) are
 *   still in the send queue when the first sends are queued behind them.
 *   Every send must complete with status 0, and the peer must get the plain
 *   bytes, then the sends' bytes, byte-exact.
 * - sends_without_scatter_gather: with `sg off` on the sending port, TCP
 *   copies the payload instead of referencing the pages. A send must still
 *   complete only once the peer has its bytes, with status 0, and the peer
 *   must get them byte-exact.
 *
 * Runs in the two-port topology (zc_sends.sh sources zc_env.sh): the
 * attached socket is made in namespace a, its peer in namespace b.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <linux/sockios.h>
#include <linux/zeronic.h>

#include "kselftest_harness.h"
#include "zc_lib.h"

#define SEND (128u << 10)
#define NSENDS 3

FIXTURE(sends)
{
	int zfd, cli, srv;
	__u32 cq;
	void *map;
	size_t map_size;
	char *buf, *got;
	size_t len;
	__u64 key;
	struct zeronic_query base;
	int sg_off;
};

FIXTURE_SETUP(sends)
{
	self->sg_off = 0;
	ZC_FIXTURE_OPEN(0, 64, 1 << 20);
	/* Not periodic within a send, nor like the plain bytes. */
	for (size_t i = 0; i < self->len; i++)
		self->buf[i] = (char)(i * 7 + (i >> 9) + 1);
	self->got = malloc(2 * self->len);
	ASSERT_NE(NULL, self->got);
	ASSERT_EQ(0, reg(self->zfd, self->buf, self->len, ZERONIC_ACCESS_LOCAL_READ, &self->key));
}

/* Runs `ethtool -K <port a> sg on|off` in namespace a; 0 on success. */
static int sg_set(int on)
{
	const char *ns = getenv("ZN_NS_A"), *dev = getenv("ZN_IF_A");
	char cmd[256];

	if (!dev || !*dev)
		return -1;
	snprintf(cmd, sizeof(cmd), "%s%s%sethtool -K %s sg %s >/dev/null", ns && *ns ? "ip netns exec " : "",
		 ns && *ns ? ns : "", ns && *ns ? " " : "", dev, on ? "on" : "off");
	return system(cmd);
}

FIXTURE_TEARDOWN(sends)
{
	ZC_FIXTURE_CLOSE(0);
	if (self->sg_off)
		EXPECT_EQ(0, sg_set(1));
	free(self->got);
}

static long ms_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Reads `n` bytes from `s` into `to` within `ms`; how many it got. */
static size_t read_n(int s, char *to, size_t n, int ms)
{
	long end = ms_now() + ms;
	size_t got = 0;

	while (got < n && ms_now() < end) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, (int)(end - ms_now())) <= 0)
			continue;
		r = recv(s, to + got, n - got, MSG_DONTWAIT);
		if (r > 0)
			got += r;
		else if (r == 0 || errno != EAGAIN)
			break;
	}
	return got;
}

/*
 * Waits (at most `ms`) until `s` has unsent bytes and none in flight: the
 * peer's window is closed, so what is queued stays there. 0 when so.
 */
static int wait_window_closed(int s, int ms)
{
	long end = ms_now() + ms;
	int outq, unsent;

	while (ms_now() < end) {
		if (ioctl(s, SIOCOUTQ, &outq) || ioctl(s, SIOCOUTQNSD, &unsent))
			return -1;
		if (unsent > 0 && outq == unsent)
			return 0;
		usleep(5000);
	}
	return -1;
}

/* Index of the first byte where `a` and `b` differ, or -1. */
static long first_diff(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return (long)i;
	return -1;
}

TEST_F_TIMEOUT(sends, unsent_plain_data_before_attach, 60)
{
	size_t plain = 300000, total = plain + NSENDS * SEND, got;
	int big = 4 << 20, unsent = 0, i;
	struct zeronic_flow_query fq = { 0 };
	struct zeronic_cqe e;
	__u32 flow = 0;
	char *want;

	ASSERT_EQ(0, connect_pair(&self->cli, &self->srv)) TH_LOG("connect: %s", strerror(errno));
	/* Room for all the plain bytes in the send buffer: write() returns. */
	ASSERT_EQ(0, setsockopt(self->cli, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big)));
	want = malloc(total);
	ASSERT_NE(NULL, want);
	for (size_t j = 0; j < plain; j++)
		want[j] = (char)(j % 251);
	ASSERT_EQ((ssize_t)plain, write(self->cli, want, plain));
	/* The peer reads nothing: its window closes with bytes still unsent. */
	ASSERT_EQ(0, wait_window_closed(self->cli, 10000));
	ASSERT_EQ(0, ioctl(self->cli, SIOCOUTQNSD, &unsent));
	TH_LOG("%d plain bytes unsent at attach", unsent);
	ASSERT_EQ(0, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	fq.flow = flow;
	for (i = 0; i < NSENDS; i++) {
		ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_SEND, self->key, i * SEND, SEND));
		memcpy(want + plain + i * SEND, self->buf + i * SEND, SEND);
	}
	got = read_n(self->srv, self->got, total, 20000);
	EXPECT_EQ(total, got)
		TH_LOG("the peer got %zu of %zu bytes (%zu plain, then %u sends of %u)", got,
		       total, plain, NSENDS, SEND);
	EXPECT_EQ(-1, first_diff(want, self->got, got))
		TH_LOG("first wrong byte at %ld", first_diff(want, self->got, got));
	for (i = 0; i < NSENDS; i++) {
		ASSERT_EQ(0, cq_take(self->map, &e, 10000))
			TH_LOG("%d of %d send completions", i, NSENDS);
		ASSERT_EQ(ZERONIC_CQE_SEND, e.opcode);
		EXPECT_EQ(0, e.status)
			TH_LOG("send %d: status %u", i, e.status);
		EXPECT_EQ((__u64)i * SEND + 1, e.wr_id);
		EXPECT_EQ(SEND, e.len);
	}
	/* Only the frames shared with the plain bytes were copied. */
	ASSERT_EQ(0, ioctl(self->zfd, ZERONIC_IOC_FLOW_QUERY, &fq));
	TH_LOG("tx_merged_bytes %llu, tx_copied_bytes %llu",
	       (unsigned long long)fq.tx_merged_bytes, (unsigned long long)fq.tx_copied_bytes);
	EXPECT_LE(NSENDS * SEND - SEND, fq.tx_merged_bytes);
	free(want);
}

TEST_F_TIMEOUT(sends, sends_without_scatter_gather, 60)
{
	size_t total = NSENDS * SEND, got;
	int big = 4 << 20, early = 0, done = 0;
	struct zeronic_cqe e;
	__u32 flow = 0;

	ASSERT_EQ(0, sg_set(0));
	self->sg_off = 1;
	/* Connected after: the socket's route has no scatter-gather. */
	ASSERT_EQ(0, connect_pair(&self->cli, &self->srv)) TH_LOG("connect: %s", strerror(errno));
	/* TCP takes all the sends at once: their bytes wait in its queue. */
	ASSERT_EQ(0, setsockopt(self->cli, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big)));
	ASSERT_EQ(0, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	/* The peer reads nothing yet: more than its window cannot be ACKed. */
	for (int i = 0; i < NSENDS; i++)
		ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_SEND, self->key, i * SEND, SEND));
	ASSERT_EQ(0, wait_window_closed(self->cli, 10000));
	/* So the last send cannot have completed, nor with status 0 any other
	 * whose bytes are not all ACKed. */
	while (!cq_take(self->map, &e, 300)) {
		early++;
		TH_LOG("send %llu completed (status %u) before the peer had all its bytes",
		       (unsigned long long)e.wr_id, e.status);
	}
	EXPECT_EQ(0, early);
	got = read_n(self->srv, self->got, total, 20000);
	EXPECT_EQ(total, got);
	EXPECT_EQ(-1, first_diff(self->buf, self->got, got))
		TH_LOG("first wrong byte at %ld", first_diff(self->buf, self->got, got));
	/* Now every send is ACKed: each completes, with status 0. */
	for (done = early; done < NSENDS; done++) {
		ASSERT_EQ(0, cq_take(self->map, &e, 10000))
			TH_LOG("%d of %d send completions", done, NSENDS);
		ASSERT_EQ(ZERONIC_CQE_SEND, e.opcode);
		EXPECT_EQ(0, e.status)
			TH_LOG("send %llu: status %u", (unsigned long long)e.wr_id, e.status);
		EXPECT_EQ(SEND, e.len);
	}
}

TEST_HARNESS_MAIN
