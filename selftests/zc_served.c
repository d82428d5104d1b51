// SPDX-License-Identifier: GPL-2.0
/*
 * Sockets their process attached itself, served by TCP (issue 34, first
 * step; docs/uapi.md, "Attaching a socket by setsockopt"):
 *
 *  - setsockopt(fd, SOL_TCP, TCP_ULP, "zeronic") on both ends of a
 *    connection over the ports; then plain read()/write(), poll(), FIONREAD,
 *    MSG_PEEK|MSG_WAITALL, MSG_DONTWAIT, SO_RCVTIMEO, splice() and
 *    shutdown() behave as on any TCP socket, 64 MiB move each way
 *    byte for byte, and the driver's counters show the NIC placed them
 *    (zc_rx_placed_bytes, hw_rx_placed_bytes of ethtool -S): at least half
 *    a ring, and with the frames the ring had no room for, every byte;
 *  - the documented errnos: ENOTCONN, EEXIST, ENODEV (loopback, IPv4 and IPv6),
 *    EOPNOTSUPP (tcp-data-split off), ENOMEM (RLIMIT_MEMLOCK),
 *    ENOSPC (the user's MR Table share);
 *  - a transfer over a wire losing 1% of the frames arrives intact;
 *  - close() gives everything back: no region, pinned page or Flow Table
 *    entry is left.
 *
 * Runs in the two-port topology (zc_served.sh: ZN_NS_A/B, ZN_ADDR_B,
 * ZN_IF_A/B, ZN_WIRE).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <linux/if_ether.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <linux/zeronic.h>

#include "kselftest_harness.h"
#include "zc_lib.h"

#define NOBODY 65534
#define BIG (64ull << 20)

static int ulp(int s)
{
	return setsockopt(s, SOL_TCP, TCP_ULP, "zeronic", 7) ? errno : 0;
}

/* Byte `i` of side `side`'s stream. */
static inline unsigned char pat(int side, unsigned long long i)
{
	return (unsigned char)((i * 131 + (i >> 12) + side * 7) & 0xff);
}

/* A counter of `ethtool -S` of side (a or b)'s port; -1 if not found. */
static long long stat_of(char side, const char *name)
{
	const char *ns = getenv(side == 'a' ? "ZN_NS_A" : "ZN_NS_B");
	const char *ifn = getenv(side == 'a' ? "ZN_IF_A" : "ZN_IF_B");
	char cmd[256], key[96], line[256];
	long long v = -1, n;
	FILE *p;

	if (!ifn)
		return -1;
	snprintf(cmd, sizeof(cmd), "%s%s ethtool -S %s 2>/dev/null", ns && *ns ? "ip netns exec " : "",
		 ns && *ns ? ns : "", ifn);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p))
		if (sscanf(line, " %95[^:]: %lld", key, &n) == 2 && !strcmp(key, name))
			v = n;
	pclose(p);
	return v;
}

/* A number read from the first line `cmd` prints in side's namespace; -1 if none. */
static long long num_in_side(char side, const char *cmd)
{
	const char *ns = getenv(side == 'a' ? "ZN_NS_A" : "ZN_NS_B");
	char line[512];
	long long v = -1;
	FILE *p;

	snprintf(line, sizeof(line), "%s%s %s", ns && *ns ? "ip netns exec " : "", ns && *ns ? ns : "", cmd);
	p = popen(line, "r");
	if (!p)
		return -1;
	if (fscanf(p, "%lld", &v) != 1)
		v = -1;
	pclose(p);
	return v;
}

/*
 * A module parameter's value as the module was loaded: the module does not
 * show its parameters in sysfs, so ZN_<NAME> says (for a module loaded with
 * other values than the defaults, which qemu/run loads), else `dflt`.
 */
static long long param(const char *env, long long dflt)
{
	const char *v = getenv(env);

	return v && *v ? atoll(v) : dflt;
}

/* The counters that say where side's received bytes came from. */
struct rx_where {
	long long placed;	/* zc_rx_placed_bytes: placed by the NIC, handed to TCP in its pages */
	long long hw_placed;	/* hw_rx_placed_bytes: the NIC's own count */
	long long no_room;	/* hw_rx_fallback - hw_rx_ooo_full: frames sent the normal way for want of ring room */
};

static struct rx_where rx_where(char side)
{
	return (struct rx_where){
		.placed = stat_of(side, "zc_rx_placed_bytes"),
		.hw_placed = stat_of(side, "hw_rx_placed_bytes"),
		.no_room = stat_of(side, "hw_rx_fallback") - stat_of(side, "hw_rx_ooo_full"),
	};
}

