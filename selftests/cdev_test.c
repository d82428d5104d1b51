// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/zeronic as a device node: type, permissions, open from several
 * processes, per-file state in fdinfo, and error codes for bad requests.
 * Needs the zeronic module loaded (qemu/run loads it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/zeronic.h>

#include "kselftest_harness.h"

#define MISC_MAJOR 10

/* Reads /proc/self/fdinfo/<fd> into buf; returns 0 on success. */
static int read_fdinfo(int fd, char *buf, size_t len)
{
	char path[64];
	ssize_t n;
	int info;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	info = open(path, O_RDONLY);
	if (info < 0)
		return -1;
	n = read(info, buf, len - 1);
	close(info);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

TEST(node_is_world_accessible_misc_char_device)
{
	struct stat st;

	ASSERT_EQ(0, stat(ZERONIC_DEVICE_PATH, &st));
	EXPECT_TRUE(S_ISCHR(st.st_mode));
	EXPECT_EQ(MISC_MAJOR, (int)major(st.st_rdev));
	EXPECT_EQ(0666u, st.st_mode & 07777);
	EXPECT_EQ(0u, st.st_uid);
	EXPECT_EQ(0u, st.st_gid);
}

TEST(open_read_write_close)
{
	int fd = open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC);

	ASSERT_LE(0, fd);
	EXPECT_EQ(0, close(fd));
	fd = open(ZERONIC_DEVICE_PATH, O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, fd);
	EXPECT_EQ(0, close(fd));
}

TEST(fdinfo_shows_uapi_version_and_owner)
{
	char buf[1024], want[64];
	int fd = open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC);

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, read_fdinfo(fd, buf, sizeof(buf)));
	snprintf(want, sizeof(want), "zeronic-uapi:\t%d\n", ZERONIC_UAPI_VERSION);
	EXPECT_NE(NULL, strstr(buf, want)) TH_LOG("fdinfo: %s", buf);
	snprintf(want, sizeof(want), "zeronic-owner-tgid:\t%d\n", getpid());
	EXPECT_NE(NULL, strstr(buf, want)) TH_LOG("fdinfo: %s", buf);
	close(fd);
}

/* A file inherited across fork still names the process that opened it. */
TEST(fdinfo_owner_survives_fork)
{
	int fd = open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC);
	pid_t parent = getpid(), child;
	int status;

	ASSERT_LE(0, fd);
	child = fork();
	ASSERT_LE(0, child);
	if (child == 0) {
		char buf[1024], want[64];

		if (read_fdinfo(fd, buf, sizeof(buf)))
			_exit(2);
		snprintf(want, sizeof(want), "zeronic-owner-tgid:\t%d\n", parent);
		_exit(strstr(buf, want) ? 0 : 1);
	}
	ASSERT_EQ(child, waitpid(child, &status, 0));
	EXPECT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status));
	close(fd);
}

TEST(many_opens_are_independent)
{
	int fds[64], i;

	for (i = 0; i < 64; i++) {
		fds[i] = open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC);
		ASSERT_LE(0, fds[i]);
	}
	for (i = 0; i < 64; i++)
		EXPECT_EQ(0, close(fds[i]));
}

TEST(unknown_ioctl_is_enotty)
{
	int fd = open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC);

	ASSERT_LE(0, fd);
	errno = 0;
	EXPECT_EQ(-1, ioctl(fd, _IO(ZERONIC_IOCTL_TYPE, 0xff)));
	EXPECT_EQ(ENOTTY, errno);
	errno = 0;
	EXPECT_EQ(-1, ioctl(fd, _IOWR(ZERONIC_IOCTL_TYPE, 0x7f, __u64), (void *)16));
	EXPECT_EQ(ENOTTY, errno);
	close(fd);
}

TEST(read_and_write_are_rejected)
{
	char byte = 0;
	int fd = open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC);

	ASSERT_LE(0, fd);
	EXPECT_EQ(-1, read(fd, &byte, 1));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(-1, write(fd, &byte, 1));
	EXPECT_EQ(EINVAL, errno);
	close(fd);
}

TEST_HARNESS_MAIN
