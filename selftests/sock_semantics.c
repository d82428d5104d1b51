// SPDX-License-Identifier: GPL-2.0
/*
 * Socket semantics an application relies on, checked over TCP between the
 * two ports of the two-port topology (issue 34, deliverable 7): the same
 * program runs once over plain TCP (the reference, `--mode plain`) and once
 * over sockets attached to the NIC (`--mode zeronic`: every end is attached
 * with setsockopt(TCP_ULP, "zeronic") right after connect() or accept()),
 * where the kernel serves the socket's calls itself. Each case sets up its own
 * connection(s): the listening/accepting end in namespace ZN_NS_B on
 * ZN_ADDR_B, the connecting end in ZN_NS_A (the variables zc_env.sh
 * exports; without them, loopback in the caller's namespace, for runs
 * outside a guest). Every byte is checked against a position-dependent
 * pattern; an EOF is read() == 0.
 *
 * Cases:
 * - prefork_server: three children accept on one inherited listener and
 *   serve six connections between them.
 * - fork_per_connection: a server that accepts, forks, closes its copy; the
 *   child serves the connection.
 * - exit_with_unsent_data, exec_with_unsent_data, sigkill_with_unsent_data:
 *   a writer process connects, leaves bytes unsent (the peer reads nothing
 *   meanwhile) and exits, execs (the new program inherits the socket, leaves
 *   it alone and exits) or is killed: the peer gets every byte, then the
 *   FIN.
 * - epoll_maxevents1_edge, epoll_maxevents1_oneshot: eight ready connections,
 *   epoll_wait(maxevents 1): each reported once per edge / arming, none lost.
 * - signal_handler_writes_under_load: a SIGALRM handler writes records to one
 *   connection while the main loop writes a bulk stream to another.
 * - vfork_child, posix_spawn_child: a child (dup2 of the socket on its
 *   stdout, exec of echo) writes through the socket; the parent's connection
 *   works on, both ways.
 * - close_range_of_connections: close_range() of four connections: each peer gets its data,
 *   then the FIN; a connection below the range still works.
 * - splice_both_ways: pipe -> socket and socket -> pipe.
 * - io_uring_read_write: IORING_OP_WRITE and IORING_OP_READ on the socket,
 *   one read submitted before its data arrives (raw system calls: liburing's
 *   headers are not installed).
 * - so_rcvtimeo: a read with nothing to read fails with EAGAIN after the
 *   timeout, measured; with data it returns at once.
 * - msg_peek_waitall: recv(MSG_PEEK | MSG_WAITALL) waits for the whole
 *   length arriving in two parts, consumes nothing.
 * - peer_reset_during_blocking_write: a write blocked on a full window
 *   returns once the peer resets; the next one fails, ECONNRESET seen.
 *
 * Where a case needs a second process (a writer that exits, a peer that
 * reads or resets), that process makes its own connection: only the cases
 * about fork, vfork and exec hand a connection across them.
 *
 * Usage: sock_semantics [--mode plain|zeronic] [kselftest harness options]
 * (or ZN_SOCK_MODE=...). An unknown mode is an error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "zc_lib.h"

extern char **environ;

/* ---- transport ---------------------------------------------------------- */

enum sock_mode {
	MODE_PLAIN,
	/* The same cases over sockets attached to the NIC (issue 34). */
	MODE_ZERONIC,
};

static enum sock_mode mode = MODE_PLAIN;

/*
 * Called on every connection end this program makes, right after connect()
 * or accept(). Plain TCP: nothing to do. Attached: setsockopt(TCP_ULP,
 * "zeronic") (the kTLS convention, docs/uapi.md), and getsockopt(TCP_ULP)
 * must read it back; an error fails the case.
 */
static int sock_attach(int fd)
{
	char ulp[16] = "";
	socklen_t len = sizeof(ulp);

	switch (mode) {
	case MODE_PLAIN:
		return 0;
	case MODE_ZERONIC:
		if (setsockopt(fd, SOL_TCP, TCP_ULP, "zeronic", 7)) {
			fprintf(stderr, "# setsockopt(TCP_ULP, zeronic): %s\n", strerror(errno));
			return -1;
		}
		if (getsockopt(fd, SOL_TCP, TCP_ULP, ulp, &len) || strcmp(ulp, "zeronic")) {
			fprintf(stderr, "# getsockopt(TCP_ULP) read '%s'\n", ulp);
			errno = EPROTO;
			return -1;
		}
		return 0;
	}
	errno = EINVAL;
	return -1;
}

static int parse_mode(const char *m)
{
	if (!strcmp(m, "plain")) {
		mode = MODE_PLAIN;
		return 0;
	}
	if (!strcmp(m, "zeronic")) {
		mode = MODE_ZERONIC;
		return 0;
	}
	fprintf(stderr, "sock_semantics: unknown mode '%s' (plain or zeronic)\n", m);
	return -1;
}

/* ---- namespaces and connections ------------------------------------------ */

static const char *addr_b(void)
{
	const char *a = getenv("ZN_ADDR_B");

	return a && *a ? a : "127.0.0.1";
}

/*
 * A listener on side b (ZN_ADDR_B, a port of the kernel's choosing: a fixed
 * one may be held by an earlier case's TIME_WAIT). `rcvbuf` > 0 sets
 * SO_RCVBUF, which the accepted sockets inherit (a small window, so a writer
 * leaves bytes unsent). Returns the fd, its port in *port.
 */
