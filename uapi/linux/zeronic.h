/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR MIT */
/*
 * ZeroNIC userspace ABI: /dev/zeronic.
 *
 * This header is the one contract between the zeronic kernel module and
 * userspace (the provider library binds it with bindgen). Rules:
 *  - Every ioctl argument is a fixed-layout struct with explicit padding that
 *    userspace must zero; the kernel rejects non-zero input reserved fields
 *    with EINVAL so they can gain meaning later. Output-only fields
 *    (including zeronic_query's reserved ones) are ignored on input.
 *  - Unknown ioctl numbers fail with ENOTTY.
 *  - Compatible additions (new ioctls, meaning given to reserved fields)
 *    bump ZERONIC_UAPI_VERSION; incompatible changes are not made: a call
 *    whose struct changes gets a new number and the old one is retired
 *    (ENOTTY), never reused.
 *
 * docs/uapi.md explains each call, its errors and the lifetime of the objects
 * it creates.
 */
#ifndef _UAPI_LINUX_ZERONIC_H
#define _UAPI_LINUX_ZERONIC_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* ABI version implemented by the driver; shown in /proc/<pid>/fdinfo. */
#define ZERONIC_UAPI_VERSION 3

/* Path of the control device. Mode 0666: limits are per user, not per file. */
#define ZERONIC_DEVICE_PATH "/dev/zeronic"

/* ioctl type byte of every ZeroNIC ioctl (unassigned in 7.3 ioctl-number.rst). */
#define ZERONIC_IOCTL_TYPE 0xDA

/* ZERONIC_IOC_QUERY: what a NIC is and what it allows. */

/* Hardware capabilities (zeronic_query.caps), the NIC's REG_CAPS bits. */
#define ZERONIC_CAP_RX_SPLIT	(1U << 0) /* header/payload split + placement */
#define ZERONIC_CAP_TX_MERGE	(1U << 1) /* header from host + payload from an MR */
#define ZERONIC_CAP_TSO		(1U << 2) /* segmentation of merge sends */
#define ZERONIC_CAP_TX_CSUM	(1U << 3) /* checksum insertion on plain TX */
#define ZERONIC_CAP_RX_CSUM	(1U << 4) /* TCP checksum verification on RX */
#define ZERONIC_CAP_RX_COALESCE	(1U << 5) /* coalesced header-queue entries */
#define ZERONIC_CAP_RX_RING	(1U << 6) /* ring-buffer placement target */

#define ZERONIC_MAX_PORTS 2

struct zeronic_port_info {
	__u32 ifindex;		/* net_device of the port (zn<N>), 0 if none */
	__u32 mtu;		/* current MTU of the net_device */
	__u32 link;		/* 1: carrier up */
	__u32 reserved;
};

struct zeronic_query {
	__u32 nic;		/* in: NIC index, 0 .. num_nics - 1 */
	__u32 num_nics;		/* out: NICs bound to the driver */
	__u32 hw_version;	/* out: major << 16 | minor */
	__u32 caps;		/* out: ZERONIC_CAP_* */
	__u32 num_ports;	/* out: 1 or 2 */
	__u32 max_mtu;		/* out: largest MTU a port accepts */
	__u32 mr_capacity;	/* out: MR Table entries of the NIC */
	__u32 mr_in_use;	/* out: MR Table entries in use (all files; per NIC, from 0 at bind) */
	__u64 mr_max_bytes;	/* out: largest region one registration may cover */
	__u64 pinned_pages;	/* out: pages pinned by registrations (all files; per NIC, from 0 at bind) */
	__u32 flow_capacity;	/* out: Flow Table entries */
	__u32 ms_per_flow;	/* out: receive segments per flow */
	struct zeronic_port_info ports[ZERONIC_MAX_PORTS];	/* out */
	/* since version 2: the calling user's share of this NIC */
	__u32 mr_user_max;	/* out: MR Table entries one user may hold */
	__u32 mr_user_in_use;	/* out: entries the calling user holds (all files) */
	__u64 user_locked_pages;	/* out: pages charged to the calling user's locked_vm (all NICs, io_uring and AF_XDP included) */
	__u64 held_pages;	/* out: pages of commands the NIC never completed, pinned until it is reset (in pinned_pages) */
	/* since version 3 */
	__u32 flows_in_use;	/* out: Flow Table entries in use (all files) */
	__u32 reserved;		/* out: zero */
};

