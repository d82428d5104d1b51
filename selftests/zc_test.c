// SPDX-License-Identifier: GPL-2.0
/*
 * The zero-copy ABI of /dev/zeronic (uapi version 3, docs/uapi.md): completion
 * queues, flow attach and detach, work requests, and what each bad input
 * gets; the flow lifecycle (detach, close of the socket, the peer's FIN and
 * RST, a killed process) and what it gives back.
 *
 * Runs in the two-port topology: zc_test.sh exports ZN_NS_A, ZN_NS_B (the
 * network namespaces of the two ports), ZN_ADDR_B and ZN_WIRE (the model's
 * fault control, to freeze the NIC for a moment). Connections are made
 * from a socket created in namespace a to a listener in namespace b, so
 * their route leaves through a ZeroNIC port. Nothing else may attach flows
 * or register memory on NIC 0 while this runs (the counters are NIC-wide).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/sockios.h>
#include <linux/zeronic.h>

#include "kselftest_harness.h"
#include "zc_lib.h"

FIXTURE(zc)
{
	int zfd, cli, srv;
	__u32 cq;
	void *map;
	size_t map_size;
	char *buf;
	size_t len;
	__u64 key_rw, key_r;
	struct zeronic_query base;
};

FIXTURE_SETUP(zc)
{
	ZC_FIXTURE_OPEN(1, 64, 1 << 20);
	ASSERT_EQ(0, reg(self->zfd, self->buf, self->len,
			 ZERONIC_ACCESS_LOCAL_READ | ZERONIC_ACCESS_LOCAL_WRITE, &self->key_rw));
	ASSERT_EQ(0, reg(self->zfd, self->buf, self->len, ZERONIC_ACCESS_LOCAL_READ,
			 &self->key_r));
}

FIXTURE_TEARDOWN(zc)
{
	/* Whatever the test did, closing gives every flow, region and pin back. */
	ZC_FIXTURE_CLOSE(1);
}

/* ---- the ABI -------------------------------------------------------------- */

TEST(abi_layout)
{
	EXPECT_EQ(3, ZERONIC_UAPI_VERSION);
	EXPECT_EQ(32u, sizeof(struct zeronic_cq_create));
	EXPECT_EQ(64u, sizeof(struct zeronic_cq_ring));
	EXPECT_EQ(32u, sizeof(struct zeronic_cqe));
	EXPECT_EQ(56u, sizeof(struct zeronic_flow_attach));
	EXPECT_EQ(32u, sizeof(struct zeronic_wr));
	EXPECT_EQ(24u, sizeof(struct zeronic_post));
	EXPECT_EQ(16u, sizeof(struct zeronic_stream_consume));
	EXPECT_EQ(80u, sizeof(struct zeronic_flow_query));
	EXPECT_EQ(0xC020DA10u, (unsigned int)ZERONIC_IOC_CQ_CREATE);
	EXPECT_EQ(0xC038DA12u, (unsigned int)ZERONIC_IOC_FLOW_ATTACH);
	EXPECT_EQ(0xC018DA14u, (unsigned int)ZERONIC_IOC_POST);
}

/* ---- completion queues ---------------------------------------------------- */

TEST_F(zc, cq_bad_sizes_are_einval)
{
	__u32 cq;

	EXPECT_EQ(EINVAL, cq_create(self->zfd, 0, -1, &cq, NULL, NULL));
	EXPECT_EQ(EINVAL, cq_create(self->zfd, 4, -1, &cq, NULL, NULL));
	EXPECT_EQ(EINVAL, cq_create(self->zfd, 100, -1, &cq, NULL, NULL));
	EXPECT_EQ(EINVAL, cq_create(self->zfd, 1u << 17, -1, &cq, NULL, NULL));
	EXPECT_EQ(EINVAL, cq_create(self->zfd, UINT32_MAX, -1, &cq, NULL, NULL));
}

TEST_F(zc, cq_bad_eventfd)
{
	__u32 cq;
	int notefd = open("/dev/null", O_RDONLY);

	EXPECT_EQ(EBADF, cq_create(self->zfd, 8, 1000, &cq, NULL, NULL));
	/* Open, but not an eventfd: EBADF too (docs/uapi.md). */
	EXPECT_EQ(EBADF, cq_create(self->zfd, 8, notefd, &cq, NULL, NULL));
	close(notefd);
}

TEST_F(zc, cq_mmap_wrong_size_or_offset_is_einval)
{
	struct zeronic_cq_create c = { .entries = 8, .eventfd = -1 };

	ASSERT_EQ(0, ioctl(self->zfd, ZERONIC_IOC_CQ_CREATE, &c));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, c.mmap_size + 4096, PROT_READ, MAP_SHARED, self->zfd,
				   c.mmap_offset));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, c.mmap_size, PROT_READ, MAP_SHARED, self->zfd,
				   c.mmap_offset + 4096));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->zfd, 0));
}