static int listener(int rcvbuf, int backlog, unsigned short *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t sl = sizeof(a);
	int self = in_ns("ZN_NS_B"), l, one = 1;

	if (self < 0)
		return -1;
	l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	back_ns(self);
	if (l < 0)
		return -1;
	inet_pton(AF_INET, addr_b(), &a.sin_addr);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (rcvbuf > 0)
		setsockopt(l, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	if (bind(l, (void *)&a, sizeof(a)) || listen(l, backlog) || getsockname(l, (void *)&a, &sl)) {
		close(l);
		return -1;
	}
	*port = ntohs(a.sin_port);
	return l;
}

/* Connects from side a to side b's `port`, attached as the mode says;
 * `sndbuf` > 0 forces SO_SNDBUF first. */
static int dial(unsigned short port, int sndbuf)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int self = in_ns("ZN_NS_A"), s;

	if (self < 0)
		return -1;
	s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s >= 0 && sndbuf > 0)
		setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf));
	inet_pton(AF_INET, addr_b(), &a.sin_addr);
	/* In side a's namespace while connecting: an LD_PRELOAD shim looks up
	 * the local address there. */
	if (s >= 0 && (connect(s, (void *)&a, sizeof(a)) || sock_attach(s))) {
		close(s);
		s = -1;
	}
	back_ns(self);
	return s;
}

/* Accepts on side b (in its namespace, as dial()), attached as the mode
 * says. */
static int take(int l)
{
	int self = in_ns("ZN_NS_B"), s;

	if (self < 0)
		return -1;
	s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	if (s >= 0 && sock_attach(s)) {
		close(s);
		s = -1;
	}
	back_ns(self);
	return s;
}

/*
 * A connected pair: *cli on side a, *srv on side b. `rcvbuf` as listener()
 * (at *srv), `sndbuf` (> 0) forced at both ends: a case that writes more
 * than the peer's window before reading makes its writes fit.
 */
static int pair(int *cli, int *srv, int rcvbuf, int sndbuf)
{
	unsigned short port;
	int l = listener(rcvbuf, 4, &port);

	*cli = *srv = -1;
	if (l < 0)
		return -1;
	*cli = dial(port, sndbuf);
	if (*cli >= 0)
		*srv = take(l);
	close(l);
	if (*srv >= 0 && sndbuf > 0)
		setsockopt(*srv, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf));
	return *srv < 0 ? -1 : 0;
}

/* A child process that dies with its parent (a failed case's leftovers). */
static pid_t child(void)
{
	pid_t p = fork();

	if (p == 0)
		prctl(PR_SET_PDEATHSIG, SIGKILL);
	return p;
}

/* The exit status of `pid` (-1: not a normal exit). */
static int reap(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- data ------------------------------------------------------------- */

static long ms_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void nap_ms(int ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&t, &t) && errno == EINTR)
		;
}

/* Byte `off` of stream `seed`: not periodic at any power of two. */
static inline unsigned char pat(unsigned int seed, size_t off)
{
	return (unsigned char)(off * 7 + (off >> 11) + (off >> 19) + seed * 31 + 1);
}

static void fill(char *b, unsigned int seed, size_t off, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pat(seed, off + i);
}

/* Index of the first byte that differs from the pattern, or -1. */
static long check(const char *b, unsigned int seed, size_t off, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)b[i] != pat(seed, off + i))
			return (long)i;
	return -1;
}

/* Writes bytes [off, off + n) of stream `seed` with write(2) (blocking
 * socket); 0 or -1 (errno). */
static int put(int s, unsigned int seed, size_t off, size_t n)
{
	char b[16384];

	while (n) {
		size_t k = n < sizeof(b) ? n : sizeof(b);
		ssize_t w;

		fill(b, seed, off, k);
		w = write(s, b, k);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		off += w;
		n -= w;
	}
	return 0;
}

/*
 * Reads bytes [off, off + n) of stream `seed` within `ms`, checking each;
 * how many matched in a row (n: all of them). Prints where it stopped.
 */
static size_t get(int s, unsigned int seed, size_t off, size_t n, int ms)
{
	long end = ms_now() + ms;
	size_t got = 0;
	char b[16384];

	while (got < n) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		size_t k = n - got < sizeof(b) ? n - got : sizeof(b);
		long bad, left = end - ms_now();
		ssize_t r;

		if (left <= 0) {
			fprintf(stderr, "# stream %u: %zu of %zu bytes within %d ms\n", seed, got, n, ms);
			break;
		}
		if (poll(&p, 1, (int)left) <= 0)
			continue;
		r = read(s, b, k);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r <= 0) {
			fprintf(stderr, "# stream %u: read %zd (%s) after %zu of %zu bytes\n", seed, r,
				r ? strerror(errno) : "EOF", got, n);
			break;
		}
		bad = check(b, seed, off + got, r);
		if (bad >= 0) {
			fprintf(stderr, "# stream %u: byte %zu differs\n", seed, off + got + bad);
			return got + bad;
		}
		got += r;
	}
	return got;
}

/* 1 if the next read on `s` is an EOF within `ms` (0 if data, an error or
 * nothing came). */
static int eof(int s, int ms)
{
	struct pollfd p = { .fd = s, .events = POLLIN };
	char c;
	ssize_t r;

	if (poll(&p, 1, ms) != 1)
		return 0;
	r = read(s, &c, 1);
	if (r != 0)
		fprintf(stderr, "# expected EOF, read %zd (%s)\n", r, r < 0 ? strerror(errno) : "data");
	return r == 0;
}

/* Bytes in `s`'s send queue not yet sent (SIOCOUTQNSD). */
static int outq(int s)
{
	int n = -1;

	ioctl(s, SIOCOUTQNSD, &n);
	return n;
}

#define MS 10000 /* the time a transfer may take in a TCG guest */

/* ---- servers -------------------------------------------------------------- */

#define REQ 4096
#define REPLY (64u << 10)

/* Serves one connection: a REQ-byte request of stream `seed`, the reply is
 * REPLY bytes of stream seed + 1000, then close. 0 on success. */
