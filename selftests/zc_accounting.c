// SPDX-License-Identifier: GPL-2.0
/*
 * What the zero-copy path charges and counts (issue 32, findings 8, 10, 11;
 * docs/uapi.md, "Accounting", "Completion queues", "Work requests"):
 *
 *  - completion queues are charged to the creator's locked_vm against
 *    RLIMIT_MEMLOCK and bounded per file, and the charge goes with the CQ
 *    even while a socket its flow was attached to lives on;
 *  - a region's uses: a stream flow's ring holds one until the flow is
 *    detached, and a post the NIC refuses gives its use back;
 *  - a released region's pages stay pinned and charged while a send still
 *    in TCP references them.
 *
 * Runs in the two-port topology (zc_accounting.sh: ZN_NS_A/B, ZN_ADDR_B,
 * ZN_WIRE). The unprivileged cases fork a child that becomes uid 65534
 * (no CAP_IPC_LOCK) with a small RLIMIT_MEMLOCK. The last case makes the
 * NIC fatal; the wrapper rebinds it afterwards.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/zeronic.h>

#include "kselftest_harness.h"
#include "zc_lib.h"

#define NOBODY 65534
/* Pages of a CQ: the header page and the entries (docs/uapi.md). */
#define CQ_PAGES(n) (1 + ((n) * 32 + 4095) / 4096)
/* CQs one file may hold (docs/uapi.md, "Completion queues"). */
#define MAX_CQS 1024

