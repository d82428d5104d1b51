/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the zero-copy selftests (zc_test.c, zc_security.c, ...) and
 * sock_semantics.c share: opening /dev/zeronic, entering the two ports'
 * network namespaces (ZN_NS_A/B, from zc_env.sh), a TCP connection over the
 * ports, one-call wrappers of the ioctls that return the errno (0 on
 * success), and forged TCP segments from a raw socket for the hostile-peer
 * cases.
 */
#ifndef ZC_LIB_H
#define ZC_LIB_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/zeronic.h>

#define PORT 5099

static inline int zopen(void)
{
	return open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC);
}

/* Enters the namespace named by `env`; returns the fd of the one left (0 if
 * `env` is unset), -1 on error. back_ns() goes back. */
static inline int in_ns(const char *env)
{
	char path[128];
	const char *ns = getenv(env);
	int fd, self, ret;

	if (!ns || !*ns)
		return 0;
	snprintf(path, sizeof(path), "/run/netns/%s", ns);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	ret = setns(fd, CLONE_NEWNET);
	close(fd);
	if (ret) {
		close(self);
		return -1;
	}
	return self;
}

static inline void back_ns(int self)
{
	if (self > 0) {
		setns(self, CLONE_NEWNET);
		close(self);
	}
}


/*
 * The family of connect_pair()'s connections: AF_INET6 when ZN_ZC_FAMILY is
 * 6 (to ZN_ADDR6_B), else AF_INET (to ZN_ADDR_B).
 */
static inline int zc_family(void)
{
	const char *f = getenv("ZN_ZC_FAMILY");

	return f && !strcmp(f, "6") ? AF_INET6 : AF_INET;
}

/* A socket of `family` and type in namespace `env` (ZN_NS_A or ZN_NS_B). */
static inline int sock_in_family(const char *env, int family, int type)
{
	int self = in_ns(env), s;

	if (self < 0)
		return -1;
	s = socket(family, type | SOCK_CLOEXEC, 0);
	back_ns(self);
	return s;
}

/* An IPv4 socket of type in namespace `env` (ZN_NS_A or ZN_NS_B). */
static inline int sock_in(const char *env, int type)
{
	return sock_in_family(env, AF_INET, type);
}

/*
 * A TCP connection over the ZeroNIC ports: *cli in a, *srv in b, to a
 * listener on a port of the kernel's choosing (a fixed one may still be
 * held by an earlier case's TIME_WAIT); IPv4 or IPv6 as zc_family() says.
 */
static inline int connect_pair(int *cli, int *srv)
{
	int fam = zc_family();
	struct sockaddr_storage a = { .ss_family = fam };
	socklen_t len = fam == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	const char *dst = getenv(fam == AF_INET6 ? "ZN_ADDR6_B" : "ZN_ADDR_B");
	int l = sock_in_family("ZN_NS_B", fam, SOCK_STREAM);
	socklen_t sl = len;
	void *addr = fam == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&a)->sin6_addr
				     : (void *)&((struct sockaddr_in *)&a)->sin_addr;

	*cli = *srv = -1;
	if (l < 0 || !dst)
		return -1;
	if (bind(l, (void *)&a, len) || listen(l, 4) || getsockname(l, (void *)&a, &sl))
		goto fail;
	if (inet_pton(fam, dst, addr) != 1)
		goto fail;
	*cli = sock_in_family("ZN_NS_A", fam, SOCK_STREAM);
	if (*cli < 0 || connect(*cli, (void *)&a, len))
		goto fail;
	*srv = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	close(l);
	return *srv < 0 ? -1 : 0;
fail:
	close(l);
	return -1;
}

static inline int cq_create(int zfd, __u32 entries, int efd, __u32 *cq, void **map, size_t *size)
{
	struct zeronic_cq_create c = { .entries = entries, .eventfd = efd };

	if (ioctl(zfd, ZERONIC_IOC_CQ_CREATE, &c))
		return errno;
	*cq = c.cq;
	if (map) {
		*map = mmap(NULL, c.mmap_size, PROT_READ | PROT_WRITE, MAP_SHARED, zfd,
			    c.mmap_offset);
		if (*map == MAP_FAILED)
			return errno;
		*size = c.mmap_size;
	}
	return 0;
}