static int serve(int s)
{
	char b[REQ];
	size_t got = 0;
	unsigned int seed;

	while (got < REQ) {
		ssize_t r = read(s, b + got, REQ - got);

		if (r <= 0)
			return 1;
		got += r;
	}
	/* The request is stream `seed` from 0: find which. */
	for (seed = 0; seed < 256 && check(b, seed, 0, REQ) >= 0; seed++)
		;
	if (seed == 256 || put(s, seed + 1000, 0, REPLY))
		return 2;
	return close(s) ? 3 : 0;
}

/* A client of serve(): request of stream `seed`, reply and EOF checked. */
static int client(unsigned short port, unsigned int seed)
{
	int s = dial(port, 0), ok;

	if (s < 0)
		return 0;
	ok = !put(s, seed, 0, REQ) && get(s, seed + 1000, 0, REPLY, MS) == REPLY && eof(s, MS);
	close(s);
	return ok;
}

TEST(prefork_server)
{
	unsigned short port;
	int l = listener(0, 16, &port), total = 0, i;
	pid_t kids[3];

	ASSERT_LE(0, l);
	for (i = 0; i < 3; i++) {
		kids[i] = child();
		ASSERT_LE(0, kids[i]);
		if (kids[i] == 0) {
			int n = 0, s;

			/* Until the parent shuts the listener down (EINVAL). */
			while ((s = take(l)) >= 0) {
				if (serve(s))
					_exit(100);
				n++;
			}
			_exit(errno == EINVAL ? n : 101);
		}
	}
	for (i = 0; i < 6; i++)
		EXPECT_TRUE(client(port, i + 1)) TH_LOG("connection %d", i);
	/* Wakes every child's accept() with EINVAL. */
	ASSERT_EQ(0, shutdown(l, SHUT_RDWR));
	for (i = 0; i < 3; i++) {
		int st = reap(kids[i]);

		EXPECT_TRUE(st >= 0 && st <= 6) TH_LOG("child %d: status %d", i, st);
		if (st >= 0 && st <= 6)
			total += st;
	}
	EXPECT_EQ(6, total);
	close(l);
}

TEST(fork_per_connection)
{
	unsigned short port;
	int l = listener(0, 8, &port), i;
	pid_t srv;

	ASSERT_LE(0, l);
	srv = child();
	ASSERT_LE(0, srv);
	if (srv == 0) {
		/* The server: accept, fork, close the parent's copy at once. */
		int bad = 0;

		for (i = 0; i < 4; i++) {
			int s = take(l);
			pid_t c;

			if (s < 0)
				_exit(100);
			c = fork();
			if (c == 0) {
				close(l);
				_exit(serve(s));
			}
			close(s);
			if (c < 0 || reap(c))
				bad++;
		}
		_exit(bad);
	}
	close(l);
	for (i = 0; i < 4; i++)
		EXPECT_TRUE(client(port, 10 + i)) TH_LOG("connection %d", i);
	EXPECT_EQ(0, reap(srv));
}

/* ---- exit, exec, SIGKILL with unsent bytes ---------------------------------- */

/*
 * The writer's side: a small receive buffer at the peer, which reads nothing
 * until the writer is gone, and a large send buffer at the writer, so that
 * blocking writes return with most of their bytes unsent. The writer is a
 * child that makes its own connection (a fork after connect is
 * fork_per_connection's subject, not these cases').
 */
#define PEER_RCVBUF (16 << 10)
#define WRITER_SNDBUF (1 << 20)
#define UNSENT (192u << 10)
#define STREAM_EXIT 41

enum unsent_end { END_EXIT, END_EXEC, END_SIGKILL };

static void unsent_case(struct __test_metadata *_metadata, enum unsent_end how)
{
	unsigned short port;
	int l = listener(PEER_RCVBUF, 1, &port), srv, p[2], q = -1;
	pid_t w;

	ASSERT_LE(0, l);
	ASSERT_EQ(0, pipe(p));
	w = child();
	ASSERT_LE(0, w);
	if (w == 0) {
		char *args[] = { "true", NULL };
		int s = dial(port, WRITER_SNDBUF);

		close(p[0]);
		if (s < 0 || put(s, STREAM_EXIT, 0, UNSENT))
			_exit(103);
		/* The bytes not yet sent: some, or the case checks nothing. */
		q = outq(s);
		if (write(p[1], &q, sizeof(q)) != sizeof(q))
			_exit(102);
		switch (how) {
		case END_EXIT:
			exit(0); /* with the socket open: exit closes it */
		case END_EXEC:
			/* Inherited, unused, closed when the new program exits. */
			fcntl(s, F_SETFD, 0);
			execv("/bin/true", args);
			_exit(104);
		case END_SIGKILL:
			for (;;)
				pause();
		}
	}
	close(p[1]);
	srv = take(l);
	close(l);
	ASSERT_LE(0, srv);
	ASSERT_EQ(sizeof(q), read(p[0], &q, sizeof(q))) TH_LOG("the writer reported nothing");
	TH_LOG("%d bytes unsent at the writer's end", q);
	EXPECT_LT(0, q);
	if (how == END_SIGKILL)
		kill(w, SIGKILL);
	/* Killed: no exit status (-1); else 0. */
	EXPECT_EQ(how == END_SIGKILL ? -1 : 0, reap(w));
	EXPECT_EQ(UNSENT, get(srv, STREAM_EXIT, 0, UNSENT, MS));
	EXPECT_TRUE(eof(srv, MS));
	close(srv);
}

TEST(exit_with_unsent_data)
{
	unsent_case(_metadata, END_EXIT);
}

TEST(exec_with_unsent_data)
{
	unsent_case(_metadata, END_EXEC);
}

TEST(sigkill_with_unsent_data)
{
	unsent_case(_metadata, END_SIGKILL);
}

/* ---- epoll, maxevents 1 ----------------------------------------------------- */

#define NCONN 8

struct conns {
	int cli[NCONN], srv[NCONN];
};