TEST_F(zc, cq_destroy)
{
	struct zeronic_cq_destroy d = { .cq = 12345 };
	__u32 flow = 0;

	EXPECT_EQ(-1, ioctl(self->zfd, ZERONIC_IOC_CQ_DESTROY, &d));
	EXPECT_EQ(ENOENT, errno);
	ASSERT_EQ(0, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	d.cq = self->cq;
	EXPECT_EQ(-1, ioctl(self->zfd, ZERONIC_IOC_CQ_DESTROY, &d));
	EXPECT_EQ(EBUSY, errno);
	EXPECT_EQ(0, detach(self->zfd, flow));
	EXPECT_EQ(0, ioctl(self->zfd, ZERONIC_IOC_CQ_DESTROY, &d));
}

/* ---- attach: the wrong kinds of socket ---------------------------------- */

TEST_F(zc, attach_refuses_what_is_not_an_established_zeronic_tcp_socket)
{
	struct sockaddr_in lo = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t lo_len = sizeof(lo);
	int efd = eventfd(0, 0), udp = sock_in("ZN_NS_A", SOCK_DGRAM);
	int fresh = sock_in("ZN_NS_A", SOCK_STREAM), lst = sock_in("ZN_NS_B", SOCK_STREAM);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), a;

	EXPECT_EQ(EBADF, attach(self->zfd, 9999, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	EXPECT_EQ(ENOTSOCK, attach(self->zfd, efd, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	EXPECT_EQ(ENOTSOCK, attach(self->zfd, self->zfd, self->cq, ZERONIC_RX_MESSAGE, 0, 0,
				   NULL));
	EXPECT_EQ(EPROTONOSUPPORT, attach(self->zfd, udp, self->cq, ZERONIC_RX_MESSAGE, 0, 0,
					  NULL));
	EXPECT_EQ(ENOTCONN, attach(self->zfd, fresh, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	ASSERT_EQ(0, listen(lst, 1));
	EXPECT_EQ(ENOTCONN, attach(self->zfd, lst, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	/*
	 * Established, but over loopback: not a ZeroNIC port. A port of the
	 * kernel's choosing: a fixed one may still be held by an earlier run's
	 * TIME_WAIT (zc_test6.sh runs this test again in the same boot).
	 */
	ASSERT_EQ(0, bind(l, (void *)&lo, sizeof(lo)));
	ASSERT_EQ(0, getsockname(l, (void *)&lo, &lo_len));
	ASSERT_EQ(0, listen(l, 1));
	ASSERT_EQ(0, connect(c, (void *)&lo, sizeof(lo)));
	a = accept(l, NULL, NULL);
	EXPECT_EQ(ENODEV, attach(self->zfd, c, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	EXPECT_EQ(ENODEV, attach(self->zfd, a, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	/* The refused sockets still work as plain sockets. */
	EXPECT_EQ(3, write(c, "abc", 3));
	EXPECT_EQ(3, read(a, self->buf, 3));
	close(a);
	close(c);
	close(l);
	close(lst);
	close(fresh);
	close(udp);
	close(efd);
}

TEST_F(zc, attach_bad_arguments)
{
	struct zeronic_flow_attach at = { .sockfd = self->cli, .cq = self->cq,
					  .rx_mode = ZERONIC_RX_MESSAGE, .reserved0 = 1 };

	EXPECT_EQ(-1, ioctl(self->zfd, ZERONIC_IOC_FLOW_ATTACH, &at));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(EINVAL, attach(self->zfd, self->cli, self->cq, 7, 0, 0, NULL));
	EXPECT_EQ(ENOENT, attach(self->zfd, self->cli, 9999, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	/* Stream mode: the ring must be a registered, writable power of two. */
	EXPECT_EQ(EINVAL, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_STREAM,
				 self->key_rw, 3000, NULL));
	EXPECT_EQ(ENOENT, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_STREAM,
				 self->key_rw ^ 0x10000, 4096, NULL));
	EXPECT_EQ(EACCES, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_STREAM,
				 self->key_r, 4096, NULL));
	EXPECT_EQ(EINVAL, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_STREAM,
				 self->key_rw, self->len * 2, NULL));
	/* None of it attached anything: a good attach still works. */
	EXPECT_EQ(0, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
}

TEST_F(zc, double_attach_is_eexist)
{
	int zfd2 = zopen();
	__u32 cq2 = 0, flow = 0;

	ASSERT_EQ(0, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	EXPECT_EQ(EEXIST, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	ASSERT_EQ(0, cq_create(zfd2, 8, -1, &cq2, NULL, NULL));
	EXPECT_EQ(EEXIST, attach(zfd2, self->cli, cq2, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	/* Detached, the socket stays the ULP's: attaching again is refused. */
	EXPECT_EQ(0, detach(self->zfd, flow));
	EXPECT_EQ(EEXIST, attach(zfd2, self->cli, cq2, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	close(zfd2);
}

/* Flushes the IPv4 route cache of namespace `env`, as a link's carrier or MTU
 * change does: the sockets' cached routes become stale. */
static int flush_routes_in(const char *env)
{
	int self = in_ns(env), fd, ret = -1;

	if (self < 0)
		return -1;
	fd = open("/proc/sys/net/ipv4/route/flush", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		ret = write(fd, "1\n", 2) == 2 ? 0 : -1;
		close(fd);
	}
	back_ns(self);
	return ret;
}

/* A connection that sent nothing since the route cache was flushed (its
 * cached route stale) still leaves through its ZeroNIC port: the attach
 * looks the route up again, as TCP does before it sends (it was ENODEV,
 * seen in zc_perf.sh when a carrier change after an MTU change flushed the
 * cache between accept and attach). */
TEST_F(zc, attach_after_a_route_cache_flush)
{
	__u32 fa = 0, fb = 0;
	struct zeronic_query q;

	ASSERT_EQ(0, flush_routes_in("ZN_NS_A"));
	ASSERT_EQ(0, flush_routes_in("ZN_NS_B"));
	EXPECT_EQ(0, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &fa));
	EXPECT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &fb));
	ASSERT_EQ(0, query(self->zfd, &q));
	EXPECT_EQ(self->base.flows_in_use + 2, q.flows_in_use);
}

TEST_F(zc, concurrent_attaches_from_two_files_one_wins)
{
	int zfd2 = zopen(), st, wins = 0;
	__u32 cq2 = 0;
	pid_t kid;

	ASSERT_EQ(0, cq_create(zfd2, 8, -1, &cq2, NULL, NULL));
	kid = fork();
	if (kid == 0)
		_exit(attach(zfd2, self->cli, cq2, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	st = attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL);
	wins += st == 0;
	EXPECT_TRUE(st == 0 || st == EEXIST || st == EBUSY) TH_LOG("parent: %s", strerror(st));
	ASSERT_EQ(kid, waitpid(kid, &st, 0));
	ASSERT_TRUE(WIFEXITED(st));
	wins += WEXITSTATUS(st) == 0;
	EXPECT_TRUE(WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == EEXIST ||
		    WEXITSTATUS(st) == EBUSY);
	EXPECT_EQ(1, wins);
	close(zfd2);
}

/* ---- an attached socket ---------------------------------------------------- */

TEST_F(zc, plain_io_on_an_attached_socket_is_eopnotsupp)
{
	char b[16];

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	EXPECT_EQ(-1, recv(self->srv, b, sizeof(b), MSG_DONTWAIT));
	EXPECT_EQ(EOPNOTSUPP, errno);
	EXPECT_EQ(-1, send(self->srv, "x", 1, 0));
	EXPECT_EQ(EOPNOTSUPP, errno);
	EXPECT_EQ(-1, read(self->srv, b, sizeof(b)));
	EXPECT_EQ(EOPNOTSUPP, errno);
	EXPECT_EQ(-1, write(self->srv, "x", 1));
	EXPECT_EQ(EOPNOTSUPP, errno);
}

TEST_F(zc, post_bad_requests)
{
	int zfd2 = zopen();
	__u64 other_key = 0;
	__u32 flow = 0;
	struct zeronic_wr wrs[2] = { { 0 } };
	struct zeronic_post p = { 0 };

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, reg(zfd2, self->buf, 4096, ZERONIC_ACCESS_LOCAL_WRITE, &other_key));
	/* A key of another file, or none at all. */
	EXPECT_EQ(ENOENT, post1(self->zfd, flow, ZERONIC_WR_RECV, other_key, 0, 4096));
	EXPECT_EQ(ENOENT, post1(self->zfd, flow, ZERONIC_WR_RECV, 0x1234567, 0, 4096));
	/* Past the region's end, or wrapping. */
	EXPECT_EQ(ERANGE, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, self->len - 10, 11));
	EXPECT_EQ(ERANGE, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, UINT64_MAX, 2));
	/* Too little access. */
	EXPECT_EQ(EACCES, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_r, 0, 4096));
	/* Malformed. */
	EXPECT_EQ(EINVAL, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, 0, 0));
	EXPECT_EQ(EINVAL, post1(self->zfd, flow, 9, self->key_rw, 0, 4096));
	EXPECT_EQ(ENOENT, post1(self->zfd, flow + 1000, ZERONIC_WR_RECV, self->key_rw, 0, 4096));
	p.flow = flow;
	p.wrs = (uintptr_t)wrs;
	p.count = 0;
	EXPECT_EQ(-1, ioctl(self->zfd, ZERONIC_IOC_POST, &p));
	EXPECT_EQ(EINVAL, errno);
	p.count = 257;
	EXPECT_EQ(-1, ioctl(self->zfd, ZERONIC_IOC_POST, &p));
	EXPECT_EQ(EINVAL, errno);
	p.count = 1;
	p.wrs = 8;
	EXPECT_EQ(-1, ioctl(self->zfd, ZERONIC_IOC_POST, &p));
	EXPECT_EQ(EFAULT, errno);
	/* The first bad request stops the batch; those before it are posted. */
	wrs[0] = (struct zeronic_wr){ .wr_id = 1, .key = self->key_rw, .len = 4096,
				      .opcode = ZERONIC_WR_RECV };
	wrs[1] = (struct zeronic_wr){ .wr_id = 2, .key = self->key_rw, .len = 0,
				      .opcode = ZERONIC_WR_RECV };
	p.wrs = (uintptr_t)wrs;
	p.count = 2;
	p.posted = 99;
	EXPECT_EQ(-1, ioctl(self->zfd, ZERONIC_IOC_POST, &p));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(1u, p.posted);
	close(zfd2);
}

TEST_F(zc, cq_full_is_eagain_never_overflow)
{
	__u32 cq8 = 0, flow = 0;
	int i, n = 0;

	/* 8 entries, 2 reserved for the flow's own events: 6 requests fit. */
	ASSERT_EQ(0, cq_create(self->zfd, 8, -1, &cq8, NULL, NULL));
	ASSERT_EQ(0, attach(self->zfd, self->srv, cq8, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	for (i = 0; i < 10; i++) {
		int err = post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, i * 4096, 4096);

		if (err) {
			EXPECT_EQ(EAGAIN, err);
			break;
		}
		n++;
	}
	EXPECT_EQ(6, n);
}

/*
 * One POST per flow of MS_PER_FLOW segments, from more flows than the NIC's
 * command ring and the driver's backlog (64 + 1024 commands) hold, while the
 * NIC executes nothing (frozen through the model's fault control): every
 * segment is accepted, and once the NIC runs again each gets its bytes in
 * order. The driver keeps what does not fit with the flow and gives it to
 * the NIC as room frees up (docs/design.md).
 */
#define BL_FLOWS 6
#define BL_SEGS 256
#define BL_SEG 512
#define BL_FLOW_BYTES (BL_SEGS * BL_SEG)


static unsigned char bl_byte(int flow, size_t off)
{
	return (unsigned char)(flow * 37 + off * 13 + (off >> 9));
}

TEST_F(zc, posts_beyond_the_command_backlog_all_reach_the_nic)
{
	int cli[BL_FLOWS], srv[BL_FLOWS], posted[BL_FLOWS], errs[BL_FLOWS];
	static struct zeronic_wr wrs[BL_FLOWS][BL_SEGS];
	static unsigned char out[BL_FLOW_BYTES];
	int got[BL_FLOWS] = { 0 };
	__u32 cq = 0, flows[BL_FLOWS];
	void *map = NULL;
	size_t map_size = 0;
	struct zeronic_cqe e;
	int f, i, froze;

	ASSERT_LE(BL_FLOWS * BL_FLOW_BYTES, self->len);
	ASSERT_NE(NULL, getenv("ZN_WIRE")) TH_LOG("zc_test.sh exports ZN_WIRE");
	ASSERT_EQ(0, cq_create(self->zfd, 2048, -1, &cq, &map, &map_size));
	for (f = 0; f < BL_FLOWS; f++) {
		ASSERT_EQ(0, connect_pair(&cli[f], &srv[f]));
		ASSERT_EQ(0, attach(self->zfd, srv[f], cq, ZERONIC_RX_MESSAGE, 0, 0, &flows[f]));
		for (i = 0; i < BL_SEGS; i++) {
			__u64 off = (__u64)f * BL_FLOW_BYTES + (__u64)i * BL_SEG;

			wrs[f][i] = (struct zeronic_wr){ .wr_id = off + 1, .key = self->key_rw,
							 .offset = off, .len = BL_SEG,
							 .opcode = ZERONIC_WR_RECV };
		}
	}
	memset(self->buf, 0, BL_FLOWS * BL_FLOW_BYTES);
	/* Posted while the NIC is frozen: nothing drains the command ring. */
	froze = nic_fault("freeze");
	for (f = 0; f < BL_FLOWS; f++) {
		struct zeronic_post p = { .flow = flows[f], .count = BL_SEGS,
					  .wrs = (uintptr_t)wrs[f] };

		errs[f] = ioctl(self->zfd, ZERONIC_IOC_POST, &p) ? errno : 0;
		posted[f] = p.posted;
	}
	ASSERT_EQ(0, nic_fault("thaw"));
	ASSERT_EQ(0, froze);
	for (f = 0; f < BL_FLOWS; f++) {
		EXPECT_EQ(0, errs[f]) TH_LOG("flow %d: %s after %d", f, strerror(errs[f]),
					     posted[f]);
		EXPECT_EQ(BL_SEGS, posted[f]);
	}
	for (f = 0; f < BL_FLOWS; f++) {
		for (i = 0; i < BL_FLOW_BYTES; i++)
			out[i] = bl_byte(f, i);
		ASSERT_EQ(BL_FLOW_BYTES, write(cli[f], out, BL_FLOW_BYTES));
	}
	for (i = 0; i < BL_FLOWS * BL_SEGS; i++) {
		ASSERT_EQ(0, cq_take(map, &e, 20000)) TH_LOG("%d of %d segments completed", i,
							    BL_FLOWS * BL_SEGS);
		ASSERT_EQ(ZERONIC_CQE_RECV, e.opcode);
		ASSERT_EQ(0, e.status);
		ASSERT_EQ(BL_SEG, e.len);
		for (f = 0; f < BL_FLOWS && flows[f] != e.flow; f++)
			;
		ASSERT_GT(BL_FLOWS, f);
		/* In stream order within the flow. */
		ASSERT_EQ((__u64)got[f] * BL_SEG, e.stream_off);
		got[f]++;
	}
	for (f = 0; f < BL_FLOWS; f++) {
		struct zeronic_flow_query q = { .flow = flows[f] };
		size_t bad = 0;

		for (i = 0; i < BL_FLOW_BYTES; i++)
			bad += self->buf[(size_t)f * BL_FLOW_BYTES + i] != (char)bl_byte(f, i);
		EXPECT_EQ(0, bad) TH_LOG("flow %d: %zu bytes differ", f, bad);
		ASSERT_EQ(0, ioctl(self->zfd, ZERONIC_IOC_FLOW_QUERY, &q));
		EXPECT_EQ(BL_FLOW_BYTES, q.rx_placed_bytes + q.rx_copied_bytes);
		EXPECT_EQ(0, q.rx_posted);
		EXPECT_EQ(0, detach(self->zfd, flows[f]));
		close(cli[f]);
		close(srv[f]);
	}
	munmap(map, map_size);
}

TEST_F(zc, dereg_of_a_region_in_use_is_ebusy)
{
	__u32 flow = 0;

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, 0, 4096));
	EXPECT_EQ(EBUSY, dereg(self->zfd, self->key_rw));
	/* The other region is not in use. */
	EXPECT_EQ(0, dereg(self->zfd, self->key_r));
	EXPECT_EQ(0, detach(self->zfd, flow));
	/* Detached: the segment went back (ECANCELED), the region is free. */
	EXPECT_EQ(0, dereg(self->zfd, self->key_rw));
}

/* ---- lifecycle -------------------------------------------------------------- */

TEST_F(zc, detach_gives_segments_back_then_detached)
{
	struct zeronic_cqe e;
	__u32 flow = 0;
	struct zeronic_flow_query fq;

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, 0, 8192));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, 8192, 8192));
	EXPECT_EQ(0, detach(self->zfd, flow));
	ASSERT_EQ(0, cq_take(self->map, &e, 2000));
	EXPECT_EQ(ZERONIC_CQE_RECV, e.opcode);
	EXPECT_EQ(ECANCELED, e.status);
	EXPECT_EQ(1u, e.wr_id);
	ASSERT_EQ(0, cq_take(self->map, &e, 2000));
	EXPECT_EQ(ZERONIC_CQE_RECV, e.opcode);
	EXPECT_EQ(8193u, e.wr_id);
	ASSERT_EQ(0, cq_take(self->map, &e, 2000));
	EXPECT_EQ(ZERONIC_CQE_FLOW, e.opcode);
	EXPECT_EQ(ZERONIC_CQE_F_DETACHED, e.flags & ZERONIC_CQE_F_DETACHED);
	/* The flow is gone from the file. */
	fq.flow = flow;
	EXPECT_EQ(-1, ioctl(self->zfd, ZERONIC_IOC_FLOW_QUERY, &fq));
	EXPECT_EQ(ENOENT, errno);
	EXPECT_EQ(ENOENT, detach(self->zfd, flow));
	EXPECT_EQ(ENOENT, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, 0, 4096));
}

TEST_F(zc, close_of_the_socket_detaches)
{
	struct zeronic_cqe e;
	struct zeronic_query q;
	__u32 flow = 0;

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, 0, 4096));
	ASSERT_EQ(0, query(self->zfd, &q));
	EXPECT_EQ(self->base.flows_in_use + 1, q.flows_in_use);
	close(self->srv);
	self->srv = -1;
	ASSERT_EQ(0, cq_take(self->map, &e, 2000));
	EXPECT_EQ(ECANCELED, e.status);
	ASSERT_EQ(0, cq_take(self->map, &e, 2000));
	EXPECT_EQ(ZERONIC_CQE_FLOW, e.opcode);
	EXPECT_TRUE(e.flags & ZERONIC_CQE_F_DETACHED);
	ASSERT_EQ(0, query(self->zfd, &q));
	EXPECT_EQ(self->base.flows_in_use, q.flows_in_use);
}

TEST_F(zc, peer_fin_is_eof)
{
	struct zeronic_cqe e;
	__u32 flow = 0;

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, 0, 4096));
	memset(self->buf, 0, 16);
	ASSERT_EQ(5, write(self->cli, "hello", 5));
	ASSERT_EQ(0, shutdown(self->cli, SHUT_WR));
	ASSERT_EQ(0, cq_take(self->map, &e, 5000)) TH_LOG("no completion after the FIN");
	EXPECT_EQ(ZERONIC_CQE_RECV, e.opcode);
	EXPECT_EQ(0, e.status);
	EXPECT_EQ(5u, e.len);
	EXPECT_TRUE(e.flags & ZERONIC_CQE_F_EOF);
	EXPECT_EQ(0, memcmp(self->buf, "hello", 5));
	ASSERT_EQ(0, cq_take(self->map, &e, 5000));
	EXPECT_EQ(ZERONIC_CQE_FLOW, e.opcode);
	EXPECT_TRUE(e.flags & ZERONIC_CQE_F_EOF);
	EXPECT_EQ(5u, e.stream_off);
}

