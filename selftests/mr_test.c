// SPDX-License-Identifier: GPL-2.0
/*
 * The memory-registration ABI of /dev/zeronic on NIC 0 (uapi/linux/zeronic.h,
 * docs/uapi.md): ZERONIC_IOC_QUERY, ZERONIC_IOC_MR_REG, ZERONIC_IOC_MR_DEREG,
 * their errors, keys (never repeated, not predictable, per file and NIC),
 * per-user accounting (RLIMIT_MEMLOCK on the user's locked_vm, the user's
 * share of the MR Table) however the file is shared, and the release of
 * every region when the file's last reference goes (close, exit, kill).
 *
 * Needs the zeronic module loaded and a NIC bound (topology two-port or
 * two-guest). The counters checked (query.mr_in_use, query.pinned_pages) are
 * NIC-wide, so nothing else may register memory while this runs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/capability.h>
#include <linux/zeronic.h>

#include "kselftest_harness.h"

#define KiB (1024ULL)
#define MiB (1024ULL * KiB)

#define ACC_R ZERONIC_ACCESS_LOCAL_READ
#define ACC_W ZERONIC_ACCESS_LOCAL_WRITE
#define ACC_RW (ACC_R | ACC_W)

static size_t page_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

/* Pages a registration of [addr, addr + len) pins: the span of pages it touches. */
static __u64 span_pages(const void *addr, __u64 len)
{
	__u64 ps = page_size(), a = (uintptr_t)addr;

	return (a + len + ps - 1) / ps - a / ps;
}

/* ioctl wrappers: 0 on success, else errno. */
static int zn_query(int fd, __u32 nic, struct zeronic_query *q)
{
	memset(q, 0, sizeof(*q));
	q->nic = nic;
	return ioctl(fd, ZERONIC_IOC_QUERY, q) ? errno : 0;
}

static int zn_reg_raw(int fd, struct zeronic_mr_reg *r)
{
	return ioctl(fd, ZERONIC_IOC_MR_REG, r) ? errno : 0;
}

static int zn_reg(int fd, const void *addr, __u64 len, __u32 access, __u64 *key)
{
	struct zeronic_mr_reg r = {
		.addr = (uintptr_t)addr,
		.length = len,
		.nic = 0,
		.access = access,
	};
	int err = zn_reg_raw(fd, &r);

	if (!err && key)
		*key = r.key;
	return err;
}

static int zn_dereg(int fd, __u64 key)
{
	struct zeronic_mr_dereg d = { .key = key, .nic = 0 };

	return ioctl(fd, ZERONIC_IOC_MR_DEREG, &d) ? errno : 0;
}

/* Anonymous private memory, faulted in (so read-only pins never see the zero page). */
static void *map_populated(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memset(p, 0x5a, len);
	return p;
}

static int open_dev(void)
{
	return open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC);
}

/* Reads exactly len bytes from a pipe; 0 on success. */
static int read_full(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * The kernel's own pin counters (docs/uapi.md, "Observing pins"), so leak
 * checks do not rest on the driver's word alone: the outstanding FOLL_PIN
 * pins of the whole kernel (/proc/vmstat nr_foll_pin_acquired -
 * nr_foll_pin_released; writing vm.stat_refresh folds the per-CPU deltas
 * first) and this process's VmPin (mm->pinned_vm).
 */
static long long pins_outstanding(void)
{
	long long v, acquired = -1, released = -1;
	char name[64];
	FILE *f;
	int fd = open("/proc/sys/vm/stat_refresh", O_WRONLY | O_CLOEXEC);

	if (fd >= 0) {
		/* If it fails (not root), the counters lag; pins_settle waits. */
		ssize_t r = write(fd, "1", 1);

		(void)r;
		close(fd);
	}
	f = fopen("/proc/vmstat", "re");
	if (!f)
		return -1;
	while (fscanf(f, "%63s %lld", name, &v) == 2) {
		if (!strcmp(name, "nr_foll_pin_acquired"))
			acquired = v;
		else if (!strcmp(name, "nr_foll_pin_released"))
			released = v;
	}
	fclose(f);
	return acquired < 0 || released < 0 ? -1 : acquired - released;
}

/*
 * Other I/O of the guest (9p's zero-copy requests) pins pages for moments,
 * so a single reading may be high. At rest: the least of readings over
 * 200 ms. A leak check waits up to 5 s for the count to come down to the
 * baseline (releases that complete after a call returned, the fold's lag,
 * other I/O), and fails if it stays above.
 */
static long long pins_at_rest(void)
{
	long long least = pins_outstanding(), n;
	int i;

	for (i = 0; i < 4; i++) {
		usleep(50 * 1000);
		n = pins_outstanding();
		if (n < least)
			least = n;
	}
	return least;
}

static long long pins_settle(long long base)
{
	long long n = pins_outstanding();
	int i;

	for (i = 0; i < 50 && n > base; i++) {
		usleep(100 * 1000);
		n = pins_outstanding();
	}
	return n;
}

static long vm_pin_kb(void);

/* The outstanding pins when the program started, before any test. */
static long long initial_pins = -1;

__attribute__((constructor)) static void record_initial_pins(void)
{
	initial_pins = pins_at_rest();
}

FIXTURE(mr)
{
	int fd;
	size_t ps;
	struct zeronic_query base;	/* NIC 0 when the test started */
	long long base_pins;		/* pins_outstanding() then */
	long base_vmpin;		/* vm_pin_kb() then */
};

FIXTURE_SETUP(mr)
{
	/* A child that failed early closes its pipe: report, don't die. */
	signal(SIGPIPE, SIG_IGN);
	self->ps = page_size();
	self->fd = open_dev();
	ASSERT_LE(0, self->fd) TH_LOG("open %s: %s", ZERONIC_DEVICE_PATH, strerror(errno));
	ASSERT_EQ(0, zn_query(self->fd, 0, &self->base))
		TH_LOG("ZERONIC_IOC_QUERY on NIC 0 failed: is a NIC bound?");
	self->base_pins = pins_at_rest();
	ASSERT_LE(0, self->base_pins) TH_LOG("no nr_foll_pin_* in /proc/vmstat");
	self->base_vmpin = vm_pin_kb();
	ASSERT_LE(0, self->base_vmpin) TH_LOG("no VmPin in /proc/self/status");
}

FIXTURE_TEARDOWN(mr)
{
	if (self->fd >= 0)
		close(self->fd);
}

/*
 * Nothing is pinned beyond the fixture's baseline, by the kernel's own
 * counters: the outstanding FOLL_PIN pins and this process's VmPin.
 */
#define EXPECT_NO_PIN_LEAK() do { \
	long long __pins = pins_settle(self->base_pins); \
	long __kb = vm_pin_kb(); \
	EXPECT_GE(self->base_pins, __pins) \
		TH_LOG("outstanding FOLL_PIN pins (/proc/vmstat): %lld at the start, %lld now", \
		       self->base_pins, __pins); \
	EXPECT_EQ(self->base_vmpin, __kb) \
		TH_LOG("VmPin: %ld kB at the start, %ld kB now", self->base_vmpin, __kb); \
} while (0)

/*
 * Checks that NIC 0's counters are the fixture's baseline plus the given
 * deltas; with no delta (a leak check), the kernel's pin counters too. A
 * macro so that failures report the caller's line.
 */
#define EXPECT_COUNTS(d_mrs, d_pages) do { \
	struct zeronic_query __q; \
	ASSERT_EQ(0, zn_query(self->fd, 0, &__q)); \
	EXPECT_EQ(self->base.mr_in_use + (__u32)(d_mrs), __q.mr_in_use) \
		TH_LOG("mr_in_use: want baseline %u + %u", \
		       self->base.mr_in_use, (__u32)(d_mrs)); \
	EXPECT_EQ(self->base.pinned_pages + (__u64)(d_pages), __q.pinned_pages) \
		TH_LOG("pinned_pages: want baseline %llu + %llu", \
		       (unsigned long long)self->base.pinned_pages, \
		       (unsigned long long)(d_pages)); \
	if ((d_mrs) == 0 && (d_pages) == 0) \
		EXPECT_NO_PIN_LEAK(); \
} while (0)

