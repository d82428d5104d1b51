// SPDX-License-Identifier: GPL-2.0
/*
 * How a flow ends (issue 32): what the NIC may still write once the driver
 * gave memory back, and what the completions of that memory say.
 *
 * - eof_stops_placement: the application's shutdown(SHUT_RD) ends the
 *   stream (EOF); the receive segments it completes must not change
 *   afterwards while the peer keeps sending.
 * - reconnect_after_fin: after FIN both ways on an attached flow, a new
 *   connection on the same 4-tuple must connect without losing its SYN
 *   and its payload must not land in the old flow's buffers.
 * - detach_cancels_pending_sends: sends a detach drops before TCP took all
 *   their bytes complete with ECANCELED, never as sent.
 * - consume_on_reset_flow_leaves_slot_alone: STREAM_CONSUME on a flow that
 *   was reset must not move the ring of the flow the NIC gave its index to.
 *
 * Runs in the two-port topology (zc_teardown.sh sources zc_env.sh): the
 * attached socket is made in namespace a, its peer in namespace b.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
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

#define SEG (64u << 10)
#define NSEGS 4

FIXTURE(td)
{
	int zfd, cli, srv;
	__u32 cq;
	void *map;
	size_t map_size;
	char *buf, *snap;
	size_t len;
	__u64 key_rw, key_r;
	struct zeronic_query base;
};

FIXTURE_SETUP(td)
{
	ZC_FIXTURE_OPEN(0, 64, 4 << 20);
	self->snap = malloc(self->len);
	ASSERT_NE(NULL, self->snap);
	ASSERT_EQ(0, reg(self->zfd, self->buf, self->len,
			 ZERONIC_ACCESS_LOCAL_READ | ZERONIC_ACCESS_LOCAL_WRITE, &self->key_rw));
	ASSERT_EQ(0, reg(self->zfd, self->buf, self->len, ZERONIC_ACCESS_LOCAL_READ,
			 &self->key_r));
}

FIXTURE_TEARDOWN(td)
{
	ZC_FIXTURE_CLOSE(0);
	free(self->snap);
}

static long ms_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Waits (at most `ms`) until every byte written to `s` was ACKed. */
static int wait_acked(int s, int ms)
{
	long end = ms_now() + ms;
	int outq = -1;

	while (ms_now() < end) {
		if (ioctl(s, SIOCOUTQ, &outq))
			return -1;
		if (outq == 0)
			return 0;
		usleep(5000);
	}
	return -1;
}

/* Waits (at most `ms`) until `s`'s TCP state is `state`. */
static int wait_state(int s, int state, int ms)
{
	long end = ms_now() + ms;
	struct tcp_info ti;
	socklen_t l;

	while (ms_now() < end) {
		l = sizeof(ti);
		if (getsockopt(s, IPPROTO_TCP, TCP_INFO, &ti, &l))
			return -1;
		if (ti.tcpi_state == state)
			return 0;
		usleep(5000);
	}
	return -1;
}

/* Waits (at most `ms`) until the flow consumed `off` bytes. */
static int wait_rx(int zfd, __u32 flow, __u64 off, int ms)
{
	struct zeronic_flow_query fq = { .flow = flow };
	long end = ms_now() + ms;

	while (ms_now() < end) {
		if (ioctl(zfd, ZERONIC_IOC_FLOW_QUERY, &fq))
			return -1;
		if (fq.rx_stream_off >= off)
			return 0;
		usleep(5000);
	}
	return -1;
}

/*
 * shutdown(SHUT_RD) on a live attached connection: the next consume sees
 * the end of the stream and completes every segment (F_EOF). From then on
 * the NIC must not write into them: the peer's later bytes must leave the
 * returned buffers as they were.
 */
