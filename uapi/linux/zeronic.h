/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR MIT */
/*
 * ZeroNIC userspace ABI: /dev/zeronic.
 *
 * This header is the one contract between the zeronic kernel module and
 * userspace (the provider library binds it with bindgen). Rules:
 *  - Every ioctl argument is a fixed-layout struct with explicit padding that
 *    userspace must zero; the kernel rejects non-zero reserved fields with
 *    EINVAL so they can gain meaning later.
 *  - Unknown ioctl numbers fail with ENOTTY.
 *  - Compatible additions bump ZERONIC_UAPI_VERSION's minor number only by
 *    adding new ioctls or using reserved fields; incompatible changes are not
 *    made.
 *
 * docs/uapi.md explains each call, its errors and the lifetime of the objects
 * it creates.
 */
#ifndef _UAPI_LINUX_ZERONIC_H
#define _UAPI_LINUX_ZERONIC_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* ABI version implemented by the driver; shown in /proc/<pid>/fdinfo. */
#define ZERONIC_UAPI_VERSION 1

/* Path of the control device. Mode 0666: limits are per user, not per file. */
#define ZERONIC_DEVICE_PATH "/dev/zeronic"

/* ioctl type byte of every ZeroNIC ioctl (unassigned in 7.3 ioctl-number.rst). */
#define ZERONIC_IOCTL_TYPE 0xDA

#endif /* _UAPI_LINUX_ZERONIC_H */
