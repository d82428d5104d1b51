// SPDX-License-Identifier: GPL-2.0
/*
 * Helper of selftests/mr_lifetime.sh: holds memory registrations on
 * /dev/zeronic NIC 0 while the script kills it, unloads the module or
 * unbinds the NIC, and reports what the ioctls return afterwards; and of
 * selftests/nic_faults.sh (one registration with "reg").
 *
 *   mr_holder query
 *       print NIC 0's counters: "mr_in_use=N pinned_pages=N num_nics=N
 *       held_pages=N flows_in_use=N",
 *       or the errno name (e.g. "ENODEV") and exit 1.
 *   mr_holder hold MIB REGIONS
 *       register MIB MiB of anonymous memory as REGIONS disjoint regions
 *       (LOCAL_READ | LOCAL_WRITE), print "ready regions=N pages=N", then
 *       serve one command per line of stdin, answering one line each:
 *         dereg   deregister every region: "dereg R..." (R = 0 or errno name)
 *         reg     register one more page: "reg R"
 *         query   "query R" and, on success, the counters
 *         close   close the file: "closed"
 *       and exit 0 at end of input.
 *   mr_holder churn MIB
 *       register and deregister MIB MiB (and a smaller overlapping region)
 *       in a loop until killed; prints "ready" after the first success.
 *   mr_holder reg MIB
 *       register MIB MiB once and deregister it: "reg R" (R = 0 or the
 *       errno name of MR_REG, e.g. EIO); exit 0 only if it registered.
 *
 * Every failure to set up prints "error: ..." and exits 1, so a script
 * waiting for "ready" never hangs.
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

#define MiB (1024UL * 1024UL)

static const char *err_name(int err)
{
	static char buf[16];
	const char *name = err ? strerrorname_np(err) : "0";

	if (name)
		return name;
	snprintf(buf, sizeof(buf), "E%d", err);
	return buf;
}

static int reg(int fd, void *addr, __u64 len, __u64 *key)
{
	struct zeronic_mr_reg r = {
		.addr = (uintptr_t)addr,
		.length = len,
		.access = ZERONIC_ACCESS_LOCAL_READ | ZERONIC_ACCESS_LOCAL_WRITE,
	};

	if (ioctl(fd, ZERONIC_IOC_MR_REG, &r))
		return errno;
	*key = r.key;
	return 0;
}

static int dereg(int fd, __u64 key)
{
	struct zeronic_mr_dereg d = { .key = key };

	return ioctl(fd, ZERONIC_IOC_MR_DEREG, &d) ? errno : 0;
}

static int query(int fd, struct zeronic_query *q)
{
	memset(q, 0, sizeof(*q));
	return ioctl(fd, ZERONIC_IOC_QUERY, q) ? errno : 0;
}

static void print_counters(const struct zeronic_query *q)
{
	printf("mr_in_use=%u pinned_pages=%llu num_nics=%u held_pages=%llu flows_in_use=%u",
	       q->mr_in_use, (unsigned long long)q->pinned_pages, q->num_nics,
	       (unsigned long long)q->held_pages, q->flows_in_use);
}

static int open_dev(void)
{
	int fd = open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		printf("error: open %s: %s\n", ZERONIC_DEVICE_PATH, strerror(errno));
		exit(1);
	}
	return fd;
}

static char *map_mib(unsigned long mib)
{
	char *p = mmap(NULL, mib * MiB, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (p == MAP_FAILED) {
		printf("error: mmap %lu MiB: %s\n", mib, strerror(errno));
		exit(1);
	}
	memset(p, 0xa5, mib * MiB);
	return p;
}

static int cmd_query(void)
{
	struct zeronic_query q;
	int fd = open_dev(), err = query(fd, &q);

	if (err) {
		printf("%s\n", err_name(err));
		return 1;
	}
	print_counters(&q);
	printf("\n");
	return 0;
}

static int cmd_hold(unsigned long mib, unsigned long n)
{
	size_t ps = (size_t)sysconf(_SC_PAGESIZE), slice;
	char *buf = map_mib(mib + 1), line[64];
	int fd = open_dev(), err;
	__u64 *keys, extra = 0;
	unsigned long i;

	if (!n || n * ps > mib * MiB) {
		printf("error: bad region count %lu\n", n);
		return 1;
	}
	slice = mib * MiB / n / ps * ps;
	keys = calloc(n, sizeof(*keys));
	if (!keys)
		return 1;
	for (i = 0; i < n; i++) {
		err = reg(fd, buf + i * slice, slice, &keys[i]);
		if (err) {
			printf("error: MR_REG %lu of %lu: %s\n", i + 1, n, err_name(err));
			return 1;
		}
	}
	printf("ready regions=%lu pages=%lu\n", n, n * (slice / ps));

	while (fgets(line, sizeof(line), stdin)) {
		if (!strcmp(line, "dereg\n")) {
			printf("dereg");
			for (i = 0; i < n; i++)
				printf(" %s", err_name(dereg(fd, keys[i])));
			if (extra)
				printf(" %s", err_name(dereg(fd, extra)));
			printf("\n");
		} else if (!strcmp(line, "reg\n")) {
			/* The page after the held slices: never registered yet. */
			err = reg(fd, buf + mib * MiB, ps, &extra);
			if (err)
				extra = 0;
			printf("reg %s\n", err_name(err));
		} else if (!strcmp(line, "query\n")) {
			struct zeronic_query q;

			err = query(fd, &q);
			printf("query %s", err_name(err));
			if (!err) {
				printf(" ");
				print_counters(&q);
			}
			printf("\n");
		} else if (!strcmp(line, "close\n")) {
			printf(close(fd) ? "close %s\n" : "closed\n", err_name(errno));
		} else {
			printf("error: unknown command %s", line);
		}
	}
	return 0;
}

static int cmd_churn(unsigned long mib)
{
	char *buf = map_mib(mib);
	int fd = open_dev(), err, ready = 0;
	__u64 k1 = 0, k2 = 0;

	for (;;) {
		err = reg(fd, buf, mib * MiB, &k1);
		if (err) {
			printf("error: MR_REG: %s\n", err_name(err));
			return 1;
		}
		if (!ready) {
			printf("ready\n");
			ready = 1;
		}
		if (!reg(fd, buf + 1, mib * MiB / 2, &k2))
			dereg(fd, k2);
		dereg(fd, k1);
	}
}

static int cmd_reg(unsigned long mib)
{
	char *buf = map_mib(mib);
	int fd = open_dev(), err, derr;
	__u64 key = 0;

	err = reg(fd, buf, mib * MiB, &key);
	printf("reg %s\n", err_name(err));
	if (err)
		return 1;
	derr = dereg(fd, key);
	if (derr)
		printf("error: MR_DEREG: %s\n", err_name(derr));
	return derr ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 2 && !strcmp(argv[1], "query"))
		return cmd_query();
	if (argc == 4 && !strcmp(argv[1], "hold"))
		return cmd_hold(strtoul(argv[2], NULL, 0), strtoul(argv[3], NULL, 0));
	if (argc == 3 && !strcmp(argv[1], "churn"))
		return cmd_churn(strtoul(argv[2], NULL, 0));
	if (argc == 3 && !strcmp(argv[1], "reg"))
		return cmd_reg(strtoul(argv[2], NULL, 0));
	fprintf(stderr, "usage: %s query | hold MIB REGIONS | churn MIB | reg MIB\n", argv[0]);
	return 2;
}