TEST_F(td, eof_stops_placement)
{
	struct zeronic_cqe e;
	__u32 flow = 0, recvs = 0;
	int i;

	ASSERT_EQ(0, connect_pair(&self->cli, &self->srv));
	memset(self->buf, 0, NSEGS * SEG);
	ASSERT_EQ(0, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	for (i = 0; i < NSEGS; i++)
		ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, i * SEG, SEG));
	ASSERT_EQ(0, write_all(self->srv, 'a', 1000));
	ASSERT_EQ(0, wait_rx(self->zfd, flow, 1000, 5000)) TH_LOG("the first bytes never came");
	ASSERT_EQ(0, shutdown(self->cli, SHUT_RD));
	/* The next bytes consumed find the receive side shut: EOF. */
	ASSERT_EQ(0, write_all(self->srv, 'b', 1000));
	for (;;) {
		ASSERT_EQ(0, cq_take(self->map, &e, 5000)) TH_LOG("no EOF event");
		if (e.opcode == ZERONIC_CQE_FLOW)
			break;
		ASSERT_EQ(ZERONIC_CQE_RECV, e.opcode);
		EXPECT_EQ(0, e.status);
		EXPECT_TRUE(e.flags & ZERONIC_CQE_F_EOF);
		recvs++;
	}
	EXPECT_EQ(NSEGS, recvs);
	EXPECT_TRUE(e.flags & ZERONIC_CQE_F_EOF);
	EXPECT_EQ(2000u, e.stream_off);
	/* Every segment is the application's again. */
	memcpy(self->snap, self->buf, NSEGS * SEG);
	ASSERT_EQ(0, write_all(self->srv, 'c', 64 << 10));
	/* Once ACKed they went through the NIC (placed or not); bounded. */
	EXPECT_EQ(0, wait_acked(self->srv, 5000)) TH_LOG("the peer's bytes were not ACKed");
	for (i = 0; i < NSEGS * (int)SEG; i++)
		if (self->buf[i] != self->snap[i])
			break;
	EXPECT_EQ(NSEGS * (int)SEG, i)
		TH_LOG("returned buffer changed at offset %d: 0x%02x, was 0x%02x", i,
		       (unsigned char)self->buf[i], (unsigned char)self->snap[i]);
	EXPECT_EQ(-1, cq_take(self->map, &e, 200))
		TH_LOG("unexpected entry: op %u status %u", e.opcode, e.status);
	/* A receive posted after the EOF completes at once, empty, as read() returns 0. */
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, 0, SEG));
	ASSERT_EQ(0, cq_take(self->map, &e, 5000))
		TH_LOG("a receive posted after the EOF never completed");
	EXPECT_EQ(ZERONIC_CQE_RECV, e.opcode);
	EXPECT_EQ(0, e.status);
	EXPECT_EQ(0u, e.len);
	EXPECT_TRUE(e.flags & ZERONIC_CQE_F_EOF);
	EXPECT_EQ(-1, cq_take(self->map, &e, 200))
		TH_LOG("unexpected entry after it: op %u status %u", e.opcode, e.status);
}

/*
 * FIN both ways on an attached flow (the peer closes first, so its side
 * keeps the TIME_WAIT), then a new connection from the same local port to
 * the same listener: the same 4-tuple. Its handshake must not lose a
 * packet (no SYN retransmitted) and its payload must reach the new socket,
 * not the old flow's buffers. Repeated: a lost SYN was seen on about half
 * of such reconnects.
 */
#define RECONNECTS 6
#define PORT2 5098