/*
 * FIN both ways while attached: the connection ends in order, which is no
 * reset: EOF once, then nothing more; the flow stays (state EOF) until
 * detached or closed.
 */
TEST_F(zc, orderly_close_is_eof_not_a_reset)
{
	struct zeronic_stream_consume sc = { 0 };
	struct zeronic_flow_query fq;
	struct zeronic_cqe e;
	__u32 flow = 0, bytes = 0, eofs = 0;
	char c;

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_STREAM,
			    self->key_rw, 4096, &flow));
	ASSERT_EQ(3, write(self->cli, "bye", 3));
	ASSERT_EQ(0, shutdown(self->cli, SHUT_WR));
	ASSERT_EQ(0, shutdown(self->srv, SHUT_WR));
	/* The peer reads our FIN: both directions are closed now. */
	ASSERT_EQ(0, read(self->cli, &c, 1));
	/* STREAM_DATA entries (one of them flagged EOF), then the FLOW event. */
	for (;;) {
		ASSERT_EQ(0, cq_take(self->map, &e, 5000)) TH_LOG("no FLOW event");
		if (e.opcode == ZERONIC_CQE_FLOW)
			break;
		ASSERT_EQ(ZERONIC_CQE_STREAM_DATA, e.opcode);
		bytes += e.len;
		eofs += !!(e.flags & ZERONIC_CQE_F_EOF);
	}
	EXPECT_EQ(3u, bytes);
	EXPECT_EQ(1u, eofs);
	EXPECT_EQ(0, e.status) TH_LOG("an orderly close reported as status %u", e.status);
	EXPECT_TRUE(e.flags & ZERONIC_CQE_F_EOF);
	EXPECT_EQ(0, memcmp(self->buf, "bye", 3));
	/* Nothing more: no reset, and consuming does not repeat the EOF. */
	sc.flow = flow;
	sc.stream_off = 3;
	EXPECT_EQ(0, ioctl(self->zfd, ZERONIC_IOC_STREAM_CONSUME, &sc));
	EXPECT_EQ(0, ioctl(self->zfd, ZERONIC_IOC_STREAM_CONSUME, &sc));
	usleep(300000);
	EXPECT_EQ(-1, cq_take(self->map, &e, 500))
		TH_LOG("unexpected entry: op %u status %u flags 0x%x", e.opcode, e.status, e.flags);
	fq.flow = flow;
	ASSERT_EQ(0, ioctl(self->zfd, ZERONIC_IOC_FLOW_QUERY, &fq));
	EXPECT_EQ(ZERONIC_FLOW_EOF, fq.state);
	EXPECT_EQ(3u, fq.rx_stream_off);
}