/* ---- The ABI's layout (docs/uapi.md): sizes, offsets, command numbers ------ */

#define EXPECT_OFFSET(type, field, off) EXPECT_EQ((size_t)(off), offsetof(type, field))

TEST(abi_layout)
{
	EXPECT_EQ(120u, sizeof(struct zeronic_query));
	EXPECT_EQ(16u, sizeof(struct zeronic_port_info));
	EXPECT_EQ(32u, sizeof(struct zeronic_mr_reg));
	EXPECT_EQ(16u, sizeof(struct zeronic_mr_dereg));
	EXPECT_EQ(3, ZERONIC_UAPI_VERSION);
	EXPECT_OFFSET(struct zeronic_query, mr_max_bytes, 32);
	EXPECT_OFFSET(struct zeronic_query, pinned_pages, 40);
	EXPECT_OFFSET(struct zeronic_query, ports, 56);
	EXPECT_OFFSET(struct zeronic_query, mr_user_max, 88);
	EXPECT_OFFSET(struct zeronic_query, mr_user_in_use, 92);
	EXPECT_OFFSET(struct zeronic_query, user_locked_pages, 96);
	EXPECT_OFFSET(struct zeronic_query, held_pages, 104);
	EXPECT_OFFSET(struct zeronic_query, flows_in_use, 112);
	EXPECT_OFFSET(struct zeronic_query, reserved, 116);
	EXPECT_OFFSET(struct zeronic_mr_reg, nic, 16);
	EXPECT_OFFSET(struct zeronic_mr_reg, key, 24);
	EXPECT_OFFSET(struct zeronic_mr_dereg, nic, 8);
	EXPECT_OFFSET(struct zeronic_mr_dereg, reserved, 12);
	EXPECT_EQ(0xC078DA00u, (unsigned int)ZERONIC_IOC_QUERY);
	EXPECT_EQ(0xC020DA03u, (unsigned int)ZERONIC_IOC_MR_REG);
	EXPECT_EQ(0x4010DA04u, (unsigned int)ZERONIC_IOC_MR_DEREG);
}

/* ---- QUERY ---------------------------------------------------------------- */

TEST_F(mr, query_describes_nic0)
{
	struct zeronic_query *q = &self->base;
	__u32 i;

	EXPECT_EQ(0u, q->nic);
	EXPECT_LE(1u, q->num_nics);
	EXPECT_EQ(2u, q->hw_version >> 16) TH_LOG("hw_version 0x%x", q->hw_version);
	EXPECT_LE(1u, q->num_ports);
	EXPECT_GE((__u32)ZERONIC_MAX_PORTS, q->num_ports);
	EXPECT_NE(0u, q->caps);
	EXPECT_LT(0u, q->mr_capacity);
	EXPECT_LE(256 * MiB, q->mr_max_bytes);
	EXPECT_GE(q->mr_capacity, q->mr_in_use);
	EXPECT_LE(1u, q->mr_user_max);
	EXPECT_GE(q->mr_capacity, q->mr_user_max);
	EXPECT_EQ(0u, q->mr_user_in_use);
	EXPECT_EQ(0ull, q->held_pages);
	for (i = 0; i < ZERONIC_MAX_PORTS; i++)
		EXPECT_EQ(0u, q->ports[i].reserved);
	EXPECT_EQ(0u, q->reserved);
	EXPECT_EQ(0u, q->flows_in_use);
}

/* QUERY's reserved fields are out-only: ignored on input, zero on output. */
TEST_F(mr, query_ignores_and_zeroes_reserved)
{
	struct zeronic_query q;
	int i;

	memset(&q, 0xff, sizeof(q));
	q.nic = 0;
	ASSERT_EQ(0, ioctl(self->fd, ZERONIC_IOC_QUERY, &q)) TH_LOG("%s", strerror(errno));
	EXPECT_EQ(0u, q.reserved);
	for (i = 0; i < ZERONIC_MAX_PORTS; i++)
		EXPECT_EQ(0u, q.ports[i].reserved);
	EXPECT_EQ(self->base.num_nics, q.num_nics);
	EXPECT_EQ(self->base.hw_version, q.hw_version);
	EXPECT_EQ(self->base.mr_capacity, q.mr_capacity);
	EXPECT_EQ(self->base.mr_max_bytes, q.mr_max_bytes);
}

TEST_F(mr, query_nic_out_of_range_is_enodev)
{
	struct zeronic_query q;

	EXPECT_EQ(ENODEV, zn_query(self->fd, self->base.num_nics, &q));
	EXPECT_EQ(ENODEV, zn_query(self->fd, self->base.num_nics + 1, &q));
	EXPECT_EQ(ENODEV, zn_query(self->fd, UINT32_MAX, &q));
}

TEST_F(mr, bad_argument_pointer_is_efault)
{
	errno = 0;
	EXPECT_EQ(-1, ioctl(self->fd, ZERONIC_IOC_QUERY, (void *)1));
	EXPECT_EQ(EFAULT, errno);
	errno = 0;
	EXPECT_EQ(-1, ioctl(self->fd, ZERONIC_IOC_QUERY, NULL));
	EXPECT_EQ(EFAULT, errno);
	errno = 0;
	EXPECT_EQ(-1, ioctl(self->fd, ZERONIC_IOC_MR_REG, (void *)1));
	EXPECT_EQ(EFAULT, errno);
	errno = 0;
	EXPECT_EQ(-1, ioctl(self->fd, ZERONIC_IOC_MR_DEREG, (void *)1));
	EXPECT_EQ(EFAULT, errno);
	EXPECT_COUNTS(0, 0);
}

/* The whole command word is the ABI: another size or direction is unknown. */
TEST_F(mr, wrong_size_or_direction_is_enotty)
{
	struct zeronic_mr_reg r = { 0 };

	errno = 0;
	EXPECT_EQ(-1, ioctl(self->fd, _IOWR(ZERONIC_IOCTL_TYPE, 0x01, __u64), &r));
	EXPECT_EQ(ENOTTY, errno);
	errno = 0;
	EXPECT_EQ(-1, ioctl(self->fd, _IOR(ZERONIC_IOCTL_TYPE, 0x00, struct zeronic_query), &r));
	EXPECT_EQ(ENOTTY, errno);
	errno = 0;
	EXPECT_EQ(-1, ioctl(self->fd, _IOWR(ZERONIC_IOCTL_TYPE, 0x04, struct zeronic_mr_dereg), &r));
	EXPECT_EQ(ENOTTY, errno);
}

/* Version 1's MR_REG and MR_DEREG (32-bit keys) are retired, never reused. */
TEST_F(mr, retired_version1_numbers_are_enotty)
{
	struct { __u64 addr, length; __u32 nic, access, key, reserved; } r1 = { 0 };
	struct { __u32 key, reserved; } d1 = { 0 };
	char *buf = map_populated(self->ps);

	ASSERT_NE(NULL, buf);
	r1.addr = (uintptr_t)buf;
	r1.length = self->ps;
	r1.access = ACC_RW;
	errno = 0;
	EXPECT_EQ(-1, ioctl(self->fd, _IOWR(ZERONIC_IOCTL_TYPE, 0x01, r1), &r1));
	EXPECT_EQ(ENOTTY, errno);
	errno = 0;
	EXPECT_EQ(-1, ioctl(self->fd, _IOW(ZERONIC_IOCTL_TYPE, 0x02, d1), &d1));
	EXPECT_EQ(ENOTTY, errno);
	EXPECT_COUNTS(0, 0);
	munmap(buf, self->ps);
}

/* ---- MR_REG / MR_DEREG: valid registrations -------------------------------- */