static inline int attach(int zfd, int s, __u32 cq, __u32 mode, __u64 ring_key, __u64 ring_size,
		  __u32 *flow)
{
	struct zeronic_flow_attach a = {
		.sockfd = s, .cq = cq, .rx_mode = mode, .ring_key = ring_key, .ring_size = ring_size,
	};

	if (ioctl(zfd, ZERONIC_IOC_FLOW_ATTACH, &a))
		return errno;
	if (flow)
		*flow = a.flow;
	return 0;
}

static inline int detach(int zfd, __u32 flow)
{
	struct zeronic_flow_detach d = { .flow = flow };

	return ioctl(zfd, ZERONIC_IOC_FLOW_DETACH, &d) ? errno : 0;
}

static inline int reg(int zfd, void *p, size_t len, __u32 access, __u64 *key)
{
	struct zeronic_mr_reg r = { .addr = (uintptr_t)p, .length = len, .access = access };

	if (ioctl(zfd, ZERONIC_IOC_MR_REG, &r))
		return errno;
	*key = r.key;
	return 0;
}

static inline int dereg(int zfd, __u64 key)
{
	struct zeronic_mr_dereg d = { .key = key };

	return ioctl(zfd, ZERONIC_IOC_MR_DEREG, &d) ? errno : 0;
}

static inline int post1(int zfd, __u32 flow, __u16 op, __u64 key, __u64 off, __u32 len)
{
	struct zeronic_wr wr = { .wr_id = off + 1, .key = key, .offset = off, .len = len,
				 .opcode = op };
	struct zeronic_post p = { .flow = flow, .count = 1, .wrs = (uintptr_t)&wr };

	return ioctl(zfd, ZERONIC_IOC_POST, &p) ? errno : 0;
}

static inline int query(int zfd, struct zeronic_query *q)
{
	memset(q, 0, sizeof(*q));
	return ioctl(zfd, ZERONIC_IOC_QUERY, q) ? errno : 0;
}

/* Takes the next CQE within `ms`; 0 on success. */
static inline int cq_take(void *map, struct zeronic_cqe *out, int ms)
{
	struct zeronic_cq_ring *r = map;
	struct zeronic_cqe *e = (void *)((char *)map + r->entries_offset);

	for (int i = 0; i < ms / 10; i++) {
		__u32 tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);

		if (r->head != tail) {
			*out = e[r->head & r->mask];
			__atomic_store_n(&r->head, r->head + 1, __ATOMIC_RELEASE);
			return 0;
		}
		usleep(10000);
	}
	return -1;
}

/* Injects a NIC fault through the model's control (ZN_WIRE, zc_env.sh):
 * "freeze" stops the NIC doing anything until "thaw". 0 on success. */
static inline int nic_fault(const char *cmd)
{
	char line[512];
	const char *w = getenv("ZN_WIRE");

	if (!w)
		return -1;
	snprintf(line, sizeof(line), "timeout 20 %s fault %s >/dev/null", w, cmd);
	return system(line);
}

#ifdef __KSELFTEST_HARNESS_H
/* Writes `n` bytes `c` to `s`; 0 if all went. */
static inline int write_all(int s, char c, size_t n)
{
	char b[4096];

	memset(b, c, sizeof(b));
	while (n) {
		ssize_t w = write(s, b, n < sizeof(b) ? n : sizeof(b));

		if (w <= 0)
			return -1;
		n -= w;
	}
	return 0;
}

/* ---- frames from a raw socket, for the hostile-peer cases ---------------- */