/*
 * Whether the NIC carried the `rx` bytes side received since `before`
 * (docs/design.md, "The ring's head follows copied_seq"): the NIC must have
 * placed at least half a ring (an empty ring takes the stream's first
 * ring_kib whatever the reader does), and what it placed plus the frames it
 * sent the normal way for want of room (at most MTU - 40 bytes each) must
 * cover every byte. A reader slower than the NIC gets the rest through the
 * normal path; bytes that took it for any other reason fail the check.
 */
static int nic_carried(char side, struct rx_where before, unsigned long long rx)
{
	struct rx_where now = rx_where(side);
	long long placed = now.placed - before.placed, hw = now.hw_placed - before.hw_placed;
	long long no_room = now.no_room - before.no_room;
	long long ring = param("ZN_RING_KIB", 4096) * 1024;
	const char *ifn = getenv(side == 'a' ? "ZN_IF_A" : "ZN_IF_B");
	char cmd[128];
	long long mss;

	snprintf(cmd, sizeof(cmd), "cat /sys/class/net/%s/mtu", ifn ? ifn : "none");
	mss = num_in_side(side, cmd) - 40;
	printf("# side %c received %llu bytes: placed %lld (NIC: %lld), %lld frames without room, ring %lld, MSS %lld\n",
	       side, rx, placed, hw, no_room, ring, mss);
	if (ring <= 0 || mss <= 0)
		return 0;
	if (placed < ring / 2)
		return printf("# side %c: the NIC placed less than half a ring\n", side), 0;
	if (hw < placed / 2)
		return printf("# side %c: the NIC counted less than half of what the driver handed TCP\n", side), 0;
	if (placed + no_room * mss < (long long)rx)
		return printf("# side %c: placed + frames without room x MSS = %lld do not cover %llu\n", side,
			      placed + no_room * mss, rx), 0;
	return 1;
}

/* Runs `cmd` in side's namespace; its exit status. */
static int in_side(char side, const char *cmd)
{
	const char *ns = getenv(side == 'a' ? "ZN_NS_A" : "ZN_NS_B");
	char line[512];

	snprintf(line, sizeof(line), "%s%s %s", ns && *ns ? "ip netns exec " : "", ns && *ns ? ns : "", cmd);
	return system(line);
}

/* Writes `n` bytes of side's pattern to `s` with plain write(); 0 if all went. */
static int write_pattern(int s, int side, unsigned long long n)
{
	static char b[65536];
	unsigned long long off = 0;

	while (off < n) {
		size_t len = n - off < sizeof(b) ? n - off : sizeof(b), i;
		ssize_t w;

		for (i = 0; i < len; i++)
			b[i] = pat(side, off + i);
		w = write(s, b, len);
		if (w <= 0)
			return -1;
		off += w;
	}
	return 0;
}

/* A child writing `n` bytes of side's pattern to `s`, then shutdown(SHUT_WR). */
static pid_t writer(int s, int side, unsigned long long n)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(write_pattern(s, side, n) || shutdown(s, SHUT_WR) ? 1 : 0);
	return pid;
}

struct reader {
	int s, side;
	unsigned long long got;
	int bad, eof;
};

/* Reads what is there (plain read()) and checks it against the pattern. */
static int read_some(struct reader *r)
{
	static char b[65536];
	ssize_t n = read(r->s, b, sizeof(b)), i;

	if (n == 0) {
		r->eof = 1;
		return 0;
	}
	if (n < 0)
		return errno == EAGAIN ? 0 : -1;
	for (i = 0; i < n; i++)
		if ((unsigned char)b[i] != pat(r->side, r->got + i) && !r->bad) {
			r->bad = 1;
			printf("# byte %llu of side %d's stream is %u, want %u\n", r->got + i, r->side,
			       (unsigned char)b[i], pat(r->side, r->got + i));
		}
	r->got += n;
	return 0;
}

/* Reads with `r` until its stream reached `to`; 0 if it did, every byte as the pattern says. */
static int read_to(struct reader *r, unsigned long long to)
{
	while (r->got < to && !r->bad && !r->eof)
		if (read_some(r))
			return -1;
	return r->got == to && !r->bad ? 0 : -1;
}

/*
 * Moves `n` bytes each way between `cli` (side 0's writer) and `srv` (side
 * 1's), reading both with poll() + read() until EOF. 0 if both arrived intact.
 */