static long mem_available_kb(void)
{
	char line[128];
	long kb = -1;
	FILE *f = fopen("/proc/meminfo", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

/* Becomes uid/gid 65534 (dropping every capability) with RLIMIT_MEMLOCK `bytes`. */
static int become_nobody(rlim_t bytes)
{
	struct rlimit rl = { .rlim_cur = bytes, .rlim_max = bytes };

	if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
		return -1;
	return setrlimit(RLIMIT_MEMLOCK, &rl);
}

static __u64 locked_pages(int zfd)
{
	struct zeronic_query q;

	return query(zfd, &q) ? ~0ull : q.user_locked_pages;
}

static int cq_destroy(int zfd, __u32 cq)
{
	struct zeronic_cq_destroy d = { .cq = cq };

	return ioctl(zfd, ZERONIC_IOC_CQ_DESTROY, &d) ? errno : 0;
}

/* Runs `fn` in a child and returns its exit status (0: passed). */
static int in_child(int (*fn)(void *), void *arg)
{
	int status;
	pid_t pid = fork();

	if (pid == 0)
		_exit(fn(arg));
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#define CHILD_FAIL(...) do { printf("# " __VA_ARGS__); printf("\n"); fflush(stdout); return 1; } while (0)

/* ---- finding 8: completion queues ------------------------------------------ */

static int cq_memlock_child(void *unused)
{
	const __u64 limit = 64 << 10, limit_pages = limit / 4096;
	long avail0 = mem_available_kb(), avail1;
	__u64 base, now;
	__u32 cq = 0, first = 0;
	int zfd, n, err = 0;

	if (become_nobody(limit))
		CHILD_FAIL("cannot become uid %d with RLIMIT_MEMLOCK %llu: %s", NOBODY,
			   (unsigned long long)limit, strerror(errno));
	zfd = zopen();
	if (zfd < 0)
		CHILD_FAIL("open as uid %d: %s", NOBODY, strerror(errno));
	base = locked_pages(zfd);
	if (base > limit_pages)
		CHILD_FAIL("uid %d has %llu pages locked already", NOBODY,
			   (unsigned long long)base);

	/* The largest CQ (513 pages) does not fit 64 KiB at all. */
	for (n = 0; n < 64 && !(err = cq_create(zfd, 65536, -1, &cq, NULL, NULL)); n++)
		;
	avail1 = mem_available_kb();
	printf("# 65536-entry CQs as uid %d under a 64 KiB memlock limit: %d created, then %s; MemAvailable %ld -> %ld kB\n",
	       NOBODY, n, err ? strerror(err) : "never refused", avail0, avail1);
	if (n != 0 || err != ENOMEM)
		CHILD_FAIL("want ENOMEM at once (%d pages > %llu), got %d CQs then errno %d",
			   CQ_PAGES(65536), (unsigned long long)limit_pages, n, err);
	if (avail0 - avail1 > 32 << 10)
		CHILD_FAIL("MemAvailable fell by %ld kB", avail0 - avail1);

	/* Small CQs (2 pages each) until refused: as many as fit the limit. */
	for (n = 0; n < 64 && !(err = cq_create(zfd, 8, -1, &cq, NULL, NULL)); n++)
		first = first ?: cq;
	now = locked_pages(zfd);
	printf("# 8-entry CQs: %d created, then %s; locked pages %llu -> %llu\n", n,
	       err ? strerror(err) : "never refused", (unsigned long long)base,
	       (unsigned long long)now);
	if (err != ENOMEM || n != (int)((limit_pages - base) / CQ_PAGES(8)))
		CHILD_FAIL("want ENOMEM after %llu CQs, got %d then errno %d",
			   (unsigned long long)((limit_pages - base) / CQ_PAGES(8)), n, err);
	if (now != base + n * CQ_PAGES(8))
		CHILD_FAIL("locked pages %llu, want %llu", (unsigned long long)now,
			   (unsigned long long)(base + n * CQ_PAGES(8)));

	/* Destroying an unmapped CQ gives its charge back at once. */
	if (cq_destroy(zfd, first))
		CHILD_FAIL("CQ_DESTROY: %s", strerror(errno));
	if (locked_pages(zfd) != now - CQ_PAGES(8))
		CHILD_FAIL("after CQ_DESTROY: %llu locked pages, want %llu",
			   (unsigned long long)locked_pages(zfd),
			   (unsigned long long)(now - CQ_PAGES(8)));

	/* A mapped one keeps its pages, and their charge, until it is unmapped. */
	{
		void *map = NULL;
		size_t size = 0;

		if (cq_create(zfd, 8, -1, &cq, &map, &size))
			CHILD_FAIL("CQ_CREATE in the room given back: %s", strerror(errno));
		if (cq_destroy(zfd, cq))
			CHILD_FAIL("CQ_DESTROY of the mapped CQ: %s", strerror(errno));
		if (locked_pages(zfd) != now)
			CHILD_FAIL("destroyed mapped CQ: %llu locked pages, want %llu (still charged)",
				   (unsigned long long)locked_pages(zfd), (unsigned long long)now);
		/* Split in two: each half holds the CQ. */
		if (munmap(map, 4096))
			CHILD_FAIL("munmap of the first page: %s", strerror(errno));
		if (locked_pages(zfd) != now)
			CHILD_FAIL("half unmapped: %llu locked pages, want %llu (still charged)",
				   (unsigned long long)locked_pages(zfd), (unsigned long long)now);
		munmap((char *)map + 4096, size - 4096);
		if (locked_pages(zfd) != now - CQ_PAGES(8))
			CHILD_FAIL("unmapped: %llu locked pages, want %llu",
				   (unsigned long long)locked_pages(zfd),
				   (unsigned long long)(now - CQ_PAGES(8)));
	}
	close(zfd);
	zfd = zopen();
	if (zfd < 0 || locked_pages(zfd) != base)
		CHILD_FAIL("after close: %llu locked pages, want %llu",
			   (unsigned long long)locked_pages(zfd), (unsigned long long)base);
	close(zfd);
	return 0;
}

TEST(cq_charged_to_memlock)
{
	ASSERT_EQ(0, in_child(cq_memlock_child, NULL));
}

TEST(cqs_bounded_per_file)
{
	int zfd = zopen(), n, err = 0;
	__u32 cq;

	ASSERT_LE(0, zfd);
	/* Root: CAP_IPC_LOCK, so only the per-file bound applies. */
	for (n = 0; n < MAX_CQS + 64 && !(err = cq_create(zfd, 8, -1, &cq, NULL, NULL)); n++)
		;
	TH_LOG("%d CQs on one file, then %s", n, err ? strerror(err) : "never refused");
	EXPECT_EQ(MAX_CQS, n);
	EXPECT_EQ(ENOSPC, err);
	close(zfd);
}

/*
 * A flow's socket may outlive the file (another process holds it, or TCP
 * still sends): the detached flow keeps nothing of its CQ's pages. Before
 * the fix the CQ stayed charged until the socket was destroyed.
 */
struct pair {
	int cli, srv;
};

static int cq_outlived_child(void *arg)
{
	struct pair *p = arg;
	__u64 base, now;
	__u32 cq = 0, cq2 = 0, flow = 0;
	size_t map_size = 0;
	void *map = NULL;
	int zfd, err;

	if (become_nobody(1 << 20))
		CHILD_FAIL("cannot become uid %d: %s", NOBODY, strerror(errno));
	zfd = zopen();
	if (zfd < 0)
		CHILD_FAIL("open: %s", strerror(errno));
	base = locked_pages(zfd);
	/* Closing the file (mapped, then unmapped; the flow still attached). */
	if ((err = cq_create(zfd, 256, -1, &cq, &map, &map_size)) ||
	    (err = attach(zfd, p->cli, cq, ZERONIC_RX_MESSAGE, 0, 0, &flow)))
		CHILD_FAIL("CQ/attach: %s", strerror(err));
	if (locked_pages(zfd) != base + CQ_PAGES(256))
		CHILD_FAIL("a 256-entry CQ: %llu locked pages, want %llu",
			   (unsigned long long)locked_pages(zfd),
			   (unsigned long long)(base + CQ_PAGES(256)));
	munmap(map, map_size);
	close(zfd);
	zfd = zopen();
	now = locked_pages(zfd);
	printf("# file closed, its flow's socket still open: %llu locked pages (%llu before the CQ)\n",
	       (unsigned long long)now, (unsigned long long)base);
	if (now != base)
		CHILD_FAIL("the closed file's CQ is still charged while the socket lives");
	/* CQ_DESTROY after FLOW_DETACH, the other socket still open. */
	if ((err = cq_create(zfd, 256, -1, &cq2, NULL, NULL)) ||
	    (err = attach(zfd, p->srv, cq2, ZERONIC_RX_MESSAGE, 0, 0, &flow)) ||
	    (err = detach(zfd, flow)) || (err = cq_destroy(zfd, cq2)))
		CHILD_FAIL("CQ/attach/detach/destroy: %s", strerror(err));
	now = locked_pages(zfd);
	printf("# CQ destroyed after its flow's detach, the socket open: %llu locked pages\n",
	       (unsigned long long)now);
	if (now != base)
		CHILD_FAIL("the destroyed CQ is still charged while the socket lives");
	close(zfd);
	return 0;
}

TEST(cq_charge_not_held_by_a_socket_outliving_it)
{
	struct pair p;

	ASSERT_EQ(0, connect_pair(&p.cli, &p.srv));
	/* The child's flows are attached to sockets this process keeps open. */
	EXPECT_EQ(0, in_child(cq_outlived_child, &p));
	close(p.cli);
	close(p.srv);
}

/* ---- finding 10: region uses ----------------------------------------------- */

/* Takes CQEs until a DETACHED flow event; its status, or -1. */
static int detached_status(void *map)
{
	struct zeronic_cqe e;

	while (!cq_take(map, &e, 10000))
		if (e.opcode == ZERONIC_CQE_FLOW && (e.flags & ZERONIC_CQE_F_DETACHED))
			return e.status;
	return -1;
}

TEST(stream_ring_region_busy_until_detached)
{
	int zfd = zopen(), cli, srv;
	size_t len = 1 << 20, map_size = 0;
	char *buf;
	void *map = NULL;
	__u64 key = 0;
	__u32 cq = 0, flow = 0;

	ASSERT_LE(0, zfd);
	ASSERT_EQ(0, connect_pair(&cli, &srv));
	ASSERT_EQ(0, cq_create(zfd, 64, -1, &cq, &map, &map_size));
	buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		   -1, 0);
	ASSERT_NE(MAP_FAILED, buf);
	ASSERT_EQ(0, reg(zfd, buf, len, ZERONIC_ACCESS_LOCAL_WRITE, &key));
	ASSERT_EQ(0, attach(zfd, srv, cq, ZERONIC_RX_STREAM, key, len, &flow));
	/* The NIC and the CPU may write the ring: the region is busy. */
	EXPECT_EQ(EBUSY, dereg(zfd, key)) TH_LOG("MR_DEREG of a live stream ring's region");
	ASSERT_EQ(0, detach(zfd, flow));
	EXPECT_EQ(0, detached_status(map)) TH_LOG("the NIC confirmed the detach");
	EXPECT_EQ(0, dereg(zfd, key)) TH_LOG("MR_DEREG after the detach");
	close(cli);
	close(srv);
	munmap(map, map_size);
	close(zfd);
	munmap(buf, len);
}

/* ---- finding 11: references keep their charge ------------------------------ */

struct stuck {
	int cli, srv;
};

static int stuck_send_child(void *arg)
{
	struct stuck *s = arg;
	const size_t len = 768 << 10, more = 512 << 10;
	const __u64 limit = 1 << 20;
	__u64 base, key = 0, key2 = 0;
	__u32 cq = 0, flow = 0;
	char *buf, *buf2, sink[65536];
	int zfd, err, i;
	struct timespec t0, t1;

	if (become_nobody(limit))
		CHILD_FAIL("cannot become uid %d: %s", NOBODY, strerror(errno));
	buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		   -1, 0);
	buf2 = mmap(NULL, more, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	zfd = zopen();
	if (buf == MAP_FAILED || buf2 == MAP_FAILED || zfd < 0)
		CHILD_FAIL("setup: %s", strerror(errno));
	memset(buf, 'x', len);
	base = locked_pages(zfd);
	if ((err = reg(zfd, buf, len, ZERONIC_ACCESS_LOCAL_READ, &key)))
		CHILD_FAIL("MR_REG of %zu KiB under a 1 MiB limit: %s", len >> 10, strerror(err));
	if ((err = cq_create(zfd, 64, -1, &cq, NULL, NULL)) ||
	    (err = attach(zfd, s->cli, cq, ZERONIC_RX_MESSAGE, 0, 0, &flow)))
		CHILD_FAIL("CQ/attach: %s", strerror(err));
	/* The peer reads nothing: most of the send stays in TCP, unacknowledged. */
	if ((err = post1(zfd, flow, ZERONIC_WR_SEND, key, 0, len)))
		CHILD_FAIL("POST of the send: %s", strerror(err));
	/* Closing detaches the flow and releases the region; TCP keeps the send. */
	close(zfd);
	zfd = zopen();
	printf("# after close with a stuck send: uid %d has %llu pages locked (%llu before the region)\n",
	       NOBODY, (unsigned long long)locked_pages(zfd), (unsigned long long)base);
	if (locked_pages(zfd) < base + len / 4096)
		CHILD_FAIL("the region's %zu pages are referenced by the send but no longer charged",
			   len / 4096);
	err = reg(zfd, buf2, more, ZERONIC_ACCESS_LOCAL_READ, &key2);
	if (err != ENOMEM)
		CHILD_FAIL("a new %zu KiB registration while the old pages are referenced: %s, want ENOMEM",
			   more >> 10, err ? strerror(err) : "registered");
	/*
	 * The peer reads what TCP queued (the detach dropped the rest of the
	 * send): the send completes, its pages go, and their charge with them.
	 */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < 1000 && locked_pages(zfd) >= base + len / 4096; i++) {
		while (recv(s->srv, sink, sizeof(sink), MSG_DONTWAIT) > 0)
			;
		usleep(10000);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("# the peer read: %llu pages locked after %ld ms\n",
	       (unsigned long long)locked_pages(zfd),
	       (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
	if (locked_pages(zfd) >= base + len / 4096)
		CHILD_FAIL("the charge stayed after the send completed");
	if ((err = reg(zfd, buf2, more, ZERONIC_ACCESS_LOCAL_READ, &key2)))
		CHILD_FAIL("registration once the send completed: %s", strerror(err));
	close(zfd);
	return 0;
}

TEST(released_region_stays_charged_while_referenced)
{
	struct stuck s;
	struct zeronic_query q0, q1;
	int zfd = zopen();

	ASSERT_LE(0, zfd);
	ASSERT_EQ(0, query(zfd, &q0));
	ASSERT_EQ(0, connect_pair(&s.cli, &s.srv));
	EXPECT_EQ(0, in_child(stuck_send_child, &s));
	close(s.cli);
	close(s.srv);
	/* Bounded: the sockets' last references go on their own time. */
	for (int i = 0; i < 500; i++) {
		ASSERT_EQ(0, query(zfd, &q1));
		if (q1.pinned_pages == q0.pinned_pages)
			break;
		usleep(10000);
	}
	EXPECT_EQ(q0.pinned_pages, q1.pinned_pages);
	EXPECT_EQ(q0.mr_in_use, q1.mr_in_use);
	close(zfd);
}

/* ---- finding 10: a post the NIC refuses (last: the NIC stays fatal) -------- */

TEST(post_on_broken_nic_gives_its_use_back)
{
	int zfd = zopen(), cli, srv, err = 0, i;
	size_t len = 1 << 20;
	char cmd[512], *buf, *probe;
	__u64 key = 0, pkey = 0;
	__u32 cq = 0, flow = 0;

	ASSERT_LE(0, zfd);
	ASSERT_NE(NULL, getenv("ZN_WIRE")) TH_LOG("zc_accounting.sh exports ZN_WIRE");
	ASSERT_EQ(0, connect_pair(&cli, &srv));
	ASSERT_EQ(0, cq_create(zfd, 64, -1, &cq, NULL, NULL));
	buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		   -1, 0);
	probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	ASSERT_NE(MAP_FAILED, buf);
	ASSERT_NE(MAP_FAILED, probe);
	ASSERT_EQ(0, reg(zfd, buf, len, ZERONIC_ACCESS_LOCAL_WRITE, &key));
	ASSERT_EQ(0, attach(zfd, srv, cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	snprintf(cmd, sizeof(cmd), "timeout 30 %s fault fatal >/dev/null", getenv("ZN_WIRE"));
	ASSERT_EQ(0, system(cmd));
	/* Broken once a registration fails with EIO (docs/uapi.md, "A broken NIC"). */
	for (i = 0; i < 100; i++) {
		err = reg(zfd, probe, 4096, ZERONIC_ACCESS_LOCAL_READ, &pkey);
		if (err == EIO)
			break;
		if (!err)
			dereg(zfd, pkey);
		usleep(100000);
	}
	ASSERT_EQ(EIO, err) TH_LOG("the driver did not notice the fatal NIC");
	err = post1(zfd, flow, ZERONIC_WR_RECV, key, 0, 4096);
	TH_LOG("RECV on the broken NIC: %s", err ? strerror(err) : "posted");
	EXPECT_EQ(EIO, err);
	/* The refused post took nothing: MR_DEREG is not EBUSY (EIO: no NIC to confirm). */
	err = dereg(zfd, key);
	TH_LOG("MR_DEREG after it: %s", err ? strerror(err) : "0");
	EXPECT_EQ(EIO, err);
	EXPECT_EQ(ENOENT, dereg(zfd, key));
	close(cli);
	close(srv);
	close(zfd);
	munmap(buf, len);
	munmap(probe, 4096);
}

TEST_HARNESS_MAIN