/* ZERONIC_IOC_MR_REG: register [addr, addr + length) of the caller's memory. */

#define ZERONIC_ACCESS_LOCAL_READ	(1U << 0) /* NIC may read (TX merge) */
#define ZERONIC_ACCESS_LOCAL_WRITE	(1U << 1) /* NIC may write (RX placement) */

struct zeronic_mr_reg {
	__u64 addr;		/* in: start, any alignment */
	__u64 length;		/* in: bytes, 1 .. mr_max_bytes */
	__u32 nic;		/* in: NIC index */
	__u32 access;		/* in: nonzero set of ZERONIC_ACCESS_* */
	__u64 key;		/* out: the region's key, nonzero, never repeated on the NIC */
};

/* ZERONIC_IOC_MR_DEREG: invalidate and release a region of this file. */
struct zeronic_mr_dereg {
	__u64 key;		/* in: key from ZERONIC_IOC_MR_REG on this file */
	__u32 nic;		/* in: the NIC the region was registered on */
	__u32 reserved;		/* in: zero */
};

#define ZERONIC_IOC_QUERY	_IOWR(ZERONIC_IOCTL_TYPE, 0x00, struct zeronic_query)
/* 0x01 and 0x02 were MR_REG and MR_DEREG with 32-bit keys (version 1): retired. */
#define ZERONIC_IOC_MR_REG	_IOWR(ZERONIC_IOCTL_TYPE, 0x03, struct zeronic_mr_reg)
#define ZERONIC_IOC_MR_DEREG	_IOW(ZERONIC_IOCTL_TYPE, 0x04, struct zeronic_mr_dereg)

/*
 * Zero-copy transfers (version 3): completion queues, flows, work requests.
 *
 * A completion queue (CQ) is a ring of struct zeronic_cqe the application
 * maps (mmap of this file at the CQ's mmap_offset): one page holding
 * struct zeronic_cq_ring, then the entries. The kernel produces entries at
 * `tail`, the application consumes them and advances `head`. Every work
 * request reserves its completion when it is posted, so a CQ never
 * overflows: a post that finds no free entry fails with EAGAIN.
 */
#define ZERONIC_CQ_MIN_ENTRIES	8
#define ZERONIC_CQ_MAX_ENTRIES	65536

struct zeronic_cq_create {
	__u32 entries;		/* in: a power of two, MIN .. MAX_ENTRIES */
	__s32 eventfd;		/* in: eventfd signalled while the CQ is armed, or -1 */
	__u32 cq;		/* out: CQ id, unique within the file */
	__u32 reserved;		/* in: zero */
	__u64 mmap_offset;	/* out: offset argument of mmap() */
	__u64 mmap_size;	/* out: length argument of mmap() */
};

struct zeronic_cq_destroy {
	__u32 cq;		/* in */
	__u32 reserved;		/* in: zero */
};

/* The first page of a CQ mapping. */
struct zeronic_cq_ring {
	__u32 head;		/* app: entries consumed (free-running) */
	__u32 tail;		/* kernel: entries produced (free-running) */
	__u32 mask;		/* kernel: entries - 1 */
	__u32 flags;		/* ZERONIC_CQ_ARMED: set by the app, cleared by the kernel when it signals */
	__u32 entries_offset;	/* kernel: byte offset of entry 0 in the mapping */
	__u32 reserved[11];
};

#define ZERONIC_CQ_ARMED	(1U << 0)

struct zeronic_cqe {
	__u64 wr_id;		/* the work request's wr_id; 0 for flow events */
	__u64 stream_off;	/* RECV, STREAM_DATA: stream offset of the first byte; FLOW: end of the stream received */
	__u32 len;		/* bytes: RECV filled, STREAM_DATA newly in the ring, SEND sent */
	__u32 flow;		/* flow id */
	__u16 opcode;		/* ZERONIC_CQE_* */
	__u16 status;		/* 0, or an errno value */
	__u32 flags;		/* ZERONIC_CQE_F_* */
};

