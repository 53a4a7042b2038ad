/* SPDX-License-Identifier: MIT */
/* src/common/io.c: whole-buffer reads and writes. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <unistd.h>

#include "src/common/io.h"

/* One loop for all four: read(2)/write(2), or pread(2)/pwrite(2) from @off when @positional. */
static ssize_t transfer(int fd, void *buf, size_t len, bool positional, off_t off, bool writing)
{
	char *p = buf;
	size_t done = 0;
	ssize_t n;

	while (done < len) {
		if (writing) {
			n = !positional ? write(fd, p + done, len - done)
				    : pwrite(fd, p + done, len - done, off + (off_t)done);
		} else {
			n = !positional ? read(fd, p + done, len - done)
				    : pread(fd, p + done, len - done, off + (off_t)done);
		}
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			return -errno;
		}
		if (n == 0 && !writing) {
			break; /* end of file */
		}
		done += (size_t)n;
	}
	return (ssize_t)done;
}

int io_write_full(int fd, const void *buf, size_t len)
{
	ssize_t n = transfer(fd, (void *)buf, len, false, 0, true);

	return n < 0 ? (int)n : 0;
}

int io_pwrite_full(int fd, const void *buf, size_t len, off_t off)
{
	ssize_t n = transfer(fd, (void *)buf, len, true, off, true);

	return n < 0 ? (int)n : 0;
}

ssize_t io_read_full(int fd, void *buf, size_t len)
{
	return transfer(fd, buf, len, false, 0, false);
}

ssize_t io_pread_full(int fd, void *buf, size_t len, off_t off)
{
	return transfer(fd, buf, len, true, off, false);
}

int io_write_full_stall(int fd, const void *buf, size_t len, int stall_ms)
{
	const char *p = buf;
	struct pollfd pfd = {.fd = fd, .events = POLLOUT};
	ssize_t n;
	int pr;

	while (len > 0) {
		n = write(fd, p, len);
		if (n >= 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (errno == EINTR) {
			continue;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			return -errno;
		}
		do {
			pr = poll(&pfd, 1, stall_ms);
		} while (pr < 0 && errno == EINTR);
		if (pr == 0) {
			return -ETIMEDOUT;
		}
		if (pr < 0) {
			return -errno;
		}
		if ((pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
			return -EPIPE;
		}
	}
	return 0;
}

int io_lift_fd(int fd)
{
	int nfd;

	if (fd > STDERR_FILENO) {
		return fd;
	}
	nfd = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
	close(fd);
	return nfd < 0 ? -errno : nfd;
}