/* Registers [p, p + len) with access, checks the counters, deregisters. */
#define REG_CHECK_DEREG(p, len, access) do { \
	__u64 __key = 0; \
	__u64 __pages = span_pages((p), (len)); \
	ASSERT_EQ(0, zn_reg(self->fd, (p), (len), (access), &__key)) \
		TH_LOG("register %llu bytes at +%#lx: %s", (unsigned long long)(len), \
		       (unsigned long)((uintptr_t)(p) % self->ps), strerror(errno)); \
	EXPECT_NE(0u, __key); \
	EXPECT_COUNTS(1, __pages); \
	EXPECT_EQ(0, zn_dereg(self->fd, __key)); \
	EXPECT_COUNTS(0, 0); \
} while (0)

TEST_F(mr, reg_one_byte)
{
	char *buf = map_populated(2 * self->ps);

	ASSERT_NE(NULL, buf);
	REG_CHECK_DEREG(buf, 1, ACC_RW);
	REG_CHECK_DEREG(buf + self->ps - 1, 1, ACC_R);	/* last byte of a page */
	REG_CHECK_DEREG(buf + 123, 1, ACC_W);
	munmap(buf, 2 * self->ps);
}

TEST_F(mr, reg_one_page)
{
	char *buf = map_populated(self->ps);

	ASSERT_NE(NULL, buf);
	REG_CHECK_DEREG(buf, self->ps, ACC_RW);
	munmap(buf, self->ps);
}

TEST_F(mr, reg_page_aligned)
{
	size_t len = 64 * self->ps;
	char *buf = map_populated(len);

	ASSERT_NE(NULL, buf);
	REG_CHECK_DEREG(buf, len, ACC_R);
	REG_CHECK_DEREG(buf, len, ACC_W);
	REG_CHECK_DEREG(buf + self->ps, 3 * self->ps, ACC_RW);
	munmap(buf, len);
}

TEST_F(mr, reg_unaligned)
{
	size_t len = 8 * self->ps;
	char *buf = map_populated(len);

	ASSERT_NE(NULL, buf);
	/* Start and end mid-page: 3 pages for 2 pages' worth of bytes. */
	REG_CHECK_DEREG(buf + 100, 2 * self->ps, ACC_RW);
	/* Two bytes across a page boundary: 2 pages. */
	REG_CHECK_DEREG(buf + self->ps - 1, 2, ACC_RW);
	/* Aligned start, unaligned end, and the reverse. */
	REG_CHECK_DEREG(buf, 3 * self->ps + 1, ACC_R);
	REG_CHECK_DEREG(buf + self->ps - 1, 3 * self->ps + 1, ACC_W);
	/* Odd sizes and offsets. */
	REG_CHECK_DEREG(buf + 7, 5 * self->ps - 13, ACC_RW);
	munmap(buf, len);
}

/* mr_max_bytes is at least 256 MiB; the guest has about 1 GiB of RAM. */
TEST_F_TIMEOUT(mr, reg_256mib, 300)
{
	size_t len = 256 * MiB;
	char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	__u64 key = 0;

	ASSERT_NE(MAP_FAILED, buf);
	ASSERT_EQ(0, zn_reg(self->fd, buf, len, ACC_RW, &key)) TH_LOG("%s", strerror(errno));
	EXPECT_NE(0u, key);
	EXPECT_COUNTS(1, len / self->ps);
	EXPECT_EQ(0, zn_dereg(self->fd, key));
	EXPECT_COUNTS(0, 0);
	munmap(buf, len);
}

TEST_F(mr, reg_read_only_mapping)
{
	size_t len = 4 * self->ps;
	char *buf = map_populated(len);
	__u64 key;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, mprotect(buf, len, PROT_READ));
	/* The NIC only reads (TX merge): fine. */
	REG_CHECK_DEREG(buf, len, ACC_R);
	REG_CHECK_DEREG(buf + 10, 10, ACC_R);
	/* The NIC may write: the mapping must be writable. */
	EXPECT_EQ(EFAULT, zn_reg(self->fd, buf, len, ACC_W, &key));
	EXPECT_EQ(EFAULT, zn_reg(self->fd, buf, len, ACC_RW, &key));
	EXPECT_COUNTS(0, 0);
	munmap(buf, len);
}

/* Part writable, part read-only: LOCAL_WRITE fails as a whole, pinning nothing. */
TEST_F(mr, reg_write_over_partly_read_only_range)
{
	size_t len = 4 * self->ps;
	char *buf = map_populated(len);
	__u64 key;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, mprotect(buf + 3 * self->ps, self->ps, PROT_READ));
	EXPECT_EQ(EFAULT, zn_reg(self->fd, buf, len, ACC_W, &key));
	EXPECT_COUNTS(0, 0);
	REG_CHECK_DEREG(buf, len, ACC_R);
	REG_CHECK_DEREG(buf, 3 * self->ps, ACC_W);
	munmap(buf, len);
}

TEST_F(mr, keys_are_nonzero_and_distinct)
{
	enum { N = 16 };
	size_t len = N * self->ps;
	char *buf = map_populated(len);
	__u64 keys[N];
	__u64 pages = 0;
	int i, j, dups = 0;

	ASSERT_NE(NULL, buf);
	for (i = 0; i < N; i++) {
		/* Some disjoint, some on the same page. */
		char *p = buf + (i % 2 ? i * self->ps : 0);

		ASSERT_EQ(0, zn_reg(self->fd, p, self->ps, i % 3 ? ACC_RW : ACC_R, &keys[i]));
		EXPECT_NE(0u, keys[i]);
		pages++;
	}
	for (i = 0; i < N; i++) {
		for (j = i + 1; j < N; j++) {
			if (keys[i] != keys[j])
				continue;
			TH_LOG("keys %d and %d are both %#llx", i, j,
			       (unsigned long long)keys[i]);
			dups++;
		}
	}
	EXPECT_EQ(0, dups);
	EXPECT_COUNTS(N, pages);
	for (i = 0; i < N; i++)
		EXPECT_EQ(0, zn_dereg(self->fd, keys[i]));
	EXPECT_COUNTS(0, 0);
	munmap(buf, len);
}

/*
 * Registering and deregistering the same page over and over reuses the same
 * MR Table slot, yet never gets a key back that the file saw before, and the
 * generation part of consecutive keys is not a counter (version 1's was +1,
 * and repeated after 65535 registrations).
 */
TEST_F_TIMEOUT(mr, keys_never_repeat_and_are_not_sequential, 300)
{
	enum { N = 4096 };
	char *buf = map_populated(self->ps);
	__u64 *keys = calloc(N, sizeof(*keys));
	int i, j, dups = 0, steps = 0;

	ASSERT_NE(NULL, buf);
	ASSERT_NE(NULL, keys);
	for (i = 0; i < N; i++) {
		ASSERT_EQ(0, zn_reg(self->fd, buf, 1, ACC_RW, &keys[i])) TH_LOG("registration %d", i);
		ASSERT_EQ(0, zn_dereg(self->fd, keys[i]));
		EXPECT_NE(0ull, keys[i]);
	}
	for (i = 1; i < N; i++) {
		__u64 g0 = keys[i - 1] >> 16, g1 = keys[i] >> 16;

		if (g1 == g0 + 1 || g1 + 1 == g0)
			steps++;
	}
	for (i = 0; i < N; i++)
		for (j = i + 1; j < N && dups < 10; j++)
			if (keys[i] == keys[j]) {
				TH_LOG("registrations %d and %d both got key %#llx", i, j,
				       (unsigned long long)keys[i]);
				dups++;
			}
	EXPECT_EQ(0, dups);
	/* Random 48-bit generations: a difference of one has probability 2^-47 per pair. */
	EXPECT_EQ(0, steps) TH_LOG("%d of %d consecutive generations differ by one", steps, N - 1);
	EXPECT_COUNTS(0, 0);
	free(keys);
	munmap(buf, self->ps);
}

