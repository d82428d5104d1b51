// SPDX-License-Identifier: GPL-2.0
/*
 * Memory-region keys (uapi/linux/zeronic.h: "the region's key, nonzero,
 * never repeated on the NIC"): many live regions have nonzero, pairwise
 * distinct keys; a file registering and deregistering in a loop is never
 * handed a key twice, and a deregistered key stays dead (ENOENT); two files
 * never share a key; and keys do not follow a pattern a caller could
 * predict (issue 8: slot + incrementing generation repeated every 65536
 * registrations and was guessable). What the driver does between the NIC
 * and the caller (retries) is invisible here; only what the caller is
 * handed counts.
 *
 * Needs a NIC bound (topology two-port or two-guest) and root (the per-user
 * MR entry cap, mr_user_max, does not apply with CAP_SYS_RESOURCE).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <linux/zeronic.h>

#include "kselftest_harness.h"

#define ACC_RW (ZERONIC_ACCESS_LOCAL_READ | ZERONIC_ACCESS_LOCAL_WRITE)

/* Live regions at once (a fraction of the model's 4096 MR entries). */
#define MANY 512
/* Register/deregister rounds on one file. */
#define ROUNDS 4096

static int reg(int fd, void *p, __u64 len, __u64 *key)
{
	struct zeronic_mr_reg r = {
		.addr = (uintptr_t)p,
		.length = len,
		.nic = 0,
		.access = ACC_RW,
	};

	if (ioctl(fd, ZERONIC_IOC_MR_REG, &r))
		return errno;
	*key = r.key;
	return 0;
}

static int dereg(int fd, __u64 key)
{
	struct zeronic_mr_dereg d = { .key = key, .nic = 0 };

	return ioctl(fd, ZERONIC_IOC_MR_DEREG, &d) ? errno : 0;
}

static int cmp_u64(const void *a, const void *b)
{
	__u64 x = *(const __u64 *)a, y = *(const __u64 *)b;

	return x < y ? -1 : x > y;
}

/* Sorts keys[0..n) and returns how many equal their predecessor. */
static int duplicates(__u64 *keys, size_t n, __u64 *example)
{
	size_t i;
	int dups = 0;

	qsort(keys, n, sizeof(*keys), cmp_u64);
	for (i = 1; i < n; i++) {
		if (keys[i] == keys[i - 1]) {
			*example = keys[i];
			dups++;
		}
	}
	return dups;
}

FIXTURE(keys)
{
	int fd;
	char *buf;
	size_t ps;
	__u64 *seen;		/* every key this file was handed */
	size_t nseen;
};

FIXTURE_SETUP(keys)
{
	self->ps = (size_t)sysconf(_SC_PAGESIZE);
	self->fd = open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->fd) TH_LOG("open %s: %s", ZERONIC_DEVICE_PATH, strerror(errno));
	self->buf = mmap(NULL, 16 * self->ps, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	ASSERT_NE(MAP_FAILED, self->buf);
	memset(self->buf, 0x5a, 16 * self->ps);
	self->seen = calloc(MANY + 2 * ROUNDS + 16, sizeof(*self->seen));
	ASSERT_NE(NULL, self->seen);
	self->nseen = 0;
}

FIXTURE_TEARDOWN(keys)
{
	close(self->fd);
	munmap(self->buf, 16 * self->ps);
	free(self->seen);
}

/* Many live regions: keys nonzero and pairwise distinct; dead once deregistered. */
TEST_F_TIMEOUT(keys, many_live_keys_are_nonzero_and_distinct, 300)
{
	__u64 keys[MANY], sorted[MANY], dup = 0;
	int i, err, zeros = 0;

	for (i = 0; i < MANY; i++) {
		/* Overlapping on a few pages: regions are independent. */
		err = reg(self->fd, self->buf + (i % 16) * self->ps, 1 + i % 3000, &keys[i]);
		ASSERT_EQ(0, err) TH_LOG("MR_REG %d of %d: %s", i + 1, MANY, strerror(err));
		zeros += keys[i] == 0;
	}
	EXPECT_EQ(0, zeros) TH_LOG("%d keys were 0", zeros);
	memcpy(sorted, keys, sizeof(keys));
	EXPECT_EQ(0, duplicates(sorted, MANY, &dup)) TH_LOG("key %#llx handed out twice", (unsigned long long)dup);
	for (i = 0; i < MANY; i++)
		ASSERT_EQ(0, dereg(self->fd, keys[i]));
	/* A deregistered key names nothing any more. */
	for (i = 0; i < MANY; i += 7) {
		unsigned long long k = keys[i];

		EXPECT_EQ(ENOENT, dereg(self->fd, k)) TH_LOG("key %#llx", k);
	}
}

