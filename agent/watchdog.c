/* SPDX-License-Identifier: MIT */
/* agent/watchdog.c: the worker-hang watchdog's heartbeat files (the timer lives in group.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/watchdog.h"

int watchdog_beat_init(struct watchdog_beat *b, const char *dir, int rank, int64_t now_ms)
{
	struct stat sb;
	int fd;

	if ((size_t)snprintf(b->path, sizeof(b->path), "%s/heartbeat_%d", dir, rank) >=
	    sizeof(b->path)) {
		return -ENAMETOOLONG;
	}
	fd = open(b->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		return -errno;
	}
	if (fstat(fd, &sb) != 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	close(fd);
	b->mtime = sb.st_mtim;
	b->last_ms = now_ms;
	return 0;
}

int64_t watchdog_beat_silence(struct watchdog_beat *b, int64_t now_ms)
{
	struct stat sb;

	/* A file that vanished cannot be touched either: the silence just grows. */
	if (stat(b->path, &sb) == 0 &&
	    (sb.st_mtim.tv_sec != b->mtime.tv_sec || sb.st_mtim.tv_nsec != b->mtime.tv_nsec)) {
		b->mtime = sb.st_mtim;
		b->last_ms = now_ms;
	}
	return now_ms - b->last_ms;
}

int64_t watchdog_period_ms(int64_t timeout_ms)
{
	int64_t p = timeout_ms / 4;

	return p < 50 ? 50 : p > 1000 ? 1000 : p;
}