/* key is out-only: what userspace leaves in it does not matter. */
TEST_F(mr, reg_ignores_key_on_input)
{
	char *buf = map_populated(self->ps);
	struct zeronic_mr_reg r = { .length = 1, .access = ACC_RW, .key = 0xdeadbeef };

	ASSERT_NE(NULL, buf);
	r.addr = (uintptr_t)buf;
	ASSERT_EQ(0, zn_reg_raw(self->fd, &r));
	EXPECT_NE(0u, r.key);
	EXPECT_EQ(0, zn_dereg(self->fd, r.key));
	munmap(buf, self->ps);
}

/* Overlapping registrations are independent: each pins and is counted. */
TEST_F(mr, overlapping_registrations)
{
	size_t len = 16 * self->ps;
	char *buf = map_populated(len);
	__u64 a, b, c;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, zn_reg(self->fd, buf, len, ACC_RW, &a));
	ASSERT_EQ(0, zn_reg(self->fd, buf, len, ACC_RW, &b));
	EXPECT_NE(a, b);
	ASSERT_EQ(0, zn_reg(self->fd, buf + 8 * self->ps + 1, 8 * self->ps - 1, ACC_R, &c));
	EXPECT_NE(a, c);
	EXPECT_NE(b, c);
	EXPECT_COUNTS(3, 16 + 16 + 8);
	EXPECT_EQ(0, zn_dereg(self->fd, a));
	EXPECT_COUNTS(2, 16 + 8);
	EXPECT_EQ(ENOENT, zn_dereg(self->fd, a));
	EXPECT_EQ(0, zn_dereg(self->fd, c));
	EXPECT_EQ(0, zn_dereg(self->fd, b));
	EXPECT_COUNTS(0, 0);
	munmap(buf, len);
}

/* A region keeps its pages when the memory is unmapped: they stay pinned. */
TEST_F(mr, region_outlives_munmap)
{
	size_t len = 8 * self->ps;
	char *buf = map_populated(len);
	__u64 key;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, zn_reg(self->fd, buf, len, ACC_RW, &key));
	ASSERT_EQ(0, munmap(buf, len));
	EXPECT_COUNTS(1, 8);
	EXPECT_EQ(0, zn_dereg(self->fd, key));
	EXPECT_COUNTS(0, 0);
}

/* ---- MR_REG: bad input ----------------------------------------------------- */

TEST_F(mr, reg_unmapped_is_efault)
{
	size_t len = 4 * self->ps;
	char *buf = map_populated(len);
	__u64 key;

	ASSERT_NE(NULL, buf);
	/* A hole in the middle: nothing is pinned, all or nothing. */
	ASSERT_EQ(0, munmap(buf + self->ps, self->ps));
	EXPECT_EQ(EFAULT, zn_reg(self->fd, buf, len, ACC_RW, &key));
	EXPECT_EQ(EFAULT, zn_reg(self->fd, buf, len, ACC_R, &key));
	EXPECT_EQ(EFAULT, zn_reg(self->fd, buf + self->ps - 1, 2, ACC_RW, &key));
	/* All unmapped. */
	ASSERT_EQ(0, munmap(buf, len));
	EXPECT_EQ(EFAULT, zn_reg(self->fd, buf, len, ACC_RW, &key));
	EXPECT_EQ(EFAULT, zn_reg(self->fd, buf, 1, ACC_R, &key));
	EXPECT_COUNTS(0, 0);
}

TEST_F(mr, reg_inaccessible_is_efault)
{
	size_t len = 2 * self->ps;
	char *buf = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	__u64 key;

	ASSERT_NE(MAP_FAILED, buf);
	EXPECT_EQ(EFAULT, zn_reg(self->fd, buf, len, ACC_R, &key));
	EXPECT_EQ(EFAULT, zn_reg(self->fd, buf, len, ACC_RW, &key));
	/* Kernel addresses are not the caller's memory. */
	EXPECT_EQ(EFAULT, zn_reg(self->fd, (void *)(uintptr_t)0xffff888000000000ULL, self->ps, ACC_R, &key));
	/* The zero page of the address space is never mapped. */
	EXPECT_EQ(EFAULT, zn_reg(self->fd, NULL, self->ps, ACC_R, &key));
	EXPECT_COUNTS(0, 0);
	munmap(buf, len);
}

TEST_F(mr, reg_zero_length_is_einval)
{
	char *buf = map_populated(self->ps);
	__u64 key;

	ASSERT_NE(NULL, buf);
	EXPECT_EQ(EINVAL, zn_reg(self->fd, buf, 0, ACC_RW, &key));
	EXPECT_EQ(EINVAL, zn_reg(self->fd, buf + 1, 0, ACC_R, &key));
	EXPECT_COUNTS(0, 0);
	munmap(buf, self->ps);
}

TEST_F(mr, reg_above_max_bytes_is_e2big)
{
	__u64 max = self->base.mr_max_bytes;
	size_t len = (size_t)max + self->ps;
	char *buf;
	__u64 key;

	/*
	 * Reserve (without backing) a mapping bigger than mr_max_bytes so that
	 * length is the only thing wrong; fall back to a small one if the
	 * address space says no (E2BIG must still win over EFAULT: the length
	 * is checked before any page is looked at).
	 */
	buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (buf == MAP_FAILED) {
		TH_LOG("cannot reserve %llu bytes; using an unbacked range", (unsigned long long)len);
		buf = map_populated(self->ps);
		ASSERT_NE(NULL, buf);
		len = self->ps;
	}
	EXPECT_EQ(E2BIG, zn_reg(self->fd, buf, max + 1, ACC_R, &key));
	EXPECT_EQ(E2BIG, zn_reg(self->fd, buf, max + self->ps, ACC_RW, &key));
	EXPECT_EQ(E2BIG, zn_reg(self->fd, buf, (UINT64_MAX >> 1), ACC_RW, &key));
	EXPECT_COUNTS(0, 0);
	munmap(buf, len);
}

TEST_F(mr, reg_address_overflow_is_einval)
{
	__u64 key;

	EXPECT_EQ(EINVAL, zn_reg(self->fd, (void *)(uintptr_t)(UINT64_MAX - self->ps + 1),
				 2 * self->ps, ACC_R, &key));
	EXPECT_EQ(EINVAL, zn_reg(self->fd, (void *)(uintptr_t)UINT64_MAX, 2, ACC_RW, &key));
	EXPECT_COUNTS(0, 0);
}

TEST_F(mr, reg_bad_access_is_einval)
{
	static const __u32 bad[] = { 0, 1U << 2, 1U << 31, ACC_RW | (1U << 2), UINT32_MAX };
	char *buf = map_populated(self->ps);
	__u64 key;
	size_t i;

	ASSERT_NE(NULL, buf);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		EXPECT_EQ(EINVAL, zn_reg(self->fd, buf, self->ps, bad[i], &key))
			TH_LOG("access %#x", bad[i]);
	EXPECT_COUNTS(0, 0);
	munmap(buf, self->ps);
}

TEST_F(mr, reg_bad_nic_is_enodev)
{
	char *buf = map_populated(self->ps);
	struct zeronic_mr_reg r = { .length = self->ps, .access = ACC_RW };

	ASSERT_NE(NULL, buf);
	r.addr = (uintptr_t)buf;
	r.nic = self->base.num_nics;
	EXPECT_EQ(ENODEV, zn_reg_raw(self->fd, &r));
	r.nic = UINT32_MAX;
	EXPECT_EQ(ENODEV, zn_reg_raw(self->fd, &r));
	EXPECT_COUNTS(0, 0);
	munmap(buf, self->ps);
}

/* ---- MR_DEREG: keys and ownership ------------------------------------------ */

TEST_F(mr, dereg_twice_is_enoent)
{
	char *buf = map_populated(self->ps);
	__u64 key;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, zn_reg(self->fd, buf, self->ps, ACC_RW, &key));
	EXPECT_EQ(0, zn_dereg(self->fd, key));
	EXPECT_EQ(ENOENT, zn_dereg(self->fd, key));
	EXPECT_EQ(ENOENT, zn_dereg(self->fd, key));
	EXPECT_COUNTS(0, 0);
	munmap(buf, self->ps);
}