/*
 * Flow control: the receive window ends at the posted room, give or take
 * at most one unit of the window scale (docs/uapi.md). The receiver
 * posts 256 KiB, more than the window its socket offered before the
 * attach, and the sender queues 768 KiB at once. Once the segment is full,
 * at most a unit's bytes reach the receiver beyond it (its socket holds
 * what the flow could not consume: SIOCINQ) and the sender still holds the
 * rest unsent (SIOCOUTQNSD); posting the rest lets it through, every byte
 * placed but at most a unit.
 */
TEST_F(zc, receive_window_ends_at_the_posted_room)
{
	const size_t first = 256 << 10, total = 768 << 10;
	struct zeronic_flow_query fq = { 0 };
	int sndbuf = 2 << 20, inq = -1, unsent = 0;
	struct tcp_info ti = { 0 };
	socklen_t tl = sizeof(ti);
	struct zeronic_cqe e;
	size_t i, unit;
	char *src;

	ASSERT_EQ(0, getsockopt(self->srv, IPPROTO_TCP, TCP_INFO, &ti, &tl));
	unit = (size_t)1 << ti.tcpi_rcv_wscale;
	ASSERT_EQ(0, setsockopt(self->cli, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)));
	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &fq.flow));
	ASSERT_EQ(0, post1(self->zfd, fq.flow, ZERONIC_WR_RECV, self->key_rw, 0, first));
	src = malloc(total);
	ASSERT_NE(NULL, src);
	for (i = 0; i < total; i++)
		src[i] = (char)(i * 7 + (i >> 12));
	ASSERT_EQ((ssize_t)total, write(self->cli, src, total));
	/* The room's last bytes may take the sender's persist timer. */
	ASSERT_EQ(0, cq_take(self->map, &e, 10000));
	EXPECT_EQ(first, e.len);
	usleep(300000);
	ASSERT_EQ(0, ioctl(self->srv, SIOCINQ, &inq));
	EXPECT_GT((int)unit, inq) TH_LOG("%d bytes arrived beyond the posted room (unit %zu)",
					 inq, unit);
	ASSERT_EQ(0, ioctl(self->cli, SIOCOUTQNSD, &unsent));
	EXPECT_LT((int)(total - first - unit), unsent)
		TH_LOG("the sender sent all but %d bytes into a full room", unsent);
	ASSERT_EQ(0, post1(self->zfd, fq.flow, ZERONIC_WR_RECV, self->key_rw, first,
			   total - first));
	ASSERT_EQ(0, cq_take(self->map, &e, 10000));
	EXPECT_EQ(total - first, e.len);
	for (i = 0; i < total && self->buf[i] == src[i]; i++)
		;
	EXPECT_EQ(total, i) TH_LOG("byte %zu differs (%zu bytes posted first)", i, first);
	ASSERT_EQ(0, ioctl(self->zfd, ZERONIC_IOC_FLOW_QUERY, &fq));
	EXPECT_EQ(total, fq.rx_stream_off);
	EXPECT_GE(unit, fq.rx_copied_bytes);
	EXPECT_EQ(total, fq.rx_placed_bytes + fq.rx_copied_bytes);
	free(src);
}