TEST_F(td, reconnect_after_fin)
{
	struct sockaddr_in b = { .sin_family = AF_INET, .sin_port = htons(PORT2) };
	struct sockaddr_in any = { .sin_family = AF_INET };
	struct sockaddr_in la;
	struct zeronic_cqe e;
	char rd[4096];
	int l, one = 1, round;

	l = sock_in("ZN_NS_B", SOCK_STREAM);
	ASSERT_LE(0, l);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	ASSERT_EQ(0, bind(l, (void *)&b, sizeof(b)));
	ASSERT_EQ(0, listen(l, 4));
	inet_pton(AF_INET, getenv("ZN_ADDR_B"), &b.sin_addr);
	for (round = 0; round < RECONNECTS; round++) {
		struct tcp_info ti;
		socklen_t sl = sizeof(la);
		__u32 flow = 0, got = 0;
		int c1, s1, c2, s2;
		size_t n;

		c1 = sock_in("ZN_NS_A", SOCK_STREAM);
		ASSERT_LE(0, c1);
		/*
		 * A port of its own, kept (bound, not picked by connect) and
		 * shared only with c2: connect() may pick a port an earlier
		 * test's TIME_WAIT to another address holds without
		 * SO_REUSEADDR, which c2's bind could then not share.
		 */
		setsockopt(c1, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		ASSERT_EQ(0, bind(c1, (void *)&any, sizeof(any)));
		ASSERT_EQ(0, connect(c1, (void *)&b, sizeof(b)));
		s1 = accept(l, NULL, NULL);
		ASSERT_LE(0, s1);
		ASSERT_EQ(0, getsockname(c1, (void *)&la, &sl));
		memset(self->buf, 0, NSEGS * SEG);
		ASSERT_EQ(0, attach(self->zfd, c1, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
		for (int i = 0; i < NSEGS; i++)
			ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw,
					   i * SEG, SEG));
		ASSERT_EQ(5, write(s1, "hello", 5));
		/* The peer closes first (TIME_WAIT there), then we do. */
		close(s1);
		for (;;) {
			ASSERT_EQ(0, cq_take(self->map, &e, 5000)) TH_LOG("no EOF event");
			if (e.opcode == ZERONIC_CQE_FLOW)
				break;
			ASSERT_EQ(ZERONIC_CQE_RECV, e.opcode);
			got += e.len;
		}
		EXPECT_TRUE(e.flags & ZERONIC_CQE_F_EOF);
		EXPECT_EQ(5u, got);
		ASSERT_EQ(0, shutdown(c1, SHUT_WR));
		ASSERT_EQ(0, wait_state(c1, TCP_CLOSE, 5000)) TH_LOG("FIN both ways never done");
		memcpy(self->snap, self->buf, NSEGS * SEG);

		/* Same 4-tuple: our old local port, the same listener. */
		c2 = sock_in("ZN_NS_A", SOCK_STREAM);
		ASSERT_LE(0, c2);
		setsockopt(c2, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		ASSERT_EQ(0, bind(c2, (void *)&la, sizeof(la))) TH_LOG("bind: %s", strerror(errno));
		ASSERT_EQ(0, connect(c2, (void *)&b, sizeof(b)))
			TH_LOG("round %d: connect: %s", round, strerror(errno));
		sl = sizeof(ti);
		ASSERT_EQ(0, getsockopt(c2, IPPROTO_TCP, TCP_INFO, &ti, &sl));
		EXPECT_EQ(0u, ti.tcpi_total_retrans)
			TH_LOG("round %d: the handshake lost a packet (%u retransmissions)", round,
			       ti.tcpi_total_retrans);
		s2 = accept(l, NULL, NULL);
		ASSERT_LE(0, s2);
		ASSERT_EQ(0, write_all(s2, 'n', sizeof(rd)));
		for (n = 0; n < sizeof(rd);) {
			struct pollfd p = { .fd = c2, .events = POLLIN };
			ssize_t r;

			ASSERT_EQ(1, poll(&p, 1, 5000)) TH_LOG("round %d: new payload lost", round);
			r = read(c2, rd + n, sizeof(rd) - n);
			ASSERT_LT(0, r);
			n += r;
		}
		for (n = 0; n < sizeof(rd) && rd[n] == 'n'; n++)
			;
		EXPECT_EQ(sizeof(rd), n);
		EXPECT_EQ(0, memcmp(self->buf, self->snap, NSEGS * SEG))
			TH_LOG("round %d: the new connection's payload landed in old buffers",
			       round);
		close(s2);
		close(c2);
		ASSERT_EQ(0, detach(self->zfd, flow));
		/* The DETACHED event. */
		ASSERT_EQ(0, cq_take(self->map, &e, 5000));
		EXPECT_EQ(ZERONIC_CQE_FLOW, e.opcode);
		EXPECT_TRUE(e.flags & ZERONIC_CQE_F_DETACHED);
		close(c1);
	}
	close(l);
}

/*
 * Two sends to a peer that does not read, with small buffers both ways:
 * the first is partly queued into TCP, the second not at all. A detach
 * drops both; once TCP frees what it holds (the peer closes with unread
 * data: a reset), both complete with ECANCELED and their full length.
 */
TEST_F(td, detach_cancels_pending_sends)
{
	int small = 4096, sends = 0, detached = 0;
	struct zeronic_cqe e;
	__u32 flow = 0;

	ASSERT_EQ(0, connect_pair(&self->cli, &self->srv));
	ASSERT_EQ(0, setsockopt(self->srv, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)));
	ASSERT_EQ(0, setsockopt(self->cli, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)));
	ASSERT_EQ(0, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_SEND, self->key_r, 0, 2 << 20));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_SEND, self->key_r, 2 << 20, 64 << 10));
	ASSERT_EQ(0, detach(self->zfd, flow));
	/* Unread data: the close resets the connection, and TCP frees its skbs. */
	close(self->srv);
	self->srv = -1;
	while (sends < 2) {
		ASSERT_EQ(0, cq_take(self->map, &e, 5000))
			TH_LOG("%d of 2 send completions", sends);
		if (e.opcode == ZERONIC_CQE_FLOW) {
			detached += !!(e.flags & ZERONIC_CQE_F_DETACHED);
			continue;
		}
		ASSERT_EQ(ZERONIC_CQE_SEND, e.opcode);
		EXPECT_EQ(ECANCELED, e.status)
			TH_LOG("send %llu (%u bytes): status %u", (unsigned long long)e.wr_id,
			       e.len, e.status);
		EXPECT_EQ(sends ? 64u << 10 : 2u << 20, e.len);
		sends++;
	}
	EXPECT_EQ(1, detached + (cq_take(self->map, &e, 200) == 0 &&
				  (e.flags & ZERONIC_CQE_F_DETACHED)));
}