TEST_F(mr, dereg_made_up_key_is_enoent)
{
	static const __u64 made_up[] = { 0, 1, 0x10000, 0xdeadbeef, UINT32_MAX, UINT64_MAX };
	char *buf = map_populated(self->ps);
	__u64 key;
	size_t i;

	ASSERT_NE(NULL, buf);
	for (i = 0; i < sizeof(made_up) / sizeof(made_up[0]); i++)
		EXPECT_EQ(ENOENT, zn_dereg(self->fd, made_up[i]))
			TH_LOG("key %#llx", (unsigned long long)made_up[i]);
	/* With a region registered, neighbours of its key are still nobody's. */
	ASSERT_EQ(0, zn_reg(self->fd, buf, self->ps, ACC_RW, &key));
	EXPECT_EQ(ENOENT, zn_dereg(self->fd, key ^ 0x10000));
	EXPECT_EQ(ENOENT, zn_dereg(self->fd, key ^ 1));
	EXPECT_EQ(ENOENT, zn_dereg(self->fd, key ^ (1ULL << 40)));
	EXPECT_EQ(ENOENT, zn_dereg(self->fd, key & 0xffffffffULL));
	EXPECT_COUNTS(1, 1);
	EXPECT_EQ(0, zn_dereg(self->fd, key));
	munmap(buf, self->ps);
}

/* A key names a region through (NIC, key): the right key on another NIC index is nobody's. */
TEST_F(mr, dereg_key_on_another_nic_is_enoent)
{
	char *buf = map_populated(self->ps);
	struct zeronic_mr_dereg d = { 0 };

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, zn_reg(self->fd, buf, self->ps, ACC_RW, &d.key));
	d.nic = 1;
	errno = 0;
	EXPECT_EQ(-1, ioctl(self->fd, ZERONIC_IOC_MR_DEREG, &d));
	EXPECT_EQ(ENOENT, errno);
	d.nic = UINT32_MAX;
	errno = 0;
	EXPECT_EQ(-1, ioctl(self->fd, ZERONIC_IOC_MR_DEREG, &d));
	EXPECT_EQ(ENOENT, errno);
	EXPECT_COUNTS(1, 1);
	d.nic = 0;
	EXPECT_EQ(0, ioctl(self->fd, ZERONIC_IOC_MR_DEREG, &d)) TH_LOG("%s", strerror(errno));
	EXPECT_COUNTS(0, 0);
	munmap(buf, self->ps);
}

TEST_F(mr, dereg_nonzero_reserved_is_einval)
{
	char *buf = map_populated(self->ps);
	struct zeronic_mr_dereg d = { .reserved = 1 };

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, zn_reg(self->fd, buf, self->ps, ACC_RW, &d.key));
	errno = 0;
	EXPECT_EQ(-1, ioctl(self->fd, ZERONIC_IOC_MR_DEREG, &d));
	EXPECT_EQ(EINVAL, errno);
	/* The region is untouched. */
	EXPECT_COUNTS(1, 1);
	EXPECT_EQ(0, zn_dereg(self->fd, d.key));
	EXPECT_COUNTS(0, 0);
	munmap(buf, self->ps);
}

/* A second open of /dev/zeronic is another file: its keys are not ours. */
TEST_F(mr, key_of_another_file_is_enoent)
{
	char *buf = map_populated(self->ps);
	int fd2 = open_dev();
	__u64 key, mine;

	ASSERT_NE(NULL, buf);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, zn_reg(fd2, buf, self->ps, ACC_RW, &key));
	ASSERT_EQ(0, zn_reg(self->fd, buf, self->ps, ACC_RW, &mine));
	EXPECT_NE(key, mine);
	EXPECT_EQ(ENOENT, zn_dereg(self->fd, key));
	EXPECT_EQ(ENOENT, zn_dereg(fd2, mine));
	EXPECT_COUNTS(2, 2);
	EXPECT_EQ(0, zn_dereg(fd2, key));
	EXPECT_EQ(0, zn_dereg(self->fd, mine));
	EXPECT_COUNTS(0, 0);
	close(fd2);
	munmap(buf, self->ps);
}

/* A key of another process's file is not ours; its region survives our attempt. */
TEST_F(mr, key_of_another_process_is_enoent)
{
	int to_parent[2], to_child[2], status;
	__u64 key = 0;
	pid_t child;
	char go = 'g';

	ASSERT_EQ(0, pipe(to_parent));
	ASSERT_EQ(0, pipe(to_child));
	child = fork();
	ASSERT_LE(0, child);
	if (child == 0) {
		char *buf = map_populated(self->ps);
		int fd = open_dev(), err;

		if (!buf || fd < 0)
			_exit(10);
		err = zn_reg(fd, buf, self->ps, ACC_RW, &key);
		if (err) {
			fprintf(stderr, "# child: MR_REG: %s\n", strerror(err));
			_exit(11);
		}
		if (write(to_parent[1], &key, sizeof(key)) != sizeof(key))
			_exit(12);
		if (read_full(to_child[0], &go, 1))
			_exit(13);
		err = zn_dereg(fd, key);
		if (err) {
			fprintf(stderr, "# child: MR_DEREG of its own key: %s\n", strerror(err));
			_exit(14);
		}
		_exit(0);
	}
	close(to_parent[1]);
	close(to_child[0]);
	if (read_full(to_parent[0], &key, sizeof(key)) == 0) {
		int fd2 = open_dev();

		EXPECT_COUNTS(1, 1);
		EXPECT_EQ(ENOENT, zn_dereg(self->fd, key));
		ASSERT_LE(0, fd2);
		EXPECT_EQ(ENOENT, zn_dereg(fd2, key));
		close(fd2);
		EXPECT_COUNTS(1, 1);
	} else {
		TH_LOG("the child sent no key");
	}
	EXPECT_EQ(1, write(to_child[1], &go, 1));
	ASSERT_EQ(child, waitpid(child, &status, 0));
	EXPECT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status));
	EXPECT_COUNTS(0, 0);
}

/*
 * Keys belong to the file, not to the process: a child that registers
 * through an inherited descriptor creates a region of the parent's file,
 * which outlives the child and which the parent deregisters.
 */
TEST_F(mr, region_of_shared_file_outlives_registering_child)
{
	int to_parent[2], status;
	__u64 key = 0;
	pid_t child;

	ASSERT_EQ(0, pipe(to_parent));
	child = fork();
	ASSERT_LE(0, child);
	if (child == 0) {
		char *buf = map_populated(4 * self->ps);

		if (!buf || zn_reg(self->fd, buf, 4 * self->ps, ACC_RW, &key))
			_exit(10);
		if (write(to_parent[1], &key, sizeof(key)) != sizeof(key))
			_exit(11);
		_exit(0);
	}
	close(to_parent[1]);
	ASSERT_EQ(child, waitpid(child, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status));
	ASSERT_EQ(0, read_full(to_parent[0], &key, sizeof(key)));
	EXPECT_COUNTS(1, 4);
	EXPECT_EQ(0, zn_dereg(self->fd, key));
	EXPECT_COUNTS(0, 0);
}

/* VmPin of /proc/self/status in kB (mm->pinned_vm), or -1. */
static long vm_pin_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPin: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* Registrations are charged to the registering process's pinned_vm (VmPin). */
TEST_F(mr, registrations_charge_vmpin)
{
	size_t len = 64 * self->ps;
	char *buf = map_populated(len);
	long kb = (long)(self->ps / 1024), base = vm_pin_kb();
	__u64 a, b;

	ASSERT_NE(NULL, buf);
	ASSERT_LE(0, base);
	ASSERT_EQ(0, zn_reg(self->fd, buf, len, ACC_RW, &a));
	EXPECT_EQ(base + 64 * kb, vm_pin_kb());
	/* Overlaps are charged again; the span of an unaligned range counts. */
	ASSERT_EQ(0, zn_reg(self->fd, buf + 1, self->ps, ACC_R, &b));
	EXPECT_EQ(base + 66 * kb, vm_pin_kb());
	EXPECT_EQ(0, zn_dereg(self->fd, a));
	EXPECT_EQ(base + 2 * kb, vm_pin_kb());
	EXPECT_EQ(0, zn_dereg(self->fd, b));
	EXPECT_EQ(base, vm_pin_kb());
	munmap(buf, len);
}