/*
 * One file registers and deregisters ROUNDS times (the NIC reuses the same
 * MR entries over and over), then holds MANY at once: it is never handed a
 * key it had before, and each previous key is dead (ENOENT) right after its
 * deregistration.
 */
TEST_F_TIMEOUT(keys, a_file_never_gets_a_key_twice, 600)
{
	__u64 key = 0, prev = 0, dup = 0;
	int i, err, stale_alive = 0;

	for (i = 0; i < ROUNDS; i++) {
		err = reg(self->fd, self->buf + (i % 16) * self->ps, self->ps, &key);
		ASSERT_EQ(0, err) TH_LOG("round %d: MR_REG: %s", i, strerror(err));
		ASSERT_NE(0ull, key);
		self->seen[self->nseen++] = key;
		ASSERT_EQ(0, dereg(self->fd, key)) TH_LOG("round %d", i);
		if (prev && dereg(self->fd, prev) != ENOENT)
			stale_alive++;
		prev = key;
	}
	EXPECT_EQ(0, stale_alive) TH_LOG("%d deregistered keys still named a region", stale_alive);
	/* Now many at once, after all those deregistrations. */
	for (i = 0; i < MANY; i++) {
		err = reg(self->fd, self->buf, 1, &key);
		ASSERT_EQ(0, err) TH_LOG("MR_REG %d: %s", i, strerror(err));
		self->seen[self->nseen++] = key;
	}
	EXPECT_EQ(0, duplicates(self->seen, self->nseen, &dup))
		TH_LOG("key %#llx handed out twice in %zu registrations",
		       (unsigned long long)dup, self->nseen);
	/* close() (teardown) releases the MANY still registered. */
}

/* Two files registering in turn never share a key (keys are NIC-wide). */
TEST_F_TIMEOUT(keys, two_files_never_share_a_key, 300)
{
	int fd2 = open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC), i, err;
	__u64 key = 0, dup = 0;

	ASSERT_LE(0, fd2);
	for (i = 0; i < 2 * MANY; i++) {
		int fd = i % 2 ? fd2 : self->fd;

		err = reg(fd, self->buf, self->ps, &key);
		ASSERT_EQ(0, err) TH_LOG("MR_REG %d: %s", i, strerror(err));
		self->seen[self->nseen++] = key;
		/* Every other round frees its entry, so entries are reused. */
		if (i % 4 >= 2)
			ASSERT_EQ(0, dereg(fd, key));
	}
	EXPECT_EQ(0, duplicates(self->seen, self->nseen, &dup))
		TH_LOG("key %#llx handed out twice across two files", (unsigned long long)dup);
	close(fd2);
}

/*
 * Keys are not predictable from the previous ones: in a register/deregister
 * loop (the same MR entry each time) the differences between consecutive
 * keys do not repeat. A slot + generation counter scheme gives the same
 * difference every time.
 */
TEST_F(keys, consecutive_keys_do_not_follow_a_pattern)
{
	enum { N = 65 };
	__u64 keys[N], deltas[N - 1], xors[N - 1], dup = 0;
	int i, err, same_delta, same_xor;

	for (i = 0; i < N; i++) {
		err = reg(self->fd, self->buf, self->ps, &keys[i]);
		ASSERT_EQ(0, err) TH_LOG("MR_REG %d: %s", i, strerror(err));
		ASSERT_EQ(0, dereg(self->fd, keys[i]));
	}
	for (i = 1; i < N; i++) {
		deltas[i - 1] = keys[i] - keys[i - 1];
		xors[i - 1] = keys[i] ^ keys[i - 1];
	}
	same_delta = duplicates(deltas, N - 1, &dup);
	EXPECT_GE(1, same_delta)
		TH_LOG("%d of %d consecutive differences repeat (e.g. %#llx): keys %#llx, %#llx, %#llx, ...",
		       same_delta, N - 1, (unsigned long long)dup, (unsigned long long)keys[0],
		       (unsigned long long)keys[1], (unsigned long long)keys[2]);
	same_xor = duplicates(xors, N - 1, &dup);
	EXPECT_GE(1, same_xor)
		TH_LOG("%d of %d consecutive XORs repeat (e.g. %#llx)", same_xor, N - 1,
		       (unsigned long long)dup);
}

TEST_HARNESS_MAIN