/*
 * Small segments that arrive while the application holds the socket (any
 * ioctl on the flow locks it, as the shim does on every read batch and
 * send) go to TCP's backlog, where the stack pulls a packet whose payload
 * fits the free room of its header buffer into that buffer
 * (skb_condense(), also for the out-of-order queue): the payload the NIC
 * placed would then come back as a copy. The receipt skbs leave no such
 * room, so every byte is placed. A child sends 40-byte messages one at a
 * time (TCP_NODELAY) while the parent keeps the socket busy with
 * STREAM_CONSUME.
 */
TEST_F(zc, small_segments_to_a_busy_owner_are_placed)
{
	const size_t msg = 40, count = 600, total = msg * count, ring = 64 << 10;
	struct zeronic_stream_consume sc = { 0 };
	struct zeronic_flow_query fq = { 0 };
	size_t got = 0, i, flagged = 0;
	struct zeronic_cqe e;
	struct zeronic_cq_ring *r = self->map;
	struct zeronic_cqe *ents = (void *)((char *)self->map + r->entries_offset);
	int one = 1, status = -1;
	struct timespec t0, t1;
	char *src;
	pid_t pid;

	src = malloc(total);
	ASSERT_NE(NULL, src);
	for (i = 0; i < total; i++)
		src[i] = (char)(i * 13 + (i >> 8));
	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_STREAM,
			    self->key_rw, ring, &fq.flow));
	ASSERT_EQ(0, setsockopt(self->cli, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		for (i = 0; i < count; i++) {
			if (write(self->cli, src + i * msg, msg) != (ssize_t)msg)
				_exit(1);
			usleep(2000);
		}
		_exit(0);
	}
	sc.flow = fq.flow;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (got < total) {
		__u32 tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);

		/* Consuming nothing new still locks the socket. */
		ASSERT_EQ(0, ioctl(self->zfd, ZERONIC_IOC_STREAM_CONSUME, &sc));
		while (r->head != tail) {
			e = ents[r->head & r->mask];
			__atomic_store_n(&r->head, r->head + 1, __ATOMIC_RELEASE);
			ASSERT_EQ(ZERONIC_CQE_STREAM_DATA, e.opcode);
			EXPECT_EQ(got, e.stream_off);
			got += e.len;
			flagged += !!(e.flags & ZERONIC_CQE_F_COPIED);
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec > 60)
			break;
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_EQ(0, status);
	ASSERT_EQ(total, got);
	EXPECT_EQ(0, memcmp(self->buf, src, total));
	ASSERT_EQ(0, ioctl(self->zfd, ZERONIC_IOC_FLOW_QUERY, &fq));
	EXPECT_EQ(total, fq.rx_stream_off);
	EXPECT_EQ(0u, fq.rx_copied_bytes)
		TH_LOG("%llu of %zu bytes copied, %zu completions flagged COPIED",
		       (unsigned long long)fq.rx_copied_bytes, total, flagged);
	EXPECT_EQ(total, fq.rx_placed_bytes);
	free(src);
}