static int conns_open(struct conns *c)
{
	unsigned short port;
	int l = listener(0, NCONN, &port), i;

	if (l < 0)
		return -1;
	for (i = 0; i < NCONN; i++) {
		c->cli[i] = dial(port, 0);
		c->srv[i] = c->cli[i] < 0 ? -1 : take(l);
		if (c->srv[i] < 0) {
			close(l);
			return -1;
		}
		fcntl(c->srv[i], F_SETFL, O_NONBLOCK);
	}
	close(l);
	return 0;
}

static void conns_close(struct conns *c)
{
	for (int i = 0; i < NCONN; i++) {
		close(c->cli[i]);
		close(c->srv[i]);
	}
}

/* Waits (MS at most) until `s` has `n` bytes to read; 0 or -1. */
static int fionread_at_least(int s, int n)
{
	long end = ms_now() + MS;
	int q = 0;

	while (ioctl(s, FIONREAD, &q) == 0 && q < n && ms_now() < end)
		nap_ms(5);
	return q < n ? -1 : 0;
}

/* Waits until every server end has `n` bytes to read (so all are ready
 * before epoll is asked). */
static int conns_ready(struct conns *c, int n)
{
	for (int i = 0; i < NCONN; i++)
		if (fionread_at_least(c->srv[i], n))
			return -1;
	return 0;
}

/* epoll_wait(maxevents 1) until it times out (`ms`); counts the events per
 * connection (data.u32), reading each reported connection's bytes if
 * `drain`. Returns the number of events. */
static int collect(int ep, struct conns *c, int counts[NCONN], int ms, int drain, unsigned int seed,
		   size_t off, size_t n)
{
	struct epoll_event ev;
	int total = 0;

	memset(counts, 0, sizeof(int) * NCONN);
	while (epoll_wait(ep, &ev, 1, ms) == 1) {
		if (ev.data.u32 >= NCONN)
			return -1;
		counts[ev.data.u32]++;
		total++;
		if (drain && get(c->srv[ev.data.u32], seed + ev.data.u32, off, n, MS) != n)
			return -1;
	}
	return total;
}

#define EPOLL_MSG 100

TEST(epoll_maxevents1_edge)
{
	int counts[NCONN], ep, i, round;
	struct conns c;

	ASSERT_EQ(0, conns_open(&c));
	ep = epoll_create1(EPOLL_CLOEXEC);
	ASSERT_LE(0, ep);
	for (i = 0; i < NCONN; i++) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u32 = i };

		ASSERT_EQ(0, epoll_ctl(ep, EPOLL_CTL_ADD, c.srv[i], &ev));
	}
	/* Two rounds: an edge per arrival, each reported exactly once. */
	for (round = 0; round < 2; round++) {
		for (i = 0; i < NCONN; i++)
			ASSERT_EQ(0, put(c.cli[i], 50 + i, round * EPOLL_MSG, EPOLL_MSG));
		ASSERT_EQ(0, conns_ready(&c, EPOLL_MSG));
		ASSERT_EQ(NCONN, collect(ep, &c, counts, 300, 1, 50, round * EPOLL_MSG, EPOLL_MSG));
		for (i = 0; i < NCONN; i++)
			EXPECT_EQ(1, counts[i]) TH_LOG("round %d, connection %d", round, i);
	}
	/* Unread bytes after the edge: no second report. */
	ASSERT_EQ(0, put(c.cli[0], 50, 2 * EPOLL_MSG, EPOLL_MSG));
	ASSERT_EQ(0, fionread_at_least(c.srv[0], EPOLL_MSG));
	EXPECT_EQ(1, collect(ep, &c, counts, 300, 0, 0, 0, 0));
	EXPECT_EQ(0, collect(ep, &c, counts, 200, 0, 0, 0, 0));
	close(ep);
	conns_close(&c);
}

TEST(epoll_maxevents1_oneshot)
{
	int counts[NCONN], ep, i;
	struct conns c;

	ASSERT_EQ(0, conns_open(&c));
	ep = epoll_create1(EPOLL_CLOEXEC);
	ASSERT_LE(0, ep);
	for (i = 0; i < NCONN; i++) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.u32 = i };

		ASSERT_EQ(0, epoll_ctl(ep, EPOLL_CTL_ADD, c.srv[i], &ev));
		ASSERT_EQ(0, put(c.cli[i], 60 + i, 0, EPOLL_MSG));
	}
	ASSERT_EQ(0, conns_ready(&c, EPOLL_MSG));
	/* Nothing read: each still reported once, then disabled. */
	ASSERT_EQ(NCONN, collect(ep, &c, counts, 300, 0, 0, 0, 0));
	for (i = 0; i < NCONN; i++)
		EXPECT_EQ(1, counts[i]) TH_LOG("connection %d", i);
	/* Re-armed: once more each, now read. */
	for (i = 0; i < NCONN; i++) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.u32 = i };

		ASSERT_EQ(0, epoll_ctl(ep, EPOLL_CTL_MOD, c.srv[i], &ev));
	}
	ASSERT_EQ(NCONN, collect(ep, &c, counts, 300, 1, 60, 0, EPOLL_MSG));
	for (i = 0; i < NCONN; i++)
		EXPECT_EQ(1, counts[i]) TH_LOG("re-armed, connection %d", i);
	close(ep);
	conns_close(&c);
}

/* ---- a signal handler that writes ---------------------------------------- */

static int sig_sock;
static volatile sig_atomic_t sig_count, sig_err;

static void on_alarm(int sig)
{
	int saved = errno;
	unsigned int rec[2] = { 0x5a5a0000u + sig_count, ~(0x5a5a0000u + sig_count) };

	(void)sig;
	if (write(sig_sock, rec, sizeof(rec)) == sizeof(rec))
		sig_count++;
	else
		sig_err = errno ? errno : -1;
	errno = saved;
}

/* The bulk stream: at least this much, and until the handler wrote
 * SIG_RECORDS records (or MS passed). */
