// SPDX-License-Identifier: GPL-2.0
/*
 * The zero-copy path against a hostile user or peer (issue 32): an
 * unprivileged process in network namespaces of its own, a peer sending
 * urgent data, forged segments TCP drops, posted room larger than sequence
 * numbers can say.
 *
 * Runs in the two-port topology, like zc_test (zc_security.sh exports
 * ZN_NS_A, ZN_NS_B and ZN_ADDR_B). Connections go from namespace a to a
 * listener in namespace b over the ZeroNIC ports; the namespace case builds
 * its own namespaces as uid 65534 in a user namespace.
 */
#define _GNU_SOURCE
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "kselftest_harness.h"
#include "zc_lib.h"

FIXTURE(sec)
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

FIXTURE_SETUP(sec)
{
	ZC_FIXTURE_OPEN(1, 512, 16 << 20);
	ASSERT_EQ(0, reg(self->zfd, self->buf, self->len,
			 ZERONIC_ACCESS_LOCAL_READ | ZERONIC_ACCESS_LOCAL_WRITE, &self->key));
}

FIXTURE_TEARDOWN(sec)
{
	/* Whatever the test did, closing gives every flow, region and pin back. */
	ZC_FIXTURE_CLOSE(1);
}

/* How many of the `n` bytes at `p` are `c`. */
static size_t count_of(const char *p, size_t n, char c)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += p[i] == c;
	return k;
}

/* ---- an interface index is not a device (finding 1) ----------------------- */

static int run(const char *fmt, ...)
{
	char cmd[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd) == 0 ? 0 : -1;
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), ok;

	if (fd < 0)
		return -1;
	ok = write(fd, s, strlen(s)) == (ssize_t)strlen(s);
	close(fd);
	return ok ? 0 : -1;
}

/* Becomes uid 65534, then root of a new user namespace with a new network one. */
static int unprivileged_user_and_net_ns(void)
{
	if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
		return -1;
	/* A set-user-ID change made /proc/self root's: make it ours again. */
	if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0))
		return -1;
	if (unshare(CLONE_NEWUSER | CLONE_NEWNET))
		return -1;
	if (write_file("/proc/self/setgroups", "deny") ||
	    write_file("/proc/self/uid_map", "0 65534 1") ||
	    write_file("/proc/self/gid_map", "0 65534 1"))
		return -1;
	return 0;
}

/* What the victim-less attacker saw: its exit code. */
enum { SAW_ENODEV = 0, ATTACHED = 100, SETUP_FAILED = 101 };

#define EVIL_PORT 6099

/*
 * Sends, as the client `cli`, `len` bytes 'Z' at `seq` with an ACK of bytes
 * the server never sent (`ack` + 2^30): TCP drops the segment, payload too,
 * while the NIC, which checks flags and the window, not ACK numbers, places
 * it. Then waits for it to be handled, so it is on the wire before anything
 * the test sends next. 0 if sent.
 */
static int forge_dropped(int cli, __u32 seq, __u32 ack, size_t len)
{
	if (zc_inject(cli, "ZN_NS_A", seq, ack + (1u << 30), ZC_TCP_ACK | ZC_TCP_PSH, 'Z', len))
		return -1;
	usleep(200000);
	return 0;
}

/*
 * The listener's end: a network namespace of the attacker's own (nested in
 * its user namespace), which the attacker moves its veth's other end into.
 */
static void listener(int ready_wr, int go_rd)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(EVIL_PORT) };
	int l, s, one = 1;
	char c;

	if (unshare(CLONE_NEWNET) || write(ready_wr, "n", 1) != 1)
		_exit(1);
	if (read(go_rd, &c, 1) != 1)	/* vb is here now */
		_exit(1);
	if (run("ip link set lo up && ip addr add 10.99.0.2/24 dev vb && ip link set vb up"))
		_exit(1);
	l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || bind(l, (void *)&a, sizeof(a)) || listen(l, 1))
		_exit(1);
	if (write(ready_wr, "l", 1) != 1)
		_exit(1);
	/* Accepts and keeps the connection until the attacker is done. */
	s = accept(l, NULL, NULL);
	while (read(go_rd, &c, 1) > 0)
		;
	close(s);
	_exit(0);
}

static int setup_failed(const char *what)
{
	fprintf(stderr, "# attacker: %s: %s\n", what, strerror(errno));
	return SETUP_FAILED;
}