/* ---- Per-user accounting: RLIMIT_MEMLOCK and the MR Table share ----------- */

/* Users the tests become: not root, so without any capability. */
#define UID_A 61001
#define UID_B 61002

#define CHILD_CHECK(cond, code, ...) do { \
	if (!(cond)) { \
		fprintf(stderr, "# child: " __VA_ARGS__); \
		fprintf(stderr, "\n"); \
		_exit(code); \
	} \
} while (0)

/*
 * In a child: RLIMIT_MEMLOCK of memlock bytes, then become uid (and gid) with
 * no supplementary groups. A non-root uid has no capability (no CAP_IPC_LOCK,
 * no CAP_SYS_RESOURCE). 0 on success.
 */
static int become_user(uid_t uid, rlim_t memlock)
{
	struct rlimit rl = { .rlim_cur = memlock, .rlim_max = memlock };

	if (setrlimit(RLIMIT_MEMLOCK, &rl) || setgroups(0, NULL) ||
	    setresgid(uid, uid, uid) || setresuid(uid, uid, uid))
		return -1;
	return 0;
}

/* The calling user's locked_vm in pages, from QUERY, or -1. */
static long long user_locked_pages(int fd)
{
	struct zeronic_query q;

	return zn_query(fd, 0, &q) ? -1 : (long long)q.user_locked_pages;
}

/*
 * In a child: RLIMIT_MEMLOCK 1 MiB. Without CAP_IPC_LOCK (as UID_A) the
 * limit holds exactly; with it (root) the limit is bypassed and the user's
 * locked_vm is not charged. Returns the exit code: 0 if every step held.
 */
static int memlock_child(int fd, int keep_cap)
{
	size_t ps = page_size();
	char *a = map_populated(512 * KiB), *b = map_populated(2 * MiB);
	__u64 ka, ka2, kb, kc;
	long long base;
	int err;

	CHILD_CHECK(a && b, 1, "mmap failed");
	if (keep_cap) {
		struct rlimit rl = { .rlim_cur = 1 * MiB, .rlim_max = 1 * MiB };

		CHILD_CHECK(setrlimit(RLIMIT_MEMLOCK, &rl) == 0, 2, "setrlimit: %s", strerror(errno));
		base = user_locked_pages(fd);
		/* CAP_IPC_LOCK bypasses the limit, and the user is not charged. */
		err = zn_reg(fd, b, 2 * MiB, ACC_RW, &kb);
		CHILD_CHECK(!err, 3, "2 MiB with CAP_IPC_LOCK: %s", strerror(err));
		CHILD_CHECK(user_locked_pages(fd) == base, 16, "root's locked_vm moved: %lld -> %lld",
			    base, user_locked_pages(fd));
		err = zn_dereg(fd, kb);
		CHILD_CHECK(!err, 4, "dereg: %s", strerror(err));
		return 0;
	}
	CHILD_CHECK(become_user(UID_A, 1 * MiB) == 0, 5, "cannot become uid %d: %s", UID_A,
		    strerror(errno));
	CHILD_CHECK(user_locked_pages(fd) == 0, 17, "uid %d starts with %lld pages charged", UID_A,
		    user_locked_pages(fd));

	err = zn_reg(fd, a, 512 * KiB, ACC_RW, &ka);
	CHILD_CHECK(!err, 6, "512 KiB under a 1 MiB limit: %s", strerror(err));
	CHILD_CHECK(user_locked_pages(fd) == (long long)(512 * KiB / ps), 18,
		    "locked_vm %lld pages after 512 KiB", user_locked_pages(fd));
	err = zn_reg(fd, b, 2 * MiB, ACC_RW, &kb);
	CHILD_CHECK(err == ENOMEM, 7, "2 MiB over the limit: want ENOMEM, got %s", strerror(err));
	/* The failed attempt charged nothing: 512 KiB more reaches the limit exactly. */
	err = zn_reg(fd, b, 512 * KiB, ACC_R, &ka2);
	CHILD_CHECK(!err, 8, "second 512 KiB (at the limit): %s", strerror(err));
	err = zn_reg(fd, b + MiB, 1, ACC_R, &kc);
	CHILD_CHECK(err == ENOMEM, 9, "one page over the limit: want ENOMEM, got %s",
		    strerror(err));
	/* Overlapping registrations are charged separately. */
	err = zn_reg(fd, a, ps, ACC_R, &kc);
	CHILD_CHECK(err == ENOMEM, 10, "overlap over the limit: want ENOMEM, got %s",
		    strerror(err));
	err = zn_dereg(fd, ka);
	CHILD_CHECK(!err, 11, "dereg: %s", strerror(err));
	err = zn_reg(fd, a, 512 * KiB, ACC_RW, &ka);
	CHILD_CHECK(!err, 12, "512 KiB again after dereg: %s", strerror(err));
	CHILD_CHECK(zn_dereg(fd, ka) == 0 && zn_dereg(fd, ka2) == 0, 13, "dereg failed");
	/* Everything uncharged: up to the limit in one go. */
	CHILD_CHECK(user_locked_pages(fd) == 0, 19, "locked_vm %lld pages after deregistering",
		    user_locked_pages(fd));
	err = zn_reg(fd, b, 1 * MiB, ACC_RW, &kb);
	CHILD_CHECK(!err, 14, "1 MiB after deregistering everything: %s", strerror(err));
	CHILD_CHECK(zn_dereg(fd, kb) == 0, 15, "dereg failed");
	return 0;
}

/* Runs fn(fd, arg) in a child; returns its exit code, -1 if it died. */
static int run_child(struct __test_metadata *_metadata, int (*fn)(int, int), int fd, int arg)
{
	int status;
	pid_t child = fork();

	if (child == 0)
		_exit(fn(fd, arg));
	if (child < 0 || waitpid(child, &status, 0) != child)
		return -1;
	if (!WIFEXITED(status)) {
		TH_LOG("child died of signal %d", WTERMSIG(status));
		return -1;
	}
	return WEXITSTATUS(status);
}

TEST_F(mr, memlock_limit_without_cap_ipc_lock)
{
	EXPECT_EQ(0, run_child(_metadata, memlock_child, self->fd, 0))
		TH_LOG("the child failed a step (see its message)");
	EXPECT_COUNTS(0, 0);
}

TEST_F(mr, memlock_limit_bypassed_with_cap_ipc_lock)
{
	EXPECT_EQ(0, run_child(_metadata, memlock_child, self->fd, 1));
	EXPECT_COUNTS(0, 0);
}

/*
 * Child step of memlock_bound_is_per_user: as UID_A with RLIMIT_MEMLOCK
 * 1 MiB, registers kib KiB through the shared file, writes the key to the
 * pipe fd 'out' (or nothing on error) and exits with the errno (0 on success).
 * The region outlives the child: it belongs to the file.
 */
static int out_fd = -1;
static int register_as_a(int fd, int kib)
{
	char *p = map_populated((size_t)kib * KiB);
	__u64 key = 0;
	int err;

	CHILD_CHECK(p, 100, "mmap failed");
	CHILD_CHECK(become_user(UID_A, 1 * MiB) == 0, 101, "cannot become uid %d", UID_A);
	err = zn_reg(fd, p, (__u64)kib * KiB, ACC_RW, &key);
	if (!err)
		CHILD_CHECK(write(out_fd, &key, sizeof(key)) == sizeof(key), 102, "pipe");
	return err;
}