#define BULK (2u << 20)
#define SIG_RECORDS 20

TEST(signal_handler_writes_under_load)
{
	struct itimerval it = { { 0, 2000 }, { 0, 2000 } }, off = {};
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	int bcli, rcli, l, p[2];
	unsigned int n = 0;
	size_t sent = 0, got = 0;
	unsigned short port;
	long end;
	pid_t peer;

	l = listener(0, 2, &port);
	ASSERT_LE(0, l);
	ASSERT_EQ(0, pipe(p));
	peer = child();
	ASSERT_LE(0, peer);
	if (peer == 0) {
		/* Accepts both (the bulk one first); checks the bulk stream and
		 * the records in order; reports how many of each came. */
		int bsrv = take(l), rsrv = take(l);
		unsigned int rec[2], want = 0;
		size_t have = 0, rhave = 0;
		int bulk_eof = 0, rec_eof = 0;

		if (bsrv < 0 || rsrv < 0)
			_exit(117);
		while (!bulk_eof || !rec_eof) {
			struct pollfd pf[2] = { { bsrv, POLLIN }, { rsrv, POLLIN } };
			char b[16384];
			ssize_t r;

			if (poll(pf, 2, MS) <= 0)
				_exit(110);
			if (pf[0].revents) {
				r = read(bsrv, b, sizeof(b));
				if (r < 0)
					_exit(111);
				if (r == 0)
					bulk_eof = 1;
				else if (check(b, 70, have, r) >= 0)
					_exit(112);
				have += r > 0 ? r : 0;
			}
			if (pf[1].revents) {
				r = read(rsrv, (char *)rec + rhave, sizeof(rec) - rhave);
				if (r < 0)
					_exit(113);
				if (r == 0)
					rec_eof = 1;
				rhave += r > 0 ? r : 0;
				if (rhave == sizeof(rec)) {
					if (rec[0] != 0x5a5a0000u + want || rec[1] != ~rec[0])
						_exit(114);
					want++;
					rhave = 0;
				}
			}
		}
		if (rhave)
			_exit(115);
		if (write(p[1], &want, sizeof(want)) != sizeof(want) ||
		    write(p[1], &have, sizeof(have)) != sizeof(have))
			_exit(116);
		_exit(0);
	}
	close(l);
	bcli = dial(port, 0);
	ASSERT_LE(0, bcli);
	rcli = dial(port, 0);
	ASSERT_LE(0, rcli);
	sig_sock = rcli;
	ASSERT_EQ(0, sigaction(SIGALRM, &sa, NULL));
	ASSERT_EQ(0, setitimer(ITIMER_REAL, &it, NULL));
	end = ms_now() + MS;
	while (sent < BULK || (sig_count < SIG_RECORDS && ms_now() < end)) {
		if (put(bcli, 70, sent, 65536))
			break;
		sent += 65536;
	}
	setitimer(ITIMER_REAL, &off, NULL);
	signal(SIGALRM, SIG_IGN);
	TH_LOG("%d records written by the handler while %zu bytes were written", (int)sig_count, sent);
	EXPECT_LE(BULK, sent);
	EXPECT_EQ(0, sig_err);
	EXPECT_LT(0, sig_count);
	close(bcli);
	close(rcli);
	close(p[1]);
	ASSERT_EQ(sizeof(n), read(p[0], &n, sizeof(n))) TH_LOG("the peer reported nothing");
	ASSERT_EQ(sizeof(got), read(p[0], &got, sizeof(got)));
	EXPECT_EQ(sig_count, n);
	EXPECT_EQ(sent, got);
	EXPECT_EQ(0, reap(peer));
}

/* ---- vfork and posix_spawn children ------------------------------------- */

/* After the child wrote `msg` through the socket: the peer gets it, then
 * the parent's connection carries 64 KiB each way. */
static void child_wrote(struct __test_metadata *_metadata, int cli, int srv, const char *msg,
			unsigned int seed)
{
	char b[64] = {};
	size_t n = strlen(msg), got = 0;
	long end = ms_now() + MS;

	while (got < n && ms_now() < end) {
		struct pollfd p = { srv, POLLIN };
		ssize_t r;

		if (poll(&p, 1, MS) != 1)
			break;
		r = read(srv, b + got, n - got);
		if (r <= 0)
			break;
		got += r;
	}
	EXPECT_STREQ(msg, b);
	ASSERT_EQ(0, put(cli, seed, 0, REPLY));
	EXPECT_EQ(REPLY, get(srv, seed, 0, REPLY, MS));
	ASSERT_EQ(0, put(srv, seed + 1, 0, REPLY));
	EXPECT_EQ(REPLY, get(cli, seed + 1, 0, REPLY, MS));
	close(cli);
	EXPECT_TRUE(eof(srv, MS));
	close(srv);
}

TEST(vfork_child)
{
	char *args[] = { "echo", "vfork-child", NULL };
	int cli, srv;
	pid_t c;

	ASSERT_EQ(0, pair(&cli, &srv, 0, WRITER_SNDBUF));
	/* Traffic before, as an application would have. */
	ASSERT_EQ(0, put(cli, 80, 0, REQ));
	ASSERT_EQ(REQ, get(srv, 80, 0, REQ, MS));
	c = vfork();
	if (c == 0) {
		/* What posix_spawn and Python's subprocess do in the child. */
		if (dup2(cli, 1) != 1)
			_exit(120);
		execv("/bin/echo", args);
		_exit(121);
	}
	ASSERT_LT(0, c);
	EXPECT_EQ(0, reap(c));
	child_wrote(_metadata, cli, srv, "vfork-child\n", 81);
}