static int attacker(int idx0, int idx1)
{
	struct sockaddr_in b = { .sin_family = AF_INET, .sin_port = htons(EVIL_PORT) };
	int ready[2], go[2], zfd, s, ret;
	__u32 cq = 0, flow = 0;
	pid_t pid;
	char c;

	if (unprivileged_user_and_net_ns() || pipe(ready) || pipe(go))
		return setup_failed("user and network namespaces as uid 65534");
	pid = fork();
	if (pid == 0) {
		close(ready[0]);
		close(go[1]);
		listener(ready[1], go[0]);
	}
	close(ready[1]);
	close(go[0]);
	if (pid < 0 || read(ready[0], &c, 1) != 1)
		return setup_failed("the listener's namespace");
	/* A veth whose end here has port 0's index, the other end port 1's. */
	if (run("ip link set lo up && ip link add va index %d type veth peer name vb index %d &&"
		" ip link set vb netns %d && ip addr add 10.99.0.1/24 dev va && ip link set va up",
		idx0, idx1, pid))
		return setup_failed("the veth with the ports' indexes");
	if (write(go[1], "m", 1) != 1 || read(ready[0], &c, 1) != 1)
		return setup_failed("the listener");
	inet_pton(AF_INET, "10.99.0.2", &b.sin_addr);
	s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0 || connect(s, (void *)&b, sizeof(b)))
		return setup_failed("the connection over the veth");
	zfd = zopen();
	if (zfd < 0 || cq_create(zfd, 16, -1, &cq, NULL, NULL))
		return setup_failed("/dev/zeronic and a CQ");
	ret = attach(zfd, s, cq, ZERONIC_RX_MESSAGE, 0, 0, &flow);
	close(zfd);
	close(s);
	close(go[1]);
	waitpid(pid, NULL, 0);
	if (ret == 0)
		return ATTACHED;
	return ret == ENODEV ? SAW_ENODEV : ret;
}

/*
 * A process with network namespaces of its own gives a veth the interface
 * indexes of both ZeroNIC ports and attaches a connection routed through
 * it: the route does not leave through a ZeroNIC port, so ENODEV. Before
 * the driver compared devices, it compared numbers: the attach succeeded
 * and the NIC split a tuple of the attacker's choosing on port 0.
 */
TEST(attach_through_a_device_with_a_port_s_index_in_another_namespace_is_enodev)
{
	struct zeronic_query q;
	int zfd = zopen(), status;
	pid_t pid;

	ASSERT_LE(0, zfd);
	ASSERT_EQ(0, query(zfd, &q));
	close(zfd);
	ASSERT_LE(2u, q.num_ports);
	ASSERT_NE(0u, q.ports[0].ifindex);
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(attacker(q.ports[0].ifindex, q.ports[1].ifindex));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_NE(SETUP_FAILED, WEXITSTATUS(status))
		TH_LOG("the attacker's namespaces could not be set up (user namespaces, veth, ip)");
	EXPECT_NE(ATTACHED, WEXITSTATUS(status))
		TH_LOG("a connection routed through another namespace's veth was attached");
	EXPECT_EQ(SAW_ENODEV, WEXITSTATUS(status))
		TH_LOG("attach returned %s, not ENODEV", strerror(WEXITSTATUS(status)));
}

/* ---- urgent data is part of the stream (finding 4) ------------------------ */

/* The peer's stream: ordinary bytes with urgent ones between them; 0 if sent. */
static int send_with_urgent_bytes(int s)
{
	if (write(s, "ab", 2) != 2 || send(s, "X", 1, MSG_OOB) != 1)
		return -1;
	usleep(100000);
	if (write(s, "cd", 2) != 2 || send(s, "Y", 1, MSG_OOB) != 1)
		return -1;
	usleep(100000);
	return write(s, "ef", 2) == 2 ? 0 : -1;
}

/*
 * The peer sends urgent bytes (telnet, FTP's ABOR): they arrive inline, in
 * stream order, and the flow goes on. Before, tcp_read_sock() stopped at the
 * first urgent mark for good and the segment never completed.
 */