/* Takes entries until `bytes` STREAM_DATA bytes of `flow` came (others dropped). */
static int stream_bytes(void *map, __u32 flow, __u32 bytes, int ms)
{
	struct zeronic_cqe e;
	__u32 got = 0;

	while (got < bytes) {
		if (cq_take(map, &e, ms))
			return -1;
		if (e.flow == flow && e.opcode == ZERONIC_CQE_STREAM_DATA)
			got += e.len;
	}
	return 0;
}

/*
 * Flow A (stream mode) receives 100 bytes and is reset; flow B is attached
 * next, so the NIC may give it A's Flow Table index, and receives 200
 * bytes into its own 4 KiB ring (unconsumed). STREAM_CONSUME of A's 100
 * bytes must not reach the NIC: as a ring head update of that index it
 * would move B's ring window to [100, 4196), where the NIC would place a
 * frame at stream offset 4106 over B's unconsumed bytes 10..59 (ring
 * offset 4106 % 4096). The frame is injected from the peer's namespace,
 * then one real byte follows it, so the frame was handled once that byte
 * is reported.
 */
#define RING 4096u

TEST_F(td, consume_on_reset_flow_leaves_slot_alone)
{
	struct zeronic_stream_consume sc = { 0 };
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	int cli_b = -1, srv_b = -1, i;
	__u32 fa = 0, fb = 0, seq;
	struct zeronic_cqe e;

	memset(self->buf, 0, RING);
	ASSERT_EQ(0, connect_pair(&self->cli, &self->srv));
	ASSERT_EQ(0, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_STREAM, self->key_rw,
			    RING, &fa));
	ASSERT_EQ(0, write_all(self->srv, 'a', 100));
	ASSERT_EQ(0, stream_bytes(self->map, fa, 100, 5000)) TH_LOG("flow A got no data");
	/* The peer resets A. */
	ASSERT_EQ(0, setsockopt(self->srv, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
	close(self->srv);
	self->srv = -1;
	for (;;) {
		ASSERT_EQ(0, cq_take(self->map, &e, 5000)) TH_LOG("no reset event on A");
		if (e.flow == fa && e.opcode == ZERONIC_CQE_FLOW)
			break;
	}
	EXPECT_EQ(ECONNRESET, e.status);

	ASSERT_EQ(0, connect_pair(&cli_b, &srv_b));
	ASSERT_EQ(0, attach(self->zfd, cli_b, self->cq, ZERONIC_RX_STREAM, self->key_rw,
			    RING, &fb));
	/* B's ring is where A's was (region offset 0): A's NIC flow is gone. */
	ASSERT_EQ(0, write_all(srv_b, 'x', 200));
	ASSERT_EQ(0, stream_bytes(self->map, fb, 200, 5000)) TH_LOG("flow B got no data");
	for (i = 0; i < 200 && self->buf[i] == 'x'; i++)
		;
	ASSERT_EQ(200, i) TH_LOG("B's ring does not hold its bytes");

	/* A's consumption: A's index is B's now on the NIC. */
	sc.flow = fa;
	sc.stream_off = 100;
	ioctl(self->zfd, ZERONIC_IOC_STREAM_CONSUME, &sc);

	ASSERT_EQ(0, zc_seqs(srv_b, &seq, NULL)) TH_LOG("TCP_REPAIR: %s", strerror(errno));
	/* Stream offset 0 of B is seq - 200. */
	ASSERT_EQ(0, zc_inject(srv_b, "ZN_NS_B", seq - 200 + RING + 10, 0, ZC_TCP_PSH, 'Z', 50))
		TH_LOG("inject: %s", strerror(errno));
	ASSERT_EQ(0, write_all(srv_b, 'y', 1));
	ASSERT_EQ(0, stream_bytes(self->map, fb, 1, 5000)) TH_LOG("B's next byte never came");
	for (i = 0; i < 200 && self->buf[i] == 'x'; i++)
		;
	EXPECT_EQ(200, i) TH_LOG("B's unconsumed byte %d is 0x%02x: the NIC moved B's ring", i,
				 (unsigned char)self->buf[i]);
	close(srv_b);
	close(cli_b);
}

TEST_HARNESS_MAIN