TEST(posix_spawn_child)
{
	char *args[] = { "echo", "spawn-child", NULL };
	posix_spawn_file_actions_t fa;
	int cli, srv;
	pid_t c;

	ASSERT_EQ(0, pair(&cli, &srv, 0, WRITER_SNDBUF));
	ASSERT_EQ(0, put(cli, 82, 0, REQ));
	ASSERT_EQ(REQ, get(srv, 82, 0, REQ, MS));
	ASSERT_EQ(0, posix_spawn_file_actions_init(&fa));
	ASSERT_EQ(0, posix_spawn_file_actions_adddup2(&fa, cli, 1));
	ASSERT_EQ(0, posix_spawn(&c, "/bin/echo", &fa, NULL, args, environ));
	posix_spawn_file_actions_destroy(&fa);
	EXPECT_EQ(0, reap(c));
	child_wrote(_metadata, cli, srv, "spawn-child\n", 83);
}

/* ---- close_range ------------------------------------------------------------ */

#define CR_CONNS 4
#define CR_BYTES (32u << 10)

TEST(close_range_of_connections)
{
	int keep_cli, keep_srv, cli[CR_CONNS], srv[CR_CONNS], i, lo = -1, hi = -1;

	ASSERT_EQ(0, pair(&keep_cli, &keep_srv, 0, 0));
	for (i = 0; i < CR_CONNS; i++) {
		ASSERT_EQ(0, pair(&cli[i], &srv[i], 0, 0));
		ASSERT_EQ(0, put(cli[i], 90 + i, 0, CR_BYTES));
	}
	/* The client ends, moved to a range of their own above every fd. */
	for (i = 0; i < CR_CONNS; i++) {
		int fd = fcntl(cli[i], F_DUPFD_CLOEXEC, 200 + i);

		ASSERT_EQ(200 + i, fd);
		close(cli[i]);
		cli[i] = fd;
		if (lo < 0)
			lo = fd;
		hi = fd;
	}
	ASSERT_EQ(0, close_range(lo, hi, 0));
	for (i = 0; i < CR_CONNS; i++) {
		EXPECT_EQ(-1, fcntl(cli[i], F_GETFD));
		EXPECT_EQ(CR_BYTES, get(srv[i], 90 + i, 0, CR_BYTES, MS)) TH_LOG("connection %d", i);
		EXPECT_TRUE(eof(srv[i], MS)) TH_LOG("connection %d", i);
		close(srv[i]);
	}
	/* The connection outside the range works on. */
	ASSERT_EQ(0, put(keep_cli, 95, 0, CR_BYTES));
	EXPECT_EQ(CR_BYTES, get(keep_srv, 95, 0, CR_BYTES, MS));
	close(keep_cli);
	close(keep_srv);
}

/* ---- splice ------------------------------------------------------------------ */

#define SPLICE_BYTES (256u << 10)

TEST(splice_both_ways)
{
	int cli, srv, p[2];
	size_t done;
	pid_t w;

	ASSERT_EQ(0, pair(&cli, &srv, 0, WRITER_SNDBUF));
	ASSERT_EQ(0, pipe(p));
	/* pipe -> socket: a writer fills the pipe, splice moves it out. */
	w = child();
	ASSERT_LE(0, w);
	if (w == 0) {
		close(p[0]);
		close(cli);
		close(srv);
		_exit(put(p[1], 100, 0, SPLICE_BYTES) ? 1 : 0);
	}
	close(p[1]);
	for (done = 0; done < SPLICE_BYTES;) {
		ssize_t r = splice(p[0], NULL, cli, NULL, SPLICE_BYTES - done, SPLICE_F_MOVE);

		ASSERT_LT(0, r) TH_LOG("splice to the socket: %s", strerror(errno));
		done += r;
	}
	close(p[0]);
	EXPECT_EQ(0, reap(w));
	EXPECT_EQ(SPLICE_BYTES, get(srv, 100, 0, SPLICE_BYTES, MS));

	/* socket -> pipe: the peer writes, splice moves it into a pipe a
	 * reader checks. */
	ASSERT_EQ(0, pipe(p));
	w = child();
	ASSERT_LE(0, w);
	if (w == 0) {
		close(p[1]);
		close(cli);
		close(srv);
		_exit(get(p[0], 101, 0, SPLICE_BYTES, MS) == SPLICE_BYTES && eof(p[0], MS) ? 0 : 1);
	}
	close(p[0]);
	ASSERT_EQ(0, put(srv, 101, 0, SPLICE_BYTES));
	close(srv);
	for (done = 0;;) {
		ssize_t r = splice(cli, NULL, p[1], NULL, 65536, SPLICE_F_MOVE);

		ASSERT_LE(0, r) TH_LOG("splice from the socket: %s", strerror(errno));
		if (r == 0)
			break;
		done += r;
	}
	EXPECT_EQ(SPLICE_BYTES, done);
	close(p[1]);
	EXPECT_EQ(0, reap(w));
	close(cli);
}

/* ---- io_uring (raw system calls) ------------------------------------------ */

struct ring {
	int fd;
	unsigned int *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
	void *sq_map, *cq_map;
	size_t sq_len, cq_len, sqe_len;
};

static int ring_init(struct ring *r, unsigned int entries)
{
	struct io_uring_params p = {};

	r->fd = syscall(__NR_io_uring_setup, entries, &p);
	if (r->fd < 0)
		return -1;
	r->sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned int);
	r->cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	r->sqe_len = p.sq_entries * sizeof(struct io_uring_sqe);
	r->sq_map = mmap(NULL, r->sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
			 IORING_OFF_SQ_RING);
	r->cq_map = mmap(NULL, r->cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
			 IORING_OFF_CQ_RING);
	r->sqes = mmap(NULL, r->sqe_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
		       IORING_OFF_SQES);
	if (r->sq_map == MAP_FAILED || r->cq_map == MAP_FAILED || r->sqes == MAP_FAILED)
		return -1;
	r->sq_tail = (unsigned int *)((char *)r->sq_map + p.sq_off.tail);
	r->sq_mask = (unsigned int *)((char *)r->sq_map + p.sq_off.ring_mask);
	r->sq_array = (unsigned int *)((char *)r->sq_map + p.sq_off.array);
	r->cq_head = (unsigned int *)((char *)r->cq_map + p.cq_off.head);
	r->cq_tail = (unsigned int *)((char *)r->cq_map + p.cq_off.tail);
	r->cq_mask = (unsigned int *)((char *)r->cq_map + p.cq_off.ring_mask);
	r->cqes = (struct io_uring_cqe *)((char *)r->cq_map + p.cq_off.cqes);
	return 0;
}

