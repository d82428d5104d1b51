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
#include <sys/uio.h>
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

/*
 * Every open mode gives a file; reading and writing it fail as documented
 * (EINVAL: the node has no read/write; EBADF when the file was not opened
 * for that direction, the VFS's check), ioctl works whatever the mode, and
 * close succeeds.
 */
TEST(open_read_write_close)
{
	static const struct { int flags; const char *name; int rd_err, wr_err; } modes[] = {
		{ O_RDWR, "O_RDWR", EINVAL, EINVAL },
		{ O_RDONLY, "O_RDONLY", EINVAL, EBADF },
		{ O_WRONLY, "O_WRONLY", EBADF, EINVAL },
	};
	size_t i;

	for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		char buf[16];
		int fd = open(ZERONIC_DEVICE_PATH, modes[i].flags | O_CLOEXEC);

		ASSERT_LE(0, fd) TH_LOG("open %s: %s", modes[i].name, strerror(errno));
		memset(buf, 0x5a, sizeof(buf));
		errno = 0;
		EXPECT_EQ(-1, read(fd, buf, sizeof(buf))) TH_LOG("%s", modes[i].name);
		EXPECT_EQ(modes[i].rd_err, errno) TH_LOG("read on %s: %s", modes[i].name, strerror(errno));
		EXPECT_EQ(0x5a, buf[0]) TH_LOG("a failed read wrote the buffer");
		errno = 0;
		EXPECT_EQ(-1, write(fd, buf, sizeof(buf))) TH_LOG("%s", modes[i].name);
		EXPECT_EQ(modes[i].wr_err, errno) TH_LOG("write on %s: %s", modes[i].name, strerror(errno));
		/* The file is there for ioctl(), whatever the mode. */
		errno = 0;
		EXPECT_EQ(-1, ioctl(fd, _IO(ZERONIC_IOCTL_TYPE, 0xff)));
		EXPECT_EQ(ENOTTY, errno) TH_LOG("ioctl on %s: %s", modes[i].name, strerror(errno));
		EXPECT_EQ(0, close(fd));
	}
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

/* No form of read or write gets through: empty, vectored, positioned. */
TEST(read_and_write_are_rejected)
{
	char a[8], b[8];
	struct iovec iov[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
	int fd = open(ZERONIC_DEVICE_PATH, O_RDWR | O_CLOEXEC);

	ASSERT_LE(0, fd);
	memset(a, 0x11, sizeof(a));
	memset(b, 0x22, sizeof(b));
	errno = 0;
	EXPECT_EQ(-1, read(fd, a, 0));
	EXPECT_EQ(EINVAL, errno);
	errno = 0;
	EXPECT_EQ(-1, write(fd, a, 0));
	EXPECT_EQ(EINVAL, errno);
	errno = 0;
	EXPECT_EQ(-1, readv(fd, iov, 2));
	EXPECT_EQ(EINVAL, errno);
	errno = 0;
	EXPECT_EQ(-1, writev(fd, iov, 2));
	EXPECT_EQ(EINVAL, errno);
	errno = 0;
	EXPECT_EQ(-1, pread(fd, a, sizeof(a), 0));
	EXPECT_TRUE(errno == EINVAL || errno == ESPIPE) TH_LOG("pread: %s", strerror(errno));
	errno = 0;
	EXPECT_EQ(-1, pwrite(fd, a, sizeof(a), 0));
	EXPECT_TRUE(errno == EINVAL || errno == ESPIPE) TH_LOG("pwrite: %s", strerror(errno));
	EXPECT_EQ(0x11, a[0]);
	EXPECT_EQ(0x22, b[0]);
	EXPECT_EQ(0, close(fd));
}

TEST_HARNESS_MAIN