#define ZERONIC_CQE_SEND	1	/* a send: all bytes ACKed (status 0) or not (status set) */
#define ZERONIC_CQE_RECV	2	/* a message-mode receive segment */
#define ZERONIC_CQE_STREAM_DATA	3	/* stream mode: new bytes in the receive ring */
#define ZERONIC_CQE_FLOW	4	/* a flow event: EOF, reset, detached (see flags) */

#define ZERONIC_CQE_F_EOF	(1U << 0) /* the peer's FIN: no byte follows stream_off + len */
#define ZERONIC_CQE_F_COPIED	(1U << 1) /* some bytes were copied by the CPU, not placed by the NIC */
#define ZERONIC_CQE_F_DETACHED	(1U << 2) /* the flow is detached; last receive-side entry of the flow (status EIO: the NIC did not confirm its removal) */

/* ZERONIC_IOC_FLOW_ATTACH: move an established TCP socket onto the NIC. */
#define ZERONIC_RX_MESSAGE	1 /* receive into posted segments, each completed when full */
#define ZERONIC_RX_STREAM	2 /* receive into a ring the application consumes */

struct zeronic_flow_attach {
	__s32 sockfd;		/* in: an established IPv4 TCP socket routed out of a ZeroNIC port */
	__u32 cq;		/* in: CQ of this file for the flow's completions */
	__u32 rx_mode;		/* in: ZERONIC_RX_* */
	__u32 reserved0;	/* in: zero */
	__u64 ring_key;		/* in: RX_STREAM: region of the ring (LOCAL_WRITE) on the flow's NIC */
	__u64 ring_offset;	/* in: RX_STREAM: ring start in the region */
	__u64 ring_size;	/* in: RX_STREAM: ring bytes, a power of two >= 4096 */
	__u32 flow;		/* out: flow id, unique within the file */
	__u32 nic;		/* out: NIC index the flow runs on */
	__u32 port;		/* out: port of that NIC */
	__u32 reserved1;	/* in: zero */
};

struct zeronic_flow_detach {
	__u32 flow;		/* in */
	__u32 reserved;		/* in: zero */
};

/* ZERONIC_IOC_POST: post work requests to a flow. */
#define ZERONIC_WR_SEND		1 /* send len bytes of the region at offset */
#define ZERONIC_WR_RECV		2 /* message mode: a receive segment of len bytes */

struct zeronic_wr {
	__u64 wr_id;		/* returned in the completion */
	__u64 key;		/* region on the flow's NIC, registered through this file */
	__u64 offset;		/* in the region */
	__u32 len;		/* bytes, nonzero */
	__u16 opcode;		/* ZERONIC_WR_* */
	__u16 flags;		/* zero */
};

struct zeronic_post {
	__u32 flow;		/* in */
	__u32 count;		/* in: work requests at wrs, 1 .. 256 */
	__u64 wrs;		/* in: user pointer to count struct zeronic_wr */
	__u32 posted;		/* out: requests accepted, in order; the first refused one's errno is returned */
	__u32 reserved;		/* in: zero */
};

/* ZERONIC_IOC_STREAM_CONSUME: stream mode: ring bytes below stream_off are consumed. */
struct zeronic_stream_consume {
	__u32 flow;		/* in */
	__u32 reserved;		/* in: zero */
	__u64 stream_off;	/* in: consumed up to here (never beyond what a STREAM_DATA entry reported) */
};

/* ZERONIC_IOC_FLOW_QUERY: state and counters of a flow. */
#define ZERONIC_FLOW_ATTACHED	1
#define ZERONIC_FLOW_EOF	2 /* the peer's FIN was received */
#define ZERONIC_FLOW_RESET	3 /* the connection died (reset, timeout) */
#define ZERONIC_FLOW_DETACHED	4