static int both_ways(int cli, int srv, unsigned long long n, int timeout_s)
{
	struct reader r[2] = { { .s = srv, .side = 0 }, { .s = cli, .side = 1 } };
	pid_t w0 = writer(cli, 0, n), w1 = writer(srv, 1, n);
	time_t end = time(NULL) + timeout_s;
	int st0 = -1, st1 = -1, i;

	while (!(r[0].eof && r[1].eof) && time(NULL) < end) {
		struct pollfd p[2] = { { .fd = srv, .events = POLLIN }, { .fd = cli, .events = POLLIN } };

		if (poll(p, 2, 1000) < 0)
			break;
		for (i = 0; i < 2; i++)
			if (!r[i].eof && (p[i].revents & (POLLIN | POLLHUP)) && read_some(&r[i]))
				goto out;
	}
out:
	if (!(r[0].eof && r[1].eof)) {
		kill(w0, SIGKILL);
		kill(w1, SIGKILL);
	}
	waitpid(w0, &st0, 0);
	waitpid(w1, &st1, 0);
	for (i = 0; i < 2; i++)
		printf("# side %d's stream: %llu of %llu bytes, %s, %s\n", i, r[i].got, n,
		       r[i].eof ? "EOF" : "no EOF", r[i].bad ? "CORRUPT" : "intact");
	if (st0 != 0 || st1 != 0)
		printf("# writers' status: %d %d\n", st0, st1);
	return r[0].got == n && r[1].got == n && r[0].eof && r[1].eof && !r[0].bad && !r[1].bad &&
	       st0 == 0 && st1 == 0 ? 0 : -1;
}

static __u32 flows_in_use(void)
{
	struct zeronic_query q;
	int z = zopen();
	__u32 n = ~0u;

	if (z >= 0 && !query(z, &q))
		n = q.flows_in_use;
	if (z >= 0)
		close(z);
	return n;
}

static __u64 pinned_pages(void)
{
	struct zeronic_query q;
	int z = zopen();
	__u64 n = ~0ull;

	if (z >= 0 && !query(z, &q))
		n = q.pinned_pages + ((__u64)q.mr_in_use << 40);
	if (z >= 0)
		close(z);
	return n;
}

/* Whether the NIC-wide counters come back to `flows`/`pinned` within 10 s. */
static int back_to(__u32 flows, __u64 pinned)
{
	int i;

	for (i = 0; i < 100; i++) {
		if (flows_in_use() == flows && pinned_pages() == pinned)
			return 1;
		usleep(100000);
	}
	printf("# flows_in_use %u (want %u), pinned pages | mr_in_use << 40 %llx (want %llx)\n",
	       flows_in_use(), flows, (unsigned long long)pinned_pages(), (unsigned long long)pinned);
	return 0;
}

/*
 * The cases that move bytes are bounded by their own transfers' timeouts
 * (both_ways(), 300 s), not by the harness's default of 30 s: under TCG, on
 * a host running other guests, 64 MiB each way can take longer than that
 * and still be right.
 */
FIXTURE(move) {};
FIXTURE_SETUP(move) {}
FIXTURE_TEARDOWN(move) {}

TEST_F_TIMEOUT(move, attach_and_move_64mib_each_way, 330)
{
	__u32 flows0 = flows_in_use();
	__u64 pinned0 = pinned_pages();
	struct rx_where a0 = rx_where('a'), b0 = rx_where('b');
	char name[16] = "";
	socklen_t nl = sizeof(name);
	int cli, srv;

	ASSERT_EQ(0, connect_pair(&cli, &srv)) TH_LOG("a connection over the ports");
	ASSERT_EQ(0, ulp(cli));
	ASSERT_EQ(0, ulp(srv));
	ASSERT_EQ(0, getsockopt(srv, SOL_TCP, TCP_ULP, name, &nl));
	EXPECT_STREQ("zeronic", name);
	EXPECT_EQ(flows0 + 2, flows_in_use()) TH_LOG("each end has its Flow Table entry");

	ASSERT_EQ(0, both_ways(cli, srv, BIG, 300));

	EXPECT_TRUE(nic_carried('a', a0, BIG));
	EXPECT_TRUE(nic_carried('b', b0, BIG));

	close(cli);
	close(srv);
	EXPECT_TRUE(back_to(flows0, pinned0)) TH_LOG("close() gave the flows and rings back");
}

