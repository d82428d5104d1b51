// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * zn_example: the C provider library (libzeronic.h) end to end over one
 * TCP connection between two ZeroNIC ports.
 *
 *   zn_example server PORT         accept one connection, attach it in
 *                                  stream mode, receive to EOF; prints
 *                                  "server: bytes N blocks LETTERS placed P copied C"
 *   zn_example client ADDR PORT    connect, attach in message mode, send
 *                                  the blocks below from registered memory
 *                                  through the registration cache; prints
 *                                  "client: bytes N blocks LETTERS hits H misses M
 *                                  invalidations I merged T"
 *   zn_example wait MS             zn_cq_wait(MS) on an empty CQ whose
 *                                  eventfd was signalled first (a spurious
 *                                  wake-up); prints "wait: rc R elapsed E ms"
 *                                  (the library must sleep on: R 0, E >= MS)
 *
 * Every block is BLOCK bytes of one letter. The client's blocks test that
 * the registration cache is never stale: each later block is sent from the
 * same address after its memory was replaced, so a stale region would send
 * the previous letter:
 *   A  from a mapping at X
 *   A  again (a cache hit)
 *   B  after munmap(X) + mmap(X) (new pages at the same address)
 *   C  after madvise(X, DONTNEED) (zero pages, then written)
 *   D  from malloc(), E after free() + malloc() of the same size (same address or not)
 *   F  after mremap() moved X's pages away and a new mapping took X
 * The server prints the letter of each block it received ("?" for a block
 * of mixed bytes), so the test compares "AABCDEF" on both sides.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libzeronic.h>

#define BLOCK (64 * 1024)
#define RING (1024 * 1024)