TEST_F(sec, urgent_bytes_arrive_inline_in_a_message_flow)
{
	struct zeronic_cqe e = { 0 };
	__u32 flow = 0;

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, 0, 8));
	ASSERT_EQ(0, send_with_urgent_bytes(self->cli));
	ASSERT_EQ(0, cq_take(self->map, &e, 10000))
		TH_LOG("the 8-byte segment did not complete: the flow stopped at an urgent mark");
	EXPECT_EQ(0, e.status);
	EXPECT_EQ(8u, e.len);
	EXPECT_EQ(0, memcmp(self->buf, "abXcdYef", 8));
	/* And the flow goes on after them. */
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, 4096, 4));
	ASSERT_EQ(4, write(self->cli, "more", 4));
	ASSERT_EQ(0, cq_take(self->map, &e, 10000));
	EXPECT_EQ(4u, e.len);
	EXPECT_EQ(0, memcmp(self->buf + 4096, "more", 4));
}

TEST_F(sec, urgent_bytes_arrive_inline_in_a_stream_flow)
{
	struct zeronic_stream_consume sc = { 0 };
	struct zeronic_cqe e = { 0 };
	__u32 flow = 0, got = 0;

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_STREAM, self->key, 4096,
			    &flow));
	ASSERT_EQ(0, send_with_urgent_bytes(self->cli));
	while (got < 8) {
		ASSERT_EQ(0, cq_take(self->map, &e, 10000))
			TH_LOG("%u of 8 bytes arrived: the flow stopped at an urgent mark", got);
		ASSERT_EQ(ZERONIC_CQE_STREAM_DATA, e.opcode);
		EXPECT_EQ(got, e.stream_off);
		got += e.len;
	}
	EXPECT_EQ(8u, got);
	EXPECT_EQ(0, memcmp(self->buf, "abXcdYef", 8));
	sc.flow = flow;
	sc.stream_off = got;
	EXPECT_EQ(0, ioctl(self->zfd, ZERONIC_IOC_STREAM_CONSUME, &sc));
}

/* ---- posted room beyond 2 GiB (finding 7) --------------------------------- */

/*
 * 129 receives of the same 16 MiB post 2 GiB and more of room. TCP orders
 * sequence numbers modulo 2^32, so a window edge that far ahead read as
 * behind rcv_nxt and the window stayed shut: the peer could send nothing.
 */
TEST_F(sec, posted_room_beyond_2_gib_still_opens_the_window)
{
	const unsigned int n = 129;
	struct zeronic_cqe e = { 0 };
	__u32 flow = 0;
	int status;
	pid_t pid;

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	for (unsigned int i = 0; i < n; i++) {
		ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, 0, self->len))
			TH_LOG("post %u of %u", i, n);
	}
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		char *src = malloc(self->len);

		if (!src)
			_exit(1);
		memset(src, 0x5a, self->len);
		_exit(write(self->cli, src, self->len) == (ssize_t)self->len ? 0 : 1);
	}
	EXPECT_EQ(0, cq_take(self->map, &e, 20000))
		TH_LOG("nothing arrived: the window stayed shut");
	EXPECT_EQ(0, e.status);
	EXPECT_EQ(self->len, e.len);
	if (e.len == self->len)
		EXPECT_EQ(0x5a, self->buf[self->len - 1]);
	/* A writer stuck on a shut window: end the connection, then reap it. */
	shutdown(self->cli, SHUT_RDWR);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_EQ(0, detach(self->zfd, flow));
}

/* ---- TCP is the authority over content (finding 2) ------------------------ */

/*
 * A blind injector's segment (an ACK of unsent bytes: TCP drops it) lands in
 * posted space where the peer's next bytes go, then the real bytes come.
 * The NIC placed the forged bytes and, before, reported the real packet as
 * a duplicate of bytes below its cursor: the driver built its receipt over
 * the forged bytes, TCP accepted it, and the application received them
 * with status 0. The real bytes must arrive.
 */
TEST_F(sec, bytes_of_a_segment_tcp_dropped_never_reach_the_application)
{
	struct zeronic_cqe e = { 0 };
	__u32 flow = 0, seq, ack;

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, 0, 512));
	ASSERT_EQ(0, zc_seqs(self->cli, &seq, &ack)) TH_LOG("TCP_REPAIR: %s", strerror(errno));
	ASSERT_EQ(0, forge_dropped(self->cli, seq, ack, 512)) TH_LOG("inject: %s", strerror(errno));
	ASSERT_EQ(0, write_all(self->cli, 'a', 512));
	ASSERT_EQ(0, cq_take(self->map, &e, 10000)) TH_LOG("the 512 bytes never came");
	EXPECT_EQ(0, e.status);
	EXPECT_EQ(512u, e.len);
	EXPECT_EQ(512u, count_of(self->buf, 512, 'a'))
		TH_LOG("%zu of 512 bytes are the injector's", count_of(self->buf, 512, 'Z'));
	/* And the flow goes on, placing again. */
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, 4096, 4096));
	ASSERT_EQ(0, write_all(self->cli, 'b', 4096));
	ASSERT_EQ(0, cq_take(self->map, &e, 10000));
	EXPECT_EQ(4096u, e.len);
	EXPECT_EQ(4096u, count_of(self->buf + 4096, 4096, 'b'));
}