/* UID_A's charge of locked_vm in pages, seen from a child that becomes UID_A. */
static int report_locked_as_a(int fd, int unused)
{
	long long pages;

	(void)unused;
	CHILD_CHECK(become_user(UID_A, 1 * MiB) == 0, 101, "cannot become uid %d", UID_A);
	pages = user_locked_pages(fd);
	CHILD_CHECK(write(out_fd, &pages, sizeof(pages)) == sizeof(pages), 102, "pipe");
	return 0;
}

/*
 * The bound is per user however the file is shared: processes of one user
 * that register through one inherited file and exit leave their regions, and
 * their charge, with the user; the next process of that user cannot pin more
 * than what remains of RLIMIT_MEMLOCK. (Version 1 charged the pinning
 * process's pinned_vm, so every short-lived child had a fresh limit.)
 */
TEST_F(mr, memlock_bound_is_per_user_across_processes)
{
	size_t ps = self->ps;
	__u64 k1, k2;
	long long pages = -1;
	int p[2];

	ASSERT_EQ(0, pipe(p));
	out_fd = p[1];
	/* First child: 768 KiB of the 1 MiB limit, then exits. */
	ASSERT_EQ(0, run_child(_metadata, register_as_a, self->fd, 768));
	ASSERT_EQ(sizeof(k1), read(p[0], &k1, sizeof(k1)));
	EXPECT_COUNTS(1, 768 * KiB / ps);
	/* The user still pays for it: a second child of the same user gets ENOMEM for 512 KiB... */
	EXPECT_EQ(ENOMEM, run_child(_metadata, register_as_a, self->fd, 512));
	ASSERT_EQ(0, run_child(_metadata, report_locked_as_a, self->fd, 0));
	ASSERT_EQ(sizeof(pages), read(p[0], &pages, sizeof(pages)));
	EXPECT_EQ((long long)(768 * KiB / ps), pages);
	/* ... but the remaining 256 KiB, exactly. */
	ASSERT_EQ(0, run_child(_metadata, register_as_a, self->fd, 256));
	ASSERT_EQ(sizeof(k2), read(p[0], &k2, sizeof(k2)));
	EXPECT_EQ(ENOMEM, run_child(_metadata, register_as_a, self->fd, 4));
	EXPECT_COUNTS(2, 1 * MiB / ps);
	/* Root deregisters them through the same file: the user's charge goes. */
	EXPECT_EQ(0, zn_dereg(self->fd, k1));
	EXPECT_EQ(0, zn_dereg(self->fd, k2));
	ASSERT_EQ(0, run_child(_metadata, report_locked_as_a, self->fd, 0));
	ASSERT_EQ(sizeof(pages), read(p[0], &pages, sizeof(pages)));
	EXPECT_EQ(0, pages);
	EXPECT_EQ(0, run_child(_metadata, register_as_a, self->fd, 1024));
	ASSERT_EQ(sizeof(k1), read(p[0], &k1, sizeof(k1)));
	EXPECT_EQ(0, zn_dereg(self->fd, k1));
	EXPECT_COUNTS(0, 0);
	close(p[0]);
	close(p[1]);
	out_fd = -1;
}

/*
 * Child of the share tests: becomes uid (RLIMIT_MEMLOCK 64 MiB) and registers
 * one-byte regions (one page each) on the shared file until an error or n of
 * them; writes the count, then the errno that stopped it, to out_fd.
 */
static int fill_share(int fd, int n_and_uid)
{
	uid_t uid = (uid_t)(n_and_uid & 0xffff) + 61000;
	int n = n_and_uid >> 16, i, err = 0;
	char *p = map_populated(page_size());
	__u64 key;

	CHILD_CHECK(p, 100, "mmap failed");
	CHILD_CHECK(become_user(uid, 64 * MiB) == 0, 101, "cannot become uid %d", (int)uid);
	for (i = 0; i < n; i++) {
		err = zn_reg(fd, p, 1, ACC_RW, &key);
		if (err)
			break;
	}
	CHILD_CHECK(write(out_fd, &i, sizeof(i)) == sizeof(i), 102, "pipe");
	CHILD_CHECK(write(out_fd, &err, sizeof(err)) == sizeof(err), 102, "pipe");
	return 0;
}

#define FILL_ARG(n, uid_index) (((n) << 16) | (uid_index))

/* Runs fill_share as uid 61000 + uid_index; returns what it registered, and its stop errno. */
static int fill_share_as(struct __test_metadata *_metadata, int fd, int rfd, int n,
			 int uid_index, int *err)
{
	int got = -1;

	*err = -1;
	if (run_child(_metadata, fill_share, fd, FILL_ARG(n, uid_index)) != 0)
		return -1;
	if (read(rfd, &got, sizeof(got)) != sizeof(got) || read(rfd, err, sizeof(*err)) != sizeof(*err))
		return -1;
	return got;
}

/* One user holds at most mr_user_max entries of a NIC (ENOSPC); others are not affected. */
TEST_F_TIMEOUT(mr, mr_user_share_is_enospc, 300)
{
	__u32 max = self->base.mr_user_max;
	int p[2], got, err;

	if (max == 0 || max >= self->base.mr_capacity - self->base.mr_in_use)
		SKIP(return, "no per-user share smaller than the free MR Table (max_mrs_per_user=%u)",
		     max);
	ASSERT_EQ(0, pipe(p));
	out_fd = p[1];
	got = fill_share_as(_metadata, self->fd, p[0], (int)max + 1, 1, &err);
	EXPECT_EQ((int)max, got);
	EXPECT_EQ(ENOSPC, err) TH_LOG("stopped by %s", strerror(err));
	/* The regions outlive the child; the same user still cannot add one ... */
	got = fill_share_as(_metadata, self->fd, p[0], 1, 1, &err);
	EXPECT_EQ(0, got);
	EXPECT_EQ(ENOSPC, err);
	/* ... another user can. */
	got = fill_share_as(_metadata, self->fd, p[0], 1, 2, &err);
	EXPECT_EQ(1, got);
	EXPECT_EQ(0, err);
	EXPECT_COUNTS(max + 1, max + 1);
	/* Closing the file releases them all and gives the shares back. */
	EXPECT_EQ(0, close(self->fd));
	self->fd = open_dev();
	ASSERT_LE(0, self->fd);
	EXPECT_COUNTS(0, 0);
	got = fill_share_as(_metadata, self->fd, p[0], 1, 1, &err);
	EXPECT_EQ(1, got);
	EXPECT_EQ(0, close(self->fd));
	self->fd = open_dev();
	ASSERT_LE(0, self->fd);
	close(p[0]);
	close(p[1]);
	out_fd = -1;
}

/* ---- Lifetime: regions die with the file ----------------------------------- */

/* Registers a mix of regions on fd; returns the pages pinned, 0 on failure. */
static __u64 register_mix(int fd, char *buf, size_t ps, int *nregions)
{
	struct { size_t off, len; __u32 access; } mix[] = {
		{ 0, 1, ACC_R },
		{ 0, 16 * ps, ACC_RW },
		{ 3, 7 * ps, ACC_W },
		{ 8 * ps, 8 * ps, ACC_RW },
		{ 100 * ps, 156 * ps, ACC_RW },
		{ 0, 256 * ps, ACC_R },
	};
	__u64 pages = 0;
	__u64 key;
	size_t i;

	for (i = 0; i < sizeof(mix) / sizeof(mix[0]); i++) {
		if (zn_reg(fd, buf + mix[i].off, mix[i].len, mix[i].access, &key))
			return 0;
		pages += span_pages(buf + mix[i].off, mix[i].len);
	}
	*nregions = (int)i;
	return pages;
}