TEST_F(zc, data_queued_before_attach_is_delivered_first)
{
	struct zeronic_cqe e;
	struct zeronic_flow_query fq;
	__u32 flow = 0;

	ASSERT_EQ(7, write(self->cli, "before|", 7));
	usleep(200000);
	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(6, write(self->cli, "after!", 6));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, 0, 13));
	ASSERT_EQ(0, cq_take(self->map, &e, 5000));
	EXPECT_EQ(13u, e.len);
	EXPECT_EQ(0, memcmp(self->buf, "before|after!", 13));
	fq.flow = flow;
	ASSERT_EQ(0, ioctl(self->zfd, ZERONIC_IOC_FLOW_QUERY, &fq));
	EXPECT_LE(7u, fq.rx_copied_bytes);
	EXPECT_EQ(13u, fq.rx_stream_off);
}

/*
 * Stream mode: the ring is there at attach, and nothing more is sent, so
 * only the attach itself can hand over what TCP queued before it.
 */
TEST_F(zc, data_queued_before_a_stream_attach_reaches_the_ring)
{
	struct zeronic_cqe e;
	__u32 flow = 0;

	ASSERT_EQ(7, write(self->cli, "before|", 7));
	usleep(200000);
	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_STREAM,
			    self->key_rw, 4096, &flow));
	ASSERT_EQ(0, cq_take(self->map, &e, 5000));
	EXPECT_EQ(ZERONIC_CQE_STREAM_DATA, e.opcode);
	EXPECT_EQ(0u, e.stream_off);
	EXPECT_EQ(7u, e.len);
	EXPECT_NE(0u, e.flags & ZERONIC_CQE_F_COPIED);
	EXPECT_EQ(0, memcmp(self->buf, "before|", 7));
}