struct zeronic_flow_query {
	__u32 flow;		/* in */
	__u32 state;		/* out: ZERONIC_FLOW_* */
	__u64 rx_placed_bytes;	/* out: received bytes the NIC placed */
	__u64 rx_copied_bytes;	/* out: received bytes the CPU copied (fallback, queued before attach) */
	__u64 tx_merged_bytes;	/* out: sent bytes the NIC read from the region (retransmissions included) */
	__u64 tx_copied_bytes;	/* out: sent bytes the CPU copied */
	__u64 rx_stream_off;	/* out: bytes delivered in order so far */
	__u64 tx_stream_off;	/* out: bytes ACKed so far */
	__u32 rx_posted;	/* out: receive segments posted and not completed */
	__u32 tx_posted;	/* out: sends posted and not completed */
	__u64 reserved[2];	/* out: zero */
};

#define ZERONIC_IOC_CQ_CREATE	_IOWR(ZERONIC_IOCTL_TYPE, 0x10, struct zeronic_cq_create)
#define ZERONIC_IOC_CQ_DESTROY	_IOW(ZERONIC_IOCTL_TYPE, 0x11, struct zeronic_cq_destroy)
#define ZERONIC_IOC_FLOW_ATTACH	_IOWR(ZERONIC_IOCTL_TYPE, 0x12, struct zeronic_flow_attach)
#define ZERONIC_IOC_FLOW_DETACH	_IOW(ZERONIC_IOCTL_TYPE, 0x13, struct zeronic_flow_detach)
#define ZERONIC_IOC_POST	_IOWR(ZERONIC_IOCTL_TYPE, 0x14, struct zeronic_post)
#define ZERONIC_IOC_STREAM_CONSUME _IOW(ZERONIC_IOCTL_TYPE, 0x15, struct zeronic_stream_consume)
#define ZERONIC_IOC_FLOW_QUERY	_IOWR(ZERONIC_IOCTL_TYPE, 0x16, struct zeronic_flow_query)

