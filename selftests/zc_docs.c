// SPDX-License-Identifier: GPL-2.0
/*
 * The errnos docs/uapi.md promises where the driver answered otherwise
 * (issue 32, finding 14): CQ_CREATE with a descriptor that is not an
 * eventfd, MR_REG of kernel addresses, FLOW_ATTACH of a socket in a
 * sockmap, and the order in which FLOW_ATTACH checks its arguments.
 *
 * Runs in the two-port topology, like zc_test (zc_docs.sh exports
 * ZN_NS_A, ZN_NS_B and ZN_ADDR_B). Connections go from namespace a to a
 * listener in namespace b over the ZeroNIC ports. The sockmap case needs
 * CAP_BPF (the suite runs as root).
 */
#define _GNU_SOURCE
#include <linux/bpf.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>

#include "kselftest_harness.h"
#include "zc_lib.h"

FIXTURE(docs)
{
	int zfd, cli, srv;
	__u32 cq;
	void *map;
	size_t map_size;
	char *buf;
	size_t len;
	__u64 key;
	struct zeronic_query base;
};

FIXTURE_SETUP(docs)
{
	/* The smallest CQ: 2 entries for a flow's events, 6 for requests. */
	ZC_FIXTURE_OPEN(1, ZERONIC_CQ_MIN_ENTRIES, 1 << 16);
	ASSERT_EQ(0, reg(self->zfd, self->buf, self->len,
			 ZERONIC_ACCESS_LOCAL_READ | ZERONIC_ACCESS_LOCAL_WRITE, &self->key));
}

FIXTURE_TEARDOWN(docs)
{
	/* Whatever the test did, closing gives every flow, region and pin back. */
	ZC_FIXTURE_CLOSE(1);
}

/* ---- CQ_CREATE: EBADF for a descriptor that is not an eventfd ------------ */

TEST_F(docs, cq_eventfd_that_is_not_an_eventfd_is_ebadf)
{
	int p[2], efd = eventfd(0, EFD_CLOEXEC);
	__u32 cq;

	ASSERT_EQ(0, pipe(p));
	ASSERT_LE(0, efd);
	/* Not open, and open but something else: both EBADF. */
	EXPECT_EQ(EBADF, cq_create(self->zfd, 8, 9999, &cq, NULL, NULL));
	EXPECT_EQ(EBADF, cq_create(self->zfd, 8, -2, &cq, NULL, NULL));
	EXPECT_EQ(EBADF, cq_create(self->zfd, 8, p[0], &cq, NULL, NULL));
	EXPECT_EQ(EBADF, cq_create(self->zfd, 8, self->cli, &cq, NULL, NULL));
	EXPECT_EQ(EBADF, cq_create(self->zfd, 8, self->zfd, &cq, NULL, NULL));
	/* The entries are checked first (EINVAL), and an eventfd works. */
	EXPECT_EQ(EINVAL, cq_create(self->zfd, 5, p[0], &cq, NULL, NULL));
	EXPECT_EQ(0, cq_create(self->zfd, 8, efd, &cq, NULL, NULL));
	close(efd);
	close(p[0]);
	close(p[1]);
}

/* ---- MR_REG: EFAULT for kernel addresses --------------------------------- */

TEST_F(docs, mr_reg_of_kernel_addresses_is_efault)
{
	static const struct { __u64 addr, len; } kernel[] = {
		{ 0xffff888000000000ULL, 4096 },	/* the direct map */
		{ 0xffffffff81000000ULL, 4096 },	/* kernel text */
		{ 0x8000000000000000ULL, 4096 },	/* not canonical */
		/* The last page: its page-rounded end wraps. */
		{ 0xfffffffffffff000ULL, 1 },
		{ 0xfffffffffffff000ULL, 0xfff },
		{ 0xffffffffffffff00ULL, 0xff },
		{ 0xffffffffffffe800ULL, 0x1000 },
	};
	struct zeronic_mr_reg r = { .access = ZERONIC_ACCESS_LOCAL_READ };

	for (size_t i = 0; i < sizeof(kernel) / sizeof(kernel[0]); i++) {
		r.addr = kernel[i].addr;
		r.length = kernel[i].len;
		EXPECT_EQ(-1, ioctl(self->zfd, ZERONIC_IOC_MR_REG, &r));
		EXPECT_EQ(EFAULT, errno)
			TH_LOG("addr %#llx length %#llx: %s", (unsigned long long)r.addr,
			       (unsigned long long)r.length, strerror(errno));
	}
	/* A range whose own end wraps is EINVAL, checked before. */
	r.addr = 0xfffffffffffff000ULL;
	r.length = 0x1000;
	EXPECT_EQ(-1, ioctl(self->zfd, ZERONIC_IOC_MR_REG, &r));
	EXPECT_EQ(EINVAL, errno);
}

/* ---- FLOW_ATTACH: EEXIST for a socket in a sockmap ----------------------- */

static int bpf(int cmd, union bpf_attr *a)
{
	return syscall(__NR_bpf, cmd, a, sizeof(*a));
}