TEST_F(zc, peer_reset_fails_the_flow)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	struct zeronic_cqe e;
	int saw_reset = 0, i;
	__u32 flow = 0;

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, 0, 4096));
	ASSERT_EQ(0, setsockopt(self->cli, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
	close(self->cli);
	self->cli = -1;
	for (i = 0; i < 2 && !cq_take(self->map, &e, 5000); i++) {
		if (e.opcode == ZERONIC_CQE_RECV)
			EXPECT_EQ(ECONNRESET, e.status);
		if (e.opcode == ZERONIC_CQE_FLOW && e.status == ECONNRESET)
			saw_reset = 1;
	}
	EXPECT_TRUE(saw_reset) TH_LOG("no reset event");
	EXPECT_EQ(EPIPE, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key_rw, 0, 4096));
}

/* ---- the process dies ------------------------------------------------------ */

TEST_F(zc, kill_with_flows_attached_gives_everything_back)
{
	int ready[2];
	struct zeronic_query q;
	pid_t kid;
	char c;

	ASSERT_EQ(0, pipe(ready));
	kid = fork();
	if (kid == 0) {
		int zfd = zopen();
		__u32 cq = 0, flow = 0;
		__u64 key = 0;
		char *b = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

		if (zfd < 0 || cq_create(zfd, 64, -1, &cq, NULL, NULL) ||
		    reg(zfd, b, 1 << 20, ZERONIC_ACCESS_LOCAL_WRITE, &key) ||
		    attach(zfd, self->srv, cq, ZERONIC_RX_MESSAGE, 0, 0, &flow) ||
		    post1(zfd, flow, ZERONIC_WR_RECV, key, 0, 1 << 20))
			_exit(1);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	ASSERT_EQ(1, read(ready[0], &c, 1));
	ASSERT_EQ(0, query(self->zfd, &q));
	EXPECT_EQ(self->base.flows_in_use + 1, q.flows_in_use);
	/* Data flowing into the posted segment while it dies. */
	ASSERT_EQ(4, write(self->cli, "data", 4));
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	ASSERT_EQ(0, query(self->zfd, &q));
	EXPECT_EQ(self->base.flows_in_use, q.flows_in_use);
	EXPECT_EQ(self->base.pinned_pages + 512, q.pinned_pages)
		TH_LOG("only the fixture's two 1 MiB regions may be left");
	close(ready[0]);
	close(ready[1]);
}

TEST_HARNESS_MAIN