static void ring_exit(struct ring *r)
{
	munmap(r->sq_map, r->sq_len);
	munmap(r->cq_map, r->cq_len);
	munmap(r->sqes, r->sqe_len);
	close(r->fd);
}

/* Queues and submits one read or write of `fd`. */
static int ring_submit(struct ring *r, __u8 op, int fd, void *buf, unsigned int len, __u64 tag)
{
	unsigned int tail = *r->sq_tail, idx = tail & *r->sq_mask;
	struct io_uring_sqe *sqe = &r->sqes[idx];

	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = op;
	sqe->fd = fd;
	sqe->addr = (__u64)(uintptr_t)buf;
	sqe->len = len;
	sqe->off = (__u64)-1; /* the file position: none for a socket */
	sqe->user_data = tag;
	r->sq_array[idx] = idx;
	__atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
	return syscall(__NR_io_uring_enter, r->fd, 1, 0, 0, NULL, 0) == 1 ? 0 : -1;
}

/* Waits for one completion; its result, its tag in *tag. */
static int ring_wait(struct ring *r, __u64 *tag)
{
	unsigned int head = *r->cq_head;
	struct io_uring_cqe *cqe;
	int res;

	while (__atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE) == head)
		if (syscall(__NR_io_uring_enter, r->fd, 0, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0 &&
		    errno != EINTR)
			return -1000;
	cqe = &r->cqes[head & *r->cq_mask];
	res = cqe->res;
	*tag = cqe->user_data;
	__atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
	return res;
}

#define URING_BYTES (128u << 10)

TEST(io_uring_read_write)
{
	char *out = malloc(URING_BYTES), *in = malloc(URING_BYTES);
	size_t done;
	struct ring r;
	int cli, srv, res;
	__u64 tag;

	ASSERT_NE(NULL, out);
	ASSERT_NE(NULL, in);
	if (ring_init(&r, 8))
		SKIP(return, "io_uring_setup: %s", strerror(errno));
	ASSERT_EQ(0, pair(&cli, &srv, 0, WRITER_SNDBUF));

	/* Writes, a short write continued. */
	fill(out, 110, 0, URING_BYTES);
	for (done = 0; done < URING_BYTES; done += res) {
		ASSERT_EQ(0, ring_submit(&r, IORING_OP_WRITE, cli, out + done, URING_BYTES - done, 1));
		res = ring_wait(&r, &tag);
		ASSERT_LT(0, res) TH_LOG("write: %s", strerror(-res));
		ASSERT_EQ(1, tag);
	}
	EXPECT_EQ(URING_BYTES, get(srv, 110, 0, URING_BYTES, MS));

	/* Reads: the first submitted before its bytes are sent. */
	ASSERT_EQ(0, ring_submit(&r, IORING_OP_READ, cli, in, URING_BYTES, 2));
	nap_ms(50);
	ASSERT_EQ(0, put(srv, 111, 0, URING_BYTES));
	for (done = 0;;) {
		res = ring_wait(&r, &tag);
		ASSERT_LT(0, res) TH_LOG("read: %s", res < 0 ? strerror(-res) : "EOF");
		ASSERT_EQ(2, tag);
		done += res;
		if (done == URING_BYTES)
			break;
		ASSERT_EQ(0, ring_submit(&r, IORING_OP_READ, cli, in + done, URING_BYTES - done, 2));
	}
	EXPECT_EQ(-1, check(in, 111, 0, URING_BYTES));
	/* And the EOF, as a read of 0. */
	close(srv);
	ASSERT_EQ(0, ring_submit(&r, IORING_OP_READ, cli, in, 1, 3));
	EXPECT_EQ(0, ring_wait(&r, &tag));
	ring_exit(&r);
	close(cli);
	free(out);
	free(in);
}

/* ---- SO_RCVTIMEO, MSG_PEEK | MSG_WAITALL ------------------------------------ */

#define RCVTIMEO_MS 200
/* A TCG guest's timer may fire late; never early. */
#define LATE_MS 1500