static void die(const char *what, int err)
{
	fprintf(stderr, "zn_example: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

/* Waits for the next completion of cq (sleeping on its eventfd). */
static struct zeronic_cqe next_cqe(struct zn_cq *cq)
{
	struct zeronic_cqe e;
	int n;

	for (;;) {
		n = zn_cq_poll(cq, &e, 1);
		if (n < 0)
			die("zn_cq_poll", n);
		if (n == 1)
			return e;
		n = zn_cq_wait(cq, 30000);
		if (n == 0)
			die("no completion within 30 s", ETIMEDOUT);
		if (n < 0 && n != -EINTR)
			die("zn_cq_wait", n);
	}
}

static int server(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct zn_device *dev;
	struct zn_cq *cq;
	struct zn_mr *mr;
	struct zn_flow *flow;
	struct zeronic_flow_query fq;
	char letters[256] = "";
	size_t nl = 0, inblock = 0;
	char cur = 0;
	uint64_t off = 0;
	int ls, s, one = 1, r;
	unsigned char *ring;

	ls = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ls, (void *)&a, sizeof(a)) || listen(ls, 1))
		die("bind/listen", errno);
	s = accept(ls, NULL, NULL);
	if (s < 0)
		die("accept", errno);
	r = zn_open(0, &dev);
	if (r)
		die("zn_open", r);
	ring = mmap(NULL, RING, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (ring == MAP_FAILED)
		die("mmap", errno);
	r = zn_reg_mr(dev, ring, RING, ZERONIC_ACCESS_LOCAL_WRITE, &mr);
	if (r)
		die("zn_reg_mr", r);
	r = zn_cq_create(dev, 256, &cq);
	if (r)
		die("zn_cq_create", r);
	r = zn_flow_attach(dev, s, cq, ZERONIC_RX_STREAM, zn_mr_key(mr), 0, RING, &flow);
	if (r)
		die("zn_flow_attach", r);
	for (;;) {
		struct zeronic_cqe e = next_cqe(cq);

		if (e.opcode == ZERONIC_CQE_FLOW) {
			if (e.status)
				die("flow event", -(int)e.status);
			if (e.flags & ZERONIC_CQE_F_EOF)
				break;
			continue;
		}
		if (e.opcode != ZERONIC_CQE_STREAM_DATA)
			continue;
		for (uint64_t i = 0; i < e.len; i++) {
			char c = ring[(e.stream_off + i) % RING];

			if (inblock == 0)
				cur = c;
			else if (c != cur)
				cur = '?';
			if (++inblock == BLOCK) {
				if (nl < sizeof(letters) - 1)
					letters[nl++] = cur;
				inblock = 0;
			}
		}
		off = e.stream_off + e.len;
		r = zn_stream_consume(flow, off);
		if (r)
			die("zn_stream_consume", r);
		if (e.flags & ZERONIC_CQE_F_EOF)
			break;
	}
	r = zn_flow_query(flow, &fq);
	if (r)
		die("zn_flow_query", r);
	printf("server: bytes %llu blocks %s placed %llu copied %llu\n",
	       (unsigned long long)off, letters,
	       (unsigned long long)fq.rx_placed_bytes, (unsigned long long)fq.rx_copied_bytes);
	zn_flow_detach(flow);
	close(s);
	zn_cq_destroy(cq);
	r = zn_dereg_mr(mr);
	if (r)
		die("zn_dereg_mr", r);
	zn_close(dev);
	return 0;
}

static struct zn_flow *flow;
static struct zn_cq *cq;
static struct zn_cache *cache;
static uint64_t sent;
static char sent_letters[64];
static int nsent;

/* Sends BLOCK bytes at p through the cache and waits until they are ACKed. */
static void send_block(void *p)
{
	struct zn_lease l;
	struct zeronic_cqe e;
	int r;

	r = zn_cache_get(cache, p, BLOCK, ZERONIC_ACCESS_LOCAL_READ, &l);
	if (r)
		die("zn_cache_get", r);
	r = zn_post_send(flow, nsent, l.key, l.offset, BLOCK);
	if (r != 1)
		die("zn_post_send", r ? r : -EAGAIN);
	e = next_cqe(cq);
	if (e.opcode != ZERONIC_CQE_SEND || e.status)
		die("send completion", e.status ? -(int)e.status : -EPROTO);
	zn_cache_put(cache, &l);
	sent += BLOCK;
	sent_letters[nsent++] = *(char *)p;
}

static int client(const char *addr, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct zn_device *dev;
	struct zn_cache_stats st;
	struct zeronic_flow_query fq;
	char *x, *y, *p, *q;
	int s, r;

	if (inet_pton(AF_INET, addr, &a.sin_addr) != 1)
		die("address", EINVAL);
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(s, (void *)&a, sizeof(a)))
		die("connect", errno);
	r = zn_open(0, &dev);
	if (r)
		die("zn_open", r);
	r = zn_cq_create(dev, 64, &cq);
	if (r)
		die("zn_cq_create", r);
	r = zn_flow_attach(dev, s, cq, ZERONIC_RX_MESSAGE, 0, 0, 0, &flow);
	if (r)
		die("zn_flow_attach", r);
	r = zn_cache_create(dev, 16, &cache);
	if (r)
		die("zn_cache_create", r);

	x = mmap(NULL, BLOCK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (x == MAP_FAILED)
		die("mmap", errno);
	memset(x, 'A', BLOCK);
	send_block(x);
	send_block(x);

	if (munmap(x, BLOCK))
		die("munmap", errno);
	y = mmap(x, BLOCK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (y != x)
		die("mmap at the same address", y == MAP_FAILED ? errno : EEXIST);
	memset(x, 'B', BLOCK);
	send_block(x);

	if (madvise(x, BLOCK, MADV_DONTNEED))
		die("madvise", errno);
	memset(x, 'C', BLOCK);
	send_block(x);

	p = malloc(4 * BLOCK);	/* above the mmap threshold: its own mapping */
	if (!p)
		die("malloc", ENOMEM);
	memset(p, 'D', BLOCK);
	send_block(p);
	free(p);
	q = malloc(4 * BLOCK);
	if (!q)
		die("malloc", ENOMEM);
	memset(q, 'E', BLOCK);
	send_block(q);
	free(q);

	y = mmap(NULL, BLOCK, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (y == MAP_FAILED)
		die("mmap", errno);
	if (mremap(x, BLOCK, BLOCK, MREMAP_MAYMOVE | MREMAP_FIXED, y) != y)
		die("mremap", errno);
	if (mmap(x, BLOCK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != x)
		die("mmap at the old address", errno);
	memset(x, 'F', BLOCK);
	send_block(x);

	r = zn_flow_query(flow, &fq);
	if (r)
		die("zn_flow_query", r);
	zn_cache_stats(cache, &st);
	shutdown(s, SHUT_WR);
	printf("client: bytes %llu blocks %s hits %llu misses %llu invalidations %llu merged %llu\n",
	       (unsigned long long)sent, sent_letters, (unsigned long long)st.hits,
	       (unsigned long long)st.misses, (unsigned long long)st.invalidations,
	       (unsigned long long)fq.tx_merged_bytes);
	fflush(stdout);
	/* Wait for the server's FIN (plain recv() on an attached socket is
	 * EOPNOTSUPP): the server has seen everything. */
	for (;;) {
		struct zeronic_cqe e = next_cqe(cq);

		if (e.opcode == ZERONIC_CQE_FLOW)
			break;
	}
	zn_cache_destroy(cache);
	zn_flow_detach(flow);
	close(s);
	zn_cq_destroy(cq);
	zn_close(dev);
	return 0;
}

/* A spurious wake-up: the CQ's eventfd signalled while the CQ is empty. */
static int wait_spurious(int ms)
{
	struct zn_device *dev;
	struct zn_cq *cq;
	struct timespec t0, t1;
	uint64_t one = 1;
	long elapsed;
	int rc;

	rc = zn_open(0, &dev);
	if (rc)
		die("zn_open", rc);
	rc = zn_cq_create(dev, 64, &cq);
	if (rc)
		die("zn_cq_create", rc);
	if (write(zn_cq_fd(cq), &one, sizeof(one)) != sizeof(one))
		die("write to the CQ's eventfd", errno);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = zn_cq_wait(cq, ms);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	elapsed = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	printf("wait: rc %d elapsed %ld ms\n", rc, elapsed);
	zn_cq_destroy(cq);
	zn_close(dev);
	return rc == 0 && elapsed >= ms ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "server"))
		return server(atoi(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "wait"))
		return wait_spurious(atoi(argv[2]));
	fprintf(stderr, "usage: zn_example server PORT | client ADDR PORT | wait MS\n");
	return 2;
}