static inline __u16 zc_csum_fold(__u32 sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

static inline __u32 zc_csum_add(__u32 sum, const void *p, size_t n)
{
	const __u8 *b = p;

	for (size_t i = 0; i + 1 < n; i += 2)
		sum += (b[i] << 8) | b[i + 1];
	if (n & 1)
		sum += b[n - 1] << 8;
	return sum;
}

#define ZC_TCP_SYN 0x02
#define ZC_TCP_RST 0x04
#define ZC_TCP_PSH 0x08
#define ZC_TCP_ACK 0x10

/*
 * Sends, from namespace `env` (`s`'s), a TCP segment of `len` bytes `c` at
 * sequence `seq` on `s`'s connection, as if `s` sent it, with TCP flags
 * `flags` and ACK number `ack` (a raw socket: TCP's window does not stop
 * it). Without ZC_TCP_ACK, TCP drops it unread; with a valid `ack` inside
 * the window, TCP takes it. 0 if sent.
 */
static inline int zc_inject(int s, const char *env, __u32 seq, __u32 ack, __u8 flags, char c,
			    size_t len)
{
	struct sockaddr_in me, peer;
	socklen_t sl = sizeof(me);
	__u8 pkt[20 + 20 + 1024] = { 0 }, pseudo[12];
	__u8 *ip = pkt, *tcp = pkt + 20;
	int r, self, rs;
	__u32 sum;

	if (len > 1024 || getsockname(s, (void *)&me, &sl))
		return -1;
	sl = sizeof(peer);
	if (getpeername(s, (void *)&peer, &sl))
		return -1;
	ip[0] = 0x45;
	ip[8] = 64;
	ip[9] = IPPROTO_TCP;
	memcpy(ip + 12, &me.sin_addr, 4);
	memcpy(ip + 16, &peer.sin_addr, 4);
	memcpy(tcp, &me.sin_port, 2);
	memcpy(tcp + 2, &peer.sin_port, 2);
	seq = htonl(seq);
	memcpy(tcp + 4, &seq, 4);
	ack = htonl(ack);
	memcpy(tcp + 8, &ack, 4);
	tcp[12] = 5 << 4;
	tcp[13] = flags;
	tcp[14] = 0xff;
	tcp[15] = 0xff;
	memset(tcp + 20, c, len);
	memcpy(pseudo, ip + 12, 8);
	pseudo[8] = 0;
	pseudo[9] = IPPROTO_TCP;
	pseudo[10] = (20 + len) >> 8;
	pseudo[11] = (20 + len) & 0xff;
	sum = zc_csum_fold(zc_csum_add(zc_csum_add(0, pseudo, 12), tcp, 20 + len));
	tcp[16] = sum >> 8;
	tcp[17] = sum & 0xff;
	self = in_ns(env);
	if (self < 0)
		return -1;
	rs = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
	back_ns(self);
	if (rs < 0)
		return -1;
	r = sendto(rs, pkt, 40 + len, 0, (void *)&peer, sizeof(peer));
	close(rs);
	return r == (int)(40 + len) ? 0 : -1;
}

/*
 * The sequence number of the next byte `s` sends, and (if `ack` is not
 * NULL) of the next byte it expects: what its segments acknowledge (TCP
 * repair mode; root). Leaving repair mode clears the socket's
 * SO_REUSEADDR, which is put back: else its TIME_WAIT would keep the next
 * listener off its port. 0 on success.
 */
static inline int zc_seqs(int s, __u32 *seq, __u32 *ack)
{
	int on = 1, off = 0, q = TCP_SEND_QUEUE, reuse = 0;
	socklen_t l = sizeof(reuse);
	int r;

	if (getsockopt(s, SOL_SOCKET, SO_REUSEADDR, &reuse, &l) ||
	    setsockopt(s, IPPROTO_TCP, TCP_REPAIR, &on, sizeof(on)))
		return -1;
	l = sizeof(*seq);
	r = setsockopt(s, IPPROTO_TCP, TCP_REPAIR_QUEUE, &q, sizeof(q)) ||
	    getsockopt(s, IPPROTO_TCP, TCP_QUEUE_SEQ, seq, &l);
	if (!r && ack) {
		q = TCP_RECV_QUEUE;
		l = sizeof(*ack);
		r = setsockopt(s, IPPROTO_TCP, TCP_REPAIR_QUEUE, &q, sizeof(q)) ||
		    getsockopt(s, IPPROTO_TCP, TCP_QUEUE_SEQ, ack, &l);
	}
	setsockopt(s, IPPROTO_TCP, TCP_REPAIR, &off, sizeof(off));
	if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof(reuse)))
		r = -1;
	return r ? -1 : 0;
}