TEST(so_rcvtimeo)
{
	struct timeval tv = { 0, RCVTIMEO_MS * 1000 };
	int cli, srv;
	long t0, el;
	char b[REQ];

	ASSERT_EQ(0, pair(&cli, &srv, 0, 0));
	ASSERT_EQ(0, setsockopt(srv, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	t0 = ms_now();
	EXPECT_EQ(-1, read(srv, b, sizeof(b)));
	EXPECT_EQ(EAGAIN, errno);
	el = ms_now() - t0;
	TH_LOG("timed out after %ld ms", el);
	EXPECT_LE(RCVTIMEO_MS - 1, el);
	EXPECT_GE(RCVTIMEO_MS + LATE_MS, el);
	/* Part of a MSG_WAITALL read: what came, once the time is up. */
	ASSERT_EQ(0, put(cli, 120, 0, 100));
	ASSERT_EQ(0, fionread_at_least(srv, 100));
	t0 = ms_now();
	EXPECT_EQ(100, recv(srv, b, sizeof(b), MSG_WAITALL));
	el = ms_now() - t0;
	TH_LOG("MSG_WAITALL returned its part after %ld ms", el);
	EXPECT_LE(RCVTIMEO_MS - 1, el);
	EXPECT_GE(RCVTIMEO_MS + LATE_MS, el);
	EXPECT_EQ(-1, check(b, 120, 0, 100));
	/* With bytes to read: at once, and they are the bytes. */
	ASSERT_EQ(0, put(cli, 121, 0, REQ));
	ASSERT_EQ(0, fionread_at_least(srv, REQ));
	t0 = ms_now();
	EXPECT_EQ(REQ, read(srv, b, sizeof(b)));
	EXPECT_GT(RCVTIMEO_MS, ms_now() - t0);
	EXPECT_EQ(-1, check(b, 121, 0, REQ));
	/* The EOF. */
	close(cli);
	EXPECT_TRUE(eof(srv, MS));
	close(srv);
}

#define PEEK_FIRST 100
#define PEEK_ALL 1000

TEST(msg_peek_waitall)
{
	char peek[PEEK_ALL], again[PEEK_ALL];
	int l, srv, q = -1, go[2];
	unsigned short port;
	pid_t w;

	l = listener(0, 1, &port);
	ASSERT_LE(0, l);
	ASSERT_EQ(0, pipe(go));
	w = child();
	ASSERT_LE(0, w);
	if (w == 0) {
		/* Its own connection; the length in two parts, 200 ms apart;
		 * closes when the parent says. */
		int cli = dial(port, 0);
		char c;

		close(go[1]);
		if (cli < 0 || put(cli, 130, 0, PEEK_FIRST))
			_exit(1);
		nap_ms(200);
		if (put(cli, 130, PEEK_FIRST, PEEK_ALL - PEEK_FIRST))
			_exit(2);
		if (read(go[0], &c, 1) != 0)
			_exit(3);
		_exit(close(cli) ? 4 : 0);
	}
	close(go[0]);
	srv = take(l);
	close(l);
	ASSERT_LE(0, srv);
	EXPECT_EQ(PEEK_ALL, recv(srv, peek, PEEK_ALL, MSG_PEEK | MSG_WAITALL));
	EXPECT_EQ(-1, check(peek, 130, 0, PEEK_ALL));
	/* Peeking consumed nothing. */
	EXPECT_EQ(0, ioctl(srv, FIONREAD, &q));
	EXPECT_EQ(PEEK_ALL, q);
	EXPECT_EQ(PEEK_ALL, recv(srv, again, PEEK_ALL, MSG_WAITALL));
	EXPECT_EQ(-1, check(again, 130, 0, PEEK_ALL));
	close(go[1]);
	EXPECT_EQ(0, reap(w));
	EXPECT_TRUE(eof(srv, MS));
	close(srv);
}

/* ---- a peer reset during a blocking write ----------------------------------- */

#define RESET_WRITE (1u << 20)
#define RESET_AFTER_MS 300

TEST(peer_reset_during_blocking_write)
{
	char *b = malloc(RESET_WRITE);
	int cli, l, e1 = 0, e2 = 0, go[2];
	unsigned short port;
	ssize_t w1, w2;
	long t0, el;
	pid_t rst;

	ASSERT_NE(NULL, b);
	fill(b, 140, 0, RESET_WRITE);
	/* Small buffers both ends: the write blocks well before its end. */
	l = listener(PEER_RCVBUF, 1, &port);
	ASSERT_LE(0, l);
	ASSERT_EQ(0, pipe(go));
	signal(SIGPIPE, SIG_IGN);
	rst = child();
	ASSERT_LE(0, rst);
	if (rst == 0) {
		/* The peer: accepts, reads nothing, resets RESET_AFTER_MS
		 * after the writer starts. */
		struct linger lg = { 1, 0 };
		int srv = take(l);
		char c;

		close(go[1]);
		if (srv < 0 || read(go[0], &c, 1) != 1)
			_exit(2);
		nap_ms(RESET_AFTER_MS);
		/* Linger 0: close sends a RST. */
		setsockopt(srv, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		_exit(close(srv) ? 1 : 0);
	}
	close(go[0]);
	close(l);
	cli = dial(port, 64 << 10);
	ASSERT_LE(0, cli);
	ASSERT_EQ(1, write(go[1], "g", 1));
	t0 = ms_now();
	w1 = write(cli, b, RESET_WRITE);
	e1 = w1 < 0 ? errno : 0;
	el = ms_now() - t0;
	w2 = write(cli, b, RESET_WRITE);
	e2 = w2 < 0 ? errno : 0;
	TH_LOG("blocked write: %zd (%s) after %ld ms; next: %zd (%s)", w1, strerror(e1), el, w2,
	       strerror(e2));
	/* It blocked until the reset, then returned what it wrote, or the
	 * error. */
	EXPECT_LE(RESET_AFTER_MS - 50, el);
	EXPECT_GE(MS, el);
	EXPECT_GT((ssize_t)RESET_WRITE, w1);
	EXPECT_TRUE(w1 >= 0 || e1 == ECONNRESET || e1 == EPIPE);
	EXPECT_EQ(-1, w2);
	EXPECT_TRUE(e2 == ECONNRESET || e2 == EPIPE);
	EXPECT_TRUE(e1 == ECONNRESET || e2 == ECONNRESET);
	EXPECT_EQ(0, reap(rst));
	close(cli);
	free(b);
}

/* ---- main ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	const char *m = getenv("ZN_SOCK_MODE");
	char **args = calloc(argc + 1, sizeof(*args));
	int n = 0;

	if (!args)
		return 1;
	/* --mode MODE (or ZN_SOCK_MODE); the rest goes to the harness. */
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--mode") && i + 1 < argc)
			m = argv[++i];
		else if (!strncmp(argv[i], "--mode=", 7))
			m = argv[i] + 7;
		else
			args[n++] = argv[i];
	}
	if (m && *m && parse_mode(m))
		return 1;
	return test_harness_run(n, args);
}