/*
 * Errors (errno), common to all calls:
 *   ENOTTY  unknown ioctl number (including the retired 0x01 and 0x02)
 *   EFAULT  the argument pointer is not readable/writable
 *   EINVAL  an input reserved field is not zero
 *   ENODEV  no NIC with this index, or it was unbound (regions created
 *           before stay owned by the file and are released on close)
 * ZERONIC_IOC_MR_REG:
 *   EINVAL  length 0, addr + length overflows, access 0 or unknown bits
 *   E2BIG   length above mr_max_bytes
 *   EFAULT  part of the range is not mapped user memory (kernel addresses
 *           included), or is read-only while ZERONIC_ACCESS_LOCAL_WRITE
 *           was asked
 *   ENOMEM  the pages would take the calling user's locked_vm over
 *           RLIMIT_MEMLOCK (without CAP_IPC_LOCK), or out of memory
 *   ENOSPC  the NIC's MR Table is full, or the calling user already holds
 *           mr_user_max of its entries (without CAP_SYS_RESOURCE)
 *   EIO     the NIC did not complete the command (dead or fatal). Nothing
 *           was created; if the command reached the NIC, its pages stay
 *           pinned and charged until the NIC is reset (query.held_pages)
 * ZERONIC_IOC_MR_DEREG:
 *   ENOENT  no region with this key and NIC on this file (never
 *           registered, already deregistered, or registered through
 *           another file)
 *   EIO     the NIC did not confirm the invalidation (dead or fatal): the
 *           region is gone from the file, but its pages stay pinned and
 *           charged until the NIC is reset (query.held_pages)
 *   (MR_DEREG needs no NIC: after an unbind it still releases the region
 *   and returns 0.)
 *   EBUSY   work requests posted on a flow still use the region, or a
 *           stream-mode flow's ring lies in it and the flow is not
 *           detached (with the NIC's confirmation) yet (version 3)
 * ZERONIC_IOC_CQ_CREATE:
 *   EINVAL  entries not a power of two in MIN .. MAX_ENTRIES; reserved
 *   EBADF   eventfd is not an open descriptor of an eventfd (and not -1)
 *   ENOMEM  the CQ's pages would take the calling user's locked_vm over
 *           RLIMIT_MEMLOCK (without CAP_IPC_LOCK); out of memory
 *   ENOSPC  the file holds 1024 CQs
 * ZERONIC_IOC_CQ_DESTROY:
 *   ENOENT  no such CQ on this file
 *   EBUSY   a flow still reports to it
 * ZERONIC_IOC_FLOW_ATTACH (checked in this order: the argument, then the
 * socket and its route, then the ring on the flow's NIC, then the work;
 * docs/uapi.md lists the exact order):
 *   EINVAL  reserved fields, rx_mode, ring fields in RX_MESSAGE, ring_size
 *   ENOENT  no such CQ; RX_STREAM: no region with ring_key in this file
 *   EBADF   sockfd is not an open descriptor
 *   ENOTSOCK sockfd is not a socket
 *   EPROTONOSUPPORT not a TCP socket
 *   EBUSY   more than 16 attaches (of any process) in progress at once
 *   EEXIST  the socket is attached already (through any file), or has
 *           another upper-layer protocol (kTLS, sockmap)
 *   ENOTCONN the socket is not established (listening, connecting, closed)
 *   EAFNOSUPPORT neither an IPv4 nor an IPv6 socket, or an IPv6
 *           connection on a NIC without IPv6 (CAP_IPV6)
 *   EOPNOTSUPP TCP-MD5/AO or repair mode on the socket
 *   ENODEV  the socket's route does not go out of a ZeroNIC port (its device, not
 *           an interface index of the socket's namespace, is compared)
 *   EOPNOTSUPP an IPsec route, or that port's header/data split is off
 *           (ethtool -G <port> tcp-data-split off); flows attached before
 *           are left alone
 *   ENOENT  RX_STREAM: no region with ring_key on the flow's NIC
 *   EACCES  RX_STREAM: the region lacks ZERONIC_ACCESS_LOCAL_WRITE
 *   EINVAL  RX_STREAM: the ring lies beyond the region
 *   EAGAIN  the CQ has no free entries for the flow's events
 *   ENOSPC  the NIC's Flow Table is full
 *   EIO     the NIC did not complete the command
 *   ENOMEM  out of memory
 * ZERONIC_IOC_FLOW_DETACH, FLOW_QUERY, STREAM_CONSUME:
 *   ENOENT  no such flow on this file (detached flows are gone)
 * ZERONIC_IOC_POST (posted says how many were accepted; the errno is the
 * first refused request's):
 *   ENOENT  no such flow, or no region with the key on the flow's NIC in
 *           this file
 *   EINVAL  count 0 or above 256, opcode, flags, len 0, RECV on a stream
 *           flow
 *   EFAULT  wrs not readable
 *   EACCES  SEND from a region without LOCAL_READ, RECV into one without
 *           LOCAL_WRITE
 *   ERANGE  offset + len beyond the region
 *   EAGAIN  the CQ has no free entry, or the flow has MS_PER_FLOW receive
 *           segments posted
 *   EPIPE   the flow cannot send or receive any more (reset, detached, or
 *           SEND after shutdown)
 *   EIO     RECV: the NIC is broken (or being unbound); nothing was posted
 *   ENOMEM  out of memory
 * ZERONIC_IOC_STREAM_CONSUME:
 *   EINVAL  stream_off behind the ring's head or beyond the bytes reported
 *
 * Lifetime: a region belongs to the file that registered it. Closing the
 * last reference to the file (close, exit, kill) deregisters every region
 * left: the NIC's MR entry is invalidated first, then the pages are
 * unmapped and unpinned. Keys are only meaningful through that file.
 * Accounting: a region's pages are charged to the locked_vm of the user
 * who registered it (as io_uring and AF_XDP do) and to the registering
 * process's pinned_vm (VmPin), and uncharged from both when the pages are
 * unpinned, whoever holds the file by then.
 */

#endif /* _UAPI_LINUX_ZERONIC_H */