TEST_F(mr, close_releases_every_region)
{
	char *buf = map_populated(256 * self->ps);
	int fd2 = open_dev(), n = 0;
	__u64 pages;

	ASSERT_NE(NULL, buf);
	ASSERT_LE(0, fd2);
	pages = register_mix(fd2, buf, self->ps, &n);
	ASSERT_NE(0ull, pages) TH_LOG("MR_REG failed: %s", strerror(errno));
	EXPECT_COUNTS(n, pages);
	EXPECT_EQ(0, close(fd2));
	EXPECT_COUNTS(0, 0);
	/* A new open starts with nothing. */
	fd2 = open_dev();
	ASSERT_LE(0, fd2);
	EXPECT_COUNTS(0, 0);
	close(fd2);
	munmap(buf, 256 * self->ps);
}

/* Only the last reference to the file releases: a child still holds it. */
TEST_F(mr, release_waits_for_the_last_reference)
{
	char *buf = map_populated(256 * self->ps);
	int fd2 = open_dev(), n = 0, to_child[2], status;
	char go = 'g';
	__u64 pages;
	pid_t child;

	ASSERT_NE(NULL, buf);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, pipe(to_child));
	pages = register_mix(fd2, buf, self->ps, &n);
	ASSERT_NE(0ull, pages);
	child = fork();
	ASSERT_LE(0, child);
	if (child == 0) {
		close(to_child[1]);
		read_full(to_child[0], &go, 1);
		_exit(0);	/* fd2 goes with the child */
	}
	close(to_child[0]);
	EXPECT_EQ(0, close(fd2));
	EXPECT_COUNTS(n, pages);
	EXPECT_EQ(1, write(to_child[1], &go, 1));
	ASSERT_EQ(child, waitpid(child, &status, 0));
	EXPECT_COUNTS(0, 0);
	munmap(buf, 256 * self->ps);
}

/*
 * A child registers a mix of regions on its own file, never closes it, and
 * either exits or is killed with SIGKILL while holding them.
 */
static void child_registers_then(struct __test_metadata *_metadata,
				 FIXTURE_DATA(mr) *self, int kill_it)
{
	struct { __u64 pages; int n; } held = { 0, 0 };
	int ready[2], to_child[2], status;
	pid_t child;
	char go = 'g';

	ASSERT_EQ(0, pipe(ready));
	ASSERT_EQ(0, pipe(to_child));
	child = fork();
	ASSERT_LE(0, child);
	if (child == 0) {
		char *buf = map_populated(4 * MiB);
		int fd = open_dev();

		close(to_child[1]);
		if (!buf || fd < 0)
			_exit(10);
		held.pages = register_mix(fd, buf, page_size(), &held.n);
		if (!held.pages || zn_reg(fd, buf, 4 * MiB, ACC_RW, NULL))
			_exit(11);
		held.pages += 4 * MiB / page_size();
		held.n++;
		if (write(ready[1], &held, sizeof(held)) != sizeof(held))
			_exit(12);
		/* Wait for the parent to look (or to kill us), then exit. */
		read_full(to_child[0], &go, 1);
		_exit(0);
	}
	close(ready[1]);
	close(to_child[0]);
	if (read_full(ready[0], &held, sizeof(held)) == 0) {
		EXPECT_COUNTS(held.n, held.pages);
		if (kill_it)
			EXPECT_EQ(0, kill(child, SIGKILL));
	} else {
		TH_LOG("the child did not register");
	}
	EXPECT_EQ(1, write(to_child[1], &go, 1));
	ASSERT_EQ(child, waitpid(child, &status, 0));
	if (kill_it) {
		EXPECT_TRUE(WIFSIGNALED(status));
	} else {
		EXPECT_TRUE(WIFEXITED(status));
		EXPECT_EQ(0, WEXITSTATUS(status));
	}
	EXPECT_COUNTS(0, 0);
}

TEST_F(mr, exit_releases_every_region)
{
	child_registers_then(_metadata, self, 0);
}

TEST_F(mr, kill_releases_every_region)
{
	child_registers_then(_metadata, self, 1);
}

/* SIGKILL at arbitrary points of registering and deregistering leaks nothing. */
TEST_F_TIMEOUT(mr, kill_during_registration, 120)
{
	int round, status;

	for (round = 0; round < 8; round++) {
		struct timespec ts = { 0, (round + 1) * 37 * 1000 * 1000L };
		pid_t child = fork();

		ASSERT_LE(0, child);
		if (child == 0) {
			char *buf = map_populated(16 * MiB);
			int fd = open_dev();
			__u64 key, key2;

			if (!buf || fd < 0)
				_exit(10);
			/* At most two regions at a time, the last still registered. */
			for (;;) {
				if (zn_reg(fd, buf, 16 * MiB, ACC_RW, &key))
					_exit(11);
				if (zn_reg(fd, buf + 1, 4 * MiB, ACC_R, &key2) == 0)
					zn_dereg(fd, key2);
				zn_dereg(fd, key);
			}
		}
		nanosleep(&ts, NULL);
		EXPECT_EQ(0, kill(child, SIGKILL));
		ASSERT_EQ(child, waitpid(child, &status, 0));
		EXPECT_COUNTS(0, 0);
	}
}

/* ---- MR Table capacity ----------------------------------------------------- */

/*
 * Filling the MR Table gives ENOSPC, also to a user who holds nothing;
 * freeing one entry makes room again. The table is filled by several users,
 * each within its share.
 */
TEST_F_TIMEOUT(mr, mr_table_full_is_enospc, 600)
{
	__u32 left = self->base.mr_capacity - self->base.mr_in_use;
	__u32 max = self->base.mr_user_max ? self->base.mr_user_max : left;
	char *buf = map_populated(self->ps);
	int p[2], got, err, users = 0;
	__u64 key;

	ASSERT_NE(NULL, buf);
	if (self->base.mr_capacity > 65536)
		SKIP(return, "MR Table of %u entries is too big to fill here",
		     self->base.mr_capacity);
	ASSERT_LT(1u, left);
	ASSERT_EQ(0, pipe(p));
	out_fd = p[1];
	/* Users 61001, 61002, ... take all but one entry, each at most its share. */
	while (left > 1) {
		int n = (int)(left - 1 < max ? left - 1 : max);

		got = fill_share_as(_metadata, self->fd, p[0], n, 1 + users++, &err);
		ASSERT_EQ(n, got) TH_LOG("user %d stopped after %d: %s", users, got, strerror(err));
		left -= (__u32)got;
	}
	/* Root takes the last one. */
	ASSERT_EQ(0, zn_reg(self->fd, buf, 1, ACC_RW, &key));
	EXPECT_COUNTS(self->base.mr_capacity - self->base.mr_in_use,
		      self->base.mr_capacity - self->base.mr_in_use);
	/* Full: a user holding nothing gets ENOSPC, and so does root. */
	got = fill_share_as(_metadata, self->fd, p[0], 1, 1 + users, &err);
	EXPECT_EQ(0, got);
	EXPECT_EQ(ENOSPC, err) TH_LOG("%s", strerror(err));
	EXPECT_EQ(ENOSPC, zn_reg(self->fd, buf, 1, ACC_RW, NULL));
	/* One entry freed: room again. */
	EXPECT_EQ(0, zn_dereg(self->fd, key));
	got = fill_share_as(_metadata, self->fd, p[0], 1, 1 + users, &err);
	EXPECT_EQ(1, got);
	EXPECT_EQ(0, close(self->fd));	/* close releases them all, fast */
	self->fd = open_dev();
	ASSERT_LE(0, self->fd);
	EXPECT_COUNTS(0, 0);
	close(p[0]);
	close(p[1]);
	out_fd = -1;
	munmap(buf, self->ps);
}

/* Last (tests run in order): nothing any test above did is still registered. */
TEST_F(mr, no_region_left_behind)
{
	long long pins = pins_settle(initial_pins);

	EXPECT_EQ(0u, self->base.mr_in_use);
	EXPECT_EQ(0ull, self->base.pinned_pages);
	/* And the kernel holds no pin that it did not hold before the tests. */
	EXPECT_GE(initial_pins, pins)
		TH_LOG("outstanding FOLL_PIN pins: %lld before the tests, %lld after",
		       initial_pins, pins);
}

TEST_HARNESS_MAIN
