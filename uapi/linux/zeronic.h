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
#define ZERONIC_UAPI_VERSION 2

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
	__u64 reserved[1];	/* out: zero */
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
 * Errors (errno), common to all calls:
 *   ENOTTY  unknown ioctl number (including the retired 0x01 and 0x02)
 *   EFAULT  the argument pointer is not readable/writable
 *   EINVAL  an input reserved field is not zero
 *   ENODEV  no NIC with this index, or it was unbound (regions created
 *           before stay owned by the file and are released on close)
 * ZERONIC_IOC_MR_REG:
 *   EINVAL  length 0, addr + length overflows, access 0 or unknown bits
 *   E2BIG   length above mr_max_bytes
 *   EFAULT  part of the range is not mapped, or is read-only while
 *           ZERONIC_ACCESS_LOCAL_WRITE was asked
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
