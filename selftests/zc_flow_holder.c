// SPDX-License-Identifier: GPL-2.0
/*
 * Helper of selftests/nic_lost.sh: holds an attached flow on NIC 0 and
 * detaches it while the NIC is being unbound, reporting what the detach
 * completed (issue 32, finding 6: a detach must report the NIC's
 * confirmation only once the NIC, or its completed reset, gave it).
 *
 *   zc_flow_holder
 *       connects over the two ports (ZN_NS_A, ZN_NS_B, ZN_ADDR_B as
 *       zc_env.sh exports them), attaches the client socket (message
 *       mode) with one 64 KiB receive segment posted, prints "ready", then
 *       waits for one line on stdin:
 *         detach-at-unbind   waits until NIC 0 is withdrawn (QUERY fails
 *                            with ENODEV: an unbind started; at most 60 s),
 *                            detaches the flow and prints
 *                            "detached status=S recvs=N": S the DETACHED
 *                            event's status (0, or the errno value), N the
 *                            receive completions posted with it
 *       and exits 0.
 *
 * Every failure prints "error: ..." and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <linux/zeronic.h>

#include "zc_lib.h"

static int fail(const char *what, int err)
{
	printf("error: %s: %s\n", what, strerror(err));
	fflush(stdout);
	return 1;
}

int main(void)
{
	struct zeronic_query q;
	struct zeronic_cqe e;
	char line[64], *buf;
	int zfd, cli, srv, r, recvs = 0, status = -1;
	size_t map_size;
	__u32 cq = 0, flow = 0;
	__u64 key = 0;
	void *map;

	zfd = zopen();
	if (zfd < 0)
		return fail("open", errno);
	if (connect_pair(&cli, &srv))
		return fail("connect over the ports", errno);
	r = cq_create(zfd, 16, -1, &cq, &map, &map_size);
	if (r)
		return fail("CQ_CREATE", r);
	buf = mmap(NULL, 64 << 10, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (buf == MAP_FAILED)
		return fail("mmap", errno);
	r = reg(zfd, buf, 64 << 10, ZERONIC_ACCESS_LOCAL_WRITE, &key);
	if (r)
		return fail("MR_REG", r);
	r = attach(zfd, cli, cq, ZERONIC_RX_MESSAGE, 0, 0, &flow);
	if (r)
		return fail("FLOW_ATTACH", r);
	r = post1(zfd, flow, ZERONIC_WR_RECV, key, 0, 64 << 10);
	if (r)
		return fail("POST", r);
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin) || strcmp(line, "detach-at-unbind\n"))
		return fail("stdin", EINVAL);
	for (int i = 0;; i++) {
		if (query(zfd, &q) == ENODEV)
			break;
		if (i == 60000)
			return fail("NIC 0 never withdrawn", ETIMEDOUT);
		usleep(1000);
	}
	r = detach(zfd, flow);
	if (r)
		return fail("FLOW_DETACH", r);
	while (!cq_take(map, &e, 100)) {
		if (e.opcode == ZERONIC_CQE_RECV)
			recvs++;
		if (e.opcode == ZERONIC_CQE_FLOW && (e.flags & ZERONIC_CQE_F_DETACHED))
			status = e.status;
	}
	printf("detached status=%d recvs=%d\n", status, recvs);
	fflush(stdout);
	return 0;
}
