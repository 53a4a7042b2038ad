/* SPDX-License-Identifier: MIT */
/* src/common/io.c: whole-buffer reads and writes. */
#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "src/common/io.h"

int io_write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	ssize_t n;

	while (len > 0) {
		n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int io_pwrite_full(int fd, const void *buf, size_t len, off_t off)
{
	const char *p = buf;
	ssize_t n;

	while (len > 0) {
		n = pwrite(fd, p, len, off);
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			return -errno;
		}
		p += n;
		off += n;
		len -= (size_t)n;
	}
	return 0;
}

ssize_t io_read_full(int fd, void *buf, size_t len)
{
	char *p = buf;
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		n = read(fd, p + got, len - got);
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			return -errno;
		}
		if (n == 0) {
			break;
		}
		got += (size_t)n;
	}
	return (ssize_t)got;
}

ssize_t io_pread_full(int fd, void *buf, size_t len, off_t off)
{
	char *p = buf;
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		n = pread(fd, p + got, len - got, off + (off_t)got);
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			return -errno;
		}
		if (n == 0) {
			break;
		}
		got += (size_t)n;
	}
	return (ssize_t)got;
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