TEST(socket_semantics)
{
	static char buf[1 << 20], peek[32 << 10];
	struct timeval tv = { .tv_usec = 200000 };
	struct pollfd p;
	struct timespec t0, t1;
	int cli, srv, inq = -1, fds[2], i;
	unsigned long long got = 0;
	pid_t w;

	ASSERT_EQ(0, connect_pair(&cli, &srv));
	ASSERT_EQ(0, ulp(cli));
	ASSERT_EQ(0, ulp(srv));

	/* Nothing there: MSG_DONTWAIT is EAGAIN, SO_RCVTIMEO times out, poll() waits. */
	EXPECT_EQ(-1, recv(srv, buf, 1, MSG_DONTWAIT));
	EXPECT_EQ(EAGAIN, errno);
	ASSERT_EQ(0, setsockopt(srv, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	EXPECT_EQ(-1, read(srv, buf, 1));
	EXPECT_EQ(EAGAIN, errno);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	EXPECT_GE((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000, 150);
	p = (struct pollfd){ .fd = srv, .events = POLLIN };
	EXPECT_EQ(0, poll(&p, 1, 100));

	/* 1 MiB arrives: poll() says so, MSG_PEEK|MSG_WAITALL sees its start
	 * without taking it, FIONREAD counts it, read() gets all of it. */
	w = writer(cli, 0, sizeof(buf));
	p.revents = 0;
	EXPECT_EQ(1, poll(&p, 1, 10000));
	EXPECT_TRUE(p.revents & POLLIN);
	tv.tv_sec = 30;
	tv.tv_usec = 0;
	ASSERT_EQ(0, setsockopt(srv, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	ASSERT_EQ((ssize_t)sizeof(peek), recv(srv, peek, sizeof(peek), MSG_PEEK | MSG_WAITALL));
	for (i = 0; i < (int)sizeof(peek); i++)
		if ((unsigned char)peek[i] != pat(0, i))
			break;
	EXPECT_EQ((int)sizeof(peek), i) TH_LOG("peeked byte %d differs", i);
	EXPECT_EQ(0, ioctl(srv, FIONREAD, &inq));
	EXPECT_GE(inq, (int)sizeof(peek));
	/* splice() the first 64 KiB through a pipe (copied, see docs/uapi.md);
	 * like read(), a splice may move less than asked. */
	ASSERT_EQ(0, pipe(fds));
	while (got < 65536) {
		ssize_t n = splice(srv, NULL, fds[1], NULL, 65536 - got, 0);

		if (n <= 0)
			break;
		EXPECT_EQ(n, read(fds[0], buf + got, n));
		got += n;
	}
	close(fds[0]);
	close(fds[1]);
	EXPECT_EQ(65536, got);
	for (i = 0; i < (int)got; i++)
		if ((unsigned char)buf[i] != pat(0, i))
			break;
	EXPECT_EQ((int)got, i) TH_LOG("spliced byte %d differs", i);
	while (got < sizeof(buf)) {
		ssize_t n = recv(srv, buf, sizeof(buf) - got, MSG_WAITALL);

		if (n <= 0)
			break;
		for (i = 0; i < n; i++)
			if ((unsigned char)buf[i] != pat(0, got + i))
				break;
		EXPECT_EQ(n, i) TH_LOG("byte %llu differs", got + i);
		got += n;
	}
	EXPECT_EQ(sizeof(buf), got);
	/* The writer shut its side down: EOF. */
	EXPECT_EQ(0, read(srv, buf, 1));
	waitpid(w, &i, 0);
	EXPECT_EQ(0, i);

	/* The other way, through the other end's plain write(). */
	EXPECT_EQ(0, write_pattern(srv, 1, 100000));
	got = 0;
	while (got < 100000) {
		ssize_t n = read(cli, buf, sizeof(buf));

		if (n <= 0)
			break;
		got += n;
	}
	EXPECT_EQ(100000, got);
	close(cli);
	close(srv);
}

TEST(documented_errnos)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	socklen_t sl = sizeof(a);
	int cli, srv, l, c, s, self;
	char cmd[128];

	/* ENOTCONN: not connected; a listener. */
	s = sock_in("ZN_NS_A", SOCK_STREAM);
	ASSERT_LE(0, s);
	EXPECT_EQ(ENOTCONN, ulp(s));
	close(s);

	/* EEXIST: attached already. */
	ASSERT_EQ(0, connect_pair(&cli, &srv));
	ASSERT_EQ(0, ulp(cli));
	EXPECT_EQ(EEXIST, ulp(cli));
	close(cli);
	close(srv);

	/* ENODEV: a connection that does not leave through a ZeroNIC port. */
	self = in_ns("ZN_NS_A");
	ASSERT_LE(0, self);
	system("ip link set lo up 2>/dev/null");
	l = socket(AF_INET, SOCK_STREAM, 0);
	c = socket(AF_INET, SOCK_STREAM, 0);
	ASSERT_EQ(0, bind(l, (void *)&a, sizeof(a)));
	ASSERT_EQ(0, listen(l, 1));
	ASSERT_EQ(0, getsockname(l, (void *)&a, &sl));
	ASSERT_EQ(0, connect(c, (void *)&a, sizeof(a)));
	s = accept(l, NULL, NULL);
	EXPECT_EQ(ENODEV, ulp(c));
	EXPECT_EQ(ENODEV, ulp(s));
	close(s);
	close(c);
	close(l);

	/* IPv6 over loopback: the family is accepted, the route is not a port. */
	l = socket(AF_INET6, SOCK_STREAM, 0);
	c = socket(AF_INET6, SOCK_STREAM, 0);
	sl = sizeof(a6);
	ASSERT_EQ(0, bind(l, (void *)&a6, sizeof(a6)));
	ASSERT_EQ(0, listen(l, 1));
	ASSERT_EQ(0, getsockname(l, (void *)&a6, &sl));
	ASSERT_EQ(0, connect(c, (void *)&a6, sizeof(a6)));
	s = accept(l, NULL, NULL);
	EXPECT_EQ(ENODEV, ulp(c));
	EXPECT_EQ(ENODEV, ulp(s));
	close(s);
	close(c);
	close(l);
	back_ns(self);

	/* EOPNOTSUPP: the port's header/data split is off. */
	snprintf(cmd, sizeof(cmd), "ethtool -G %s tcp-data-split off", getenv("ZN_IF_A"));
	ASSERT_EQ(0, in_side('a', cmd));
	ASSERT_EQ(0, connect_pair(&cli, &srv));
	EXPECT_EQ(EOPNOTSUPP, ulp(cli));
	EXPECT_EQ(0, ulp(srv)) TH_LOG("the other port's split is on");
	snprintf(cmd, sizeof(cmd), "ethtool -G %s tcp-data-split on", getenv("ZN_IF_A"));
	EXPECT_EQ(0, in_side('a', cmd));
	/* Refused: the socket is as it was, and may be attached now. */
	EXPECT_EQ(0, ulp(cli));
	EXPECT_EQ(0, write_all(cli, 'x', 1000));
	close(cli);
	close(srv);
}

TEST(enomem_beyond_rlimit_memlock)
{
	struct rlimit rl = { .rlim_cur = 64 << 10, .rlim_max = 64 << 10 };
	int cli, srv, st = -1;
	pid_t pid;

	ASSERT_EQ(0, connect_pair(&cli, &srv));
	pid = fork();
	if (pid == 0) {
		int err;

		if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY) ||
		    setrlimit(RLIMIT_MEMLOCK, &rl))
			_exit(2);
		err = ulp(cli);
		printf("# as uid %d with RLIMIT_MEMLOCK 64 KiB: %s\n", NOBODY, strerror(err));
		_exit(err == ENOMEM ? 0 : 1);
	}
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_EQ(0, st);
	/* Root (CAP_IPC_LOCK) may. */
	EXPECT_EQ(0, ulp(cli));
	close(cli);
	close(srv);
}

TEST(enospc_beyond_the_users_mr_share)
{
	struct rlimit rl = { .rlim_cur = 64 << 20, .rlim_max = 64 << 20 };
	int cli, srv, st = -1;
	pid_t pid;

	ASSERT_EQ(0, connect_pair(&cli, &srv));
	pid = fork();
	if (pid == 0) {
		static char page[4096] __attribute__((aligned(4096)));
		struct zeronic_query q;
		int zfd, err, n = 0;
		__u64 key;

		if (setrlimit(RLIMIT_MEMLOCK, &rl) || setgroups(0, NULL) || setgid(NOBODY) ||
		    setuid(NOBODY))
			_exit(2);
		zfd = zopen();
		if (zfd < 0 || query(zfd, &q))
			_exit(3);
		/* Every MR Table entry of the user's share (or the NIC's). */
		while (n < 65536 && !(err = reg(zfd, page, sizeof(page), ZERONIC_ACCESS_LOCAL_WRITE, &key)))
			n++;
		err = err == ENOSPC ? ulp(cli) : -err;
		printf("# as uid %d holding %d of %u MR Table entries: %s\n", NOBODY, n, q.mr_user_max,
		       err > 0 ? strerror(err) : "registration stopped otherwise");
		_exit(err == ENOSPC ? 0 : 1);
	}
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_EQ(0, st);
	/* The regions went with the child's file: root may attach. */
	EXPECT_EQ(0, ulp(cli));
	close(cli);
	close(srv);
}

TEST_F_TIMEOUT(move, one_percent_loss, 330)
{
	char cmd[256];
	int cli, srv;

	ASSERT_NE(NULL, getenv("ZN_WIRE"));
	ASSERT_EQ(0, connect_pair(&cli, &srv));
	ASSERT_EQ(0, ulp(cli));
	ASSERT_EQ(0, ulp(srv));
	snprintf(cmd, sizeof(cmd), "%s loss=1 >/dev/null", getenv("ZN_WIRE"));
	ASSERT_EQ(0, system(cmd));
	EXPECT_EQ(0, both_ways(cli, srv, 16ull << 20, 300));
	snprintf(cmd, sizeof(cmd), "%s loss=0 >/dev/null", getenv("ZN_WIRE"));
	EXPECT_EQ(0, system(cmd));
	close(cli);
	close(srv);
}

/* ---- Spare rings (docs/driver.md, "Spare rings") --------------------------- */

/* A NIC-wide counter of the spare rings (the same on both ports). */
static long long spare(const char *name)
{
	return stat_of('a', name);
}

/* Waits up to 5 s for spare counter `name` to reach `want`; its value then. */
static long long spare_reaches(const char *name, long long want)
{
	int i;

	for (i = 0; i < 50 && spare(name) < want; i++)
		usleep(100000);
	return spare(name);
}

/*
 * Attaches connections, kept open in `held` (up to `max` sockets), while the
 * NIC's spare rings are taken, so that the rings a case releases next find
 * room. Stops when none is left or an attach took none (what is left still
 * cools: a page of it is referenced elsewhere). Returns how many sockets it
 * holds, or -1.
 */
static int drain_spares(int *held, int max)
{
	int n = 0;

	while (spare("zc_ring_spares") > 0) {
		long long r0 = spare("zc_ring_spare_reused");

		if (n + 2 > max || connect_pair(&held[n], &held[n + 1]))
			return -1;
		n += 2;
		if (ulp(held[n - 2]) || ulp(held[n - 1]))
			return -1;
		if (spare("zc_ring_spare_reused") == r0)
			break;
	}
	return n;
}

/* Writes `n` bytes of side 0's pattern on `w` and reads them intact on `r`. */
static int one_way(int w, int r, unsigned long long n)
{
	struct reader rd = { .s = r, .side = 0 };
	pid_t pid = writer(w, 0, n);
	int got = read_to(&rd, n), st = -1;

	waitpid(pid, &st, 0);
	return got == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/*
 * A closed socket's ring is kept, charged to nobody, and a later attach
 * takes it, zeroed: both ends' rings come back to the NIC's spares, the next
 * connection's attaches reuse at least side a's (which received nothing;
 * side b's may cool a moment longer, while TCP frees its last receipts on
 * another CPU), and 8 MiB each way through the reused rings arrive intact,
 * placed by the NIC. Closing gives every charge back.
 */
TEST_F_TIMEOUT(move, closed_rings_are_kept_and_reused, 330)
{
	__u32 flows0 = flows_in_use();
	__u64 pinned0 = pinned_pages();
	int held[32], nheld, cli, srv, i;
	long long kept0, reused0, spares0;
	struct rx_where a0, b0;

	nheld = drain_spares(held, 32);
	ASSERT_LE(0, nheld) TH_LOG("attaching while spare rings are taken");
	kept0 = spare("zc_ring_spare_kept");
	spares0 = spare("zc_ring_spares");
	ASSERT_EQ(0, connect_pair(&cli, &srv));
	ASSERT_EQ(0, ulp(cli));
	ASSERT_EQ(0, ulp(srv));
	ASSERT_EQ(0, one_way(cli, srv, 1 << 20));
	close(cli);
	close(srv);
	EXPECT_EQ(kept0 + 2, spare_reaches("zc_ring_spare_kept", kept0 + 2)) TH_LOG("both rings kept");
	EXPECT_EQ(spares0 + 2, spare("zc_ring_spares"));
	/* Side a's ring: its last references (the region's) go on a workqueue. */
	usleep(200000);

	reused0 = spare("zc_ring_spare_reused");
	a0 = rx_where('a');
	b0 = rx_where('b');
	ASSERT_EQ(0, connect_pair(&cli, &srv));
	ASSERT_EQ(0, ulp(cli));
	ASSERT_EQ(0, ulp(srv));
	printf("# attaches that took a spare ring: %lld of 2\n", spare("zc_ring_spare_reused") - reused0);
	EXPECT_LE(reused0 + 1, spare("zc_ring_spare_reused")) TH_LOG("an attach took a spare");
	EXPECT_EQ(0, both_ways(cli, srv, 8ull << 20, 300)) TH_LOG("through reused rings");
	EXPECT_TRUE(nic_carried('a', a0, 8ull << 20));
	EXPECT_TRUE(nic_carried('b', b0, 8ull << 20));
	close(cli);
	close(srv);
	for (i = 0; i < nheld; i++)
		close(held[i]);
	EXPECT_TRUE(back_to(flows0, pinned0)) TH_LOG("spare rings are pinned and charged to nobody");
	EXPECT_LE(spare("zc_ring_spares"), param("ZN_SPARE_RINGS", 8));
}

/*
 * Small payloads (rx_copybreak, 256 bytes by default) reach TCP copied from
 * the ring, not as ring pages, and arrive intact: 1500 messages of 1 to 300
 * bytes, one packet each (TCP_NODELAY, ping-pong), each echoed back. The
 * stream crosses the ring's pages at every alignment, so copies that span
 * two pages are among them. Each side's zc_rx_copybreak_bytes grows by at
 * most the bytes of the messages within the limit (larger ones take the
 * fragment path) and by at least half of them (the NIC places what finds
 * room), and the copied bytes count as placed.
 */
TEST(small_payloads_are_copied_intact)
{
	long long limit = param("ZN_RX_COPYBREAK", 256);
	long long cb_a0 = stat_of('a', "zc_rx_copybreak_bytes"), cb_b0 = stat_of('b', "zc_rx_copybreak_bytes");
	long long pl_a0 = stat_of('a', "zc_rx_placed_bytes"), pl_b0 = stat_of('b', "zc_rx_placed_bytes");
	unsigned long long off = 0, small = 0;
	unsigned char out[300];
	int cli, srv, one = 1, k;
	struct reader at_b, at_a;
	long long cb_a, cb_b;

	ASSERT_LE(0, cb_a0) TH_LOG("zc_rx_copybreak_bytes in ethtool -S");
	ASSERT_EQ(0, connect_pair(&cli, &srv));
	ASSERT_EQ(0, ulp(cli));
	ASSERT_EQ(0, ulp(srv));
	ASSERT_EQ(0, setsockopt(cli, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
	ASSERT_EQ(0, setsockopt(srv, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
	at_b = (struct reader){ .s = srv, .side = 0 };
	at_a = (struct reader){ .s = cli, .side = 0 };
	for (k = 0; k < 1500; k++) {
		size_t n = 1 + (size_t)k * 37 % 300, i;

		for (i = 0; i < n; i++)
			out[i] = pat(0, off + i);
		ASSERT_EQ((ssize_t)n, write(cli, out, n));
		ASSERT_EQ(0, read_to(&at_b, off + n)) TH_LOG("message %d at a->b offset %llu", k, off);
		/* The echo: the bytes b just found intact. */
		ASSERT_EQ((ssize_t)n, write(srv, out, n));
		ASSERT_EQ(0, read_to(&at_a, off + n)) TH_LOG("echo %d at b->a offset %llu", k, off);
		off += n;
		if ((long long)n <= limit)
			small += n;
	}
	cb_a = stat_of('a', "zc_rx_copybreak_bytes") - cb_a0;
	cb_b = stat_of('b', "zc_rx_copybreak_bytes") - cb_b0;
	printf("# %llu bytes each way, %llu in messages of at most %lld; copied: a %lld, b %lld\n", off, small,
	       limit, cb_a, cb_b);
	EXPECT_LE(cb_b, (long long)small);
	EXPECT_LE(cb_a, (long long)small);
	EXPECT_LE((long long)small / 2, cb_b) TH_LOG("b received the small payloads copied");
	EXPECT_LE((long long)small / 2, cb_a) TH_LOG("a received the small echoes copied");
	EXPECT_LE(cb_b, stat_of('b', "zc_rx_placed_bytes") - pl_b0) TH_LOG("copied bytes are placed ones");
	EXPECT_LE(cb_a, stat_of('a', "zc_rx_placed_bytes") - pl_a0);
	close(cli);
	close(srv);
}

/* A packet socket on side b's port, capturing all its frames, in b's namespace. */
static int tap_b(void)
{
	int self = in_ns("ZN_NS_B"), s, big = 4 << 20;
	struct sockaddr_ll ll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL) };

	if (self < 0)
		return -1;
	ll.sll_ifindex = if_nametoindex(getenv("ZN_IF_B") ? getenv("ZN_IF_B") : "none");
	s = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
	if (s >= 0 && (!ll.sll_ifindex || bind(s, (void *)&ll, sizeof(ll)) ||
		       setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)))) {
		close(s);
		s = -1;
	}
	back_ns(self);
	return s;
}

/*
 * Of the frames `tap` captured, checks the TCP payload sent to port `dport`
 * against side 0's pattern (stream offset = sequence number - the SYN's - 1).
 * Returns the payload bytes checked, or -1 at the first wrong byte.
 */
static long long check_capture(int tap, unsigned short dport)
{
	static unsigned char f[1 << 17];
	unsigned int isn = 0;
	long long checked = 0;
	int have_isn = 0;
	ssize_t n;

	while ((n = recv(tap, f, sizeof(f), MSG_DONTWAIT)) > 0) {
		unsigned char *ip = f + 14, *tcp;
		unsigned int seq, hl, ipl, i, data;
		int v6 = ((f[12] << 8) | f[13]) == ETH_P_IPV6;

		if (n < 14 + 40 || (!v6 && ((f[12] << 8) | f[13]) != ETH_P_IP))
			continue;
		if (v6) {
			if (ip[6] != IPPROTO_TCP)
				continue;
			hl = 40;
			ipl = 40 + ((ip[4] << 8) | ip[5]);
		} else {
			if (ip[9] != IPPROTO_TCP)
				continue;
			hl = (ip[0] & 15) * 4;
			ipl = (ip[2] << 8) | ip[3];
		}
		if (14 + ipl > (unsigned int)n || ipl < hl + 20)
			continue;
		tcp = ip + hl;
		if (((tcp[2] << 8) | tcp[3]) != dport)
			continue;
		seq = ((unsigned int)tcp[4] << 24) | (tcp[5] << 16) | (tcp[6] << 8) | tcp[7];
		if (tcp[13] & 0x02) {	/* SYN */
			isn = seq;
			have_isn = 1;
			continue;
		}
		data = hl + (tcp[12] >> 4) * 4;
		if (!have_isn || data > ipl)
			continue;
		for (i = 0; i < ipl - data; i++) {
			unsigned long long off = (unsigned int)(seq - isn - 1) + i;

			if (tcp[data - hl + i] != pat(0, off)) {
				printf("# captured byte %llu is %u, want %u\n", off,
				       tcp[data - hl + i], pat(0, off));
				return -1;
			}
		}
		checked += ipl - data;
	}
	return checked;
}

/*
 * A ring whose pages a socket buffer still references is not reused: here
 * a packet socket holds clones of side b's receipts. What it captured stays
 * what was received while the next connections attach, run and close, and
 * b's ring cools meanwhile (the spare ring that is not ready).
 */
TEST_F_TIMEOUT(move, ring_referenced_by_a_packet_socket_is_not_reused, 420)
{
	__u32 flows0 = flows_in_use();
	__u64 pinned0 = pinned_pages();
	int held[32], nheld, cli, srv, tap, i;
	long long kept0, checked;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	unsigned short dport;

	tap = tap_b();
	ASSERT_LE(0, tap) TH_LOG("a packet socket on b's port: %s", strerror(errno));
	nheld = drain_spares(held, 32);
	ASSERT_LE(0, nheld);
	kept0 = spare("zc_ring_spare_kept");
	ASSERT_EQ(0, connect_pair(&cli, &srv));
	ASSERT_EQ(0, getsockname(srv, (void *)&ss, &sl));
	dport = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					       : ((struct sockaddr_in *)&ss)->sin_port);
	ASSERT_EQ(0, ulp(cli));
	ASSERT_EQ(0, ulp(srv));
	ASSERT_EQ(0, one_way(cli, srv, 256 << 10));
	close(cli);
	close(srv);
	EXPECT_EQ(kept0 + 2, spare_reaches("zc_ring_spare_kept", kept0 + 2));

	/* The next connections attach (taking what spare rings they may), run
	 * and close. */
	for (i = 0; i < 3; i++) {
		ASSERT_EQ(0, connect_pair(&cli, &srv));
		ASSERT_EQ(0, ulp(cli));
		ASSERT_EQ(0, ulp(srv));
		EXPECT_EQ(0, both_ways(cli, srv, 2 << 20, 120));
		close(cli);
		close(srv);
	}
	EXPECT_LE(1, spare("zc_ring_spares_cooling")) TH_LOG("b's ring cools while the capture holds it");
	checked = check_capture(tap, dport);
	printf("# the packet socket's capture: %lld payload bytes checked\n", checked);
	EXPECT_LT(0, checked) TH_LOG("the capture is what was received");
	close(tap);
	for (i = 0; i < nheld; i++)
		close(held[i]);
	EXPECT_TRUE(back_to(flows0, pinned0));
}

TEST_HARNESS_MAIN