/* The same in a stream flow: the ring must hold the real bytes. */
TEST_F(sec, bytes_of_a_segment_tcp_dropped_never_reach_a_stream_ring)
{
	struct zeronic_stream_consume sc = { 0 };
	struct zeronic_cqe e = { 0 };
	__u32 flow = 0, seq, ack, got = 0;

	memset(self->buf, 0, 4096);
	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_STREAM, self->key, 4096,
			    &flow));
	ASSERT_EQ(0, zc_seqs(self->cli, &seq, &ack)) TH_LOG("TCP_REPAIR: %s", strerror(errno));
	ASSERT_EQ(0, forge_dropped(self->cli, seq, ack, 512)) TH_LOG("inject: %s", strerror(errno));
	ASSERT_EQ(0, write_all(self->cli, 'a', 512));
	while (got < 512) {
		ASSERT_EQ(0, cq_take(self->map, &e, 10000)) TH_LOG("%u of 512 bytes came", got);
		ASSERT_EQ(ZERONIC_CQE_STREAM_DATA, e.opcode);
		EXPECT_EQ(0, e.status);
		got += e.len;
	}
	EXPECT_EQ(512u, got);
	EXPECT_EQ(512u, count_of(self->buf, 512, 'a'))
		TH_LOG("%zu of 512 bytes are the injector's", count_of(self->buf, 512, 'Z'));
	sc.flow = flow;
	sc.stream_off = got;
	EXPECT_EQ(0, ioctl(self->zfd, ZERONIC_IOC_STREAM_CONSUME, &sc));
}

/*
 * Linux keeps the first copy of bytes it queued out of order. A segment TCP
 * takes into its out-of-order queue (bytes 100..199, as if the peer sent
 * them: right ACK, in the window) is placed; then a forged one over the
 * same bytes (an ACK of unsent bytes: dropped) arrives. Before, the NIC wrote it over the
 * queued bytes, which the application then received once the hole filled.
 */
TEST_F(sec, a_forged_overlap_never_changes_bytes_tcp_queued)
{
	struct zeronic_cqe e = { 0 };
	__u32 flow = 0, seq, ack;

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, 0, 200));
	ASSERT_EQ(0, zc_seqs(self->cli, &seq, &ack)) TH_LOG("TCP_REPAIR: %s", strerror(errno));
	ASSERT_EQ(0, zc_inject(self->cli, "ZN_NS_A", seq + 100, ack, ZC_TCP_ACK | ZC_TCP_PSH,
			       'b', 100));
	usleep(200000);
	ASSERT_EQ(0, forge_dropped(self->cli, seq + 100, ack, 100));
	ASSERT_EQ(0, write_all(self->cli, 'a', 100));
	ASSERT_EQ(0, cq_take(self->map, &e, 10000)) TH_LOG("the 200 bytes never came");
	EXPECT_EQ(0, e.status);
	EXPECT_EQ(200u, e.len);
	EXPECT_EQ(100u, count_of(self->buf, 100, 'a'));
	EXPECT_EQ(100u, count_of(self->buf + 100, 100, 'b'))
		TH_LOG("%zu of the queued bytes are the forger's", count_of(self->buf + 100, 100, 'Z'));
}

/* ---- memory the NIC may still write (finding 12) -------------------------- */

/*
 * Bytes TCP queued before the attach are copied into the first segment by
 * the CPU. The NIC had that segment (its MS_POST) and writes it until its
 * cursor passes it, so the segment may go back only once the NIC executed
 * the cursor move: with the NIC frozen, it must not complete. Before, it
 * completed at once, while a frame of those bytes (a retransmission, or an
 * injected one) could still be written into it.
 */
