/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * libzeronic: the C ABI of the ZeroNIC provider library (lib/zeronic-c).
 *
 * A safe wrapper of /dev/zeronic (docs/uapi.md): open a NIC, register
 * memory, create completion queues, attach established TCP sockets as
 * flows, post sends and receives, reap completions without system calls or
 * sleep on the CQ's eventfd, and a registration cache that is never stale.
 *
 * Conventions: every int-returning call returns 0 (or a count) on success
 * and -errno on failure, the errnos of docs/uapi.md. Handles are opaque and
 * freed by their destroy call. Linking libzeronic.so (or preloading it)
 * installs its memory hooks (munmap, mmap, mmap64, mremap, madvise, brk,
 * sbrk, free, realloc), which keep zn_cache_* from handing out regions of
 * pages no longer mapped at their address (docs/shim.md).
 *
 * Link: -lzeronic (target/release/libzeronic.so or .a; the static library
 * also needs -lpthread -ldl -lm). tests/header.rs checks this file against
 * the library's definitions.
 */
#ifndef LIBZERONIC_H
#define LIBZERONIC_H

#include <stddef.h>
#include <stdint.h>
#include <linux/zeronic.h>

#ifdef __cplusplus
extern "C" {
#endif

struct zn_device;
struct zn_mr;
struct zn_cq;
struct zn_flow;
struct zn_cache;

/* A lease on a cached region (zn_cache_get). */
struct zn_lease {
	uint64_t key;		/* the region's key */
	uint64_t offset;	/* offset of the asked address in the region */
	uint64_t start;		/* the region's start, for zn_cache_put */
};

/* Counters of a registration cache. */
struct zn_cache_stats {
	uint64_t hits;		/* zn_cache_get answered from the cache */
	uint64_t misses;	/* zn_cache_get that registered */
	uint64_t invalidations;	/* regions made stale by the memory hooks */
	uint64_t evictions;	/* regions deregistered to stay within the bound */
	uint64_t entries;	/* regions registered now */
	uint64_t bytes;		/* bytes they cover */
};

const char *zn_version(void);

/* Device: an open /dev/zeronic for one NIC index. */
int zn_open(unsigned int nic, struct zn_device **out);
void zn_close(struct zn_device *dev);
int zn_device_fd(const struct zn_device *dev);
int zn_query(const struct zn_device *dev, struct zeronic_query *out);

/* Memory regions. access: ZERONIC_ACCESS_LOCAL_READ and/or _WRITE. */
int zn_reg_mr(const struct zn_device *dev, void *addr, size_t len,
	      unsigned int access, struct zn_mr **out);
uint64_t zn_mr_key(const struct zn_mr *mr);
/* Frees mr, except on -EBUSY (posted work still uses it). */
int zn_dereg_mr(struct zn_mr *mr);

/* Completion queues. */
int zn_cq_create(const struct zn_device *dev, unsigned int entries, struct zn_cq **out);
void zn_cq_destroy(struct zn_cq *cq);
/* The eventfd to poll()/epoll: readable once an entry came to an armed CQ. */
int zn_cq_fd(const struct zn_cq *cq);
/* 1: armed and still empty (sleep on zn_cq_fd); 0: entries are waiting. */
int zn_cq_arm(const struct zn_cq *cq);
/* Pops up to max entries; returns how many (0: none). */
int zn_cq_poll(const struct zn_cq *cq, struct zeronic_cqe *out, int max);
/* 1: an entry is there; 0: timeout (timeout_ms < 0: none), never early; -EINTR. */
int zn_cq_wait(const struct zn_cq *cq, int timeout_ms);

/* Flows. rx_mode ZERONIC_RX_MESSAGE (ring arguments 0) or ZERONIC_RX_STREAM. */
int zn_flow_attach(const struct zn_device *dev, int sockfd, const struct zn_cq *cq,
		   unsigned int rx_mode, uint64_t ring_key, uint64_t ring_offset,
		   uint64_t ring_size, struct zn_flow **out);
uint32_t zn_flow_id(const struct zn_flow *flow);
/* Detaches and frees the handle. */
int zn_flow_detach(struct zn_flow *flow);
/* Posts count requests; returns how many were accepted (fewer: EAGAIN). */
int zn_post(const struct zn_flow *flow, const struct zeronic_wr *wrs, unsigned int count);
/* 1: posted; 0: no free CQ entry now (reap, retry); -errno. */
int zn_post_send(const struct zn_flow *flow, uint64_t wr_id, uint64_t key,
		 uint64_t offset, uint32_t len);
int zn_post_recv(const struct zn_flow *flow, uint64_t wr_id, uint64_t key,
		 uint64_t offset, uint32_t len);
int zn_stream_consume(const struct zn_flow *flow, uint64_t stream_off);
int zn_flow_query(const struct zn_flow *flow, struct zeronic_flow_query *out);

/* Registration cache. */
int zn_cache_create(const struct zn_device *dev, unsigned int max_entries,
		    struct zn_cache **out);
int zn_cache_get(const struct zn_cache *cache, const void *addr, size_t len,
		 unsigned int access, struct zn_lease *lease);
void zn_cache_put(const struct zn_cache *cache, const struct zn_lease *lease);
int zn_cache_stats(const struct zn_cache *cache, struct zn_cache_stats *out);
void zn_cache_destroy(struct zn_cache *cache);

#ifdef __cplusplus
}
#endif

#endif /* LIBZERONIC_H */