/*
 * The receive window the peer of `s` last advertised to it, in bytes
 * (TCP repair mode; root; SO_REUSEADDR kept as zc_seqs() keeps it).
 * 0 on success.
 */
static inline int zc_peer_window(int s, __u32 *wnd)
{
	struct tcp_repair_window w;
	int on = 1, off = 0, reuse = 0;
	socklen_t l = sizeof(reuse);
	int r;

	if (getsockopt(s, SOL_SOCKET, SO_REUSEADDR, &reuse, &l) ||
	    setsockopt(s, IPPROTO_TCP, TCP_REPAIR, &on, sizeof(on)))
		return -1;
	l = sizeof(w);
	r = getsockopt(s, IPPROTO_TCP, TCP_REPAIR_WINDOW, &w, &l);
	setsockopt(s, IPPROTO_TCP, TCP_REPAIR, &off, sizeof(off));
	if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof(reuse)))
		r = -1;
	*wnd = w.snd_wnd;
	return r ? -1 : 0;
}

/*
 * The start of a zero-copy fixture, in FIXTURE_SETUP (`self` has the
 * fields zfd, base, cli, srv, cq, map, map_size, buf and len): the file,
 * the NIC-wide query to compare with at the end, with `pair` a connection
 * over the ports (else cli and srv are -1), a CQ of `entries` mapped, and
 * `buf_len` bytes of populated anonymous memory at buf. Registering it is
 * the fixture's own (the keys and their access differ).
 */
#define ZC_FIXTURE_OPEN(pair, entries, buf_len)                                                \
	do {                                                                                   \
		self->cli = self->srv = -1;                                                    \
		self->zfd = zopen();                                                           \
		ASSERT_LE(0, self->zfd);                                                       \
		ASSERT_EQ(0, query(self->zfd, &self->base));                                   \
		if (pair)                                                                      \
			ASSERT_EQ(0, connect_pair(&self->cli, &self->srv))                     \
				TH_LOG("no TCP connection over the ZeroNIC ports "             \
				       "(ZN_NS_A/B, ZN_ADDR_B): %s", strerror(errno));         \
		ASSERT_EQ(0, cq_create(self->zfd, (entries), -1, &self->cq, &self->map,        \
				       &self->map_size));                                      \
		self->len = (buf_len);                                                         \
		self->buf = mmap(NULL, self->len, PROT_READ | PROT_WRITE,                      \
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);           \
		ASSERT_NE(MAP_FAILED, self->buf);                                              \
	} while (0)

/*
 * The end of a fixture ZC_FIXTURE_OPEN started, in FIXTURE_TEARDOWN:
 * zc_close_and_check() (`pins`: pinned pages checked too), then the
 * memory.
 */
#define ZC_FIXTURE_CLOSE(pins)                                                                 \
	do {                                                                                   \
		zc_close_and_check(_metadata, self->zfd, self->cli, self->srv, self->map,      \
				   self->map_size, &self->base, (pins));                       \
		munmap(self->buf, self->len);                                                  \
	} while (0)

/*
 * The end of a zero-copy fixture: closes the connection's ends, the CQ's
 * mapping (if made) and the file, then checks on a fresh file that closing
 * gave every flow and region back, and with `pins` every pinned page
 * (`base`: the query at the fixture's setup).
 */
static inline void zc_close_and_check(struct __test_metadata *_metadata, int zfd, int cli,
				      int srv, void *map, size_t map_size,
				      const struct zeronic_query *base, int pins)
{
	struct zeronic_query q;

	close(cli);
	close(srv);
	if (map && map != MAP_FAILED)
		munmap(map, map_size);
	close(zfd);
	zfd = zopen();
	if (zfd >= 0 && !query(zfd, &q)) {
		EXPECT_EQ(base->flows_in_use, q.flows_in_use);
		EXPECT_EQ(base->mr_in_use, q.mr_in_use);
		if (pins)
			EXPECT_EQ(base->pinned_pages, q.pinned_pages);
	}
	close(zfd);
}
#endif

#endif /* ZC_LIB_H */