TEST_F(sec, a_segment_the_cpu_filled_goes_back_only_after_the_nic_moved_past_it)
{
	struct zeronic_cqe e = { 0 };
	__u32 flow = 0;
	int early;

	ASSERT_EQ(7, write(self->cli, "before|", 7));
	usleep(300000);
	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, nic_fault("freeze")) TH_LOG("the model's fault control (ZN_WIRE)");
	EXPECT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, 0, 7));
	early = cq_take(self->map, &e, 1000);
	ASSERT_EQ(0, nic_fault("thaw"));
	EXPECT_NE(0, early)
		TH_LOG("the segment completed (%u bytes) while the NIC could still write it", e.len);
	if (early)
		ASSERT_EQ(0, cq_take(self->map, &e, 10000))
			TH_LOG("the segment never completed after the NIC moved on");
	EXPECT_EQ(0, e.status);
	EXPECT_EQ(7u, e.len);
	EXPECT_NE(0u, e.flags & ZERONIC_CQE_F_COPIED);
	EXPECT_EQ(0, memcmp(self->buf, "before|", 7));
}

/*
 * The CPU copies bytes TCP took on the normal path (here: queued before the
 * attach) into the segment; the NIC may place into that segment until its
 * cursor passed it. With the cursor move held at the NIC, a forged frame of
 * those bytes arrives (TCP drops it: it already holds them). Before, the
 * copy was made at once, the NIC placed the forged bytes over it, and the
 * segment completed with them once the cursor moved. The copy must wait
 * for the NIC's cursor.
 */
TEST_F(sec, a_copy_waits_until_the_nic_moved_past_it)
{
	struct zeronic_cqe e = { 0 };
	__u32 flow = 0, seq;

	ASSERT_EQ(7, write(self->cli, "before|", 7));
	usleep(300000);
	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, zc_seqs(self->cli, &seq, NULL)) TH_LOG("TCP_REPAIR: %s", strerror(errno));
	ASSERT_EQ(0, nic_fault("hold")) TH_LOG("the model's fault control (ZN_WIRE)");
	EXPECT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, 0, 7));
	usleep(200000);
	EXPECT_EQ(0, zc_inject(self->cli, "ZN_NS_A", seq - 7, 0, ZC_TCP_PSH, 'Z', 7))
		TH_LOG("inject: %s", strerror(errno));
	usleep(200000);
	ASSERT_EQ(0, nic_fault("thaw"));
	ASSERT_EQ(0, cq_take(self->map, &e, 10000)) TH_LOG("the segment never completed");
	EXPECT_EQ(0, e.status);
	EXPECT_EQ(7u, e.len);
	EXPECT_EQ(0, memcmp(self->buf, "before|", 7))
		TH_LOG("the segment holds \"%.7s\": the NIC wrote over the copy", self->buf);
}

/*
 * The NIC refuses a segment post (fault refuse-posts): it then places the
 * next segment posted where the refused one starts, the driver where it
 * ends, and the stream lands in the wrong buffers. Before, the refusal was
 * ignored: a segment completed with status 0 holding bytes that were not
 * the stream's. The flow must fail with EIO instead, and no segment may
 * complete with status 0 holding other bytes.
 */
TEST_F(sec, a_segment_the_nic_refuses_fails_the_flow)
{
	static const char fill[3] = { 'a', 'b', 'c' };
	struct zeronic_cqe e = { 0 };
	int event = -1, wrong = 0, i;
	__u32 flow = 0;

	memset(self->buf, 0, 3 * 4096);
	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, 0, 4096));
	usleep(100000);
	ASSERT_EQ(0, nic_fault("refuse-posts")) TH_LOG("the model's fault control (ZN_WIRE)");
	EXPECT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, 4096, 4096));
	usleep(300000);
	ASSERT_EQ(0, nic_fault("thaw"));
	/* Refused with EPIPE once the flow failed; taken before. */
	post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, 8192, 4096);
	for (i = 0; i < 3; i++)
		ASSERT_EQ(0, write_all(self->cli, fill[i], 4096));
	while (!cq_take(self->map, &e, 3000)) {
		if (e.opcode == ZERONIC_CQE_FLOW) {
			event = e.status;
			continue;
		}
		if (e.opcode != ZERONIC_CQE_RECV || e.status)
			continue;
		/* post1()'s wr_id is the region offset + 1. */
		i = (e.wr_id - 1) / 4096;
		if (i > 2 || count_of(self->buf + i * 4096, e.len, fill[i]) != e.len) {
			TH_LOG("segment %d completed with status 0 and %u bytes not the stream's",
			       i, e.len);
			wrong++;
		}
	}
	EXPECT_EQ(EIO, event) TH_LOG("the flow did not fail with EIO (event %d)", event);
	EXPECT_EQ(0, wrong) TH_LOG("a segment completed with status 0 holding other bytes");
	EXPECT_NE(4096u, count_of(self->buf + 8192, 4096, 'b'))
		TH_LOG("the refused segment's bytes landed in the next one");
}