TEST_F(docs, attach_of_a_sockmap_socket_is_eexist)
{
	union bpf_attr a;
	__u32 k = 0, v = self->cli, flow = 0;
	int m;

	memset(&a, 0, sizeof(a));
	a.map_type = BPF_MAP_TYPE_SOCKMAP;
	a.key_size = 4;
	a.value_size = 4;
	a.max_entries = 1;
	m = bpf(BPF_MAP_CREATE, &a);
	ASSERT_LE(0, m) TH_LOG("BPF_MAP_CREATE(SOCKMAP): %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.map_fd = m;
	a.key = (uintptr_t)&k;
	a.value = (uintptr_t)&v;
	a.flags = BPF_ANY;
	ASSERT_EQ(0, bpf(BPF_MAP_UPDATE_ELEM, &a)) TH_LOG("sockmap update: %s", strerror(errno));
	/* Another upper layer has the socket. */
	EXPECT_EQ(EEXIST, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	/* Out of the map, the socket is TCP's again and attaches. */
	memset(&a, 0, sizeof(a));
	a.map_fd = m;
	a.key = (uintptr_t)&k;
	ASSERT_EQ(0, bpf(BPF_MAP_DELETE_ELEM, &a));
	EXPECT_EQ(0, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	close(m);
}

/* ---- FLOW_ATTACH: the order of its checks -------------------------------- */

/* Arguments that need neither the socket nor the NIC come first. */
TEST_F(docs, attach_checks_its_arguments_before_the_socket)
{
	struct zeronic_flow_attach at = { .sockfd = 9999, .cq = self->cq,
					  .rx_mode = ZERONIC_RX_MESSAGE, .reserved0 = 1 };

	EXPECT_EQ(-1, ioctl(self->zfd, ZERONIC_IOC_FLOW_ATTACH, &at));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(ENOENT, attach(self->zfd, 9999, 12345, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	EXPECT_EQ(EINVAL, attach(self->zfd, 9999, self->cq, 7, 0, 0, NULL));
	EXPECT_EQ(EINVAL, attach(self->zfd, 9999, self->cq, ZERONIC_RX_MESSAGE, self->key, 0,
				 NULL));
	EXPECT_EQ(EINVAL, attach(self->zfd, 9999, self->cq, ZERONIC_RX_STREAM, self->key, 4095,
				 NULL));
	EXPECT_EQ(ENOENT, attach(self->zfd, 9999, self->cq, ZERONIC_RX_STREAM, self->key + 1,
				 4096, NULL));
	EXPECT_EQ(EBADF, attach(self->zfd, 9999, self->cq, ZERONIC_RX_STREAM, self->key, 4096,
				NULL));
}

/*
 * A CQ without free entries (EAGAIN) is the work's check, after everything
 * about the socket and its route: a socket that can never be attached says
 * so whatever the CQ.
 */
TEST_F(docs, attach_checks_the_socket_before_the_cq_entries)
{
	struct sockaddr_in lo = { .sin_family = AF_INET, .sin_port = htons(PORT + 2),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int udp = sock_in("ZN_NS_A", SOCK_DGRAM), fresh = sock_in("ZN_NS_A", SOCK_STREAM);
	int lst = sock_in("ZN_NS_B", SOCK_STREAM);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), a;
	int cli2, srv2;
	__u32 flow = 0;

	ASSERT_LE(0, udp);
	ASSERT_LE(0, fresh);
	ASSERT_LE(0, lst);
	/* Fill the CQ: the flow's 2 event entries, then 6 receives. */
	ASSERT_EQ(0, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	for (int i = 0; i < ZERONIC_CQ_MIN_ENTRIES - 2; i++)
		ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, i, 1));
	ASSERT_EQ(EAGAIN, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, 100, 1));

	EXPECT_EQ(EBADF, attach(self->zfd, 9999, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	EXPECT_EQ(ENOTSOCK, attach(self->zfd, self->zfd, self->cq, ZERONIC_RX_MESSAGE, 0, 0,
				   NULL));
	EXPECT_EQ(EPROTONOSUPPORT, attach(self->zfd, udp, self->cq, ZERONIC_RX_MESSAGE, 0, 0,
					  NULL));
	EXPECT_EQ(EEXIST, attach(self->zfd, self->cli, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	EXPECT_EQ(ENOTCONN, attach(self->zfd, fresh, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	ASSERT_EQ(0, listen(lst, 1));
	EXPECT_EQ(ENOTCONN, attach(self->zfd, lst, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	/* Established over loopback: no ZeroNIC port. */
	ASSERT_EQ(0, bind(l, (void *)&lo, sizeof(lo)));
	ASSERT_EQ(0, listen(l, 1));
	ASSERT_EQ(0, connect(c, (void *)&lo, sizeof(lo)));
	a = accept(l, NULL, NULL);
	ASSERT_LE(0, a);
	EXPECT_EQ(ENODEV, attach(self->zfd, c, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	/* Stream mode: the ring region on the flow's NIC comes before the work too. */
	close(lst);
	ASSERT_EQ(0, connect_pair(&cli2, &srv2));
	EXPECT_EQ(EINVAL, attach(self->zfd, cli2, self->cq, ZERONIC_RX_STREAM, self->key,
				 1 << 17, NULL));
	/* A socket that could be attached: now the CQ is what is missing. */
	EXPECT_EQ(EAGAIN, attach(self->zfd, cli2, self->cq, ZERONIC_RX_MESSAGE, 0, 0, NULL));
	EXPECT_EQ(EAGAIN, attach(self->zfd, cli2, self->cq, ZERONIC_RX_STREAM, self->key, 4096,
				 NULL));
	/* Refused, it is still a plain socket. */
	EXPECT_EQ(3, write(cli2, "abc", 3));
	EXPECT_EQ(3, read(srv2, self->buf + 4096, 3));
	close(cli2);
	close(srv2);
	close(a);
	close(c);
	close(l);
	close(fresh);
	close(udp);
}

TEST_HARNESS_MAIN