/*
 * The NIC places nothing past the window TCP offered, which TCP would drop
 * (RFC 9293 3.10.7.4). Room is posted far past that window; a segment after
 * it, with a right ACK, must not be written. Before, the NIC placed any
 * segment inside posted room.
 */
TEST_F(sec, a_segment_past_the_offered_window_is_never_placed)
{
	const size_t room = 4 << 20;
	struct zeronic_cqe e = { 0 };
	__u32 flow = 0, seq, ack, wnd;
	size_t at, got = 0;
	int i;

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	for (i = 0; i < 4; i++)
		ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, (size_t)i << 20,
				   1 << 20));
	/* Any window update the room brought reaches the client. */
	usleep(200000);
	ASSERT_EQ(0, zc_seqs(self->cli, &seq, &ack)) TH_LOG("TCP_REPAIR: %s", strerror(errno));
	ASSERT_EQ(0, zc_peer_window(self->cli, &wnd)) TH_LOG("TCP_REPAIR: %s", strerror(errno));
	at = (size_t)wnd + 65536;
	ASSERT_GT(room - 512, at) TH_LOG("window %u: no posted room past it", wnd);
	ASSERT_EQ(0, zc_inject(self->cli, "ZN_NS_A", seq + at, ack, ZC_TCP_ACK | ZC_TCP_PSH, 'Z',
			       512))
		TH_LOG("inject: %s", strerror(errno));
	usleep(200000);
	EXPECT_EQ(0u, count_of(self->buf + at, 512, 'Z'))
		TH_LOG("the NIC wrote bytes %zu.. past the %u-byte window", at, wnd);
	/* The stream goes on over that room, every byte the peer's. */
	ASSERT_EQ(0, write_all(self->cli, 'a', room));
	while (got < room) {
		ASSERT_EQ(0, cq_take(self->map, &e, 20000)) TH_LOG("%zu of %zu bytes came", got, room);
		EXPECT_EQ(0, e.status);
		got += e.len;
	}
	EXPECT_EQ(room, count_of(self->buf, room, 'a'));
}

/*
 * Nor payload TCP discards for the segment's flags: without ACK, with SYN,
 * with RST (RFC 9293 3.10.7.4; Linux drops all three). A SYN would draw a
 * challenge ACK and an RST at the right sequence number would reset the
 * connection, so those two are sent one byte ahead (still in the window,
 * where TCP only acknowledges or challenges them).
 */
TEST_F(sec, payload_tcp_discards_for_its_flags_is_never_placed)
{
	static const __u8 flags[] = { ZC_TCP_PSH, ZC_TCP_SYN | ZC_TCP_ACK, ZC_TCP_RST | ZC_TCP_ACK };
	struct zeronic_cqe e = { 0 };
	__u32 flow = 0, seq, ack;
	size_t i;

	ASSERT_EQ(0, attach(self->zfd, self->srv, self->cq, ZERONIC_RX_MESSAGE, 0, 0, &flow));
	ASSERT_EQ(0, post1(self->zfd, flow, ZERONIC_WR_RECV, self->key, 0, 4096));
	ASSERT_EQ(0, zc_seqs(self->cli, &seq, &ack)) TH_LOG("TCP_REPAIR: %s", strerror(errno));
	for (i = 0; i < sizeof(flags); i++)
		ASSERT_EQ(0, zc_inject(self->cli, "ZN_NS_A", seq + 1024 + 1024 * i, ack, flags[i],
				       'Z', 512))
			TH_LOG("inject: %s", strerror(errno));
	usleep(200000);
	EXPECT_EQ(0u, count_of(self->buf, 4096, 'Z'))
		TH_LOG("the NIC wrote %zu bytes TCP discarded", count_of(self->buf, 4096, 'Z'));
	ASSERT_EQ(0, write_all(self->cli, 'a', 4096));
	ASSERT_EQ(0, cq_take(self->map, &e, 10000)) TH_LOG("the 4096 bytes never came");
	EXPECT_EQ(0, e.status);
	EXPECT_EQ(4096u, e.len);
	EXPECT_EQ(4096u, count_of(self->buf, 4096, 'a'));
}

TEST_HARNESS_MAIN
